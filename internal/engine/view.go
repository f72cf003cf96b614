package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// The view (docs/design.md "Engine internals"): what Home Assistant shows of
// a tenant is computed, never kept. One pure function, view, derives the
// phase, every node's stage, the counts, the problem and its reasons, the
// versions and the backup age from the facts: the tenant file, the record
// (facts only), the running operation (run), what the nodes last reported
// (written by the poller alone) and the pending plan. It is level-triggered:
// the same facts give the same documents, whoever asks and how often.

// facts are the inputs of view, copied under the tenant's lock.
type facts struct {
	name    string
	spec    *tenant.Tenant // the file; nil when it was removed
	applied *tenant.Tenant // the spec of the record, for an orphaned tenant
	rec     record
	run     *runFacts          // the running operation; nil when idle
	last    lastRun            // how the last run ended
	obs     map[string]nodeObs // what the nodes last reported, by name
	plan    *planFacts         // the pending plan; nil when none
	drift   *driftFacts        // what the last refresh found changed outside
	backup  *tenant.BackupInfo // the newest etcd snapshot
	// recovering: a tofu an earlier rezuscloud left running is being
	// waited for before the tenant takes operations
	recovering bool
	recoverErr string                       // the workspace could not be recovered at start-up
	queued     int                          // operations waiting behind the running one
	pools      map[string]tenant.PoolStatus // the worker pools' last decisions
	now        time.Time
	opts       viewOptions
}

// viewOptions are the engine's settings the view needs.
type viewOptions struct {
	talosPort int
	// stallAfter: a node that stays in a stage the engine put it in for
	// longer, without any change, is a problem
	stallAfter time.Duration
	// unreachableAfter: a provisioned node that has not answered for
	// longer is a problem and may be forgotten
	unreachableAfter time.Duration
}

// runFacts is the running operation as the view sees it.
type runFacts struct {
	name     string // its event name (opApply, ...)
	creating bool   // an apply of a cluster that was not bootstrapped when it began
	activity string
	step     string
	progress int
	intents  map[string]intent
	rollout  *tenant.Rollout
	problem  string
}

// lastRun is what is left of the last run once it ended.
type lastRun struct {
	progress int
	tofu     time.Duration // spent in tofu
}

// intent is what the running operation makes of a node while it acts on
// it. A stage is shown instead of what the node reports (a stage no read
// can tell yet: installing after its config was given, resetting,
// rebooting, upgrading, shutting down), not ready unless serving. With no
// stage, the node is shown as it reports itself, but is not counted as
// down: the operation is bringing it up.
type intent struct {
	stage   tenant.Stage
	serving bool
	since   time.Time
}

// nodeObs is what a node last reported, as the poller saw it.
type nodeObs struct {
	st talos.NodeState
	// since is when the node entered its current stage.
	since time.Time
	// talosVersion and kubeletVersion are the last versions it reported
	// (kept while it does not answer).
	talosVersion, kubeletVersion string
}

// planFacts is a pending plan, as far as the view needs it.
type planFacts struct {
	changes     tenant.Changes
	networkOnly bool
}

// driftFacts is what a refresh-only plan found changed outside tofu.
type driftFacts struct {
	changes tenant.Changes
	what    []string // resource addresses, for the reason
}

// view derives every document of a tenant from its facts.
func view(f facts) tenant.View {
	shown := f.spec
	if shown == nil {
		shown = f.applied
	}
	v := tenant.View{Name: f.name, Spec: shown, Nodes: map[string]tenant.NodeStatus{}}
	declared := map[string]tenant.Node{}
	var order []string // declared nodes, in the file's order
	if shown != nil {
		for _, n := range shown.Nodes() {
			declared[n.Name] = n
			order = append(order, n.Name)
		}
	}
	var intents map[string]intent
	if f.run != nil {
		intents = f.run.intents
	}
	show := func(name string) {
		if _, ok := v.Nodes[name]; ok {
			return
		}
		var decl *tenant.Node
		if n, ok := declared[name]; ok {
			decl = &n
		}
		v.Nodes[name] = nodeView(f, name, decl)
	}
	for _, n := range order {
		show(n)
	}
	for n := range f.rec.Nodes {
		show(n) // provisioned, no longer declared: shown until it is gone
	}
	for n := range intents {
		if _, recorded := f.rec.Nodes[n]; recorded || declared[n].Name != "" {
			show(n)
		}
	}

	st := tenant.Status{Pending: pending(f), LastOperation: f.rec.LastOperation, Progress: f.last.progress, Queued: f.queued, Pools: f.pools}
	if shown != nil {
		st.TalosVersion, st.KubernetesVersion = shown.TalosVersion, shown.KubernetesVersion
		st.Provider, st.AutoApply = shown.Provider, shown.AutoApply
		st.Counts = make(map[string]int, len(shown.NodeGroups))
		for _, g := range shown.NodeGroups {
			st.Counts[g.Name] = g.Count
		}
	}
	if r := f.run; r != nil {
		name := r.name
		st.Operation, st.Activity, st.OperationStep, st.Progress = &name, r.activity, r.step, r.progress
		if r.rollout != nil {
			ro := *r.rollout
			st.Rollout = &ro
		}
	}
	st.Progress = min(max(st.Progress, 0), 100)

	// counts: declared nodes ready; down = provisioned, declared nodes that
	// reported and are not running and ready, and that no operation is
	// bringing up
	allPolled := true
	var down []string
	for _, n := range order {
		ns := v.Nodes[n]
		if ns.Ready && ns.Stage == tenant.StageRunning {
			st.NodesReady++
		}
		if _, recorded := f.rec.Nodes[n]; !recorded {
			continue
		}
		if _, ok := f.obs[n]; !ok {
			allPolled = false
			continue
		}
		if _, busy := intents[n]; busy {
			continue
		}
		if f.rec.Nodes[n].Off && ns.Stage == tenant.StageUnreachable {
			continue // powered off on purpose
		}
		if !(ns.Ready && ns.Stage == tenant.StageRunning) {
			down = append(down, n)
		}
	}
	st.NodesTotal = len(order)
	st.Phase = phase(f, allPolled && len(down) > 0)
	st.TalosVersionRunning, st.KubernetesVersionRunning = runningVersions(f)
	if f.backup != nil {
		b := *f.backup
		st.Backup = &b
		st.BackupStale = backupDue(shown, f.rec, f.backup, f.now, 2) && f.spec != nil
	}
	st.Problems = problems(f, st, v.Nodes, down)
	st.Problem = len(st.Problems) > 0
	st.Summary = tenant.Summary(st)
	v.Status = st
	return v
}

// phase is the tenant's lifecycle phase (docs/design.md §4, §11.1). A running
// cluster stays running while it is scaled or applied (the activity says
// so); only a cluster that was never bootstrapped shows provisioning and
// bootstrapping.
func phase(f facts, degraded bool) tenant.Phase {
	r := f.run
	converging := r != nil && (r.name == opApply || r.name == opBootstrap)
	hasPlan := f.plan != nil && f.plan.changes.Any()
	switch {
	case r != nil && r.name == opDestroy:
		return tenant.PhaseDestroying
	case f.spec == nil && f.rec.Infra:
		return tenant.PhaseOrphaned
	case f.spec == nil:
		return tenant.PhaseAbsent
	case r != nil && r.name == opUpgrade:
		return tenant.PhaseUpgrading
	case converging && (r.creating || !f.rec.Bootstrapped):
		if r.step == stepBootstrap || r.step == stepWait {
			return tenant.PhaseBootstrapping
		}
		return tenant.PhaseProvisioning
	case !converging && hasPlan && (!f.rec.Infra || f.rec.Failure != nil):
		return tenant.PhasePlanned
	case !converging && f.rec.Failure != nil:
		return tenant.PhaseFailed
	case !f.rec.Infra:
		return tenant.PhaseAbsent
	case !f.rec.Bootstrapped || degraded:
		return tenant.PhaseDegraded
	}
	return tenant.PhaseRunning
}

// nodeView is one node's state document.
func nodeView(f facts, name string, decl *tenant.Node) tenant.NodeStatus {
	nr, recorded := f.rec.Nodes[name]
	o, observed := f.obs[name]
	var s tenant.NodeStatus
	switch {
	case recorded:
		s.Role, s.Group = nr.Role, nr.Group
		s.Address = shownAddress(providerOf(f), f.rec.Endpoint, f.rec.Nodes, name, f.opts.talosPort)
		s.PrivateAddress = nr.PrivateAddress
	case decl != nil:
		s.Role, s.Group = decl.Role, decl.Group
		if decl.Machine != nil {
			s.Address = decl.Machine.Address
		}
	}
	if observed {
		s.TalosVersion, s.KubernetesVersion = o.talosVersion, o.kubeletVersion
	}
	in, intended := intent{}, false
	if f.run != nil {
		in, intended = f.run.intents[name]
	}
	switch {
	case intended && in.stage != "":
		s.Stage = in.stage
		s.Ready = in.serving && observed && o.st.Ready && o.st.Stage == tenant.StageRunning
	case observed && recorded:
		s.Stage = o.st.Stage
		s.Ready = o.st.Ready && o.st.Stage == tenant.StageRunning
	case recorded:
		s.Stage = tenant.StageUnreachable // provisioned, not read yet
	default:
		s.Stage = tenant.StagePending
	}
	s.Power = s.Stage.Power()
	if recorded && observed && o.st.Stage == tenant.StageUnreachable && !intended && !nr.Off {
		s.UnreachableSince = o.since
		// the button only where Forget can act: a metal worker (a control
		// plane is replaced, a cloud server is the provider's)
		s.Forgettable = deadFor(f, o.since) && s.Role == tenant.RoleWorker && providerOf(f) == tenant.ProviderMetal
	}
	return s
}

// deadFor reports a node silent since since for longer than
// unreachable_after.
func deadFor(f facts, since time.Time) bool {
	return f.opts.unreachableAfter > 0 && f.now.Sub(since) >= f.opts.unreachableAfter
}

func providerOf(f facts) tenant.Provider {
	if f.spec != nil {
		return f.spec.Provider
	}
	if f.applied != nil {
		return f.applied.Provider
	}
	return tenant.ProviderMetal
}

// pending is what Apply would change: the pending plan's changes, and what
// a refresh found changed outside.
func pending(f facts) tenant.Changes {
	var c tenant.Changes
	if f.plan != nil {
		c = f.plan.changes
	}
	if f.drift != nil && f.plan == nil {
		c = f.drift.changes
	}
	return c
}

// runningVersions are the lowest versions the provisioned nodes report,
// none when the cluster does not exist.
func runningVersions(f facts) (talosVersion, kubernetesVersion string) {
	if !f.rec.Bootstrapped || len(f.rec.Nodes) == 0 {
		return "", ""
	}
	var tv, kv []string
	for n := range f.rec.Nodes {
		o := f.obs[n]
		tv = append(tv, o.talosVersion)
		kv = append(kv, o.kubeletVersion)
	}
	return lowestVersion(tv), strings.TrimPrefix(lowestVersion(kv), "v")
}

// backupDue reports whether the cluster exists, backups are on and the
// newest snapshot is older than factor intervals (or there is none).
func backupDue(t *tenant.Tenant, rec record, newest *tenant.BackupInfo, now time.Time, factor int) bool {
	if t == nil || !rec.Bootstrapped || len(rec.Nodes) == 0 {
		return false
	}
	iv := t.BackupInterval()
	if iv <= 0 {
		return false
	}
	return newest == nil || now.Sub(newest.At) >= time.Duration(factor)*iv
}

// problems are the reasons the tenant needs a look, each one sentence.
func problems(f facts, st tenant.Status, nodes map[string]tenant.NodeStatus, down []string) []string {
	var ps []string
	switch st.Phase {
	case tenant.PhaseOrphaned:
		ps = append(ps, "its tenant file was removed: restore it, or destroy the cluster")
	case tenant.PhaseFailed:
		ps = append(ps, f.rec.Failure.Message)
	case tenant.PhaseDegraded:
		if len(down) > 0 {
			slices.Sort(down)
			ps = append(ps, fmt.Sprintf("%d of %d nodes are not running and ready: %s", len(down), st.NodesTotal,
				strings.Join(down, ", ")))
		} else {
			ps = append(ps, "the cluster was never bootstrapped: press Apply")
		}
	}
	if f.run != nil && f.run.problem != "" {
		ps = append(ps, f.run.problem)
	}
	if f.run != nil && f.opts.stallAfter > 0 {
		var stalled []string
		for n, in := range f.run.intents {
			if in.stage == "" || in.stage == tenant.StageProvisioning {
				continue // bringing a node up, creating it: tofu's and the wait's own bounds
			}
			since := in.since
			if o, ok := f.obs[n]; ok && o.since.After(since) {
				since = o.since
			}
			if f.now.Sub(since) >= f.opts.stallAfter {
				stalled = append(stalled, fmt.Sprintf("node %s has been %s since %s without any change", n,
					strings.ReplaceAll(string(in.stage), "_", " "), since.UTC().Format(time.RFC3339)))
			}
		}
		slices.Sort(stalled)
		ps = append(ps, stalled...)
	}
	var dead []string
	for n, ns := range nodes {
		switch {
		case ns.UnreachableSince.IsZero() || !deadFor(f, ns.UnreachableSince):
		case ns.Forgettable:
			dead = append(dead, fmt.Sprintf("node %s has not answered since %s: bring it back, replace it or forget it",
				n, ns.UnreachableSince.UTC().Format(time.RFC3339)))
		case providerOf(f) == tenant.ProviderMetal:
			dead = append(dead, fmt.Sprintf("node %s has not answered since %s: bring it back or replace it",
				n, ns.UnreachableSince.UTC().Format(time.RFC3339)))
		default:
			dead = append(dead, fmt.Sprintf("node %s has not answered since %s: check its server in the cloud (one deleted outside shows as drift)",
				n, ns.UnreachableSince.UTC().Format(time.RFC3339)))
		}
	}
	slices.Sort(dead)
	ps = append(ps, dead...)
	if ro := f.rec.Rollout; ro != nil && f.run == nil && st.Phase != tenant.PhaseFailed {
		ps = append(ps, fmt.Sprintf("the %s upgrade to %s stopped after %d of %d nodes: press Install to resume",
			componentName(ro.Component), ro.Version, ro.Done, ro.Total))
	}
	if f.drift != nil && f.drift.changes.Any() {
		ps = append(ps, "drift: changed outside rezuscloud: "+strings.Join(f.drift.what, ", ")+"; Apply puts it back")
	}
	if st.BackupStale {
		ps = append(ps, fmt.Sprintf("the newest etcd backup is from %s, more than twice the backup interval ago",
			st.Backup.At.UTC().Format(time.RFC3339)))
	}
	if f.recoverErr != "" {
		ps = append(ps, "the OpenTofu workspace could not be recovered at start-up, so its state lock is kept: "+f.recoverErr)
	}
	if f.recovering {
		ps = append(ps, "waiting for an OpenTofu run that an earlier rezuscloud left behind to finish")
	}
	return ps
}

// componentName is a component as a person writes it.
func componentName(c string) string {
	if c == ComponentKubernetes {
		return "Kubernetes"
	}
	return "Talos"
}
