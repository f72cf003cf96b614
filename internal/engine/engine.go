// Package engine runs operations on tenants: one queue per tenant (serial
// inside a tenant, parallel across tenants up to a limit), the apply, plan,
// scale, destroy, bootstrap and reboot flows that join tofu and Talos, and
// the status model that Home Assistant shows.
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

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// Publisher shows tenants and their state (the MQTT bridge implements it).
// Calls must not block for long.
type Publisher interface {
	SetTenants([]*tenant.Tenant)
	SetTenantStatus(name string, st tenant.Status)
	SetNodeStatus(tenantName, node string, st tenant.NodeStatus)
	SetBridgeStatus(operations int)
	PublishOperation(ev tenant.OperationEvent)
}

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
	// Nodes is the Talos machine API (nil: package talos).
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
	// secureTry is how long one wait for a configured node's secure API
	// lasts before its stage is read again (default 3 s; unit tests
	// shorten it).
	secureTry time.Duration
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
	// SetLogLevel changes the log level (the bridge's select).
	SetLogLevel func(level string) error
	// Log is the logger (nil: none).
	Log *zap.Logger
}

// Engine runs tenants. Its exported methods are the commands of Home
// Assistant's buttons, numbers and request API: they check their input,
// queue the operation and return; results arrive as operation events.
type Engine struct {
	opts   Options
	log    *zap.Logger
	sem    chan struct{}
	poller *talos.Poller

	ctx    context.Context // the engine's lifetime (Run)
	ready  chan struct{}   // closed once the tenant files were read
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	ts     map[string]*tstate
	closed bool
	disc   discoverer // machines found on the LAN (discover.go)
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
	// the poller reads nodes through a Nodes that is not the default one
	// too (a fake's nodes are then polled like the flows read them); the
	// default keeps the poller's own connections
	var pollStatus func(context.Context, talos.Target, []byte) (talos.NodeState, error)
	if opts.Nodes == nil {
		opts.Nodes = talosNodes{}
	} else if _, real := opts.Nodes.(talosNodes); !real {
		pollStatus = opts.Nodes.Status
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
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	if opts.WakeInterval <= 0 {
		opts.WakeInterval = time.Minute
	}
	if opts.BackupCheck <= 0 {
		opts.BackupCheck = time.Minute
	}
	if opts.CloudEnv == nil {
		opts.CloudEnv = func(tenant.Provider) map[string]string { return nil }
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	e := &Engine{opts: opts, log: opts.Log, sem: make(chan struct{}, opts.ParallelApplies), ts: map[string]*tstate{},
		ready: make(chan struct{})}
	e.poller = talos.NewPoller(talos.PollerOptions{Interval: opts.PollInterval, OnChange: e.onNodeState, Status: pollStatus})
	return e, nil
}

// Run loads the tenants, restores what the engine remembers of them, and
// keeps following the tenant files until ctx ends. Then it cancels running
// operations gracefully (tofu gets SIGINT and saves its state) and waits
// for them before it returns.
func (e *Engine) Run(ctx context.Context, watchInterval time.Duration) error {
	// operations see the end of ctx as a shutdown (tofu.ErrShutdown): an
	// apply in tofu may then finish its requests in flight first
	opCtx, shutdown := context.WithCancelCause(context.WithoutCancel(ctx))
	defer shutdown(nil)
	stopWatch := context.AfterFunc(ctx, func() { shutdown(tofu.ErrShutdown) })
	defer stopWatch()
	e.mu.Lock()
	e.ctx = opCtx
	e.mu.Unlock()
	e.restore()
	pollCtx, stopPoll := context.WithCancel(context.Background())
	pollDone := make(chan struct{})
	go func() { e.poller.Run(pollCtx); close(pollDone) }()
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.backupLoop(ctx, e.opts.BackupCheck) }()
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

// releaseStaleLocks recovers each tenant's tofu workspace at start-up
// (tofu.Runner.Recover): a lock is released only once no tofu of an earlier
// add-on process still runs.
func (e *Engine) releaseStaleLocks(names []string) {
	for _, name := range names {
		// stops a tofu the previous add-on left running before its lock is
		// released, and imports only a newer errored.tfstate
		if err := e.opts.Infra.Recover(e.ctx, name); err != nil {
			e.log.Error("recovering the tofu workspace", zap.String("tenant", name), zap.Error(err))
		}
	}
}

// restore brings back tenants that have a record but maybe no file.
func (e *Engine) restore() {
	// every tenant that ever ran tofu has a record (it is saved before an
	// operation starts), so the records name every lock there can be
	names := e.knownTenants()
	e.releaseStaleLocks(names)
	for _, name := range names {
		rec, err := e.loadRecord(name)
		if err != nil {
			e.log.Error("restoring tenant", zap.String("tenant", name), zap.Error(err))
			continue
		}
		if !rec.Infra {
			continue
		}
		var applied *tenant.Tenant
		if len(rec.Spec) > 0 {
			applied, _ = tenant.Parse(e.opts.Store.Path(name), rec.Spec)
		}
		e.mu.Lock()
		ts := e.ensureLocked(name, rec)
		e.mu.Unlock()
		ts.mu.Lock()
		if ts.spec == nil && applied != nil {
			ts.applied = applied
		}
		ts.mu.Unlock()
	}
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
	var changed []*tstate
	for name, t := range present {
		ts, ok := e.ts[name]
		if !ok {
			rec, err := e.loadRecord(name)
			if err != nil {
				e.log.Error("tenant record", zap.String("tenant", name), zap.Error(err))
			}
			ts = e.ensureLocked(name, rec)
		}
		if ts.setSpec(t) {
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
func (e *Engine) specChanged(ts *tstate) error {
	op := ts.reaction()
	if op == "" {
		return nil
	}
	return e.enqueue(ts.name, op, nil)
}

// reaction is the operation a change of the tenant's file calls for: none
// without infrastructure, else a plan, or an apply with auto_apply.
func (ts *tstate) reaction() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch {
	case !ts.rec.Infra:
		return ""
	case ts.spec != nil && ts.spec.AutoApply:
		return "apply"
	}
	return "plan"
}

// ensureLocked returns the tenant's state, creating it and its worker.
func (e *Engine) ensureLocked(name string, rec record) *tstate {
	if ts, ok := e.ts[name]; ok {
		return ts
	}
	ts := newTState(e, name, rec)
	e.ts[name] = ts
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ts.work()
	}()
	return ts
}

// publishTenants tells the publisher which tenants and nodes exist, with
// their current state.
func (e *Engine) publishTenants() {
	e.mu.Lock()
	states := make([]*tstate, 0, len(e.ts))
	for _, ts := range e.ts {
		states = append(states, ts)
	}
	e.mu.Unlock()
	slices.SortFunc(states, func(a, b *tstate) int { return strings.Compare(a.name, b.name) })
	var list []*tenant.Tenant
	for _, ts := range states {
		if t := ts.shown(); t != nil {
			list = append(list, t)
		}
	}
	e.opts.Publisher.SetTenants(list)
	for _, ts := range states {
		ts.publish()
	}
	e.publishBridge()
	e.updatePollTargets()
	e.publishMachines() // discover.go: declared machines leave
}

func (e *Engine) publishBridge() {
	e.mu.Lock()
	n := 0
	for _, ts := range e.ts {
		if ts.running() != "" {
			n++
		}
	}
	e.mu.Unlock()
	e.opts.Publisher.SetBridgeStatus(n)
}

func (e *Engine) get(name string) (*tstate, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	ts, ok := e.ts[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTenant, name)
	}
	return ts, nil
}

// enqueue checks the tenant and queues an operation.
func (e *Engine) enqueue(name, op string, args *opArgs) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	ts, ok := e.ts[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownTenant, name)
	}
	return e.enqueueLocked(ts, op, args)
}

// enqueueLocked queues an operation; e.mu is held.
func (e *Engine) enqueueLocked(ts *tstate, op string, args *opArgs) error {
	o := &operation{name: op}
	if args != nil {
		o.args = *args
	}
	select {
	case ts.queue <- o:
		return nil
	default:
		return fmt.Errorf("tenant %s: %w", ts.name, ErrBusy)
	}
}

// Apply provisions the tenant as its file declares it: the pending plan if
// one was made for exactly this spec, else a new plan applied at once.
func (e *Engine) Apply(ctx context.Context, name string) error {
	ts, err := e.get(name)
	if err != nil {
		return err
	}
	if ts.orphaned() {
		return fmt.Errorf("tenant %s: its file was removed; restore it to apply, or destroy the tenant", name)
	}
	if err := e.fileValid(name); err != nil {
		return err
	}
	return e.enqueue(name, "apply", nil)
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

// Plan plans the tenant and shows the pending changes.
func (e *Engine) Plan(ctx context.Context, name string) error {
	ts, err := e.get(name)
	if err != nil {
		return err
	}
	if ts.orphaned() {
		return fmt.Errorf("tenant %s: its file was removed; restore it to plan", name)
	}
	if err := e.fileValid(name); err != nil {
		return err
	}
	return e.enqueue(name, "plan", nil)
}

// Cancel stops the tenant's running operation (tofu gets SIGINT and saves
// its state) and drops the queued ones.
func (e *Engine) Cancel(ctx context.Context, name string) error {
	ts, err := e.get(name)
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
	if _, err := e.get(name); err != nil {
		return err
	}
	if confirm != name {
		return fmt.Errorf("tenant %s: destroy not confirmed: confirm must be the tenant name %q", name, name)
	}
	return e.enqueue(name, "destroy", nil)
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
	changed, err := e.editSpecLocked(name, write)
	if err != nil {
		return err
	}
	if changed {
		e.publishTenants()
	}
	return nil
}

func (e *Engine) editSpecLocked(name string, write func() (*tenant.Tenant, error)) (changed bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false, ErrClosed
	}
	ts, ok := e.ts[name]
	if !ok {
		return false, fmt.Errorf("%w %q", ErrUnknownTenant, name)
	}
	if ts.orphaned() {
		return false, fmt.Errorf("tenant %s: its file was removed", name)
	}
	if ts.reaction() != "" && len(ts.queue) >= cap(ts.queue) {
		return false, fmt.Errorf("tenant %s: %w; the file was not changed", name, ErrBusy)
	}
	t, err := write()
	if err != nil {
		return false, err
	}
	if !ts.setSpec(t) {
		return false, nil // the file watcher noticed the change first and reacted
	}
	if op := ts.reaction(); op != "" { // auto_apply may just have changed
		if err := e.enqueueLocked(ts, op, nil); err != nil {
			return true, err
		}
	}
	return true, nil
}

// Bootstrap bootstraps etcd on the first control plane (a no-op when it
// was done).
func (e *Engine) Bootstrap(ctx context.Context, name string) error {
	if _, err := e.get(name); err != nil {
		return err
	}
	return e.enqueue(name, "bootstrap", nil)
}

// Reboot reboots one node.
func (e *Engine) Reboot(ctx context.Context, name, node string) error {
	ts, err := e.get(name)
	if err != nil {
		return err
	}
	if err := ts.provisioned(node); err != nil {
		return err
	}
	return e.enqueue(name, "reboot", &opArgs{node: node})
}

// provisioned refuses a node the tenant's file does not declare, or one
// that is not provisioned (yet).
func (ts *tstate) provisioned(node string) error {
	if t := ts.shown(); t != nil {
		if _, ok := t.Node(node); !ok {
			return fmt.Errorf("tenant %s has no node %q", ts.name, node)
		}
	}
	if _, ok := ts.target(node); !ok {
		return fmt.Errorf("tenant %s: node %q is not provisioned", ts.name, node)
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
