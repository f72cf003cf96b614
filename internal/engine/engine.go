// Package engine runs operations on tenants: one queue per tenant (serial
// inside a tenant, parallel across tenants up to a limit), the apply, plan,
// scale, destroy, bootstrap, reboot, upgrade and backup flows that join
// tofu and Talos, and the view that Home Assistant shows, computed from
// facts (docs/design.md "Engine internals").
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/kube"
	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// Publisher shows tenants and their state (the MQTT bridge implements it).
// Calls must not block for long.
type Publisher interface {
	// SetTenants replaces the tenants shown: their devices (the tenant
	// and every node of its view) and documents.
	SetTenants(vs []tenant.View)
	// SetTenant updates one tenant's documents (and devices, when its
	// nodes changed).
	SetTenant(v tenant.View)
	SetBridgeStatus(operations int)
	PublishOperation(ev tenant.OperationEvent)
}

// View is one tenant as Home Assistant shows it.
type View = tenant.View

// Options configure an Engine.
type Options struct {
	// DataDir holds each tenant's secrets, record, kubeconfig and talosconfig.
	DataDir string
	// Store is the tenant files.
	Store *tenant.Store
	// Runner runs tofu.
	Runner *tofu.Runner
	// Infra opens the tenants' tofu workspaces (nil: Runner's).
	Infra Infra
	// Nodes is the Talos machine API (nil: package talos). The poller reads
	// nodes through it too.
	Nodes Nodes
	// Publisher receives every change of state.
	Publisher Publisher
	// CloudEnv gives the environment (credentials) tofu needs for a platform.
	CloudEnv func(tenant.Provider) map[string]string
	// ParallelApplies bounds the operations that run at once across tenants
	// (default 2).
	ParallelApplies int
	// TalosPort is the Talos API port of every node (default 50000).
	TalosPort int
	// NodeTimeout bounds the wait for nodes to come up (default 20 min).
	NodeTimeout time.Duration
	// ResetTimeout bounds one node's reset in a scale-down or a destroy: a
	// machine that does not take it in time is named (default 2 min).
	ResetTimeout time.Duration
	// StallAfter: a node that stays in a stage an operation put it in for
	// longer, without any change, is shown as a problem (default 3 min).
	StallAfter time.Duration
	// UnreachableAfter: a provisioned node that has not answered for longer
	// is a problem and may be forgotten (default 10 min).
	UnreachableAfter time.Duration
	// PollInterval is how often running nodes are polled (default 10 s).
	PollInterval time.Duration
	// ShareDir, when set, also receives each tenant's kubeconfig and
	// talosconfig under <ShareDir>/<tenant>/ (0600).
	ShareDir string
	// Wake sends a Wake-on-LAN packet for a MAC address; it is called for
	// a metal machine with a mac that does not answer when it is needed
	// (nil: machines are never woken).
	Wake func(ctx context.Context, mac string) error
	// WakeInterval is how often a machine that does not answer is woken
	// again (default 1 min).
	WakeInterval time.Duration
	// Power makes the power controllers of metal machines (power.go).
	Power PowerOptions
	// Discovery finds machines on the LAN (discover.go); off without CIDRs.
	Discovery DiscoveryOptions
	// BackupCheck is how often the periodic etcd backups are looked at
	// (default 1 min).
	BackupCheck time.Duration
	// DriftInterval is how often an idle cloud tenant is refreshed to find
	// what was changed outside rezuscloud (default 1 h; negative: never).
	DriftInterval time.Duration
	// SetLogLevel changes the log level (the bridge's select).
	SetLogLevel func(level string) error
	// Scrub removes secrets from the operations' log lines (nil: none are
	// registered; tofu redacts sensitive values itself).
	Scrub func(string) string
	// PoolInputs is what Home Assistant tells the worker pools (pool.go;
	// nil: no energy, price or plug readings).
	PoolInputs PoolInputs
	// Kube opens a cluster's Kubernetes API from its kubeconfig (nil:
	// package kube).
	Kube func(kubeconfig []byte) (Kube, error)
	// PoolInterval is how often the worker pools decide (default 30 s).
	PoolInterval time.Duration
	// Shared, when set, is the store the instances of one rezuscloud share
	// (PostgreSQL), written under this instance's leadership: every record,
	// secret and backup index entry goes there first and the data folder is
	// the working copy (shared.go). nil: the data folder alone.
	Shared state.Writer
	// Log is the logger (nil: none).
	Log *zap.Logger
}

// Engine runs tenants. Its exported methods are the commands of Home
// Assistant's buttons, numbers and request API: they check their input,
// queue the operation and return; results arrive as operation events.
type Engine struct {
	opts     Options
	viewOpts viewOptions
	log      *zap.Logger
	sem      chan struct{}
	poller   *talos.Poller
	oplog    *oplog

	// secureTry is how long one wait for a configured node's secure API
	// lasts before its stage is read again (3 s; unit tests shorten it)
	secureTry time.Duration

	ready  chan struct{} // closed once the tenant files were read
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	ctx    context.Context // operations' lifetime (Run)
	ts     map[string]*tenantState
	closed bool
	disc   discoverer // machines found on the LAN (discover.go)

	chMu    sync.Mutex
	changed chan struct{} // closed and replaced when any view changes

	sharedMu sync.Mutex
	shared   map[string][32]byte // secrets written to Options.Shared: tenant/kind → checksum
}

// Errors a caller may want to tell apart.
var (
	ErrUnknownTenant = errors.New("unknown tenant")
	ErrBusy          = errors.New("too many operations queued")
	ErrClosed        = errors.New("engine is shutting down")
)

// New returns an engine; start it with Run.
func New(opts Options) (*Engine, error) {
	if opts.Infra == nil && opts.Runner != nil {
		opts.Infra = runnerInfra{opts.Runner}
	}
	if opts.DataDir == "" || opts.Store == nil || opts.Infra == nil || opts.Publisher == nil {
		return nil, fmt.Errorf("engine: DataDir, Store, Runner (or Infra) and Publisher are required")
	}
	if opts.Nodes == nil {
		opts.Nodes = newTalosNodes()
	}
	if opts.ParallelApplies <= 0 {
		opts.ParallelApplies = 2
	}
	if opts.TalosPort == 0 {
		opts.TalosPort = 50000
	}
	if opts.NodeTimeout <= 0 {
		opts.NodeTimeout = 20 * time.Minute
	}
	if opts.ResetTimeout <= 0 {
		opts.ResetTimeout = 2 * time.Minute
	}
	if opts.StallAfter <= 0 {
		opts.StallAfter = 3 * time.Minute
	}
	if opts.UnreachableAfter <= 0 {
		opts.UnreachableAfter = 10 * time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	if opts.WakeInterval <= 0 {
		opts.WakeInterval = time.Minute
	}
	if opts.BackupCheck <= 0 {
		opts.BackupCheck = time.Minute
	}
	if opts.DriftInterval == 0 {
		opts.DriftInterval = time.Hour
	}
	if opts.PoolInterval <= 0 {
		opts.PoolInterval = 30 * time.Second
	}
	if opts.Kube == nil {
		opts.Kube = func(kc []byte) (Kube, error) { return kube.New(kc) }
	}
	if opts.CloudEnv == nil {
		opts.CloudEnv = func(tenant.Provider) map[string]string { return nil }
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	e := &Engine{opts: opts, log: opts.Log, sem: make(chan struct{}, opts.ParallelApplies), ts: map[string]*tenantState{}, shared: map[string][32]byte{},
		ready: make(chan struct{}), changed: make(chan struct{}), oplog: newOplog(), secureTry: 3 * time.Second,
		viewOpts: viewOptions{talosPort: opts.TalosPort, stallAfter: opts.StallAfter, unreachableAfter: opts.UnreachableAfter}}
	po := talos.PollerOptions{Interval: opts.PollInterval, OnChange: e.onNodeState, Status: opts.Nodes.Status}
	if p, ok := opts.Nodes.(interface{ Prune(map[string]bool) }); ok {
		po.Prune = p.Prune
	}
	e.poller = talos.NewPoller(po)
	if opts.Scrub != nil {
		e.oplog.scrub = opts.Scrub
	}
	return e, nil
}

// now is the engine's clock (the fake one of testing/synctest in tests).
func (e *Engine) now() time.Time { return time.Now() }

// opCtx is the context operations run in: it ends when Run stops (with
// tofu.ErrShutdown as its cause).
func (e *Engine) opCtx() context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil {
		return context.Background()
	}
	return e.ctx
}

// Run loads the tenants, restores what the engine remembers of them, and
// keeps following the tenant files until ctx ends. Then it cancels running
// operations gracefully (tofu gets SIGINT and saves its state) and waits
// for them before it returns. A ctx cancelled with a cause of its own (this
// instance lost its leadership of a shared store) interrupts tofu at once
// instead of letting an apply finish: what it did could not be saved.
func (e *Engine) Run(ctx context.Context, watchInterval time.Duration) error {
	// operations see the end of ctx as a shutdown (tofu.ErrShutdown): an
	// apply in tofu may then finish its requests in flight first
	opCtx, shutdown := context.WithCancelCause(context.WithoutCancel(ctx))
	defer shutdown(nil)
	stopWatch := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
			cause = tofu.ErrShutdown
		}
		shutdown(cause)
	})
	defer stopWatch()
	e.mu.Lock()
	e.ctx = opCtx
	e.mu.Unlock()
	e.restore()
	pollCtx, stopPoll := context.WithCancel(context.Background())
	pollDone := make(chan struct{})
	go func() { e.poller.Run(pollCtx); close(pollDone) }()
	e.wg.Add(4)
	go func() { defer e.wg.Done(); e.backupLoop(ctx, e.opts.BackupCheck) }()
	go func() { defer e.wg.Done(); e.poolLoop(ctx) }()
	go func() { defer e.wg.Done(); e.clockLoop(ctx) }()
	go func() { defer e.wg.Done(); e.driftLoop(ctx) }()
	discDone := e.startDiscovery(ctx) // discover.go

	e.opts.Store.Watch(ctx, watchInterval, func(s *tenant.Snapshot, err error) {
		if err != nil {
			e.log.Error("reading tenant files", zap.Error(err))
		} else {
			e.apply(s)
		}
		e.once.Do(func() { close(e.ready) })
	})

	e.mu.Lock()
	e.closed = true
	for _, t := range e.ts {
		t.close()
	}
	e.mu.Unlock()
	e.wg.Wait() // workers end after their running operation was cancelled
	stopPoll()
	<-pollDone
	<-discDone
	return nil
}

// Ready is closed once Run has read the tenant files the first time.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// clockLoop republishes what depends on the time alone (a node stalled or
// unreachable for too long, a stale backup): every half minute, or more
// often when a stall is to be seen sooner.
func (e *Engine) clockLoop(ctx context.Context) {
	everyTick(ctx, min(30*time.Second, max(e.opts.StallAfter/4, time.Second)), func() {
		for _, ts := range e.states() {
			ts.changed()
		}
	})
}

// everyTick calls f every d (the first time after d) until ctx ends: the
// engine's periodic loops (clock, backups, pools, drift).
func everyTick(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f()
	}
}

// restore brings back tenants that have a record but maybe no file. A
// tenant whose workspace a tofu of an earlier process may still hold
// waits for it in its own worker (recover), so that the others, the tenant
// files and Home Assistant come up at once.
func (e *Engine) restore() {
	// every tenant that ever ran tofu has a record (it is saved before an
	// operation starts), so the records name every lock there can be
	for _, name := range e.knownTenants() {
		rec, err := e.loadRecord(name)
		if err != nil {
			e.log.Error("restoring tenant", zap.String("tenant", name), zap.Error(err))
			continue
		}
		e.mu.Lock()
		ts := e.ensureLocked(name, rec, true)
		e.mu.Unlock()
		e.refreshShare(name)
		if !rec.Infra {
			continue
		}
		if len(rec.Spec) > 0 {
			if applied, err := tenant.Parse(e.opts.Store.Path(name), rec.Spec); err == nil {
				ts.mu.Lock()
				ts.applied = applied
				ts.mu.Unlock()
			}
		}
	}
	e.updatePollTargets()
}

// apply takes a new snapshot of the tenant files.
func (e *Engine) apply(s *tenant.Snapshot) {
	for _, p := range s.Problems {
		e.log.Warn("tenant file problem (the tenant is left as it was)", zap.String("problem", p.Error()))
	}
	present := map[string]*tenant.Tenant{}
	for _, t := range s.Tenants {
		present[t.Name] = t
	}
	invalid := map[string]bool{}
	for _, n := range s.Invalid {
		invalid[n] = true
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	var changed []*tenantState
	for name, t := range present {
		ts, ok := e.ts[name]
		if !ok {
			rec, err := e.loadRecord(name)
			if err != nil {
				e.log.Error("tenant record", zap.String("tenant", name), zap.Error(err))
			}
			ts = e.ensureLocked(name, rec, false)
		}
		if _, react := ts.setSpecReact(t); react {
			changed = append(changed, ts)
		}
	}
	for name, ts := range e.ts {
		if _, ok := present[name]; ok || invalid[name] {
			continue // an invalid file keeps the tenant as it was
		}
		if ts.removeSpec() {
			delete(e.ts, name)
			ts.close()
			// nothing provisioned: the secrets bundle and record go with the file
			e.removeTenantFiles(name)
		}
	}
	e.mu.Unlock()
	e.publishTenants()
	for _, ts := range changed {
		if err := e.specChanged(ts); err != nil {
			e.log.Warn("queueing after a tenant file change", zap.String("tenant", ts.name), zap.Error(err))
		}
	}
}

// specChanged reacts to a new tenant file: a provisioned tenant plans, or
// applies with auto_apply; one without infrastructure waits for Apply.
// Whoever notices a change first (the file watcher or the command that
// wrote the file) calls it, once per change.
func (e *Engine) specChanged(ts *tenantState) error {
	op, ok := e.reaction(ts)
	if !ok {
		return nil
	}
	return e.enqueue(ts.name, op)
}

// reaction is the operation a change of the tenant's file calls for: none
// without infrastructure, else a plan, or an apply with auto_apply.
func (e *Engine) reaction(ts *tenantState) (operation, bool) {
	rec := ts.recs.get()
	t := ts.shownSpec()
	switch {
	case !rec.Infra || ts.orphaned():
		return operation{}, false
	case t.AutoApply:
		return e.applyOp(ts), true
	}
	return e.planOp(ts), true
}

// ensureLocked returns the tenant's state, creating it and its worker
// (which first recovers the tenant's workspace, when recover is set).
func (e *Engine) ensureLocked(name string, rec record, recover bool) *tenantState {
	if ts, ok := e.ts[name]; ok {
		return ts
	}
	ts := newTenantState(e, name, rec)
	e.ts[name] = ts
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ts.work(recover)
	}()
	return ts
}

// states is every tenant, sorted by name.
func (e *Engine) states() []*tenantState {
	e.mu.Lock()
	out := make([]*tenantState, 0, len(e.ts))
	for _, ts := range e.ts {
		out = append(out, ts)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b *tenantState) int { return strings.Compare(a.name, b.name) })
	return out
}

// publishTenants tells the publisher which tenants exist, with their
// complete views.
func (e *Engine) publishTenants() {
	var vs []tenant.View
	for _, ts := range e.states() {
		ts.pubMu.Lock()
		v := ts.view()
		ts.shown = &v
		ts.pubMu.Unlock()
		if v.Spec != nil {
			vs = append(vs, v)
		}
	}
	e.opts.Publisher.SetTenants(vs)
	e.notifyChanged()
	e.publishBridge()
	e.publishMachines() // discover.go: declared machines leave
}

// notifyChanged wakes whoever waits on Changed.
func (e *Engine) notifyChanged() {
	e.chMu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.chMu.Unlock()
}

func (e *Engine) publishBridge() {
	n := 0
	for _, ts := range e.states() {
		ts.mu.Lock()
		if ts.run != nil {
			n++
		}
		ts.mu.Unlock()
	}
	e.opts.Publisher.SetBridgeStatus(n)
}

// lookup returns a tenant's state.
func (e *Engine) lookup(name string) (*tenantState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lookupLocked(name)
}

func (e *Engine) lookupLocked(name string) (*tenantState, error) {
	if e.closed {
		return nil, ErrClosed
	}
	ts, ok := e.ts[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTenant, name)
	}
	return ts, nil
}

// enqueue queues an operation for a tenant.
func (e *Engine) enqueue(name string, op operation) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ts, err := e.lookupLocked(name)
	if err != nil {
		return err
	}
	return e.enqueueLocked(ts, op)
}

// enqueueLocked queues an operation; e.mu is held.
func (e *Engine) enqueueLocked(ts *tenantState, op operation) error {
	select {
	case ts.queue <- &op:
		return nil
	default:
		return fmt.Errorf("tenant %s: %w", ts.name, ErrBusy)
	}
}

// Busy says what work is in progress ("" when none): operations running
// or queued, and waits for a tofu an earlier process left running. The
// health check keeps a busy add-on alive, whatever else is wrong.
func (e *Engine) Busy() string {
	running, queued, recovering := 0, 0, 0
	for _, ts := range e.states() {
		ts.mu.Lock()
		if ts.run != nil {
			running++
		}
		if ts.recovering {
			recovering++
		}
		queued += len(ts.queue)
		ts.mu.Unlock()
	}
	var parts []string
	switch running {
	case 0:
	case 1:
		parts = append(parts, "1 operation is running")
	default:
		parts = append(parts, fmt.Sprintf("%d operations are running", running))
	}
	if queued > 0 {
		parts = append(parts, fmt.Sprintf("%d queued", queued))
	}
	if recovering > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting for an earlier tofu", recovering))
	}
	return strings.Join(parts, ", ")
}
