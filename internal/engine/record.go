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
	"sync"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// record is what the engine remembers of a tenant across restarts, kept in
// <data_dir>/tenants/<name>/engine.json: facts only (what exists, what
// happened), never a phase or a stage, which the view derives from them
// (view.go). It holds no secret.
type record struct {
	// Infra is true from the first apply that created anything until a
	// destroy succeeded: the secrets bundle must not be regenerated and a
	// removed tenant file makes the tenant orphaned, not gone.
	Infra bool `json:"infra"`
	// Bootstrapped is true once the first control plane accepted Bootstrap.
	Bootstrapped bool `json:"bootstrapped"`
	// Endpoint is the Kubernetes API endpoint the machine configs name.
	Endpoint string `json:"endpoint,omitempty"`
	// Nodes are the nodes the last apply created, by name.
	Nodes map[string]nodeRecord `json:"nodes,omitempty"`
	// Running names the operation in progress; still set at start-up, it
	// means the add-on stopped in the middle of it.
	Running string `json:"running,omitempty"`
	// LastOperation is the last finished operation.
	LastOperation *tenant.OperationResult `json:"last_operation,omitempty"`
	// Failure is the last operation that did not succeed (failed, was
	// cancelled or interrupted) and that no later apply, rollout or destroy
	// made good; while it is set the tenant is failed.
	Failure *tenant.OperationResult `json:"failure,omitempty"`
	// Spec is the tenant file as last applied, so an orphaned tenant (its
	// file removed) can still be shown and destroyed.
	Spec []byte `json:"spec,omitempty"`
	// TalosVersion and KubernetesVersion are the versions the cluster's
	// machine configs are made with: those it was created with, then the
	// target of the last rollout that reached every node. An apply uses
	// them (and each node's own, nodeRecord), not the file's, so it never
	// moves a running cluster by itself (docs/design.md §10.2).
	TalosVersion      string `json:"talos_version,omitempty"`
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
	// Rollout is an upgrade that started and has not reached every node:
	// after a cancel, a failure or a restart it says what Install resumes.
	Rollout *rolloutRecord `json:"rollout,omitempty"`
	// Phase is read from records written before phases were derived, once
	// (migrate); it is never written.
	Phase tenant.Phase `json:"phase,omitempty"`
}

// rolloutRecord is an upgrade in progress, as far as it got.
type rolloutRecord struct {
	Component string `json:"component"`
	Version   string `json:"version"`
	Done      int    `json:"done"`
	Total     int    `json:"total"`
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
	// TalosVersion, KubernetesVersion (the control-plane components) and
	// KubeletVersion are the versions the node's config was last made with
	// ("": the record's): a rollout moves them node by node, and an apply
	// keeps them, so that it never moves a version by itself.
	TalosVersion      string `json:"talos_version,omitempty"`
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
	KubeletVersion    string `json:"kubelet_version,omitempty"`
	// Off: the machine was powered off on purpose (Power off, a worker
	// pool). An apply leaves it off (it neither wakes it nor waits for
	// it) and it is no problem that it does not answer; Power on clears it.
	Off bool `json:"off,omitempty"`
}

// clone copies a record so it can be read without the tenant's lock.
func (r record) clone() record {
	r.Nodes = maps.Clone(r.Nodes)
	r.Spec = slices.Clone(r.Spec)
	if r.LastOperation != nil {
		lo := *r.LastOperation
		r.LastOperation = &lo
	}
	if r.Failure != nil {
		f := *r.Failure
		r.Failure = &f
	}
	if r.Rollout != nil {
		ro := *r.Rollout
		r.Rollout = &ro
	}
	return r
}

// migrate turns a record written before phases were derived into facts:
// a tenant that was failed keeps its failure. It reports whether anything
// changed.
func (r *record) migrate() bool {
	if r.Phase == "" {
		return false
	}
	if r.Phase == tenant.PhaseFailed && r.Failure == nil {
		f := tenant.OperationResult{Name: "apply", Result: tenant.ResultFailed,
			Message: "the last operation before an update of rezuscloud did not succeed; press Apply to converge"}
		if lo := r.LastOperation; lo != nil && lo.Result != tenant.ResultSucceeded {
			f = *lo
		}
		r.Failure = &f
	}
	r.Phase = ""
	return true
}

// versionsOf are the versions node n's config is made with: its own once a
// rollout moved it, else the cluster's ("" where the cluster has none yet:
// the tenant's).
func (r record) versionsOf(n string) talos.Versions {
	nr := r.Nodes[n]
	v := talos.Versions{Talos: firstOf(nr.TalosVersion, r.TalosVersion), Kubernetes: firstOf(nr.KubernetesVersion, r.KubernetesVersion)}
	v.Kubelet = firstOf(nr.KubeletVersion, v.Kubernetes)
	return v
}

// records keeps one tenant's record: the one writer of its file. Every
// change goes through save (or commit), which changes the record in memory
// and writes it whole, serialised, so that a slower writer can never put
// back an older record over a newer one.
type records struct {
	path string
	// share, when set, writes the record to the shared store first
	// (shared.go); its refusal writes nothing
	share func([]byte) error

	saveMu sync.Mutex // serialises writes
	mu     sync.Mutex
	rec    record
}

func (e *Engine) tenantDir(name string) string { return filepath.Join(e.opts.DataDir, "tenants", name) }

func (e *Engine) recordPath(name string) string {
	return filepath.Join(e.tenantDir(name), "engine.json")
}

// get returns a copy of the record.
func (rs *records) get() record {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.rec.clone()
}

// read runs f on the record under its lock (f must not keep it).
func (rs *records) read(f func(r *record)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	f(&rs.rec)
}

// save changes the record and writes it.
func (rs *records) save(change func(*record)) error {
	rs.saveMu.Lock()
	defer rs.saveMu.Unlock()
	rs.mu.Lock()
	if change != nil {
		change(&rs.rec)
	}
	rec := rs.rec.clone()
	rs.mu.Unlock()
	return writeRecord(rs.path, rec, rs.share)
}

// commit is the crash-ordering rule in one place: what act is about to do
// is recorded (and on disk) before act runs, so that a stop, a kill or a
// power cut in the middle of act finds a record that covers it (Infra
// before tofu creates anything; a node's config marker before the node
// gets the config). A failed write runs nothing.
func (rs *records) commit(change func(*record), act func() error) error {
	if err := rs.save(change); err != nil {
		return err
	}
	return act()
}

// maxRecord bounds a record file: a record of 100 nodes is some 30 KB.
const maxRecord = 4 << 20

// loadRecord reads a tenant's record; a missing one is empty, one that is
// not a small regular file is an error that names it.
func (e *Engine) loadRecord(name string) (record, error) {
	var r record
	path := e.recordPath(name)
	data, err := safefile.Read(path, maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("tenant %s: engine record: %w", name, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("tenant %s: engine record %s is damaged: %w", name, path, err)
	}
	return r, nil
}

// writeRecord writes a record atomically, 0600, after share (when set)
// took it.
func writeRecord(path string, r record, share func([]byte) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if share != nil {
		if err := share(data); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("engine record: %w", err)
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
