package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// The read side: what the panel and AI assistants show. Every read is of
// the same view the MQTT bridge publishes.

// Views returns every tenant as Home Assistant shows it, sorted by name.
func (e *Engine) Views() []View {
	var vs []View
	for _, ts := range e.states() {
		if v := ts.view(); v.Spec != nil {
			vs = append(vs, v)
		}
	}
	return vs
}

// View returns one tenant.
func (e *Engine) View(name string) (View, bool) {
	ts, err := e.lookup(name)
	if err != nil {
		return View{}, false
	}
	v := ts.view()
	return v, v.Spec != nil
}

// Changed is closed and replaced whenever any tenant's view changes.
func (e *Engine) Changed() <-chan struct{} {
	e.chMu.Lock()
	defer e.chMu.Unlock()
	return e.changed
}

// PendingPlan is the pending plan's resource changes as tofu's plan JSON
// (nil when there is none). Attribute values are left out on purpose: a
// cloud instance's user_data is its machine config, a secret.
func (e *Engine) PendingPlan(ctx context.Context, name string) (*tfjson.Plan, error) {
	ts, err := e.lookup(name)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	p := ts.plan
	ts.mu.Unlock()
	if p == nil {
		return nil, nil
	}
	out := &tfjson.Plan{FormatVersion: "1.2"}
	for _, c := range p.plan.Changes {
		typ, rname := resourceTypeName(c.Address)
		out.ResourceChanges = append(out.ResourceChanges, &tfjson.ResourceChange{
			Address: c.Address, Type: typ, Name: rname, Mode: tfjson.ManagedResourceMode,
			Change: &tfjson.Change{Actions: planActions(c.Action)},
		})
	}
	return out, nil
}

// resourceTypeName splits "type.name[key]" (modules aside) into its type
// and name.
func resourceTypeName(addr string) (string, string) {
	parts := strings.Split(addr, ".")
	if len(parts) < 2 {
		return "", addr
	}
	name := parts[len(parts)-1]
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	return parts[len(parts)-2], name
}

// planActions is tofu's planned_change action as plan-JSON actions.
func planActions(a string) tfjson.Actions {
	switch a {
	case "create":
		return tfjson.Actions{tfjson.ActionCreate}
	case "update":
		return tfjson.Actions{tfjson.ActionUpdate}
	case "delete":
		return tfjson.Actions{tfjson.ActionDelete}
	case "replace":
		return tfjson.Actions{tfjson.ActionDelete, tfjson.ActionCreate}
	case "read":
		return tfjson.Actions{tfjson.ActionRead}
	}
	return tfjson.Actions{tfjson.ActionNoop}
}

// Machines returns the machines found on the LAN that no tenant declares.
func (e *Engine) Machines() []talos.Machine { return e.publishMachines() }

// Backups lists a tenant's etcd snapshot files, newest first.
func (e *Engine) Backups(name string) ([]tenant.BackupInfo, error) {
	if _, err := e.lookup(name); err != nil {
		return nil, err
	}
	return listBackups(e.backupDir(name))
}

// OpenBackup opens one of a tenant's etcd snapshots by its file name.
func (e *Engine) OpenBackup(name, file string) (io.ReadCloser, error) {
	list, err := e.Backups(name)
	if err != nil {
		return nil, err
	}
	for _, b := range list {
		if filepath.Base(b.File) == file {
			return os.Open(b.File)
		}
	}
	return nil, fmt.Errorf("tenant %s has no etcd backup %q", name, file)
}

// Secret returns a tenant's kubeconfig or talosconfig.
func (e *Engine) Secret(name, kind string) ([]byte, error) {
	if _, err := e.lookup(name); err != nil {
		return nil, err
	}
	var path string
	switch kind {
	case "kubeconfig":
		path = e.kubeconfigPath(name)
	case "talosconfig":
		path = e.talosconfigPath(name)
	default:
		return nil, fmt.Errorf("tenant %s: no secret %q (kubeconfig or talosconfig)", name, kind)
	}
	data, err := talos.LoadTalosconfig(path) // any small secret file: kubeconfig too
	if err != nil {
		return nil, fmt.Errorf("tenant %s has no %s yet: press Apply", name, kind)
	}
	return data, nil
}

// Log is the lines of the tenant's running and last operations.
func (e *Engine) Log(name string) []LogLine { return e.oplog.lines(name) }

// Follow streams the tenant's new log lines until ctx ends.
func (e *Engine) Follow(ctx context.Context, name string) <-chan LogLine {
	return e.oplog.follow(ctx, name)
}
