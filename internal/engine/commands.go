package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// The commands: each checks its input, builds the operation (a closure over
// the tenant) and queues it; the result arrives as an operation event.

func (e *Engine) applyOp(ts *tenantState) operation {
	return operation{name: opApply, activity: tenant.ActivityApplying, do: func(ctx context.Context, r *run) (string, error) {
		msg, err := ts.planOrApply(ctx, r, true)
		if err == nil {
			ts.queueAutoUpgrades() // auto_apply: a changed version rolls out after the apply
		}
		return msg, err
	}}
}

func (e *Engine) planOp(ts *tenantState) operation {
	return operation{name: opPlan, activity: tenant.ActivityPlanning, do: func(ctx context.Context, r *run) (string, error) {
		return ts.planOrApply(ctx, r, false)
	}}
}

// Apply provisions the tenant as its file declares it: the pending plan if
// one was made for exactly this spec, else a new plan applied at once.
func (e *Engine) Apply(ctx context.Context, name string) error {
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if ts.orphaned() {
		return fmt.Errorf("tenant %s: its file was removed; restore it to apply, or destroy the tenant", name)
	}
	if err := e.fileValid(name); err != nil {
		return err
	}
	return e.enqueue(name, e.applyOp(ts))
}

// Plan plans the tenant and shows the pending changes.
func (e *Engine) Plan(ctx context.Context, name string) error {
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if ts.orphaned() {
		return fmt.Errorf("tenant %s: its file was removed; restore it to plan", name)
	}
	if err := e.fileValid(name); err != nil {
		return err
	}
	return e.enqueue(name, e.planOp(ts))
}

// fileValid reads the tenant files now, as the watcher would, so that Apply
// and Plan work on the file as it is at the press: a file that does not
// validate refuses them with its own problems (the last valid version is
// never applied in its place).
func (e *Engine) fileValid(name string) error {
	s, err := e.opts.Store.Load()
	if err != nil {
		return fmt.Errorf("tenant %s: reading the tenant files: %w", name, err)
	}
	e.apply(s)
	if !slices.Contains(s.Invalid, name) {
		return nil
	}
	var mine tenant.Problems
	for _, p := range s.Problems {
		if tenant.NameFromPath(p.File) == name {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return fmt.Errorf("tenant %s: its file %s.toml does not validate; fix it first (nothing was changed)", name, name)
	}
	return fmt.Errorf("tenant %s: its file does not validate; fix it first (nothing was changed):\n%w", name, tenant.Readable(mine))
}

// Cancel stops the tenant's running operation (tofu gets SIGINT and saves
// its state; a wait for a node ends at once) and drops the queued ones.
func (e *Engine) Cancel(ctx context.Context, name string) error {
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if !ts.cancel() {
		return fmt.Errorf("tenant %s: no operation is running", name)
	}
	return nil
}

// Destroy tears the tenant's infrastructure down. confirm must be the
// tenant's name.
func (e *Engine) Destroy(ctx context.Context, name, confirm string) error {
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if confirm != name {
		return fmt.Errorf("tenant %s: destroy not confirmed: confirm must be the tenant name %q", name, name)
	}
	return e.enqueue(name, operation{name: opDestroy, activity: tenant.ActivityDestroying,
		do: func(ctx context.Context, r *run) (string, error) { return ts.destroy(ctx, r) }})
}

// Scale writes a group's node count into the tenant file (atomically).
// A provisioned tenant then plans, or applies when it has auto_apply; an
// unprovisioned one uses the new count at its next Apply.
func (e *Engine) Scale(ctx context.Context, name, group string, count int) error {
	return e.editSpec(name, func() (*tenant.Tenant, error) { return e.opts.Store.SetCount(name, group, count) })
}

// SetAutoApply writes auto_apply into the tenant file.
func (e *Engine) SetAutoApply(ctx context.Context, name string, on bool) error {
	return e.editSpec(name, func() (*tenant.Tenant, error) { return e.opts.Store.SetAutoApply(name, on) })
}

// editSpec changes a tenant file through write and reacts to the change
// like the file watcher would. A change that needs an operation the
// tenant's queue has no room for is refused before the file is written: a
// refused command changes nothing. e.mu is held from the room check to the
// enqueue (the worker only ever makes room), so no other command can take
// the slot in between.
func (e *Engine) editSpec(name string, write func() (*tenant.Tenant, error)) error {
	return e.editSpecThen(name, write, nil)
}

// editSpecThen is editSpec that queues then (when not nil) instead of the
// file's reaction.
func (e *Engine) editSpecThen(name string, write func() (*tenant.Tenant, error), then *operation) error {
	changed, err := e.editSpecLocked(name, write, then)
	if err != nil {
		return err
	}
	if changed {
		e.publishTenants()
	}
	return nil
}

func (e *Engine) editSpecLocked(name string, write func() (*tenant.Tenant, error), then *operation) (changed bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ts, err := e.lookupLocked(name)
	if err != nil {
		return false, err
	}
	if ts.orphaned() {
		return false, fmt.Errorf("tenant %s: its file was removed", name)
	}
	if len(ts.queue) >= cap(ts.queue) {
		return false, fmt.Errorf("tenant %s: %w; the file was not changed", name, ErrBusy)
	}
	t, err := write()
	if err != nil {
		return false, err
	}
	changed, react := ts.setSpecReact(t)
	op, ok := e.reaction(ts) // auto_apply may just have changed
	if then != nil {
		op, ok = *then, true
	} else if !changed {
		return false, nil // the file watcher noticed the change first and reacted
	} else if !react {
		return true, nil // only what the pools read: their next decision uses it
	}
	if ok {
		if err := e.enqueueLocked(ts, op); err != nil {
			return true, err
		}
	}
	return true, nil
}

// Bootstrap bootstraps etcd on the first control plane (a no-op when it
// was done).
func (e *Engine) Bootstrap(ctx context.Context, name string) error {
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	return e.enqueue(name, operation{name: opBootstrap, activity: tenant.ActivityApplying,
		do: func(ctx context.Context, r *run) (string, error) { return ts.bootstrap(ctx, r) }})
}

// Reboot reboots one node.
func (e *Engine) Reboot(ctx context.Context, name, node string) error {
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if err := ts.provisioned(node); err != nil {
		return err
	}
	return e.enqueue(name, operation{name: opReboot, activity: tenant.ActivityRebooting,
		do: func(ctx context.Context, r *run) (string, error) { return ts.reboot(ctx, r, node) }})
}

// provisioned refuses a node the tenant's file does not declare, or one
// that is not provisioned (yet).
func (ts *tenantState) provisioned(node string) error {
	if t := ts.shownSpec(); t != nil {
		if _, ok := t.Node(node); !ok {
			return fmt.Errorf("tenant %s has no node %q", ts.name, node)
		}
	}
	if _, ok := ts.target(node); !ok {
		return fmt.Errorf("tenant %s: node %q is not provisioned", ts.name, node)
	}
	return nil
}

// Reload reads the tenant files again now.
func (e *Engine) Reload(ctx context.Context) error {
	s, err := e.opts.Store.Load()
	if err != nil {
		return err
	}
	e.apply(s)
	if len(s.Problems) > 0 {
		return fmt.Errorf("some tenant files have problems:\n%w", s.Problems)
	}
	return nil
}

// SetLogLevel changes the log level.
func (e *Engine) SetLogLevel(level string) error {
	if e.opts.SetLogLevel == nil {
		return fmt.Errorf("the log level cannot be changed")
	}
	return e.opts.SetLogLevel(level)
}
