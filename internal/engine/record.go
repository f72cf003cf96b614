package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// record is what the engine remembers of a tenant across restarts, kept in
// <data_dir>/tenants/<name>/engine.json. It holds no secret.
type record struct {
	// Infra is true from the first apply that created anything until a
	// destroy succeeded: the secrets bundle must not be regenerated and a
	// removed tenant file makes the tenant orphaned, not gone.
	Infra bool `json:"infra"`
	// Bootstrapped is true once the first control plane accepted Bootstrap.
	Bootstrapped bool `json:"bootstrapped"`
	// Phase is the tenant's phase as it was when the last operation ended
	// (a copy of the status's, see settlePhaseLocked).
	Phase tenant.Phase `json:"phase"`
	// Endpoint is the Kubernetes API endpoint the machine configs name.
	Endpoint string `json:"endpoint,omitempty"`
	// Nodes are the nodes the last apply created, by name.
	Nodes map[string]nodeRecord `json:"nodes,omitempty"`
	// Running names the operation in progress; still set at start-up, it
	// means the add-on stopped in the middle of it.
	Running string `json:"running,omitempty"`
	// LastOperation is the last finished operation.
	LastOperation *tenant.OperationResult `json:"last_operation,omitempty"`
	// Spec is the tenant file as last applied, so an orphaned tenant (its
	// file removed) can still be shown and destroyed.
	Spec []byte `json:"spec,omitempty"`
	// TalosVersion and KubernetesVersion are the versions the cluster's
	// machine configs are made with: those it was created with, then the
	// target of the last rollout that started. An apply uses them, not the
	// file's, so it never moves a running cluster by itself (DESIGN §10.2).
	TalosVersion      string `json:"talos_version,omitempty"`
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
}

// nodeRecord is one applied node.
type nodeRecord struct {
	// Address is where the node is reached: a metal machine's address, a
	// cloud node's public address, or its private address when it has no
	// public one (then it is reached through a control plane, see route).
	Address string `json:"address"`
	// PrivateAddress is a cloud node's address in its network ("" for metal
	// and for records written before it was kept).
	PrivateAddress string      `json:"private_address,omitempty"`
	ID             string      `json:"id,omitempty"`
	Group          string      `json:"group"`
	Role           tenant.Role `json:"role"`
	// ConfigHash is the sha256 of the machine config the node was last
	// given, so a changed config reaches running nodes too.
	ConfigHash string `json:"config_hash,omitempty"`
}

// clone copies a record so it can be read without the tenant's lock.
func (r record) clone() record {
	r.Nodes = maps.Clone(r.Nodes)
	r.Spec = slices.Clone(r.Spec)
	if r.LastOperation != nil {
		lo := *r.LastOperation
		r.LastOperation = &lo
	}
	return r
}

func (e *Engine) tenantDir(name string) string { return filepath.Join(e.opts.DataDir, "tenants", name) }

func (e *Engine) recordPath(name string) string {
	return filepath.Join(e.tenantDir(name), "engine.json")
}

// loadRecord reads a tenant's record; a missing one is empty.
func (e *Engine) loadRecord(name string) (record, error) {
	var r record
	data, err := os.ReadFile(e.recordPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("tenant %s: engine record: %w", name, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("tenant %s: engine record %s is damaged: %w", name, e.recordPath(name), err)
	}
	return r, nil
}

// saveRecord writes a tenant's record atomically.
func (e *Engine) saveRecord(name string, r record) error {
	if err := os.MkdirAll(e.tenantDir(name), 0o700); err != nil {
		return fmt.Errorf("tenant %s: %w", name, err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(e.recordPath(name), data, 0o600); err != nil {
		return fmt.Errorf("tenant %s: engine record: %w", name, err)
	}
	return nil
}

// knownTenants lists the tenants that have a record.
func (e *Engine) knownTenants() []string {
	entries, err := os.ReadDir(filepath.Join(e.opts.DataDir, "tenants"))
	if err != nil {
		return nil
	}
	var names []string
	for _, d := range entries {
		if d.IsDir() {
			if _, err := os.Stat(e.recordPath(d.Name())); err == nil {
				names = append(names, d.Name())
			}
		}
	}
	return names
}
