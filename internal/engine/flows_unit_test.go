package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestUnitApplyHappyPath: an apply over fakes configures both nodes,
// bootstraps once and ends running, recorded.
func TestUnitApplyHappyPath(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newUnitFixture(t, nil)
		ev := f.apply(t)
		if ev.Result != tenant.ResultSucceeded {
			t.Fatalf("apply: %s: %s", ev.Result, ev.Message)
		}
		r := f.record(t)
		if !r.Infra || !r.Bootstrapped || r.Failure != nil || len(r.Nodes) != 2 {
			t.Fatalf("record after apply: infra %v bootstrapped %v failure %v nodes %d", r.Infra, r.Bootstrapped, r.Failure, len(r.Nodes))
		}
		if st := f.status(); st.Phase != tenant.PhaseRunning {
			t.Errorf("phase after apply: %s, want running", st.Phase)
		}
		f.nodes.mu.Lock()
		calls := slices.Clone(f.nodes.calls)
		f.nodes.mu.Unlock()
		boots := 0
		for _, c := range calls {
			if strings.HasPrefix(c, "bootstrap ") {
				boots++
			}
		}
		if boots != 1 {
			t.Errorf("bootstrap called %d times, want 1 (calls %v)", boots, calls)
		}
	})
}

// TestUnitApplyTofuFails: a failing tofu apply fails the operation with
// tofu's error, the phase is failed, and no node was configured.
func TestUnitApplyTofuFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newUnitFixture(t, func(f *unitFixture) { f.infra.applyErr = errors.New("quota exceeded") })
		ev := f.apply(t)
		if ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "quota exceeded") {
			t.Fatalf("apply: %s: %q, want failed with tofu's error", ev.Result, ev.Message)
		}
		if r := f.record(t); r.Failure == nil || r.Running != "" {
			t.Errorf("record: failure %v running %q, want the failure and none running", r.Failure, r.Running)
		}
		if st := f.status(); st.Phase != tenant.PhaseFailed {
			t.Errorf("phase: %s, want failed", st.Phase)
		}
		f.nodes.mu.Lock()
		defer f.nodes.mu.Unlock()
		if len(f.nodes.calls) != 0 {
			t.Errorf("nodes were called after tofu failed: %v", f.nodes.calls)
		}
	})
}

// TestUnitRecordBeforeAct: when a node is given its config the record on
// disk already says so, and says infrastructure exists and that the apply
// runs (a crash during the call converges on restart).
func TestUnitRecordBeforeAct(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var f *unitFixture
		var bad []string
		f = newUnitFixture(t, func(u *unitFixture) {
			u.nodes.check = func(ep string) {
				r := u.record(t)
				var hashed bool
				for _, n := range r.Nodes {
					if n.Address == strings.Split(ep, ":")[0] && n.ConfigHash != "" {
						hashed = true
					}
				}
				if !r.Infra || r.Running != "apply" || !hashed {
					bad = append(bad, ep)
				}
			}
		})
		f.applied(t)
		f.nodes.mu.Lock()
		defer f.nodes.mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("config given before it was recorded to %v", bad)
		}
		if len(f.nodes.calls) == 0 {
			t.Error("no node was configured")
		}
	})
}

// lastErr is the error a command returns, whatever else it returns.
func lastErr(vs ...any) error {
	if len(vs) == 0 || vs[len(vs)-1] == nil {
		return nil
	}
	err, _ := vs[len(vs)-1].(error)
	return err
}

// TestUnitCancelDuringApply: a Cancel pressed while tofu applies ends the
// apply cancelled, records no running operation and configures no node.
func TestUnitCancelDuringApply(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		in := make(chan struct{})
		f := newUnitFixture(t, func(u *unitFixture) { u.infra.block, u.infra.inApply = true, in })
		if err := lastErr(f.eng.Apply(context.Background(), "lab")); err != nil {
			t.Fatalf("apply: %v", err)
		}
		select {
		case <-in:
		case <-time.After(10 * time.Second):
			t.Fatal("tofu apply never started")
		}
		if b := f.eng.Busy(); b != "1 operation is running" {
			t.Errorf("Busy during the apply: %q", b)
		}
		if err := lastErr(f.eng.Cancel(context.Background(), "lab")); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		var ev tenant.OperationEvent
		f.rec.wait(t, "the apply to end", 10*time.Second, func(r *recorder) bool {
			var ok bool
			ev, ok = r.lastEvent("apply")
			return ok
		})
		if ev.Result != tenant.ResultCancelled {
			t.Fatalf("apply: %s: %q, want cancelled", ev.Result, ev.Message)
		}
		if r := f.record(t); r.Running != "" {
			t.Errorf("record after cancel: running %q, want none", r.Running)
		}
		f.nodes.mu.Lock()
		defer f.nodes.mu.Unlock()
		if len(f.nodes.calls) != 0 {
			t.Errorf("nodes were called after the apply was cancelled: %v", f.nodes.calls)
		}
	})
}

// TestUnitMaintenanceFallback: a node that falls back to maintenance mode
// after it was given its config is given it again; once, and the apply
// succeeds; every time, and the apply fails and says why.
func TestUnitMaintenanceFallback(t *testing.T) {
	const worker = "127.0.0.2:1"
	for _, tc := range []struct {
		name      string
		fallbacks int
		result    tenant.Result
		message   string
		applies   int // maintenance applies the worker gets
	}{
		{name: "once", fallbacks: 1, result: tenant.ResultSucceeded, applies: 2},
		{name: "always", fallbacks: -1, result: tenant.ResultFailed,
			message: "node lab-workers-1 fell back to maintenance mode 3 times", applies: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { unitFallback(t, worker, tc.fallbacks, tc.result, tc.message, tc.applies) })
		})
	}
}

func unitFallback(t *testing.T, worker string, fallbacks int, result tenant.Result, message string, applies int) {
	tc := struct {
		result  tenant.Result
		message string
		applies int
	}{result, message, applies}
	{
		{
			f := newUnitFixture(t, func(u *unitFixture) { u.nodes.fallbacks = map[string]int{worker: fallbacks} })
			ev := f.apply(t)
			if ev.Result != tc.result || !strings.Contains(ev.Message, tc.message) {
				t.Fatalf("apply: %s: %q, want %s with %q", ev.Result, ev.Message, tc.result, tc.message)
			}
			f.nodes.mu.Lock()
			defer f.nodes.mu.Unlock()
			n := 0
			for _, c := range f.nodes.calls {
				if c == "apply-maintenance "+worker {
					n++
				}
			}
			if n != tc.applies {
				t.Errorf("the worker was given its config %d times, want %d (calls %v)", n, tc.applies, f.nodes.calls)
			}
		}
	}
}

// TestUnitRoutedTarget: on a cloud, a node with only a private address is
// reached through the control planes with a public one (then the
// endpoint's host); nodes with their own address, and every metal node,
// are dialled directly.
func TestUnitRoutedTarget(t *testing.T) {
	t.Parallel()
	nodes := map[string]nodeRecord{
		"lab-cp-1":      {Address: "127.0.10.1", PrivateAddress: "10.0.0.11", Role: tenant.RoleControlPlane},
		"lab-cp-2":      {Address: "127.0.10.2", PrivateAddress: "10.0.0.12", Role: tenant.RoleControlPlane},
		"lab-workers-1": {Address: "10.0.0.21", PrivateAddress: "10.0.0.21", Role: tenant.RoleWorker},
		"lab-workers-2": {PrivateAddress: "10.0.0.22", Role: tenant.RoleWorker},
		"lab-workers-3": {Address: "127.0.10.3", PrivateAddress: "10.0.0.23", Role: tenant.RoleWorker},
	}
	const endpoint = "https://127.0.10.9:6443"
	gw := []string{"127.0.10.1:50000", "127.0.10.2:50000", "127.0.10.9:50000"}
	for _, tc := range []struct {
		p    tenant.Provider
		node string
		want talos.Target
		ok   bool
	}{
		{tenant.ProviderOpenStack, "lab-cp-1", talos.Direct("127.0.10.1:50000"), true},
		{tenant.ProviderOpenStack, "lab-workers-1", talos.Route(gw, "10.0.0.21"), true},
		{tenant.ProviderOpenStack, "lab-workers-2", talos.Route(gw, "10.0.0.22"), true},
		{tenant.ProviderOpenStack, "lab-workers-3", talos.Direct("127.0.10.3:50000"), true},
		{tenant.ProviderOpenStack, "lab-gone", talos.Target{}, false},
		{tenant.ProviderMetal, "lab-workers-1", talos.Direct("10.0.0.21:50000"), true},
	} {
		got, ok := targetIn(tc.p, endpoint, nodes, tc.node, 50000)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s %s: %v %v, want %v %v", tc.p, tc.node, got, ok, tc.want, tc.ok)
		}
	}
	// without a control plane of its own address, only the endpoint's host
	cpPrivate := map[string]nodeRecord{
		"lab-cp-1":      {Address: "10.0.0.11", PrivateAddress: "10.0.0.11", Role: tenant.RoleControlPlane},
		"lab-workers-1": {PrivateAddress: "10.0.0.21", Role: tenant.RoleWorker},
	}
	got, ok := targetIn(tenant.ProviderOpenStack, endpoint, cpPrivate, "lab-workers-1", 50000)
	if want := talos.Route([]string{"127.0.10.9:50000"}, "10.0.0.21"); !ok || !got.Equal(want) {
		t.Errorf("through the endpoint only: %v %v, want %v", got, ok, want)
	}
	if _, ok := targetIn(tenant.ProviderOpenStack, "", cpPrivate, "lab-workers-1", 50000); ok {
		t.Error("a routed node with no gateway at all has a target")
	}
}

// TestUnitPollerThroughSeam: the poller reads nodes through the engine's
// Nodes too, and is what shows a change no flow made: a running node
// found back in maintenance mode.
func TestUnitPollerThroughSeam(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newUnitFixture(t, nil)
		f.applied(t)
		f.nodes.mu.Lock()
		f.nodes.configured["127.0.0.2:1"] = false // reset behind the engine's back
		f.nodes.mu.Unlock()
		f.eng.poller.Trigger(pollKey("lab", "lab-workers-1"))
		f.rec.wait(t, "the poller to show the worker in maintenance", 10*time.Second, func(r *recorder) bool {
			s := r.nstatus["lab-workers-1"]
			return s.Stage == tenant.StageMaintenance && !s.Ready
		})
	})
}

// TestUnitQuietNodeIsNoPowerOn: a worker that stops answering for a while
// and answers again (a missed poll on a busy box) is not a power-on: the
// pool's one-power-on-an-hour guard counted those, and then held a worker
// it had switched off for an hour although nothing had switched it on.
func TestUnitQuietNodeIsNoPowerOn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newUnitFixture(t, nil)
		f.applied(t)
		f.eng.mu.Lock()
		ts := f.eng.ts["lab"]
		f.eng.mu.Unlock()
		running := talos.NodeState{Stage: tenant.StageRunning, Ready: true}
		for range 3 {
			ts.observe("lab-workers-1", talos.Unreachable)
			ts.observe("lab-workers-1", running)
		}
		start := time.Now().Add(-time.Minute)
		if n := ts.powerOnsSince("lab-workers-1", start); n != 0 {
			t.Fatalf("a node that only went quiet counts %d power-ons", n)
		}
		ts.mu.Lock()
		ts.notePowerOnLocked("lab-workers-1", time.Now())
		ts.mu.Unlock()
		if n := ts.powerOnsSince("lab-workers-1", start); n != 1 {
			t.Fatalf("a power-on counts %d", n)
		}
	})
}
