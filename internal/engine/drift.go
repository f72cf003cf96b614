package engine

import (
	"context"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// Drift (docs/design.md §11.7): every DriftInterval an idle cloud tenant
// gets a refresh-only plan, which changes nothing, to notice a server
// deleted or changed outside rezuscloud. What it finds shows as pending
// changes and as a problem with the reason "drift"; Apply puts it back
// (the apply's own refresh sees the same), and clears it.

// driftLoop checks the idle cloud tenants for drift every DriftInterval.
func (e *Engine) driftLoop(ctx context.Context) {
	if e.opts.DriftInterval < 0 {
		return
	}
	everyTick(ctx, e.opts.DriftInterval, func() {
		for _, ts := range e.states() {
			if ctx.Err() != nil {
				return
			}
			if err := ts.checkDrift(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("checking for drift", zap.String("tenant", ts.name), zap.Error(err))
			}
		}
	})
}

// checkDrift runs one refresh-only plan of an idle cloud tenant with
// infrastructure (never during an operation: a tenant that is busy is
// checked at the next interval) and shows what it found.
func (ts *tenantState) checkDrift(ctx context.Context) error {
	e := ts.e
	t, rec := ts.snapshot()
	if t == nil || ts.orphaned() || !rec.Infra || t.Provider == tenant.ProviderMetal || ts.busy() {
		return nil
	}
	ws, err := e.opts.Infra.Workspace(ts.name, tofu.WorkspaceOptions{Env: e.opts.CloudEnv(t.Provider)})
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), tofu.ConfigFile)); err != nil {
		return nil // never planned: nothing to compare
	}
	d, err := ws.Drift(ctx, tofu.RunOptions{})
	if err != nil {
		return err
	}
	var df *driftFacts
	if !d.Empty() {
		df = &driftFacts{changes: tenant.Changes{Add: len(d.Deleted()), Change: len(d.Changed())}}
		for _, r := range d.Resources {
			df.what = append(df.what, r.Address+" "+string(r.Kind))
		}
		e.log.Warn("drift: changed outside rezuscloud", zap.String("tenant", ts.name), zap.String("drift", d.String()))
	}
	ts.mu.Lock()
	if ts.run == nil { // an operation that started meanwhile knows better
		ts.drift = df
	}
	ts.mu.Unlock()
	ts.changed()
	return nil
}
