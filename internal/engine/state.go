package engine

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// queueLen bounds the operations waiting for one tenant.
const queueLen = 8

// tenantState is one tenant: its file, its record, the running operation
// and what its nodes last reported, and the worker that runs its
// operations one at a time. It keeps facts only: what Home Assistant sees
// is computed from them by view (view.go) whenever one changes.
type tenantState struct {
	e     *Engine
	name  string
	queue chan *operation
	recs  *records // the record and its one writer

	mu      sync.Mutex
	spec    *tenant.Tenant // the file as it is now; nil when removed (orphaned)
	specRaw []byte
	applied *tenant.Tenant // the spec of the record, for an orphaned tenant
	run     *run           // the running operation; nil when idle
	last    lastRun
	plan    *pendingPlan // the last plan, waiting for Apply
	drift   *driftFacts
	// obs is what the nodes last reported; written only by the poller's
	// reports (Engine.onNodeState)
	obs map[string]nodeObs
	// obsChanged is closed and replaced whenever obs changes (waits)
	obsChanged chan struct{}
	recovering bool   // waiting for a tofu an earlier process left running
	recoverErr string // why the workspace could not be recovered ("" when it was)

	forgotten bool // destroyed and without a file: keep no record
	seen      bool // a file was seen since start-up

	// etcd backups (backup.go)
	backupMu     sync.Mutex         // one snapshot at a time
	backup       *tenant.BackupInfo // the newest snapshot file
	backupLoaded bool               // backup was read from the backup dir
	backupTried  time.Time          // the last periodic attempt

	// worker pools (pool.go): each pooled group's memory and status, and
	// the nodes' power-ons (seen as answering again) of the last hour
	pools    map[string]*poolOf
	powerOns map[string][]time.Time
	// kubeClient is the cluster API client of kubeconfig kubeFor
	kubeClient Kube
	kubeFor    []byte

	pubMu sync.Mutex   // orders publications
	shown *tenant.View // the view last handed to the publisher
}

func newTenantState(e *Engine, name string, rec record) *tenantState {
	ts := &tenantState{e: e, name: name, queue: make(chan *operation, queueLen),
		recs: &records{path: e.recordPath(name), share: e.shareRecord(name), rec: rec}, obs: map[string]nodeObs{}, obsChanged: make(chan struct{})}
	migrated := ts.recs.rec.migrate()
	if op := rec.Running; op != "" {
		// the add-on stopped in the middle of an operation
		last := &tenant.OperationResult{Name: op, Result: tenant.ResultFailed, At: e.now(),
			Message: interruptedMessage(op, rec.Rollout)}
		ts.recs.rec.Running = ""
		ts.recs.rec.LastOperation = last
		if converges(op) {
			ts.recs.rec.Failure = last
		}
		migrated = true
	}
	if migrated {
		if err := ts.recs.save(nil); err != nil {
			e.log.Error("saving tenant record", zap.String("tenant", name), zap.Error(err))
		}
	}
	return ts
}

// interruptedMessage is the message of an operation that a stop of
// rezuscloud interrupted.
func interruptedMessage(op string, ro *rolloutRecord) string {
	switch {
	case op == opUpgrade && ro != nil:
		return fmt.Sprintf("the %s upgrade to %s was interrupted when rezuscloud stopped, after %d of %d nodes; press Install to resume",
			componentName(ro.Component), ro.Version, ro.Done, ro.Total)
	case converges(op):
		return fmt.Sprintf("%s was interrupted when rezuscloud stopped; press Apply to converge", op)
	}
	return fmt.Sprintf("%s was interrupted when rezuscloud stopped", op)
}

// facts copies the inputs of the view. Called with ts.mu held.
func (ts *tenantState) factsLocked() facts {
	f := facts{name: ts.name, spec: ts.spec, applied: ts.applied, rec: ts.recs.get(), last: ts.last,
		obs: make(map[string]nodeObs, len(ts.obs)), drift: ts.drift, backup: ts.backup, recovering: ts.recovering, recoverErr: ts.recoverErr, queued: len(ts.queue),
		now: ts.e.now(), opts: ts.e.viewOpts}
	for n, o := range ts.obs {
		f.obs[n] = o
	}
	for g, p := range ts.pools {
		if p.status.Decision == "" {
			continue
		}
		if f.pools == nil {
			f.pools = map[string]tenant.PoolStatus{}
		}
		f.pools[g] = p.status
	}
	if r := ts.run; r != nil {
		rf := runFacts{name: r.name, creating: r.creating, activity: r.activity, step: r.step, progress: r.progress, problem: r.problem,
			intents: make(map[string]intent, len(r.intents))}
		for n, in := range r.intents {
			rf.intents[n] = in
		}
		if r.rollout != nil {
			ro := *r.rollout
			rf.rollout = &ro
		}
		f.run = &rf
	}
	if p := ts.plan; p != nil {
		f.plan = &planFacts{changes: p.changes(), networkOnly: p.networkOnly}
	}
	return f
}

// view is the tenant as Home Assistant shows it now.
func (ts *tenantState) view() tenant.View {
	ts.loadBackup()
	ts.mu.Lock()
	f := ts.factsLocked()
	ts.mu.Unlock()
	return view(f)
}

// changed publishes the tenant's view when it differs from what was
// published last. Every change of a fact calls it (after releasing ts.mu).
func (ts *tenantState) changed() {
	ts.pubMu.Lock()
	defer ts.pubMu.Unlock()
	v := ts.view()
	if ts.shown != nil && reflect.DeepEqual(*ts.shown, v) {
		return
	}
	ts.shown = &v
	ts.e.opts.Publisher.SetTenant(v)
	ts.e.notifyChanged()
}

// setSpec takes a new version of the tenant file; it reports a change.
// Called with e.mu held.
func (ts *tenantState) setSpec(t *tenant.Tenant) bool {
	changed, _ := ts.setSpecReact(t)
	return changed
}

// setSpecReact is setSpec that also reports whether the change calls for
// the file's reaction (a plan, or an apply with auto_apply): not when only
// what the worker pools read changed (tenant.OnlyPoolsDiffer).
func (ts *tenantState) setSpecReact(t *tenant.Tenant) (changed, react bool) {
	raw := t.Source
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var before *tenant.Tenant
	if ts.spec == nil && !ts.seen {
		// first sight since start-up: a change only if the file differs
		// from the spec last applied (a restart alone runs nothing)
		rec := ts.recs.get()
		changed = len(rec.Spec) > 0 && !bytes.Equal(raw, rec.Spec)
		if changed {
			before, _ = tenant.Parse(t.Path, rec.Spec)
		}
	} else {
		changed = ts.spec == nil || !bytes.Equal(raw, ts.specRaw)
		before = ts.spec
	}
	ts.seen = true
	ts.spec, ts.specRaw = t, raw
	react = changed && !tenant.OnlyPoolsDiffer(before, t)
	if react {
		ts.plan = nil // a plan is only good for the spec it was made from
	}
	return changed, react
}

// removeSpec handles a removed tenant file: a tenant with infrastructure
// becomes orphaned (nothing is destroyed); one without is forgotten, which
// removeSpec reports. Called with e.mu held.
func (ts *tenantState) removeSpec() (forget bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	rec := ts.recs.get()
	if !rec.Infra && ts.run == nil {
		return true
	}
	if ts.spec != nil {
		ts.applied = ts.spec
		if len(rec.Spec) > 0 {
			if t, err := tenant.Parse(ts.spec.Path, rec.Spec); err == nil {
				ts.applied = t
			}
		}
	}
	ts.spec, ts.specRaw, ts.plan = nil, nil, nil
	return false
}

func (ts *tenantState) orphaned() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.spec == nil
}

// busy reports whether an operation runs or waits.
func (ts *tenantState) busy() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.run != nil || len(ts.queue) > 0 || ts.recovering
}

// shown is the tenant as Home Assistant shows it: the file, or for an
// orphaned tenant the spec it was last applied with.
func (ts *tenantState) shownSpec() *tenant.Tenant {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.spec != nil {
		return ts.spec
	}
	return ts.applied
}

// snapshot returns the spec to work on and the record.
func (ts *tenantState) snapshot() (*tenant.Tenant, record) {
	return ts.shownSpec(), ts.recs.get()
}

// exists reports whether the cluster was created (etcd bootstrapped).
func (ts *tenantState) exists() bool {
	rec := ts.recs.get()
	return rec.Infra && rec.Bootstrapped && len(rec.Nodes) > 0
}

func (ts *tenantState) phase() tenant.Phase { return ts.view().Status.Phase }

// provider is the tenant's platform (metal when nothing is known).
func (ts *tenantState) provider() tenant.Provider {
	if t := ts.shownSpec(); t != nil {
		return t.Provider
	}
	return tenant.ProviderMetal
}

// target is how to reach a provisioned node.
func (ts *tenantState) target(name string) (talos.Target, bool) {
	rec := ts.recs.get()
	return targetIn(ts.provider(), rec.Endpoint, rec.Nodes, name, ts.e.opts.TalosPort)
}

// talosconfig is the tenant's talosconfig, or an error that says to apply.
func (ts *tenantState) talosconfig() ([]byte, error) {
	tc, err := talos.LoadTalosconfig(ts.e.talosconfigPath(ts.name))
	if err != nil {
		return nil, fmt.Errorf("tenant %s has no talosconfig: press Apply", ts.name)
	}
	return tc, nil
}

// observe takes what a node reported (the poller's report).
func (ts *tenantState) observe(node string, st talos.NodeState) {
	now := ts.e.now()
	ts.mu.Lock()
	o, ok := ts.obs[node]
	if !ok || o.st.Stage != st.Stage || o.st.Ready != st.Ready {
		o.since = now
	}
	o.st = st
	if st.TalosVersion != "" {
		o.talosVersion = st.TalosVersion
	}
	if st.KubeletVersion != "" {
		o.kubeletVersion = st.KubeletVersion
	}
	ts.obs[node] = o
	close(ts.obsChanged)
	ts.obsChanged = make(chan struct{})
	ts.mu.Unlock()
	ts.changed()
}

// observed is what a node last reported, and a channel closed at the
// next report of any node of the tenant.
func (ts *tenantState) observed(node string) (nodeObs, bool, <-chan struct{}) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	o, ok := ts.obs[node]
	return o, ok, ts.obsChanged
}

// read reads a node now, for a flow that acts on it, and reports the read
// to the poller, which stays the one source of what nodes report.
func (ts *tenantState) read(ctx context.Context, node string, t talos.Target, tc []byte) (talos.NodeState, error) {
	st, err := ts.e.opts.Nodes.Status(ctx, t, tc)
	if ctx.Err() == nil {
		ts.e.poller.Report(pollKey(ts.name, node), st)
	}
	return st, err
}

// pollKey names a node for the poller: tenant and node joined by a byte
// that neither may contain.
func pollKey(tenantName, node string) string { return tenantName + "/" + node }

// onNodeState takes a change reported by the poller.
func (e *Engine) onNodeState(key string, st talos.NodeState) {
	tn, node, ok := strings.Cut(key, "/")
	if !ok {
		return
	}
	e.mu.Lock()
	ts := e.ts[tn]
	e.mu.Unlock()
	if ts != nil {
		ts.observe(node, st)
	}
}

// updatePollTargets polls every provisioned node of every tenant that has
// a talosconfig; the reports of nodes no longer provisioned are dropped.
// It runs where a record's nodes or a talosconfig change.
func (e *Engine) updatePollTargets() {
	targets := map[string]talos.PollTarget{}
	for _, ts := range e.states() {
		rec := ts.recs.get()
		p := ts.provider()
		ts.mu.Lock()
		for n := range ts.obs {
			if _, ok := rec.Nodes[n]; !ok {
				delete(ts.obs, n)
			}
		}
		ts.mu.Unlock()
		tc, err := talos.LoadTalosconfig(e.talosconfigPath(ts.name))
		if err != nil {
			continue
		}
		for n := range rec.Nodes {
			if t, ok := targetIn(p, rec.Endpoint, rec.Nodes, n, e.opts.TalosPort); ok {
				targets[pollKey(ts.name, n)] = talos.PollTarget{Target: t, Talosconfig: tc}
			}
		}
	}
	e.poller.SetTargets(targets)
}

// work runs the tenant's operations one at a time until the queue closes;
// first it waits for a tofu an earlier rezuscloud left running (restore).
func (ts *tenantState) work(recover bool) {
	if recover {
		ts.recover()
	}
	for op := range ts.queue {
		ts.execute(op)
	}
}

// recover waits for a tofu that an earlier process left running in the
// tenant's workspace, then releases its lock (tofu.Runner.Recover). A wait
// of more than a second is shown; the tenant's operations queue behind it.
func (ts *tenantState) recover() {
	e := ts.e
	done, was := false, false // under ts.mu
	show := time.AfterFunc(time.Second, func() {
		ts.mu.Lock()
		ts.recovering = !done
		ts.mu.Unlock()
		ts.changed()
	})
	err := e.opts.Infra.Recover(e.opCtx(), ts.name)
	if err != nil {
		e.log.Error("recovering the tofu workspace", zap.String("tenant", ts.name), zap.Error(err))
	}
	show.Stop()
	ts.mu.Lock()
	done = true
	if err != nil {
		ts.recoverErr = err.Error()
		was = true
	}
	was = was || ts.recovering
	ts.recovering = false
	ts.mu.Unlock()
	if was {
		ts.changed()
	}
}

// drain drops the queued operations.
func (ts *tenantState) drain() {
	for {
		select {
		case op := <-ts.queue:
			if op != nil && op.dropped != nil {
				op.dropped()
			}
			continue
		default:
		}
		return
	}
}

// close ends the worker once its running operation returns; queued
// operations are dropped. Called with e.mu held, once.
func (ts *tenantState) close() {
	ts.drain()
	close(ts.queue)
}

// cancel stops the running operation and drops the queued ones.
func (ts *tenantState) cancel() bool {
	ts.drain()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.run == nil {
		return false
	}
	ts.run.stop()
	return true
}
