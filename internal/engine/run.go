package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Operation names: the event names of the bridge's Operation event
// (contract) and the state document's operation.
const (
	opPlan      = "plan"
	opApply     = "apply"
	opDestroy   = "destroy"
	opBootstrap = "bootstrap"
	opReboot    = "reboot"
	opPowerOff  = "power_off"
	opPowerOn   = "power_on"
	opUpgrade   = "upgrade"
	opBackup    = "backup"
	opForget    = "forget"
)

// converges reports whether an operation brings the tenant to its file
// (its failure makes the tenant failed, its success ends a failure).
func converges(op string) bool {
	switch op {
	// (a forget changes the file and the record or nothing: a refused one,
	// say of a node that answers, leaves nothing for Apply to make good)
	case opPlan, opApply, opDestroy, opBootstrap, opUpgrade, opReplace:
		return true
	}
	return false
}

// Steps of an apply (the state document's operation_step).
const (
	stepPrepare   = "prepare"
	stepPlan      = "plan"
	stepReset     = "reset"
	stepInfra     = "infrastructure"
	stepConfigure = "configure"
	stepBootstrap = "bootstrap"
	stepWait      = "wait"
)

// operation is one queued command: its name and what it does. Commands
// build it (commands.go); the worker runs it (execute).
type operation struct {
	name     string
	activity string
	do       func(ctx context.Context, r *run) (string, error)
	// dropped, when set, is called when the queued operation is dropped
	// without running (Cancel, a stop)
	dropped func()
}

// run is the operation in progress: what it is doing, how far it is, and
// the stages it puts the nodes in while it acts on them. Flows change only
// their run; each change is published through the view.
type run struct {
	ts      *tenantState
	name    string
	started time.Time
	stop    context.CancelFunc

	// creating: the cluster was not bootstrapped when the operation began
	creating bool

	// under ts.mu
	activity string
	step     string
	progress int
	intents  map[string]intent
	rollout  *tenant.Rollout
	problem  string
	tofu     time.Duration // spent in tofu
}

func (r *run) set(f func(r *run)) {
	r.ts.mu.Lock()
	f(r)
	r.ts.mu.Unlock()
	r.ts.changed()
}

// setStep enters a step of the operation.
func (r *run) setStep(step string) { r.set(func(r *run) { r.step = step }) }

// setProgress says how far the operation is (0–100).
func (r *run) setProgress(pct int) { r.set(func(r *run) { r.progress = min(max(pct, 0), 100) }) }

// setActivity says what the operation does (tenant.Activity*).
func (r *run) setActivity(a string) { r.set(func(r *run) { r.activity = a }) }

// setProblem shows (or with "" clears) a problem the operation sees.
func (r *run) setProblem(msg string) { r.set(func(r *run) { r.problem = msg }) }

// setRollout shows the rollout's progress (nil: none).
func (r *run) setRollout(ro *tenant.Rollout) { r.set(func(r *run) { r.rollout = ro }) }

// intend puts a node in a stage while the operation acts on it (see
// intent); the node is polled soon.
func (r *run) intend(node string, stage tenant.Stage, serving bool) {
	now := r.ts.e.now()
	r.set(func(r *run) {
		if in, ok := r.intents[node]; ok && in.stage == stage && in.serving == serving {
			return
		}
		r.intents[node] = intent{stage: stage, serving: serving, since: now}
	})
	r.ts.e.poller.Trigger(pollKey(r.ts.name, node))
}

// expect marks a node the operation is bringing up: shown as it reports
// itself, not counted as down.
func (r *run) expect(node string) { r.intend(node, "", false) }

// release ends the operation's intent for a node.
func (r *run) release(node string) {
	r.set(func(r *run) { delete(r.intents, node) })
}

// addTofu adds to the time spent in tofu.
func (r *run) addTofu(d time.Duration) {
	r.ts.mu.Lock()
	r.tofu += d
	r.ts.mu.Unlock()
}

// execute runs one operation: it waits for a slot, marks the tenant busy
// (also on disk, so an interruption is noticed after a restart), runs the
// flow and records how it ended.
func (ts *tenantState) execute(op *operation) {
	e := ts.e
	base := e.opCtx()
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

	start := e.now()
	r := &run{ts: ts, name: op.name, started: start, stop: stop, activity: op.activity, intents: map[string]intent{},
		creating: !ts.recs.get().Bootstrapped}
	if err := ts.recs.save(func(rec *record) { rec.Running = op.name }); err != nil {
		e.log.Error("saving tenant record", zap.String("tenant", ts.name), zap.Error(err))
	}
	ts.mu.Lock()
	ts.run = r
	ts.mu.Unlock()
	ts.changed()
	e.publishBridge()
	e.opts.Publisher.PublishOperation(tenant.OperationEvent{Tenant: ts.name, Name: op.name, Result: tenant.ResultStarted, At: start})
	e.oplog.begin(ts.name, op.name, start)
	e.log.Info("operation started", zap.String("tenant", ts.name), zap.String("operation", op.name))

	msg, err := op.do(ctx, r)

	result := tenant.ResultSucceeded
	switch {
	case err == nil:
	case base.Err() != nil:
		// rezuscloud is stopping: the operation was interrupted, not
		// cancelled by the user; tofu saved its state
		result = tenant.ResultFailed
		e.log.Info("operation interrupted by shutdown", zap.String("tenant", ts.name), zap.String("operation", op.name), zap.Error(err))
		msg = interruptedMessage(op.name, ts.recs.get().Rollout)
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		result = tenant.ResultCancelled
		msg = cancelledMessage(op.name, err)
	default:
		result = tenant.ResultFailed
		msg = fmt.Sprintf("%s failed: %v", op.name, err)
	}
	ended := e.now()
	last := &tenant.OperationResult{Name: op.name, Result: result, At: ended, Message: msg}
	ts.mu.Lock()
	forgotten := ts.forgotten
	tofuTook := r.tofu
	ts.mu.Unlock()
	if !forgotten {
		if err := ts.recs.save(func(rec *record) {
			rec.Running = ""
			rec.LastOperation = last
			switch {
			case result != tenant.ResultSucceeded && converges(op.name):
				rec.Failure = last
			case result == tenant.ResultSucceeded && converges(op.name) && op.name != opPlan:
				rec.Failure = nil
			}
		}); err != nil {
			e.log.Error("saving tenant record", zap.String("tenant", ts.name), zap.Error(err))
		}
	}
	ts.mu.Lock()
	ts.run = nil
	ts.last = lastRun{progress: r.progress, tofu: r.tofu}
	if result == tenant.ResultSucceeded && op.name != opPlan && op.name != opBackup {
		ts.last.progress = 100
	}
	ts.mu.Unlock()
	ts.changed()
	e.publishBridge()
	e.oplog.end(ts.name, op.name, result, msg, ended)
	e.opts.Publisher.PublishOperation(tenant.OperationEvent{Tenant: ts.name, Name: op.name, Result: result,
		Message: msg, Duration: ended.Sub(start), At: ended})
	log := e.log.With(zap.String("tenant", ts.name), zap.String("operation", op.name),
		zap.Duration("took", ended.Sub(start).Round(time.Millisecond)), zap.Duration("in_tofu", tofuTook.Round(time.Millisecond)))
	if result == tenant.ResultSucceeded {
		log.Info("operation succeeded", zap.String("message", msg))
	} else {
		log.Warn("operation did not succeed", zap.String("result", string(result)), zap.String("message", msg))
	}
}

// cancelledMessage is the message of an operation the user cancelled: what
// the next step is, for that operation.
func cancelledMessage(op string, err error) string {
	switch op {
	case opUpgrade:
		return fmt.Sprintf("upgrade was cancelled: %v. The nodes not on the new version keep running theirs; press Install to resume.", err)
	case opApply, opPlan, opDestroy, opBootstrap:
		return fmt.Sprintf("%s was cancelled: %v. Press Apply to converge.", op, err)
	}
	return fmt.Sprintf("%s was cancelled: %v", op, err)
}
