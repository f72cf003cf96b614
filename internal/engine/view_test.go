package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// viewTenant is a metal tenant: one control plane, count workers of a
// pool of three.
func viewTenant(workers int) *tenant.Tenant {
	return &tenant.Tenant{Name: "lab", Provider: tenant.ProviderMetal, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: "127.0.0.10"}}},
			{Name: "workers", Role: tenant.RoleWorker, Count: workers, Machines: []tenant.Machine{
				{Address: "127.0.0.11"}, {Address: "127.0.0.12"}, {Address: "127.0.0.13"}}},
		}}
}

var viewNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// nodes records the named nodes of viewTenant.
func nodes(names ...string) map[string]nodeRecord {
	out := map[string]nodeRecord{}
	for _, n := range names {
		role, group := tenant.RoleWorker, "workers"
		if strings.Contains(n, "-cp-") {
			role, group = tenant.RoleControlPlane, "cp"
		}
		addr := map[string]string{"lab-cp-1": "127.0.0.10", "lab-workers-1": "127.0.0.11", "lab-workers-2": "127.0.0.12",
			"lab-workers-3": "127.0.0.13"}[n]
		out[n] = nodeRecord{Address: addr, Role: role, Group: group}
	}
	return out
}

// running is what a running, ready node reports.
func running() nodeObs {
	return nodeObs{st: talos.NodeState{Stage: tenant.StageRunning, Ready: true, TalosVersion: "v1.13.0", KubeletVersion: "1.35.0"},
		since: viewNow.Add(-time.Hour), talosVersion: "v1.13.0", kubeletVersion: "1.35.0"}
}

func obsOf(stage tenant.Stage, since time.Time) nodeObs {
	return nodeObs{st: talos.NodeState{Stage: stage}, since: since}
}

// all gives every named node the same observation.
func all(o nodeObs, names ...string) map[string]nodeObs {
	out := map[string]nodeObs{}
	for _, n := range names {
		out[n] = o
	}
	return out
}

func runOf(name, step string, intents map[string]intent) *runFacts {
	if intents == nil {
		intents = map[string]intent{}
	}
	for n, in := range intents {
		if in.since.IsZero() {
			in.since = viewNow
			intents[n] = in
		}
	}
	return &runFacts{name: name, step: step, intents: intents}
}

// creating marks r as the apply that creates the cluster.
func creating(r *runFacts) *runFacts { r.creating = true; return r }

var (
	three   = []string{"lab-cp-1", "lab-workers-1", "lab-workers-2"}
	failure = &tenant.OperationResult{Name: opApply, Result: tenant.ResultFailed, Message: "apply failed: quota exceeded"}
	bootRec = record{Infra: true, Bootstrapped: true, Nodes: nodes(three...)}
)

// TestViewPhase: rows of facts → the phase, for every phase, including the
// flaps users saw (a running cluster scaled must stay running).
func TestViewPhase(t *testing.T) {
	spec := viewTenant(2)
	for _, tc := range []struct {
		name string
		f    facts
		want tenant.Phase
	}{
		{"nothing yet", facts{spec: spec}, tenant.PhaseAbsent},
		{"a plan with changes", facts{spec: spec, plan: &planFacts{changes: tenant.Changes{Add: 3}}}, tenant.PhasePlanned},
		{"a plan without changes", facts{spec: spec, plan: &planFacts{}}, tenant.PhaseAbsent},
		{"first apply, infrastructure", facts{spec: spec, run: runOf(opApply, stepInfra, nil)}, tenant.PhaseProvisioning},
		{"first apply, configuring", facts{spec: spec, rec: record{Infra: true, Nodes: nodes(three...)},
			run: runOf(opApply, stepConfigure, nil)}, tenant.PhaseProvisioning},
		{"first apply, bootstrap", facts{spec: spec, rec: record{Infra: true, Nodes: nodes(three...)},
			run: runOf(opApply, stepBootstrap, nil)}, tenant.PhaseBootstrapping},
		{"first apply, waiting after the bootstrap", facts{spec: spec, rec: record{Infra: true, Bootstrapped: true, Nodes: nodes(three...)},
			run: creating(runOf(opApply, stepWait, nil))}, tenant.PhaseBootstrapping},
		{"a scale waits for its nodes: running", facts{spec: spec, rec: record{Infra: true, Bootstrapped: true, Nodes: nodes(three...)},
			obs: all(running(), three...), run: runOf(opApply, stepWait, nil)}, tenant.PhaseRunning},
		{"running", facts{spec: spec, rec: bootRec, obs: all(running(), three...)}, tenant.PhaseRunning},
		{"running until every node was read", facts{spec: spec, rec: bootRec, obs: all(running(), "lab-cp-1")}, tenant.PhaseRunning},
		{"a node down", facts{spec: spec, rec: bootRec,
			obs: map[string]nodeObs{"lab-cp-1": running(), "lab-workers-1": running(), "lab-workers-2": obsOf(tenant.StageUnreachable, viewNow)}},
			tenant.PhaseDegraded},
		{"scaled up: stays running while the new worker comes", facts{spec: viewTenant(3), rec: bootRec,
			obs: all(running(), three...),
			run: runOf(opApply, stepInfra, map[string]intent{"lab-workers-3": {stage: tenant.StageProvisioning}})},
			tenant.PhaseRunning},
		{"scaled up: the new worker installs", facts{spec: viewTenant(3), rec: record{Infra: true, Bootstrapped: true,
			Nodes: nodes("lab-cp-1", "lab-workers-1", "lab-workers-2", "lab-workers-3")},
			obs: map[string]nodeObs{"lab-cp-1": running(), "lab-workers-1": running(), "lab-workers-2": running(),
				"lab-workers-3": obsOf(tenant.StageMaintenance, viewNow)},
			run: runOf(opApply, stepConfigure, map[string]intent{"lab-workers-3": {stage: tenant.StageInstalling}})},
			tenant.PhaseRunning},
		{"scaled up: the new worker boots", facts{spec: viewTenant(3), rec: record{Infra: true, Bootstrapped: true,
			Nodes: nodes("lab-cp-1", "lab-workers-1", "lab-workers-2", "lab-workers-3")},
			obs: map[string]nodeObs{"lab-cp-1": running(), "lab-workers-1": running(), "lab-workers-2": running(),
				"lab-workers-3": obsOf(tenant.StageBooting, viewNow)},
			run: runOf(opApply, stepWait, map[string]intent{"lab-workers-3": {}})},
			tenant.PhaseRunning},
		{"scaled down: the removed worker resets", facts{spec: viewTenant(1), rec: bootRec, obs: all(running(), three...),
			run: runOf(opApply, stepReset, map[string]intent{"lab-workers-2": {stage: tenant.StageResetting}})},
			tenant.PhaseRunning},
		{"a reboot does not degrade", facts{spec: spec, rec: bootRec,
			obs: map[string]nodeObs{"lab-cp-1": running(), "lab-workers-1": running(), "lab-workers-2": obsOf(tenant.StageBooting, viewNow)},
			run: runOf(opReboot, "", map[string]intent{"lab-workers-2": {}})},
			tenant.PhaseRunning},
		{"upgrading", facts{spec: spec, rec: bootRec, obs: all(running(), three...), run: runOf(opUpgrade, "node lab-cp-1", nil)},
			tenant.PhaseUpgrading},
		{"destroying", facts{spec: spec, rec: bootRec, run: runOf(opDestroy, stepInfra, nil)}, tenant.PhaseDestroying},
		{"destroying an orphan", facts{applied: spec, rec: bootRec, run: runOf(opDestroy, stepInfra, nil)}, tenant.PhaseDestroying},
		{"failed", facts{spec: spec, rec: record{Infra: true, Failure: failure}}, tenant.PhaseFailed},
		{"failed, a backup runs", facts{spec: spec, rec: record{Infra: true, Bootstrapped: true, Failure: failure},
			run: runOf(opBackup, "", nil)}, tenant.PhaseFailed},
		{"failed, a plan with changes", facts{spec: spec, rec: record{Infra: true, Failure: failure},
			plan: &planFacts{changes: tenant.Changes{Change: 1}}}, tenant.PhasePlanned},
		{"failed, the apply that fixes it runs", facts{spec: spec, rec: record{Infra: true, Bootstrapped: true, Failure: failure,
			Nodes: nodes(three...)}, obs: all(running(), three...), run: runOf(opApply, stepInfra, nil)}, tenant.PhaseRunning},
		{"failed before the first bootstrap, applied again", facts{spec: spec, rec: record{Infra: true, Failure: failure},
			run: runOf(opApply, stepInfra, nil)}, tenant.PhaseProvisioning},
		{"a running cluster with a plan", facts{spec: spec, rec: bootRec, obs: all(running(), three...),
			plan: &planFacts{changes: tenant.Changes{Add: 1}}}, tenant.PhaseRunning},
		{"never bootstrapped", facts{spec: spec, rec: record{Infra: true}}, tenant.PhaseDegraded},
		{"orphaned", facts{applied: spec, rec: bootRec, obs: all(running(), three...)}, tenant.PhaseOrphaned},
		{"destroyed", facts{spec: spec, rec: record{LastOperation: &tenant.OperationResult{Name: opDestroy, Result: tenant.ResultSucceeded}}},
			tenant.PhaseAbsent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.name, tc.f.now, tc.f.opts = "lab", viewNow, viewOptions{talosPort: 50000, stallAfter: 3 * time.Minute, unreachableAfter: 10 * time.Minute}
			v := view(tc.f)
			if v.Status.Phase != tc.want {
				t.Errorf("phase %s, want %s (problems %q)", v.Status.Phase, tc.want, v.Status.Problems)
			}
			wantProblem := tc.want == tenant.PhaseFailed || tc.want == tenant.PhaseDegraded || tc.want == tenant.PhaseOrphaned
			if v.Status.Problem != wantProblem {
				t.Errorf("problem %v (%q), want %v", v.Status.Problem, v.Status.Problems, wantProblem)
			}
			if v.Status.Summary == "" {
				t.Error("no summary")
			}
		})
	}
}

// TestViewStage: rows of facts → one node's stage and readiness, for every
// stage.
func TestViewStage(t *testing.T) {
	spec := viewTenant(2)
	const n = "lab-workers-1"
	for _, tc := range []struct {
		name  string
		f     facts
		node  string
		want  tenant.Stage
		ready bool
	}{
		{"declared, nothing yet", facts{spec: spec}, n, tenant.StagePending, false},
		{"being created", facts{spec: spec, run: runOf(opApply, stepInfra, map[string]intent{n: {stage: tenant.StageProvisioning}})},
			n, tenant.StageProvisioning, false},
		{"provisioned, not read yet", facts{spec: spec, rec: bootRec}, n, tenant.StageUnreachable, false},
		{"does not answer", facts{spec: spec, rec: bootRec, obs: all(obsOf(tenant.StageUnreachable, viewNow), n)}, n,
			tenant.StageUnreachable, false},
		{"in maintenance", facts{spec: spec, rec: bootRec, obs: all(obsOf(tenant.StageMaintenance, viewNow), n)}, n,
			tenant.StageMaintenance, false},
		{"given its config: installing, though it still says maintenance (no flicker)", facts{spec: spec, rec: bootRec,
			obs: all(obsOf(tenant.StageMaintenance, viewNow), n),
			run: runOf(opApply, stepConfigure, map[string]intent{n: {stage: tenant.StageInstalling}})}, n, tenant.StageInstalling, false},
		{"booting", facts{spec: spec, rec: bootRec, obs: all(obsOf(tenant.StageBooting, viewNow), n),
			run: runOf(opApply, stepWait, map[string]intent{n: {}})}, n, tenant.StageBooting, false},
		{"running", facts{spec: spec, rec: bootRec, obs: all(running(), n)}, n, tenant.StageRunning, true},
		{"ready only when running", facts{spec: spec, rec: bootRec,
			obs: all(nodeObs{st: talos.NodeState{Stage: tenant.StageBooting, Ready: true}}, n)}, n, tenant.StageBooting, false},
		{"rebooting", facts{spec: spec, rec: bootRec, obs: all(running(), n),
			run: runOf(opReboot, "", map[string]intent{n: {stage: tenant.StageRebooting}})}, n, tenant.StageRebooting, false},
		{"upgrading (Talos): not ready", facts{spec: spec, rec: bootRec, obs: all(running(), n),
			run: runOf(opUpgrade, "", map[string]intent{n: {stage: tenant.StageUpgrading}})}, n, tenant.StageUpgrading, false},
		{"upgrading (Kubernetes): serving", facts{spec: spec, rec: bootRec, obs: all(running(), n),
			run: runOf(opUpgrade, "", map[string]intent{n: {stage: tenant.StageUpgrading, serving: true}})}, n, tenant.StageUpgrading, true},
		{"a removed node keeps its device while it resets", facts{spec: viewTenant(1), rec: bootRec, obs: all(running(), three...),
			run: runOf(opApply, stepReset, map[string]intent{"lab-workers-2": {stage: tenant.StageResetting}})},
			"lab-workers-2", tenant.StageResetting, false},
		{"shutting down", facts{spec: spec, rec: bootRec, obs: all(running(), n),
			run: runOf(opPowerOff, "", map[string]intent{n: {stage: tenant.StageShuttingDown}})}, n, tenant.StageShuttingDown, false},
		{"destroyed: pending again", facts{spec: spec, rec: record{}, obs: all(running(), n)}, n, tenant.StagePending, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.name, tc.f.now, tc.f.opts = "lab", viewNow, viewOptions{talosPort: 50000, stallAfter: 3 * time.Minute}
			v := view(tc.f)
			s, ok := v.Nodes[tc.node]
			if !ok {
				t.Fatalf("node %s not shown (nodes %v)", tc.node, v.Nodes)
			}
			if s.Stage != tc.want || s.Ready != tc.ready {
				t.Errorf("stage %s ready %v, want %s %v", s.Stage, s.Ready, tc.want, tc.ready)
			}
		})
	}
}

// TestViewNodesShown: the nodes shown are the declared ones and those that
// still exist; a removed node leaves once it is reset (out of the record,
// no intent).
func TestViewNodesShown(t *testing.T) {
	base := facts{name: "lab", spec: viewTenant(1), now: viewNow, opts: viewOptions{talosPort: 50000}}
	during := base
	during.rec = bootRec
	during.run = runOf(opApply, stepReset, map[string]intent{"lab-workers-2": {stage: tenant.StageResetting}})
	if _, ok := view(during).Nodes["lab-workers-2"]; !ok {
		t.Error("the node being removed left before its reset was done")
	}
	after := base
	after.rec = record{Infra: true, Bootstrapped: true, Nodes: nodes("lab-cp-1", "lab-workers-1")}
	after.run = runOf(opApply, stepConfigure, nil)
	v := view(after)
	if _, ok := v.Nodes["lab-workers-2"]; ok || len(v.Nodes) != 2 {
		t.Errorf("nodes after the reset: %v", v.Nodes)
	}
	if v.Status.NodesTotal != 2 || v.Status.Counts["workers"] != 1 {
		t.Errorf("counts: total %d, %v", v.Status.NodesTotal, v.Status.Counts)
	}
}

// TestViewProblems: what makes problem true, and the reason it names.
func TestViewProblems(t *testing.T) {
	spec := viewTenant(2)
	opts := viewOptions{talosPort: 50000, stallAfter: 3 * time.Minute, unreachableAfter: 10 * time.Minute}
	for _, tc := range []struct {
		name string
		f    facts
		want string // in a reason; "" means no problem
	}{
		{"healthy", facts{spec: spec, rec: bootRec, obs: all(running(), three...)}, ""},
		{"a node that stalls in its upgrade is named well before the node timeout", facts{spec: spec, rec: bootRec,
			obs: map[string]nodeObs{"lab-cp-1": obsOf(tenant.StageUnreachable, viewNow.Add(-4*time.Minute)), "lab-workers-1": running(), "lab-workers-2": running()},
			run: runOf(opUpgrade, "", map[string]intent{"lab-cp-1": {stage: tenant.StageUpgrading, since: viewNow.Add(-5 * time.Minute)}})},
			"node lab-cp-1 has been upgrading since"},
		{"an upgrade in progress is no problem", facts{spec: spec, rec: bootRec, obs: all(running(), three...),
			run: runOf(opUpgrade, "", map[string]intent{"lab-cp-1": {stage: tenant.StageUpgrading, since: viewNow.Add(-time.Minute)}})}, ""},
		{"a dead node", facts{spec: spec, rec: bootRec,
			obs: map[string]nodeObs{"lab-cp-1": running(), "lab-workers-1": running(), "lab-workers-2": obsOf(tenant.StageUnreachable, viewNow.Add(-11*time.Minute))}},
			"node lab-workers-2 has not answered since"},
		{"a stopped rollout", facts{spec: spec, rec: record{Infra: true, Bootstrapped: true, Nodes: nodes(three...),
			Rollout: &rolloutRecord{Component: ComponentKubernetes, Version: "1.35.1", Done: 1, Total: 4}}, obs: all(running(), three...)},
			"Kubernetes upgrade to 1.35.1 stopped after 1 of 4 nodes"},
		{"drift", facts{spec: spec, rec: bootRec, obs: all(running(), three...),
			drift: &driftFacts{changes: tenant.Changes{Add: 1}, what: []string{"openstack_compute_instance_v2.w1"}}}, "drift"},
		{"a stale backup", facts{spec: spec, rec: bootRec, obs: all(running(), three...),
			backup: &tenant.BackupInfo{At: viewNow.Add(-72 * time.Hour)}}, "newest etcd backup"},
		{"a fresh backup", facts{spec: spec, rec: bootRec, obs: all(running(), three...),
			backup: &tenant.BackupInfo{At: viewNow.Add(-time.Hour)}}, ""},
		{"failed", facts{spec: spec, rec: record{Infra: true, Failure: failure}}, "quota exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.name, tc.f.now, tc.f.opts = "lab", viewNow, opts
			st := view(tc.f).Status
			if tc.want == "" {
				if st.Problem || len(st.Problems) > 0 {
					t.Errorf("problem %v: %q", st.Problem, st.Problems)
				}
				return
			}
			if !st.Problem || !strings.Contains(strings.Join(st.Problems, "\n"), tc.want) {
				t.Errorf("problem %v: %q, want a reason with %q", st.Problem, st.Problems, tc.want)
			}
		})
	}
}

// TestViewDeadNodeForgettable: "Forget machine" is offered only past
// unreachable_after.
func TestViewDeadNodeForgettable(t *testing.T) {
	f := facts{name: "lab", spec: viewTenant(2), rec: bootRec, now: viewNow,
		opts: viewOptions{talosPort: 50000, unreachableAfter: 10 * time.Minute},
		obs:  map[string]nodeObs{"lab-workers-2": obsOf(tenant.StageUnreachable, viewNow.Add(-9*time.Minute))}}
	if view(f).Nodes["lab-workers-2"].Forgettable {
		t.Error("forgettable before unreachable_after")
	}
	f.now = viewNow.Add(2 * time.Minute)
	if !view(f).Nodes["lab-workers-2"].Forgettable {
		t.Error("not forgettable after unreachable_after")
	}
	// a dead control plane is a problem that says replace, never a Forget
	// button (Forget refuses control planes)
	f.obs = map[string]nodeObs{"lab-cp-1": obsOf(tenant.StageUnreachable, viewNow.Add(-20*time.Minute))}
	v := view(f)
	if v.Nodes["lab-cp-1"].Forgettable {
		t.Error("a dead control plane is forgettable")
	}
	if p := strings.Join(v.Status.Problems, " "); !strings.Contains(p, "lab-cp-1") || !strings.Contains(p, "replace it") || strings.Contains(p, "forget it") {
		t.Errorf("dead control plane: problems %q", v.Status.Problems)
	}
}

// TestViewVersions: the running versions are the lowest the nodes report,
// none before the cluster exists.
func TestViewVersions(t *testing.T) {
	old := running()
	old.talosVersion = "v1.12.5"
	f := facts{name: "lab", spec: viewTenant(2), rec: bootRec, now: viewNow, opts: viewOptions{talosPort: 50000},
		obs: map[string]nodeObs{"lab-cp-1": running(), "lab-workers-1": old, "lab-workers-2": running()}}
	st := view(f).Status
	if st.TalosVersionRunning != "v1.12.5" || st.KubernetesVersionRunning != "1.35.0" || st.TalosVersion != "v1.13.0" {
		t.Errorf("versions: running %s %s, file %s", st.TalosVersionRunning, st.KubernetesVersionRunning, st.TalosVersion)
	}
	f.rec = record{}
	if st := view(f).Status; st.TalosVersionRunning != "" {
		t.Errorf("running version %q before the cluster exists", st.TalosVersionRunning)
	}
}

// TestViewPoweredOffOnPurpose: a worker powered off on purpose (Power off,
// a pool) that does not answer keeps the cluster running: it is not down,
// not a problem and never forgettable; the same silence without the fact
// is a degraded cluster with a dead node. The pools' last decisions are
// in the status.
func TestViewPoweredOffOnPurpose(t *testing.T) {
	rec := bootRec.clone()
	rec.Nodes = nodes(three...)
	obs := all(running(), three...)
	obs["lab-workers-2"] = obsOf(tenant.StageUnreachable, viewNow.Add(-time.Hour))
	pools := map[string]tenant.PoolStatus{"workers": {Mode: tenant.PoolOn, Decision: "remove", Node: "lab-workers-2"}}
	f := facts{name: "lab", spec: viewTenant(2), rec: rec, obs: obs, now: viewNow, pools: pools,
		opts: viewOptions{talosPort: 50000, unreachableAfter: 10 * time.Minute}}

	v := view(f)
	if v.Status.Phase != tenant.PhaseDegraded || !v.Nodes["lab-workers-2"].Forgettable || !v.Status.Problem {
		t.Fatalf("silent without the fact: phase %s, forgettable %v, problems %v", v.Status.Phase, v.Nodes["lab-workers-2"].Forgettable, v.Status.Problems)
	}
	nr := rec.Nodes["lab-workers-2"]
	nr.Off = true
	rec.Nodes["lab-workers-2"] = nr
	f.rec = rec
	v = view(f)
	ns := v.Nodes["lab-workers-2"]
	if v.Status.Phase != tenant.PhaseRunning || v.Status.Problem || ns.Forgettable || ns.Power != "off" || v.Status.NodesReady != 2 {
		t.Errorf("off on purpose: phase %s, problems %v, node %+v, ready %d", v.Status.Phase, v.Status.Problems, ns, v.Status.NodesReady)
	}
	if p := v.Status.Pools["workers"]; p.Decision != "remove" || p.Node != "lab-workers-2" {
		t.Errorf("pools %+v", v.Status.Pools)
	}
}
