package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Rolling upgrades (docs/design.md §10.2). The file's talos_version and
// kubernetes_version are targets; the record's versions are what the
// machine configs are made with. A rollout moves one node at a time,
// control planes first, stops at the first failure and never retries by
// itself; run again, it resumes with the nodes not yet on target because a
// node's own report (never a record) says whether it is done.

// Components an upgrade moves.
const (
	ComponentTalos      = "talos"
	ComponentKubernetes = "kubernetes"
)

// upgradeStep is how often a node is asked about its progress while it
// upgrades.
const upgradeStep = 200 * time.Millisecond

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
	ts, err := e.get(name)
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
	t := ts.shown()
	if version == "" {
		version = fileVersion(t, component)
	}
	if err := ts.checkUpgrade(component, version, t); err != nil {
		return fmt.Errorf("tenant %s: %w; nothing was changed", name, err)
	}
	if version == fileVersion(t, component) {
		return e.enqueue(name, "upgrade", &opArgs{component: component})
	}
	if err := e.writeVersion(name, component, version); err != nil {
		return err
	}
	e.publishTenants()
	return nil
}

// writeVersion writes a version into the tenant file and queues its
// rollout, with e.mu held from the room check to the enqueue so that a
// refused command changes nothing (as editSpec).
func (e *Engine) writeVersion(name, component, version string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	ts, ok := e.ts[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownTenant, name)
	}
	if len(ts.queue) >= cap(ts.queue) {
		return fmt.Errorf("tenant %s: %w; the file was not changed", name, ErrBusy)
	}
	t, err := e.opts.Store.SetVersion(name, component, version)
	if err != nil {
		return err
	}
	ts.setSpec(t) // the watcher sees no change: no plan, no apply, only the rollout
	return e.enqueueLocked(ts, "upgrade", &opArgs{component: component})
}

func fileVersion(t *tenant.Tenant, component string) string {
	if component == ComponentTalos {
		return t.TalosVersion
	}
	return t.KubernetesVersion
}

// exists reports whether the cluster was created (etcd bootstrapped).
func (ts *tstate) exists() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.rec.Infra && ts.rec.Bootstrapped && len(ts.rec.Nodes) > 0
}

func (ts *tstate) phase() tenant.Phase {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.status.Phase
}

// current is the version of a component the cluster runs: the lowest the
// nodes report, else the version its configs are made with.
func (ts *tstate) current(component string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.recountVersionsLocked()
	if component == ComponentTalos {
		return firstOf(ts.status.TalosVersionRunning, ts.rec.TalosVersion)
	}
	return firstOf(ts.status.KubernetesVersionRunning, ts.rec.KubernetesVersion)
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
func (ts *tstate) checkUpgrade(component, version string, t *tenant.Tenant) error {
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

// recountVersionsLocked sets the running versions: the lowest the nodes
// report, none when the cluster does not exist. ts.mu is held.
func (ts *tstate) recountVersionsLocked() {
	ts.status.TalosVersionRunning, ts.status.KubernetesVersionRunning = "", ""
	if !ts.rec.Bootstrapped || len(ts.rec.Nodes) == 0 {
		return
	}
	var tv, kv []string
	for n := range ts.rec.Nodes {
		s := ts.nodes[n]
		tv = append(tv, s.TalosVersion)
		kv = append(kv, s.KubernetesVersion)
	}
	ts.status.TalosVersionRunning = lowestVersion(tv)
	ts.status.KubernetesVersionRunning = strings.TrimPrefix(lowestVersion(kv), "v")
}

// pinVersions is the tenant with the versions the cluster's configs are
// made with, once the cluster exists: an apply of a file with a new
// version changes nothing that runs (the rollout does).
func pinVersions(t *tenant.Tenant, rec record) *tenant.Tenant {
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
func (ts *tstate) queueAutoUpgrades() {
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
		if err := ts.e.enqueue(ts.name, "upgrade", &opArgs{component: c}); err != nil {
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
	ts        *tstate
	t         *tenant.Tenant
	rec       record
	tc        []byte
	component string
	target    string
	order     []string
	cps       int
	state     map[string]talos.NodeState
	// nodeCtx bounds one node's work: it ends with the engine, not with
	// Cancel, so that Cancel stops after the node in progress.
	base context.Context
}

// upgrade runs a rollout of component to the file's version.
func (ts *tstate) upgrade(ctx context.Context, component string) (string, error) {
	e := ts.e
	t, rec := ts.snapshot()
	if t == nil {
		return "", fmt.Errorf("tenant %s has no file", ts.name)
	}
	if !rec.Infra || !rec.Bootstrapped || len(rec.Nodes) == 0 {
		return "", fmt.Errorf("tenant %s: the cluster is not running: press Apply to create it first", ts.name)
	}
	tc, err := os.ReadFile(e.talosconfigPath(ts.name))
	if err != nil {
		return "", fmt.Errorf("tenant %s has no talosconfig: press Apply", ts.name)
	}
	e.mu.Lock()
	base := e.ctx
	e.mu.Unlock()
	if base == nil {
		base = context.Background()
	}
	r := &rollout{ts: ts, t: t, rec: rec, tc: tc, component: component, target: fileVersion(t, component),
		order: rolloutOrder(t, rec), state: map[string]talos.NodeState{}, base: base}
	for _, n := range r.order {
		if rec.Nodes[n].Role == tenant.RoleControlPlane {
			r.cps++
		}
	}
	// every node must run and be ready before anything changes
	if err := r.gate(ctx); err != nil {
		return "", err
	}
	if err := ts.checkUpgrade(component, r.target, t); err != nil {
		return "", fmt.Errorf("%w; nothing was changed", err)
	}
	defer ts.setStatus(func(s *tenant.Status) { s.Rollout = nil })
	if component == ComponentTalos {
		return r.talos(ctx)
	}
	return r.kubernetes(ctx)
}

// gate waits (up to 30 s) until every node runs and is ready, and
// keeps what each reports.
func (r *rollout) gate(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, min(30*time.Second, r.ts.e.opts.NodeTimeout))
	defer cancel()
	for {
		var waiting []string
		for _, n := range r.order {
			st, err := r.status(gctx, n)
			if err != nil || st.Stage != tenant.StageRunning || !st.Ready {
				waiting = append(waiting, fmt.Sprintf("%s (%s)", n, describe(st, err)))
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-gctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("not every node runs and is ready, so nothing was upgraded: %s", strings.Join(waiting, ", "))
		case <-time.After(upgradeStep):
		}
	}
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

// status reads a node's state, shows it, and keeps it.
func (r *rollout) status(ctx context.Context, node string) (talos.NodeState, error) {
	tg, ok := r.ts.target(node)
	if !ok {
		return talos.NodeState{}, fmt.Errorf("node %s has no address", node)
	}
	st, err := r.ts.e.opts.Nodes.Status(ctx, tg, r.tc)
	if err != nil {
		return st, err
	}
	r.state[node] = st
	r.ts.observe(node, st, tenant.StageUpgrading)
	return st, nil
}

// begin marks the rollout started: the record's version becomes the target
// (new nodes and applies use it from now on), phase upgrading.
func (r *rollout) begin(total int) error {
	if err := r.ts.saveRec(func(rec *record) {
		if r.component == ComponentTalos {
			rec.TalosVersion = r.target
		} else {
			rec.KubernetesVersion = r.target
		}
	}); err != nil {
		return err
	}
	r.ts.setStatus(func(s *tenant.Status) {
		s.Phase = next(s.Phase, evUpgradeStarted, facts{})
		s.Progress = 0
		s.Rollout = &tenant.Rollout{Component: r.component, Version: r.target, Total: total}
	})
	return nil
}

func (r *rollout) progress(done int, node string) {
	r.ts.setStatus(func(s *tenant.Status) {
		if s.Rollout == nil {
			return
		}
		s.Rollout.Done, s.Rollout.Node = done, node
		if s.Rollout.Total > 0 {
			s.Progress = done * 100 / s.Rollout.Total
		}
	})
}

// finish ends a rollout that reached every node.
func (r *rollout) finish() {
	r.ts.setStatus(func(s *tenant.Status) {
		s.Phase, s.Progress, s.Rollout = next(s.Phase, evUpgradeDone, facts{}), 100, nil
	})
}

// stopped reports a Cancel between nodes.
func (r *rollout) stopped(ctx context.Context, done, total int) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("stopped after %d of %d nodes: %w", done, total, context.Cause(ctx))
}

// nodeCtx bounds one node's step by the node timeout and the engine's life.
func (r *rollout) nodeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.base, r.ts.e.opts.NodeTimeout)
}

// talos upgrades the nodes not on the target Talos one at a time, after an
// etcd snapshot.
func (r *rollout) talos(ctx context.Context) (string, error) {
	var todo []string
	for _, n := range r.order {
		if !sameVersion(r.state[n].TalosVersion, r.target) {
			todo = append(todo, n)
		}
	}
	if len(todo) == 0 {
		if err := r.begin(0); err != nil {
			return "", err
		}
		r.finish()
		return fmt.Sprintf("every node runs Talos %s already", r.target), nil
	}
	if err := r.begin(len(todo)); err != nil {
		return "", err
	}
	info, err := r.ts.snapshotEtcd(ctx, r.tc)
	if err != nil {
		return "", fmt.Errorf("the etcd snapshot before the upgrade failed, so no node was upgraded: %w", err)
	}
	image := talos.InstallerImage(r.target, r.t.Schematic)
	for i, n := range todo {
		if err := r.stopped(ctx, i, len(todo)); err != nil {
			return "", err
		}
		r.progress(i, n)
		nctx, cancel := r.nodeCtx()
		err := r.talosNode(nctx, n, image)
		cancel()
		if err != nil {
			return "", fmt.Errorf("node %s: %w (the nodes after it were not upgraded; press Install to resume)", n, err)
		}
	}
	r.progress(len(todo), "")
	r.finish()
	return fmt.Sprintf("%d nodes upgraded to Talos %s one at a time; etcd snapshot %s", len(todo), r.target, info.File), nil
}

// talosNode installs the image on one node, which reboots into it, and
// waits until it is done: target version, running, ready, and for a
// control plane etcd with all its members.
func (r *rollout) talosNode(ctx context.Context, node, image string) error {
	ts := r.ts
	tg, ok := ts.target(node)
	if !ok {
		return errors.New("it has no address")
	}
	old := r.state[node].TalosVersion
	ts.intend(node, tenant.StageUpgrading, false)
	ts.e.log.Info("upgrading node", zap.String("tenant", ts.name), zap.String("node", node), zap.String("image", image))
	if err := r.ts.e.opts.Nodes.Upgrade(ctx, tg, r.tc, image); err != nil {
		r.status(ctx, node) //nolint:errcheck // shows its real stage again
		return fmt.Errorf("installing %s: %w", image, err)
	}
	ts.e.poller.Trigger(pollKey(ts.name, node))
	wentDown := false
	return r.waitDone(ctx, node, func(st talos.NodeState, err error) (bool, error) {
		if err != nil || st.Stage != tenant.StageRunning {
			wentDown = true
			return false, nil
		}
		if sameVersion(st.TalosVersion, r.target) {
			return true, nil
		}
		if wentDown && st.Ready && sameVersion(st.TalosVersion, old) {
			return false, fmt.Errorf("it came back on Talos %s, not %s (the upgrade did not take; it is not retried)", old, r.target)
		}
		return false, nil
	}, fmt.Sprintf("Talos %s", r.target))
}

// waitDone waits until check says the node is on target and it runs, is
// ready and (control planes) sees every etcd member.
func (r *rollout) waitDone(ctx context.Context, node string, check func(talos.NodeState, error) (bool, error), what string) error {
	cp := r.rec.Nodes[node].Role == tenant.RoleControlPlane
	last := "no answer"
	for {
		st, err := r.status(ctx, node)
		on, ferr := check(st, err)
		if ferr != nil {
			return ferr
		}
		switch {
		case err != nil:
			last = err.Error()
		case !on:
			last = fmt.Sprintf("stage %s, Talos %s, kubelet %s", st.Stage, firstOf(st.TalosVersion, "?"), firstOf(st.KubeletVersion, "?"))
		case st.Stage != tenant.StageRunning || !st.Ready:
			last = describe(st, nil)
		case cp:
			members, merr := r.etcdMembers(ctx, node)
			if merr == nil && members >= r.cps {
				return nil
			}
			last = fmt.Sprintf("etcd has %d of %d members", members, r.cps)
			if merr != nil {
				last = "etcd members: " + merr.Error()
			}
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not on %s, running and ready in time (last: %s): %w", what, last, context.Cause(ctx))
		case <-time.After(upgradeStep):
		}
	}
}

func (r *rollout) etcdMembers(ctx context.Context, node string) (int, error) {
	tg, ok := r.ts.target(node)
	if !ok {
		return 0, errors.New("no address")
	}
	m, err := r.ts.e.opts.Nodes.EtcdMembers(ctx, tg, r.tc)
	return len(m), err
}

// kubernetes moves Kubernetes the way talosctl upgrade-k8s does: the
// control-plane components node by node (the node's new config with its
// kubelet left as it is), then the kubelet on every node, each by
// ApplyConfiguration without a reboot.
func (r *rollout) kubernetes(ctx context.Context) (string, error) {
	var cpTodo, kubeletTodo []string
	cpVersions := map[string]map[string]string{}
	for _, n := range r.order {
		if r.rec.Nodes[n].Role == tenant.RoleControlPlane {
			v, err := r.controlPlaneVersions(ctx, n)
			if err != nil {
				return "", fmt.Errorf("node %s: reading its control-plane versions: %w", n, err)
			}
			cpVersions[n] = v
			if !allOn(v, r.target) {
				cpTodo = append(cpTodo, n)
			}
		}
		if !sameVersion(r.state[n].KubeletVersion, r.target) {
			kubeletTodo = append(kubeletTodo, n)
		}
	}
	total := len(cpTodo) + len(kubeletTodo)
	if err := r.begin(total); err != nil {
		return "", err
	}
	if total == 0 {
		r.finish()
		return fmt.Sprintf("every node runs Kubernetes %s already", r.target), nil
	}
	bundle, err := talos.LoadSecrets(talos.SecretsPath(r.ts.e.tenantDir(r.ts.name)))
	if err != nil {
		return "", err
	}
	t := *r.t
	t.TalosVersion = firstOf(r.rec.TalosVersion, t.TalosVersion)
	t.KubernetesVersion = r.target
	done := 0
	for _, n := range cpTodo {
		if err := r.stopped(ctx, done, total); err != nil {
			return "", err
		}
		r.progress(done, n)
		kubelet := firstOf(r.state[n].KubeletVersion, r.rec.KubernetesVersion)
		if sameVersion(kubelet, r.target) {
			kubelet = "" // the kubelet is there already: the node's full config
		}
		nctx, cancel := r.nodeCtx()
		err := r.kubeNode(nctx, &t, bundle, n, kubelet, func(ctx context.Context) (bool, error) {
			v, err := r.controlPlaneVersions(ctx, n)
			return err == nil && allOn(v, r.target), nil
		})
		cancel()
		if err != nil {
			return "", fmt.Errorf("node %s: control-plane components to %s: %w (press Install to resume)", n, r.target, err)
		}
		done++
	}
	for _, n := range kubeletTodo {
		if err := r.stopped(ctx, done, total); err != nil {
			return "", err
		}
		r.progress(done, n)
		nctx, cancel := r.nodeCtx()
		err := r.kubeNode(nctx, &t, bundle, n, "", func(context.Context) (bool, error) {
			return sameVersion(r.state[n].KubeletVersion, r.target), nil
		})
		cancel()
		if err != nil {
			return "", fmt.Errorf("node %s: kubelet to %s: %w (press Install to resume)", n, r.target, err)
		}
		done++
	}
	r.progress(done, "")
	r.finish()
	return fmt.Sprintf("Kubernetes %s on every node (%d control-plane and %d kubelet steps, one node at a time)", r.target,
		len(cpTodo), len(kubeletTodo)), nil
}

// kubeNode applies one node's config for the new Kubernetes (with the
// kubelet kept at keepKubelet unless it is "") without a reboot and waits
// until on says the node is there.
func (r *rollout) kubeNode(ctx context.Context, t *tenant.Tenant, bundle *secrets.Bundle, node, keepKubelet string,
	on func(context.Context) (bool, error)) error {
	ts := r.ts
	tn, ok := t.Node(node)
	if !ok {
		return errors.New("the tenant file no longer declares it")
	}
	nt := t
	if keepKubelet != "" {
		c := *t
		c.ConfigPatches = append(slices.Clone(t.ConfigPatches),
			fmt.Sprintf("machine:\n  kubelet:\n    image: %s:v%s\n", constants.KubeletImage, strings.TrimPrefix(keepKubelet, "v")))
		nt = &c
	}
	cfg, err := talos.NodeConfig(nt, bundle, r.rec.Endpoint, tn)
	if err != nil {
		return fmt.Errorf("its new machine config: %w", err)
	}
	tg, ok := ts.target(node)
	if !ok {
		return errors.New("it has no address")
	}
	ts.intend(node, tenant.StageUpgrading, true)
	if err := r.ts.e.opts.Nodes.ApplyConfig(ctx, tg, r.tc, cfg); err != nil {
		r.status(ctx, node) //nolint:errcheck // shows its real stage again
		return err
	}
	if err := ts.configApplied(node, configHash(cfg)); err != nil {
		return err
	}
	return r.waitDone(ctx, node, func(_ talos.NodeState, err error) (bool, error) {
		if err != nil {
			return false, nil
		}
		return on(ctx)
	}, "Kubernetes "+r.target)
}

func (r *rollout) controlPlaneVersions(ctx context.Context, node string) (map[string]string, error) {
	tg, ok := r.ts.target(node)
	if !ok {
		return nil, errors.New("no address")
	}
	return r.ts.e.opts.Nodes.ControlPlaneVersions(ctx, tg, r.tc)
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
