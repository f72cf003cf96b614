package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Rolling upgrades (docs/design.md §10.2). The file's talos_version and
// kubernetes_version are targets; the record's versions are what the
// machine configs are made with, the cluster's and each node's. A rollout
// moves one node at a time, control planes first, records each node's new
// version as it gets there (so an apply never moves a version: a cancelled
// or failed rollout leaves every node as it is), stops at the first
// failure and never retries by itself; run again, it resumes with the
// nodes not yet on target because a node's own report (never a record)
// says whether it is done.

// Components an upgrade moves.
const (
	ComponentTalos      = "talos"
	ComponentKubernetes = "kubernetes"
)

// Upgrade rolls the tenant's cluster to a Talos or Kubernetes version: with
// version, the tenant file is changed first (in place, comments kept);
// without, to the file's version (the update entity's Install). Everything
// is checked before anything changes: the cluster must exist, the version
// must be a step machinery's compatibility tables allow from what the nodes
// run. The rollout is queued behind a running operation.
func (e *Engine) Upgrade(ctx context.Context, name, component, version string) error {
	if component != ComponentTalos && component != ComponentKubernetes {
		return fmt.Errorf("tenant %s: component %q is not talos or kubernetes", name, component)
	}
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if ts.orphaned() {
		return fmt.Errorf("tenant %s: its file was removed; restore it to upgrade", name)
	}
	if !ts.exists() {
		return fmt.Errorf("tenant %s: the cluster is not running (phase %s): press Apply to create it first; nothing was changed",
			name, ts.phase())
	}
	if err := e.fileValid(name); err != nil {
		return err
	}
	t := ts.shownSpec()
	if version == "" {
		version = fileVersion(t, component)
	}
	if err := ts.checkUpgrade(component, version, t); err != nil {
		return fmt.Errorf("tenant %s: %w; nothing was changed", name, err)
	}
	op := e.upgradeOp(ts, component)
	if version == fileVersion(t, component) {
		return e.enqueue(name, op)
	}
	// the watcher sees no change then: no plan, no apply, only the rollout
	return e.editSpecThen(name, func() (*tenant.Tenant, error) { return e.opts.Store.SetVersion(name, component, version) }, &op)
}

func (e *Engine) upgradeOp(ts *tenantState, component string) operation {
	return operation{name: opUpgrade, activity: tenant.ActivityUpgrading, do: func(ctx context.Context, r *run) (string, error) {
		return ts.upgrade(ctx, r, component)
	}}
}

func fileVersion(t *tenant.Tenant, component string) string {
	if component == ComponentTalos {
		return t.TalosVersion
	}
	return t.KubernetesVersion
}

// current is the version of a component the cluster runs: the lowest the
// nodes report, else the version its configs are made with.
func (ts *tenantState) current(component string) string {
	v := ts.view()
	rec := ts.recs.get()
	if component == ComponentTalos {
		return firstOf(v.Status.TalosVersionRunning, rec.TalosVersion)
	}
	return firstOf(v.Status.KubernetesVersionRunning, rec.KubernetesVersion)
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// checkUpgrade checks a rollout of component to version against what runs.
func (ts *tenantState) checkUpgrade(component, version string, t *tenant.Tenant) error {
	if component == ComponentTalos {
		return checkTalosUpgrade(ts.current(ComponentTalos), version, firstOf(ts.current(ComponentKubernetes), t.KubernetesVersion))
	}
	return checkKubernetesUpgrade(ts.current(ComponentKubernetes), version, firstOf(ts.current(ComponentTalos), t.TalosVersion))
}

// checkTalosUpgrade allows a Talos step from → to that machinery's tables
// allow: no downgrade across minor versions, at most one minor at once, a
// version machinery knows, and one that supports the running Kubernetes.
func checkTalosUpgrade(from, to, kube string) error {
	tv, ok := parseSemver(to)
	if !ok || !strings.HasPrefix(to, "v") {
		return fmt.Errorf("%q is not a Talos version like v1.13.1", to)
	}
	if fv, ok := parseSemver(from); ok {
		if err := minorStep("Talos", fv, tv, from, to); err != nil {
			return err
		}
	}
	target, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: to})
	if err != nil {
		return fmt.Errorf("Talos %s is not a version this rezuscloud knows: %v", to, err)
	}
	if from != "" {
		host, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: from})
		if err != nil {
			return fmt.Errorf("the cluster runs Talos %s, which this rezuscloud does not know: %v", from, err)
		}
		if err := target.UpgradeableFrom(host); err != nil {
			return fmt.Errorf("Talos %s cannot be reached from %s: %v", to, from, err)
		}
	}
	if kube != "" {
		kv, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kube, "v"))
		if err == nil {
			if err := kv.SupportedWith(target); err != nil {
				return fmt.Errorf("Talos %s does not support Kubernetes %s, which the cluster runs: upgrade Kubernetes first (%v)", to, kube, err)
			}
		}
	}
	return nil
}

// checkKubernetesUpgrade allows a Kubernetes step from → to as talosctl
// upgrade-k8s does (same minor or the next one) to a version the running
// Talos supports.
func checkKubernetesUpgrade(from, to, talosVersion string) error {
	kvs, ok := parseSemver(to)
	if !ok || strings.HasPrefix(to, "v") {
		return fmt.Errorf("%q is not a Kubernetes version like 1.35.1 (no leading v)", to)
	}
	if fv, ok := parseSemver(from); ok {
		if err := minorStep("Kubernetes", fv, kvs, from, to); err != nil {
			return err
		}
	}
	kv, err := compatibility.ParseKubernetesVersion(to)
	if err != nil {
		return fmt.Errorf("Kubernetes %s: %v", to, err)
	}
	if talosVersion != "" {
		tv, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: talosVersion})
		if err != nil {
			return fmt.Errorf("the cluster runs Talos %s, which this rezuscloud does not know: %v", talosVersion, err)
		}
		if err := kv.SupportedWith(tv); err != nil {
			return fmt.Errorf("Kubernetes %s is not supported by Talos %s, which the cluster runs: %v", to, talosVersion, err)
		}
	}
	return nil
}

// minorStep refuses a downgrade across minor versions and a jump of more
// than one minor version.
func minorStep(what string, from, to semver, fromS, toS string) error {
	switch {
	case to.major != from.major:
		return fmt.Errorf("%s %s is another major version than %s, which the cluster runs", what, toS, fromS)
	case to.minor < from.minor:
		return fmt.Errorf("%s %s would be a downgrade across minor versions from %s, which is not supported", what, toS, fromS)
	case to.minor > from.minor+1:
		return fmt.Errorf("%s %s is more than one minor version ahead of %s: upgrade to the newest %d.%d.x first", what, toS, fromS, from.major, from.minor+1)
	}
	return nil
}

// semver is a version's numbers ("v1.13.1" and "1.35.0" alike).
type semver struct{ major, minor, patch int }

func parseSemver(s string) (semver, bool) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return semver{}, false
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return semver{}, false
		}
		n[i] = v
	}
	return semver{n[0], n[1], n[2]}, true
}

func (a semver) cmp(b semver) int {
	switch {
	case a.major != b.major:
		return a.major - b.major
	case a.minor != b.minor:
		return a.minor - b.minor
	}
	return a.patch - b.patch
}

// lowestVersion is the lowest of versions (those that do not parse are
// ignored); "" when none does.
func lowestVersion(vs []string) string {
	best, bv := "", semver{}
	for _, v := range vs {
		sv, ok := parseSemver(v)
		if !ok {
			continue
		}
		if best == "" || sv.cmp(bv) < 0 {
			best, bv = v, sv
		}
	}
	return best
}

// sameVersion compares versions with or without a leading "v".
func sameVersion(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

// clusterVersions is the tenant with the versions the cluster's configs are
// made with, once the cluster exists: an apply of a file with a new
// version changes nothing that runs (the rollout does).
func clusterVersions(t *tenant.Tenant, rec record) *tenant.Tenant {
	if !rec.Bootstrapped || (rec.TalosVersion == "" && rec.KubernetesVersion == "") {
		return t
	}
	c := *t
	c.TalosVersion = firstOf(rec.TalosVersion, t.TalosVersion)
	c.KubernetesVersion = firstOf(rec.KubernetesVersion, t.KubernetesVersion)
	return &c
}

// recordVersions keeps the versions of a cluster being created.
func recordVersions(r *record, t *tenant.Tenant) {
	if !r.Bootstrapped || r.TalosVersion == "" {
		r.TalosVersion = t.TalosVersion
	}
	if !r.Bootstrapped || r.KubernetesVersion == "" {
		r.KubernetesVersion = t.KubernetesVersion
	}
}

// queueAutoUpgrades queues the rollouts an apply of a tenant with
// auto_apply calls for: each component whose file version is not the one
// the cluster's configs are made with. Talos goes first unless the new
// Talos does not support the running Kubernetes.
func (ts *tenantState) queueAutoUpgrades() {
	t, rec := ts.snapshot()
	if t == nil || !t.AutoApply || !rec.Bootstrapped {
		return
	}
	var comps []string
	if !sameVersion(rec.TalosVersion, t.TalosVersion) {
		comps = append(comps, ComponentTalos)
	}
	if !sameVersion(rec.KubernetesVersion, t.KubernetesVersion) {
		comps = append(comps, ComponentKubernetes)
	}
	if len(comps) == 2 && checkTalosUpgrade("", t.TalosVersion, ts.current(ComponentKubernetes)) != nil {
		comps[0], comps[1] = comps[1], comps[0]
	}
	for _, c := range comps {
		if err := ts.e.enqueue(ts.name, ts.e.upgradeOp(ts, c)); err != nil {
			ts.e.log.Warn("queueing the rollout of a changed version", zap.String("tenant", ts.name), zap.String("component", c), zap.Error(err))
		}
	}
}

// rolloutOrder is the provisioned nodes, control planes first, each role
// in the file's order.
func rolloutOrder(t *tenant.Tenant, rec record) []string {
	var cps, workers []string
	for _, n := range t.Nodes() {
		nr, ok := rec.Nodes[n.Name]
		if !ok {
			continue
		}
		if nr.Role == tenant.RoleControlPlane {
			cps = append(cps, n.Name)
		} else {
			workers = append(workers, n.Name)
		}
	}
	return append(cps, workers...)
}

// rollout is one upgrade as it runs.
type rollout struct {
	ts        *tenantState
	r         *run
	t         *tenant.Tenant
	rec       record
	tc        []byte
	component string
	target    string
	order     []string
	cps       int
	state     map[string]talos.NodeState
}

// upgrade runs a rollout of component to the file's version.
func (ts *tenantState) upgrade(ctx context.Context, r *run, component string) (string, error) {
	t, rec := ts.snapshot()
	if t == nil {
		return "", fmt.Errorf("tenant %s has no file", ts.name)
	}
	if !rec.Infra || !rec.Bootstrapped || len(rec.Nodes) == 0 {
		return "", fmt.Errorf("tenant %s: the cluster is not running: press Apply to create it first", ts.name)
	}
	tc, err := ts.talosconfig()
	if err != nil {
		return "", err
	}
	ro := &rollout{ts: ts, r: r, t: t, rec: rec, tc: tc, component: component, target: fileVersion(t, component),
		order: rolloutOrder(t, rec), state: map[string]talos.NodeState{}}
	for _, n := range ro.order {
		if rec.Nodes[n].Role == tenant.RoleControlPlane {
			ro.cps++
		}
	}
	r.setStep("check")
	// every node must run and be ready before anything changes
	if err := ro.gate(ctx); err != nil {
		return "", err
	}
	if err := ts.checkUpgrade(component, ro.target, t); err != nil {
		return "", fmt.Errorf("%w; nothing was changed", err)
	}
	if component == ComponentTalos {
		return ro.talos(ctx)
	}
	return ro.kubernetes(ctx)
}

// gate waits (up to 30 s) until every node runs and is ready, and keeps
// what each reports.
func (ro *rollout) gate(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, min(30*time.Second, ro.ts.e.opts.NodeTimeout))
	defer cancel()
	var waiting []string
	err := backoff.Until(gctx, waitPolicy, nil, func(ctx context.Context) (bool, error) {
		waiting = waiting[:0]
		for _, n := range ro.order {
			st, err := ro.status(ctx, n)
			if err != nil || st.Stage != tenant.StageRunning || !st.Ready {
				waiting = append(waiting, fmt.Sprintf("%s (%s)", n, describe(st, err)))
			}
		}
		return len(waiting) == 0, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	return fmt.Errorf("not every node runs and is ready, so nothing was upgraded: %s", strings.Join(waiting, ", "))
}

func describe(st talos.NodeState, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case st.Problem != "":
		return st.Problem
	case st.Stage == tenant.StageRunning && !st.Ready:
		if len(st.Unmet) > 0 {
			return "not ready: " + strings.Join(st.Unmet, ", ")
		}
		return "not ready"
	}
	return string(st.Stage)
}

// status reads a node's state (reported to the poller) and keeps it.
func (ro *rollout) status(ctx context.Context, node string) (talos.NodeState, error) {
	tg, ok := ro.ts.target(node)
	if !ok {
		return talos.NodeState{}, fmt.Errorf("node %s has no address", node)
	}
	st, err := ro.ts.read(ctx, node, tg, ro.tc)
	if err != nil {
		return st, err
	}
	ro.state[node] = st
	return st, nil
}

// begin marks the rollout started, in the record too (what Install
// resumes after a cancel or a restart).
func (ro *rollout) begin(total int) error {
	if err := ro.ts.recs.save(func(rec *record) {
		rec.Rollout = &rolloutRecord{Component: ro.component, Version: ro.target, Total: total}
	}); err != nil {
		return err
	}
	ro.r.setRollout(&tenant.Rollout{Component: ro.component, Version: ro.target, Total: total})
	ro.r.setProgress(0)
	return nil
}

// progress shows the node in progress and how many are done.
func (ro *rollout) progress(done, total int, node string) {
	ro.r.setRollout(&tenant.Rollout{Component: ro.component, Version: ro.target, Done: done, Total: total, Node: node})
	if total > 0 {
		ro.r.setProgress(done * 100 / total)
	}
	if node != "" {
		ro.r.setStep("node " + node)
	}
}

// nodeDone records a node's step: its config is now made at the target
// (field picks which version), and one more node is done.
func (ro *rollout) nodeDone(node string, field func(nr *nodeRecord)) error {
	return ro.ts.recs.save(func(rec *record) {
		if nr, ok := rec.Nodes[node]; ok {
			field(&nr)
			rec.Nodes[node] = nr
		}
		if rec.Rollout != nil {
			rec.Rollout.Done++
		}
	})
}

// finish ends a rollout that reached every node: the cluster's version is
// the target.
func (ro *rollout) finish() error {
	if err := ro.ts.recs.save(func(rec *record) {
		if ro.component == ComponentTalos {
			rec.TalosVersion = ro.target
		} else {
			rec.KubernetesVersion = ro.target
		}
		rec.Rollout = nil
	}); err != nil {
		return err
	}
	ro.r.setRollout(nil)
	ro.r.setProgress(100)
	return nil
}

// stopped reports a Cancel between nodes.
func (ro *rollout) stopped(ctx context.Context, done, total int) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("stopped after %d of %d nodes: %w", done, total, context.Cause(ctx))
}

// nodeCtx bounds one node's step by the node timeout; a Cancel ends it at
// once (a node that never comes back must not hold the tenant).
func (ro *rollout) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, ro.ts.e.opts.NodeTimeout)
}

// talos upgrades the nodes not on the target Talos one at a time, after an
// etcd snapshot.
func (ro *rollout) talos(ctx context.Context) (string, error) {
	var todo []string
	for _, n := range ro.order {
		if !sameVersion(ro.state[n].TalosVersion, ro.target) {
			todo = append(todo, n)
		}
	}
	if err := ro.begin(len(todo)); err != nil {
		return "", err
	}
	if len(todo) == 0 {
		if err := ro.finish(); err != nil {
			return "", err
		}
		return fmt.Sprintf("every node runs Talos %s already", ro.target), nil
	}
	ro.r.setStep("etcd snapshot")
	info, err := ro.ts.snapshotEtcd(ctx, ro.tc)
	if err != nil {
		return "", fmt.Errorf("the etcd snapshot before the upgrade failed, so no node was upgraded: %w", err)
	}
	image := talos.InstallerImage(ro.target, ro.t.Schematic)
	for i, n := range todo {
		if err := ro.stopped(ctx, i, len(todo)); err != nil {
			return "", err
		}
		ro.progress(i, len(todo), n)
		nctx, cancel := ro.nodeCtx(ctx)
		err := ro.talosNode(nctx, n, image)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("stopped while node %s upgraded (%d of %d nodes done): %w", n, i, len(todo), context.Cause(ctx))
			}
			return "", fmt.Errorf("node %s: %w (the nodes after it were not upgraded; press Install to resume)", n, err)
		}
		if err := ro.nodeDone(n, func(nr *nodeRecord) { nr.TalosVersion = ro.target }); err != nil {
			return "", err
		}
	}
	ro.progress(len(todo), len(todo), "")
	if err := ro.finish(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d nodes upgraded to Talos %s one at a time; etcd snapshot %s", len(todo), ro.target, info.File), nil
}

// talosNode installs the image on one node, which reboots into it, and
// waits until it is done: target version, running, ready, and for a
// control plane etcd with all its members.
func (ro *rollout) talosNode(ctx context.Context, node, image string) error {
	ts := ro.ts
	tg, ok := ts.target(node)
	if !ok {
		return errors.New("it has no address")
	}
	old := ro.state[node].TalosVersion
	ro.r.intend(node, tenant.StageUpgrading, false)
	defer ro.r.release(node)
	ts.e.log.Info("upgrading node", zap.String("tenant", ts.name), zap.String("node", node), zap.String("image", image))
	ts.e.oplog.line(ts.name, ro.r.name, "talos", "info", "node "+node+": installing "+image)
	if err := ts.e.opts.Nodes.Upgrade(ctx, tg, ro.tc, image); err != nil {
		return fmt.Errorf("installing %s: %w", image, err)
	}
	wentDown := false
	return ro.waitDone(ctx, node, func(st talos.NodeState, err error) (bool, error) {
		if err != nil || st.Stage != tenant.StageRunning {
			wentDown = true
			return false, nil
		}
		if sameVersion(st.TalosVersion, ro.target) {
			return true, nil
		}
		if wentDown && st.Ready && sameVersion(st.TalosVersion, old) {
			return false, fmt.Errorf("it came back on Talos %s, not %s (the upgrade did not take; it is not retried)", old, ro.target)
		}
		return false, nil
	}, fmt.Sprintf("Talos %s", ro.target))
}

// waitDone waits until check says the node is on target and it runs, is
// ready and (control planes) sees every etcd member.
func (ro *rollout) waitDone(ctx context.Context, node string, check func(talos.NodeState, error) (bool, error), what string) error {
	cp := ro.rec.Nodes[node].Role == tenant.RoleControlPlane
	last := "no answer"
	err := backoff.Until(ctx, waitPolicy, nil, func(ctx context.Context) (bool, error) {
		st, err := ro.status(ctx, node)
		on, ferr := check(st, err)
		if ferr != nil {
			return false, ferr
		}
		switch {
		case err != nil:
			last = err.Error()
		case !on:
			last = fmt.Sprintf("stage %s, Talos %s, kubelet %s", st.Stage, firstOf(st.TalosVersion, "?"), firstOf(st.KubeletVersion, "?"))
		case st.Stage != tenant.StageRunning || !st.Ready:
			last = describe(st, nil)
		case cp:
			members, merr := ro.etcdMembers(ctx, node)
			if merr == nil && members >= ro.cps {
				return true, nil
			}
			last = fmt.Sprintf("etcd has %d of %d members", members, ro.cps)
			if merr != nil {
				last = "etcd members: " + merr.Error()
			}
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("not on %s, running and ready in time (last: %s): %w", what, last, context.Cause(ctx))
	}
	return err
}

func (ro *rollout) etcdMembers(ctx context.Context, node string) (int, error) {
	tg, ok := ro.ts.target(node)
	if !ok {
		return 0, errors.New("no address")
	}
	m, err := ro.ts.e.opts.Nodes.EtcdMembers(ctx, tg, ro.tc)
	return len(m), err
}

// kubernetes moves Kubernetes the way talosctl upgrade-k8s does: the
// control-plane components node by node (the node's new config with its
// kubelet left as it is), then the kubelet on every node, each by
// ApplyConfiguration without a reboot.
func (ro *rollout) kubernetes(ctx context.Context) (string, error) {
	var cpTodo, kubeletTodo []string
	for _, n := range ro.order {
		if ro.rec.Nodes[n].Role == tenant.RoleControlPlane {
			v, err := ro.controlPlaneVersions(ctx, n)
			if err != nil {
				return "", fmt.Errorf("node %s: reading its control-plane versions: %w", n, err)
			}
			if !allOn(v, ro.target) {
				cpTodo = append(cpTodo, n)
			}
		}
		if !sameVersion(ro.state[n].KubeletVersion, ro.target) {
			kubeletTodo = append(kubeletTodo, n)
		}
	}
	total := len(cpTodo) + len(kubeletTodo)
	if err := ro.begin(total); err != nil {
		return "", err
	}
	if total == 0 {
		if err := ro.finish(); err != nil {
			return "", err
		}
		return fmt.Sprintf("every node runs Kubernetes %s already", ro.target), nil
	}
	bundle, err := talos.LoadSecrets(talos.SecretsPath(ro.ts.e.tenantDir(ro.ts.name)))
	if err != nil {
		return "", err
	}
	done := 0
	for _, n := range cpTodo {
		if err := ro.stopped(ctx, done, total); err != nil {
			return "", err
		}
		ro.progress(done, total, n)
		v := ro.rec.versionsOf(n)
		v.Kubernetes = ro.target
		if v.Kubelet == "" || sameVersion(ro.state[n].KubeletVersion, ro.target) {
			v.Kubelet = firstOf(ro.state[n].KubeletVersion, v.Kubelet)
		}
		nctx, cancel := ro.nodeCtx(ctx)
		err := ro.kubeNode(nctx, bundle, n, v, func(ctx context.Context) (bool, error) {
			cv, err := ro.controlPlaneVersions(ctx, n)
			return err == nil && allOn(cv, ro.target), nil
		})
		cancel()
		if err != nil {
			return "", fmt.Errorf("node %s: control-plane components to %s: %w (press Install to resume)", n, ro.target, err)
		}
		if err := ro.nodeDone(n, func(nr *nodeRecord) { nr.KubernetesVersion, nr.KubeletVersion = ro.target, v.Kubelet }); err != nil {
			return "", err
		}
		ro.rec = ro.ts.recs.get()
		done++
	}
	for _, n := range kubeletTodo {
		if err := ro.stopped(ctx, done, total); err != nil {
			return "", err
		}
		ro.progress(done, total, n)
		v := ro.rec.versionsOf(n)
		if ro.rec.Nodes[n].Role == tenant.RoleControlPlane {
			v.Kubernetes = ro.target
		}
		v.Kubelet = ro.target
		nctx, cancel := ro.nodeCtx(ctx)
		err := ro.kubeNode(nctx, bundle, n, v, func(context.Context) (bool, error) {
			return sameVersion(ro.state[n].KubeletVersion, ro.target), nil
		})
		cancel()
		if err != nil {
			return "", fmt.Errorf("node %s: kubelet to %s: %w (press Install to resume)", n, ro.target, err)
		}
		if err := ro.nodeDone(n, func(nr *nodeRecord) { nr.KubernetesVersion, nr.KubeletVersion = v.Kubernetes, ro.target }); err != nil {
			return "", err
		}
		ro.rec = ro.ts.recs.get()
		done++
	}
	ro.progress(done, total, "")
	if err := ro.finish(); err != nil {
		return "", err
	}
	return fmt.Sprintf("Kubernetes %s on every node (%d control-plane and %d kubelet steps, one node at a time)", ro.target,
		len(cpTodo), len(kubeletTodo)), nil
}

// kubeNode applies one node's config at versions v without a reboot and
// waits until on says the node is there.
func (ro *rollout) kubeNode(ctx context.Context, bundle *secrets.Bundle, node string, v talos.Versions,
	on func(context.Context) (bool, error)) error {
	ts := ro.ts
	tn, ok := ro.t.Node(node)
	if !ok {
		return errors.New("the tenant file no longer declares it")
	}
	cfg, err := talos.NodeConfigAt(clusterVersions(ro.t, ro.rec), bundle, ro.rec.Endpoint, tn, v)
	if err != nil {
		return fmt.Errorf("its new machine config: %w", err)
	}
	tg, ok := ts.target(node)
	if !ok {
		return errors.New("it has no address")
	}
	ro.r.intend(node, tenant.StageUpgrading, true)
	defer ro.r.release(node)
	ts.e.oplog.line(ts.name, ro.r.name, "talos", "info", fmt.Sprintf("node %s: applying its config for Kubernetes %s (kubelet %s)", node, v.Kubernetes, v.Kubelet))
	if err := ts.e.opts.Nodes.ApplyConfig(ctx, tg, ro.tc, cfg); err != nil {
		return err
	}
	if err := ts.recs.save(func(rec *record) { setConfigHash(rec, node, configHash(cfg)) }); err != nil {
		return err
	}
	return ro.waitDone(ctx, node, func(_ talos.NodeState, err error) (bool, error) {
		if err != nil {
			return false, nil
		}
		return on(ctx)
	}, "Kubernetes "+ro.target)
}

func (ro *rollout) controlPlaneVersions(ctx context.Context, node string) (map[string]string, error) {
	tg, ok := ro.ts.target(node)
	if !ok {
		return nil, errors.New("no address")
	}
	return ro.ts.e.opts.Nodes.ControlPlaneVersions(ctx, tg, ro.tc)
}

// allOn reports whether every control-plane component runs version.
func allOn(v map[string]string, version string) bool {
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !sameVersion(v[c], version) {
			return false
		}
	}
	return true
}
