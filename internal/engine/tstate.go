package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// queueLen bounds the operations waiting for one tenant.
const queueLen = 8

// operation is one queued command.
type operation struct {
	name string
	args opArgs
}

type opArgs struct {
	node      string
	component string // upgrade: "talos" or "kubernetes"
}

// tstate is one tenant: its spec, what the engine remembers of it, its
// status, and the worker that runs its operations one at a time.
type tstate struct {
	e     *Engine
	name  string
	queue chan *operation

	saveMu  sync.Mutex // serialises writes of the record (see saveRec)
	mu      sync.Mutex
	spec    *tenant.Tenant // the file as it is now; nil when removed (orphaned)
	specRaw []byte
	applied *tenant.Tenant // the spec of the record, for an orphaned tenant
	rec     record
	status  tenant.Status
	nodes   map[string]tenant.NodeStatus
	cur     string             // running operation, "" when idle
	stop    context.CancelFunc // cancels the running operation
	plan    *pendingPlan       // the last plan, waiting for Apply

	forgotten bool // destroyed and without a file: keep no record
	seen      bool // a file was seen since start-up
	// polled names the nodes the poller reported since start-up: until
	// every node was, running and degraded are not judged
	polled map[string]bool

	tofuTime time.Duration // spent in tofu by the running operation
	lastTofu time.Duration // ... by the last finished one

	// etcd backups (backup.go)
	backupMu     sync.Mutex         // one snapshot at a time
	lastBackup   *tenant.BackupInfo // the newest snapshot file
	backupLoaded bool               // lastBackup was read from the backup dir
	backupTried  time.Time          // the last periodic attempt
}

func newTState(e *Engine, name string, rec record) *tstate {
	ts := &tstate{e: e, name: name, queue: make(chan *operation, queueLen), rec: rec, nodes: map[string]tenant.NodeStatus{},
		polled: map[string]bool{}}
	ts.status = tenant.Status{LastOperation: rec.LastOperation,
		Phase: next(tenant.PhaseAbsent, evRestore, facts{infra: rec.Infra, recorded: rec.Phase, interrupted: rec.Running != ""})}
	if rec.Running != "" {
		// the add-on stopped in the middle of an operation
		ts.status.Problem = true
		ts.status.LastOperation = &tenant.OperationResult{Name: rec.Running, Result: tenant.ResultFailed, At: time.Now(),
			Message: interrupted(rec.Running)}
		ts.rec.Running = ""
		ts.settlePhaseLocked()
		ts.rec.LastOperation = ts.status.LastOperation
		if err := e.saveRecord(name, ts.rec); err != nil {
			e.log.Error("saving tenant record", zap.String("tenant", name), zap.Error(err))
		}
	}
	for n, r := range rec.Nodes {
		ts.nodes[n] = tenant.NodeStatus{Stage: tenant.StageUnreachable, Address: r.Address, PrivateAddress: r.PrivateAddress,
			Role: r.Role, Group: r.Group}
	}
	return ts
}

// settlePhaseLocked copies the phase into the record. The status's phase
// is the one source: the record keeps a copy of it as it was when the last
// operation ended (or a restart found one interrupted), which a restart
// and a tenant file that comes back start from, and is written nowhere
// else (a destroy's own save records absent, the phase it ends in).
// Called with ts.mu held; the caller saves the record.
func (ts *tstate) settlePhaseLocked() { ts.rec.Phase = ts.status.Phase }

// interrupted is the message of an operation that a stop of rezuscloud
// interrupted.
func interrupted(op string) string {
	return fmt.Sprintf("%s was interrupted when rezuscloud stopped; press Apply to converge", op)
}

// setSpec takes a new version of the tenant file; it reports a change.
// Called with e.mu held.
func (ts *tstate) setSpec(t *tenant.Tenant) bool {
	raw := t.Source
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var changed bool
	if ts.spec == nil && !ts.seen {
		// first sight since start-up: a change only if the file differs
		// from the spec last applied (a restart alone runs nothing)
		changed = len(ts.rec.Spec) > 0 && !bytes.Equal(raw, ts.rec.Spec)
	} else {
		changed = ts.spec == nil || !bytes.Equal(raw, ts.specRaw)
	}
	ts.seen = true
	fileBack := ts.spec == nil
	ts.spec, ts.specRaw = t, raw
	if changed {
		ts.plan = nil // a plan is only good for the spec it was made from
	}
	if fileBack {
		ts.advanceLocked(evFileBack, facts{infra: ts.rec.Infra, recorded: ts.rec.Phase})
	}
	ts.status.TalosVersion, ts.status.KubernetesVersion = t.TalosVersion, t.KubernetesVersion
	for _, n := range t.Nodes() {
		if _, ok := ts.nodes[n.Name]; !ok {
			addr := ""
			if n.Machine != nil {
				addr = n.Machine.Address
			}
			ts.nodes[n.Name] = tenant.NodeStatus{Stage: tenant.StagePending, Address: addr, Role: n.Role, Group: n.Group}
		}
	}
	ts.pruneNodesLocked()
	return changed
}

// removeSpec handles a removed tenant file: a tenant with infrastructure
// becomes orphaned (nothing is destroyed); one without is forgotten, which
// removeSpec reports. Called with e.mu held.
func (ts *tstate) removeSpec() (forget bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.rec.Infra && ts.cur == "" {
		return true
	}
	if ts.spec != nil {
		ts.applied = ts.spec
		if len(ts.rec.Spec) > 0 {
			if t, err := tenant.Parse(ts.spec.Path, ts.rec.Spec); err == nil {
				ts.applied = t
			}
		}
	}
	ts.spec = nil
	ts.specRaw = nil
	ts.plan = nil
	ts.advanceLocked(evFileRemoved, facts{})
	ts.status.Problem = true
	ts.pruneNodesLocked()
	return false
}

// pruneNodesLocked drops nodes neither declared nor provisioned.
func (ts *tstate) pruneNodesLocked() {
	declared := map[string]bool{}
	if t := ts.shownLocked(); t != nil {
		for _, n := range t.Nodes() {
			declared[n.Name] = true
		}
	}
	for n := range ts.nodes {
		if _, applied := ts.rec.Nodes[n]; !declared[n] && !applied {
			delete(ts.nodes, n)
		}
	}
}

func (ts *tstate) orphaned() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.spec == nil
}

func (ts *tstate) running() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.cur
}

// shown is the tenant as Home Assistant shows it: the file, or for an
// orphaned tenant the spec it was last applied with.
func (ts *tstate) shown() *tenant.Tenant {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.shownLocked()
}

func (ts *tstate) shownLocked() *tenant.Tenant {
	if ts.spec != nil {
		return ts.spec
	}
	if ts.applied != nil {
		// an orphaned tenant shows the nodes it has
		return ts.applied
	}
	return nil
}

func (e *Engine) endpoint(address string) string {
	return net.JoinHostPort(address, strconv.Itoa(e.opts.TalosPort))
}

// publish sends the tenant's and its nodes' state.
func (ts *tstate) publish() {
	ts.mu.Lock()
	ts.recountLocked()
	st := ts.status
	nodes := make(map[string]tenant.NodeStatus, len(ts.nodes))
	for k, v := range ts.nodes {
		nodes[k] = v
	}
	ts.mu.Unlock()
	p := ts.e.opts.Publisher
	p.SetTenantStatus(ts.name, st)
	for n, s := range nodes {
		p.SetNodeStatus(ts.name, n, s)
	}
}

// recountLocked derives nodes ready/total and running ↔ degraded.
func (ts *tstate) recountLocked() {
	ready, total := 0, 0
	t := ts.shownLocked()
	if t != nil {
		for _, n := range t.Nodes() {
			total++
			if s := ts.nodes[n.Name]; s.Ready && s.Stage == tenant.StageRunning {
				ready++
			}
		}
	}
	ts.status.NodesReady, ts.status.NodesTotal = ready, total
	allPolled := true
	for n := range ts.rec.Nodes {
		if !ts.polled[n] {
			allPolled = false
		}
	}
	ts.advanceLocked(evNodesPolled, facts{busy: ts.cur != "", file: ts.spec != nil, allPolled: allPolled,
		ready: ready, total: total, bootstrapped: ts.rec.Bootstrapped})
	ts.status.Problem = ts.status.Phase == tenant.PhaseFailed || ts.status.Phase == tenant.PhaseDegraded ||
		ts.status.Phase == tenant.PhaseOrphaned
	ts.recountVersionsLocked() // upgrade.go
	ts.recountBackupLocked()   // backup.go
}

// setNode updates one node's state and publishes it.
func (ts *tstate) setNode(name string, f func(*tenant.NodeStatus)) {
	ts.mu.Lock()
	s, ok := ts.nodes[name]
	if !ok {
		ts.mu.Unlock()
		return
	}
	f(&s)
	ts.nodes[name] = s
	ts.mu.Unlock()
	ts.publish()
}

// setStatus changes the tenant's status and publishes it.
func (ts *tstate) setStatus(f func(*tenant.Status)) {
	ts.mu.Lock()
	f(&ts.status)
	ts.mu.Unlock()
	ts.publish()
}

// onNodeState takes a change reported by the poller.
func (e *Engine) onNodeState(key string, st talos.NodeState) {
	tn, node, ok := strings.Cut(key, "/")
	if !ok {
		return
	}
	ts, err := e.get(tn)
	if err != nil {
		return
	}
	ts.mu.Lock()
	ts.polled[node] = true
	ts.mu.Unlock()
	ts.setNode(node, func(s *tenant.NodeStatus) { observed(s, st, "") })
}

// observe shows a node's state that a flow read while it acts on the node,
// through the same conversion as the poller's reports (observed). hold,
// when not "", is an intent stage that a node reported running keeps (a
// node being upgraded runs between its steps); it is still shown ready.
// The poller reports only changes from what it read last: when the flow
// read something else, the poller is told to read the node again, so that
// its next report starts from what is shown and no change is lost.
func (ts *tstate) observe(name string, st talos.NodeState, hold tenant.Stage) {
	ts.setNode(name, func(s *tenant.NodeStatus) { observed(s, st, hold) })
	key := pollKey(ts.name, name)
	if last, ok := ts.e.poller.State(key); ok && !last.Equal(st) {
		ts.e.poller.Trigger(key)
	}
}

// observed turns a node's state into its status; see observe.
func observed(s *tenant.NodeStatus, st talos.NodeState, hold tenant.Stage) {
	if hold == "" || s.Stage != hold || st.Stage != tenant.StageRunning {
		s.Stage = st.Stage
	}
	s.Ready = st.Ready && st.Stage == tenant.StageRunning
	if st.TalosVersion != "" {
		s.TalosVersion = st.TalosVersion
	}
	if st.KubeletVersion != "" {
		s.KubernetesVersion = st.KubeletVersion
	}
}

// intend shows a stage the engine puts a node in while it acts on it and
// that no read can tell yet (installing after its config was given,
// resetting, rebooting, upgrading, shutting down): the one way flows set
// a stage themselves. The node is not ready in it, unless it keeps
// serving while the engine acts (a Kubernetes upgrade: Ready is then
// left as last read). The poller's next report replaces it with what the
// node says; it is told to read the node soon.
func (ts *tstate) intend(name string, stage tenant.Stage, serving bool) {
	ts.setNode(name, func(s *tenant.NodeStatus) {
		s.Stage = stage
		s.Ready = s.Ready && serving
	})
	ts.e.poller.Trigger(pollKey(ts.name, name))
}

// pollKey names a node for the poller: tenant and node joined by a byte
// that neither may contain.
func pollKey(tenantName, node string) string { return tenantName + "/" + node }

// updatePollTargets polls every provisioned node of every tenant that has
// a talosconfig.
func (e *Engine) updatePollTargets() {
	targets := map[string]talos.PollTarget{}
	e.mu.Lock()
	states := make([]*tstate, 0, len(e.ts))
	for _, ts := range e.ts {
		states = append(states, ts)
	}
	e.mu.Unlock()
	for _, ts := range states {
		tc, err := os.ReadFile(e.talosconfigPath(ts.name))
		if err != nil {
			continue
		}
		ts.mu.Lock()
		for n := range ts.rec.Nodes {
			if t, ok := e.targetIn(ts.providerLocked(), ts.rec.Endpoint, ts.rec.Nodes, n); ok {
				targets[pollKey(ts.name, n)] = talos.PollTarget{Target: t, Talosconfig: tc}
			}
		}
		ts.mu.Unlock()
	}
	e.poller.SetTargets(targets)
}

// work runs the tenant's operations one at a time until the queue closes.
func (ts *tstate) work() {
	for op := range ts.queue {
		ts.run(op)
	}
}

// drain drops the queued operations.
func (ts *tstate) drain() {
	for {
		select {
		case <-ts.queue:
			continue
		default:
		}
		return
	}
}

// close ends the worker once its running operation returns; queued
// operations are dropped. Called with e.mu held, once.
func (ts *tstate) close() {
	ts.drain()
	close(ts.queue)
}

// cancel stops the running operation and drops the queued ones.
func (ts *tstate) cancel() bool {
	ts.drain()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.stop == nil {
		return false
	}
	ts.stop()
	return true
}

// run executes one operation: it waits for a slot, marks the tenant busy
// (also on disk, so an interruption is noticed after a restart), runs the
// flow and reports the result.
func (ts *tstate) run(op *operation) {
	e := ts.e
	e.mu.Lock()
	base := e.ctx
	e.mu.Unlock()
	if base == nil {
		base = context.Background()
	}
	ctx, stop := context.WithCancel(base)
	defer stop()
	if ctx.Err() != nil {
		return // shutting down
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-e.sem }()

	start := time.Now()
	ts.mu.Lock()
	ts.cur, ts.stop = op.name, stop
	ts.tofuTime = 0
	ts.rec.Running = op.name
	opName := op.name
	ts.status.Operation = &opName
	ts.status.Progress = 0
	ts.mu.Unlock()
	if err := ts.persist(); err != nil {
		e.log.Error("saving tenant record", zap.String("tenant", ts.name), zap.Error(err))
	}
	ts.publish()
	e.publishBridge()
	e.opts.Publisher.PublishOperation(tenant.OperationEvent{Tenant: ts.name, Name: op.name, Result: tenant.ResultStarted, At: start})
	e.log.Info("operation started", zap.String("tenant", ts.name), zap.String("operation", op.name))

	msg, err := ts.dispatch(ctx, op)

	result := tenant.ResultSucceeded
	var end event // how a failed operation moves the phase
	switch {
	case err == nil:
	case base.Err() != nil:
		// rezuscloud is stopping: the operation was interrupted, not
		// cancelled by the user; tofu saved its state
		result, end = tenant.ResultFailed, evInterrupted
		e.log.Info("operation interrupted by shutdown", zap.String("tenant", ts.name), zap.String("operation", op.name), zap.Error(err))
		msg = interrupted(op.name)
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		result, end = tenant.ResultCancelled, evCancelled
		msg = fmt.Sprintf("%s was cancelled: %v. Press Apply to converge.", op.name, err)
	default:
		result, end = tenant.ResultFailed, evFailed
		msg = fmt.Sprintf("%s failed: %v", op.name, err)
	}
	ended := time.Now()
	last := &tenant.OperationResult{Name: op.name, Result: result, At: ended, Message: msg}
	ts.mu.Lock()
	ts.cur, ts.stop = "", nil
	ts.lastTofu = ts.tofuTime
	tofuTook := ts.tofuTime
	ts.rec.Running = ""
	ts.rec.LastOperation = last
	ts.status.Operation = nil
	ts.status.LastOperation = last
	if result != tenant.ResultSucceeded {
		ts.advanceLocked(end, facts{backup: op.name == "backup"})
	}
	ts.settlePhaseLocked()
	forgotten := ts.forgotten
	ts.mu.Unlock()
	if !forgotten {
		if err := ts.persist(); err != nil {
			e.log.Error("saving tenant record", zap.String("tenant", ts.name), zap.Error(err))
		}
	}
	e.publishTenants()
	e.opts.Publisher.PublishOperation(tenant.OperationEvent{Tenant: ts.name, Name: op.name, Result: result,
		Message: msg, Duration: ended.Sub(start), At: ended})
	log := e.log.With(zap.String("tenant", ts.name), zap.String("operation", op.name), zap.Duration("took", ended.Sub(start).Round(time.Millisecond)), zap.Duration("in_tofu", tofuTook.Round(time.Millisecond)))
	if result == tenant.ResultSucceeded {
		log.Info("operation succeeded", zap.String("message", msg))
	} else {
		log.Warn("operation did not succeed", zap.String("result", string(result)), zap.String("message", msg))
	}
}
