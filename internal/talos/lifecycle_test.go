package talos_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

var fastDelays = simnode.Options{
	InstallDelay: 30 * time.Millisecond, RebootDelay: 20 * time.Millisecond,
	DownDelay: 30 * time.Millisecond, BootDelay: 30 * time.Millisecond, ResetDelay: 20 * time.Millisecond,
}

// simTenant starts one simulated node per declared node of a metal tenant
// (cps control planes, workers workers) and generates its configs.
func simTenant(t *testing.T, cps, workers int) (*tenant.Tenant, *talos.Configs, *simnode.Cluster, map[string]string) {
	t.Helper()
	hosts := loopbackHosts(cps + workers)
	tn := metalTenant("lab", hosts, cps, workers)
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		addrs[i] = h + ":0"
	}
	cl, err := simnode.StartCluster(context.Background(), addrs, fastDelays)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfgs, err := talos.GenerateConfigs(tn, sharedBundle(t), "")
	if err != nil {
		t.Fatal(err)
	}
	endpoints := map[string]string{}
	for i, n := range tn.Nodes() {
		endpoints[n.Name] = cl.Nodes[i].Addr()
	}
	return tn, cfgs, cl, endpoints
}

type recorder struct {
	mu     sync.Mutex
	states map[string][]talos.NodeState
}

func (r *recorder) record(name string, st talos.NodeState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.states == nil {
		r.states = map[string][]talos.NodeState{}
	}
	r.states[name] = append(r.states[name], st)
}

func (r *recorder) stages(name string) []tenant.Stage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []tenant.Stage
	for _, st := range r.states[name] {
		out = append(out, st.Stage)
	}
	return out
}

func (r *recorder) last(name string) (talos.NodeState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.states[name]
	if len(s) == 0 {
		return talos.NodeState{}, false
	}
	return s[len(s)-1], true
}

// TestTenantLifecycle is the "done" test: a tenant's three
// simulated nodes go from maintenance to running through this package alone,
// bootstrapped once, with a kubeconfig on disk, while the poller reports
// their stages as they change.
func TestTenantLifecycle(t *testing.T) {
	tn, cfgs, cl, eps := simTenant(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rec := &recorder{}
	p := talos.NewPoller(talos.PollerOptions{Interval: 10 * time.Millisecond, Timeout: time.Second,
		Concurrency: 2, MaxBackoff: 40 * time.Millisecond, OnChange: rec.record})
	targets := map[string]talos.PollTarget{}
	for name, ep := range eps {
		targets[name] = talos.PollTarget{Target: talos.Direct(ep), Talosconfig: cfgs.Talosconfig}
	}
	p.SetTargets(targets)
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() { p.Run(pctx); close(pdone) }()

	nodes := tn.Nodes()
	t0 := time.Now()
	testenv.WaitFor(t, 5*time.Second, "maintenance reported", func() bool {
		for _, n := range nodes {
			if st, ok := rec.last(n.Name); !ok || st.Stage != tenant.StageMaintenance {
				return false
			}
		}
		return true
	})

	// The first control plane refuses bootstrap twice before it can.
	cl.Nodes[0].FailBootstrap(2)

	for _, n := range nodes {
		if err := talos.ApplyMaintenance(ctx, eps[n.Name], cfgs.Nodes[n.Name]); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%v applied", time.Since(t0))
	for _, n := range nodes {
		v, err := talos.WaitSecure(ctx, talos.Direct(eps[n.Name]), cfgs.Talosconfig)
		if err != nil {
			t.Fatal(err)
		}
		if v != "v1.13.0" {
			t.Errorf("%s: version %q", n.Name, v)
		}
	}
	t.Logf("%v secure", time.Since(t0))
	// The engine bootstraps the first control plane; a second call (a
	// retried operation, or on another control plane) is harmless.
	if err := talos.Bootstrap(ctx, talos.Direct(eps[nodes[0].Name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	if err := talos.Bootstrap(ctx, talos.Direct(eps[nodes[1].Name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v bootstrapped", time.Since(t0))
	kc, err := talos.Kubeconfig(ctx, talos.Direct(eps[nodes[0].Name]), cfgs.Talosconfig)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lab", "kubeconfig")
	if err := talos.SaveKubeconfig(path, kc); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig on disk: %v %v", fi, err)
	}
	if !strings.Contains(string(kc), "server: "+cfgs.Endpoint) || !strings.Contains(string(kc), "client-certificate-data:") {
		t.Errorf("kubeconfig:\n%s", kc)
	}

	testenv.WaitFor(t, 10*time.Second, "all running and ready", func() bool {
		for _, n := range nodes {
			if st, ok := rec.last(n.Name); !ok || st.Stage != tenant.StageRunning || !st.Ready {
				return false
			}
		}
		return true
	})
	t.Logf("%v all running", time.Since(t0))
	pcancel()
	<-pdone

	calls := cl.Calls()
	if calls.Bootstrapped != 1 {
		t.Errorf("etcd bootstrapped %d times, want 1", calls.Bootstrapped)
	}
	if got := cl.Nodes[0].Calls().Bootstrap; got != 3 {
		t.Errorf("first control plane: %d bootstrap calls, want 3 (2 refused, then done)", got)
	}
	if calls.Apply != 3 || calls.ApplyRejected != 0 {
		t.Errorf("apply calls %d (rejected %d), want 3 (0)", calls.Apply, calls.ApplyRejected)
	}
	for _, n := range nodes {
		stages := rec.stages(n.Name)
		t.Logf("%s: %v", n.Name, stages)
		if stages[0] != tenant.StageMaintenance || stages[len(stages)-1] != tenant.StageRunning {
			t.Errorf("%s: stages %v", n.Name, stages)
		}
		for i := 1; i < len(rec.states[n.Name]); i++ {
			if rec.states[n.Name][i].Equal(rec.states[n.Name][i-1]) {
				t.Errorf("%s: state reported twice in a row: %+v", n.Name, rec.states[n.Name][i])
			}
		}
		for _, st := range rec.states[n.Name] {
			if st.Ready && st.Stage != tenant.StageRunning {
				t.Errorf("%s: ready in stage %s", n.Name, st.Stage)
			}
		}
	}
}

func TestWorkerAndResetFlow(t *testing.T) {
	tn, cfgs, cl, eps := simTenant(t, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, wk := tn.Nodes()[0], tn.Nodes()[1]

	// The worker is configured first: it waits for its control plane
	// (trustd) before its secure API answers.
	if err := talos.ApplyMaintenance(ctx, eps[wk.Name], cfgs.Nodes[wk.Name]); err != nil {
		t.Fatal(err)
	}
	// It installs, reboots, and goes down (answering nothing) until a
	// control plane exists: wait until it is down.
	if err := cl.Nodes[1].WaitStage(ctx, runtime.MachineStageRebooting, false); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "worker down", func() bool {
		st, err := talos.Status(ctx, talos.Direct(eps[wk.Name]), cfgs.Talosconfig)
		return err == nil && st.Stage == tenant.StageUnreachable
	})
	// ... and it stays down: no secure API without its control plane.
	if st, err := talos.Status(ctx, talos.Direct(eps[wk.Name]), cfgs.Talosconfig); err != nil || st.Stage != tenant.StageUnreachable {
		t.Errorf("worker without control plane: %+v %v", st, err)
	}
	if err := talos.ApplyMaintenance(ctx, eps[cp.Name], cfgs.Nodes[cp.Name]); err != nil {
		t.Fatal(err)
	}
	for _, n := range []tenant.Node{cp, wk} {
		if _, err := talos.WaitSecure(ctx, talos.Direct(eps[n.Name]), cfgs.Talosconfig); err != nil {
			t.Fatal(err)
		}
	}
	// Workers cannot bootstrap nor hand out a kubeconfig.
	bctx, bcancel := context.WithTimeout(ctx, time.Second)
	err := talos.Bootstrap(bctx, talos.Direct(eps[wk.Name]), cfgs.Talosconfig)
	bcancel()
	if err == nil || !strings.Contains(err.Error(), "Unimplemented") {
		t.Errorf("bootstrap on worker: %v", err)
	}
	if _, err := talos.Kubeconfig(ctx, talos.Direct(eps[wk.Name]), cfgs.Talosconfig); err == nil {
		t.Error("kubeconfig from worker: want error")
	}
	if err := talos.Bootstrap(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	for i := range cl.Nodes {
		if err := cl.Nodes[i].WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
			t.Fatal(err)
		}
	}

	// Reboot: rebooting, unreachable, booting, running again.
	if err := talos.Reboot(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	if st, _ := talos.Status(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig); st.Stage != tenant.StageRebooting && st.Stage != tenant.StageUnreachable {
		t.Errorf("after reboot: %+v", st)
	}
	if err := cl.Nodes[0].WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}

	// Graceful reset of the worker (scale down), non-graceful of the control
	// plane (destroy): both back in maintenance, configurable again.
	if err := talos.Reset(ctx, talos.Direct(eps[wk.Name]), cfgs.Talosconfig, talos.ResetOptions{Graceful: true}); err != nil {
		t.Fatal(err)
	}
	if err := talos.Reset(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig, talos.ResetOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range cl.Nodes {
		if err := cl.Nodes[i].WaitStage(ctx, runtime.MachineStageMaintenance, false); err != nil {
			t.Fatal(err)
		}
		if cl.Nodes[i].Config() != nil {
			t.Errorf("node %d: config not wiped", i)
		}
	}
	if c := cl.Nodes[1].Calls(); c.Reset != 1 || c.ResetGraceful != 1 {
		t.Errorf("worker reset calls %+v", c)
	}
	st, err := talos.Status(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig)
	if err != nil || st.Stage != tenant.StageMaintenance {
		t.Errorf("after reset: %+v %v", st, err)
	}
	// Resetting a node in maintenance is a no-op.
	if err := talos.Reset(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig, talos.ResetOptions{}); err != nil {
		t.Errorf("reset in maintenance: %v", err)
	}
	// A fresh cluster: apply and bootstrap again.
	if err := talos.ApplyMaintenance(ctx, eps[cp.Name], cfgs.Nodes[cp.Name]); err != nil {
		t.Fatal(err)
	}
	if _, err := talos.WaitSecure(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	if err := talos.Bootstrap(ctx, talos.Direct(eps[cp.Name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	if got := cl.Nodes[0].Calls().Bootstrapped; got != 2 {
		t.Errorf("bootstrapped %d times over two cluster lives, want 2", got)
	}
}

func TestInvalidConfigRejected(t *testing.T) {
	_, cfgs, cl, eps := simTenant(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ep := cl.Nodes[0].Addr()
	for _, bad := range [][]byte{[]byte("garbage: [\n"), []byte("version: v1alpha1\nmachine:\n  type: worker\n")} {
		err := talos.ApplyMaintenance(ctx, ep, bad)
		if !errors.Is(err, talos.ErrConfigRejected) {
			t.Errorf("apply %q: err = %v, want ErrConfigRejected", bad, err)
		} else {
			t.Log(err)
		}
	}
	if c := cl.Nodes[0].Calls(); c.Apply != 2 || c.ApplyRejected != 2 {
		t.Errorf("calls %+v", c)
	}
	st, err := talos.Status(ctx, talos.Direct(ep), cfgs.Talosconfig)
	if err != nil || st.Stage != tenant.StageMaintenance || st.Ready {
		t.Errorf("after rejected apply: %+v %v", st, err)
	}
	// Without a talosconfig, only maintenance mode can be read.
	if st, err := talos.Status(ctx, talos.Direct(ep), nil); err != nil || st.Stage != tenant.StageMaintenance {
		t.Errorf("status without talosconfig: %+v %v", st, err)
	}
	// Maintenance mode is read-only: bootstrap is refused, not retried.
	for name := range eps {
		bctx, bcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := talos.Bootstrap(bctx, talos.Direct(eps[name]), cfgs.Talosconfig)
		bcancel()
		if err == nil {
			t.Error("bootstrap in maintenance: want error")
		}
	}
}

// A node that goes unreachable shows as unreachable, once, and is polled
// with backoff, not in a storm.
func TestUnreachableBackoff(t *testing.T) {
	tn, cfgs, cl, eps := simTenant(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := tn.Nodes()[0].Name
	if err := talos.ApplyMaintenance(ctx, eps[name], cfgs.Nodes[name]); err != nil {
		t.Fatal(err)
	}
	if err := cl.Nodes[0].WaitStage(ctx, runtime.MachineStageRunning, false); err != nil {
		t.Fatal(err)
	}

	var attempts atomic.Int32
	rec := &recorder{}
	p := talos.NewPoller(talos.PollerOptions{
		Interval: 20 * time.Millisecond, MaxBackoff: 320 * time.Millisecond, Timeout: time.Second,
		OnChange: rec.record,
		Status: func(ctx context.Context, tg talos.Target, tc []byte) (talos.NodeState, error) {
			attempts.Add(1)
			return talos.Status(ctx, tg, tc)
		},
	})
	p.SetTargets(map[string]talos.PollTarget{name: {Target: talos.Direct(eps[name]), Talosconfig: cfgs.Talosconfig}})
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go p.Run(pctx)
	testenv.WaitFor(t, 5*time.Second, "running", func() bool { st, ok := rec.last(name); return ok && st.Stage == tenant.StageRunning })

	cl.Nodes[0].SetUnreachable(true)
	testenv.WaitFor(t, 5*time.Second, "unreachable", func() bool { st, ok := rec.last(name); return ok && st.Stage == tenant.StageUnreachable })
	before, dropped0 := attempts.Load(), cl.Nodes[0].Calls().Dropped
	// A measurement window, not synchronisation: count the polls in 1.2 s.
	time.Sleep(1200 * time.Millisecond)
	during, dropped := attempts.Load()-before, cl.Nodes[0].Calls().Dropped-dropped0
	// Backoff 40, 80, 160, 320, 320, ... ms: about 6 polls in 1.2 s (a fixed
	// 20 ms interval would make 60).
	if during > 9 {
		t.Errorf("%d polls of an unreachable node in 1.2 s: no backoff", during)
	}
	if dropped > 2*int(during)+2 {
		t.Errorf("%d connection attempts for %d polls", dropped, during)
	}
	t.Logf("unreachable for 1.2 s: %d polls, %d connections dropped", during, dropped)
	if n := len(rec.stages(name)); n != 2 {
		t.Errorf("reported states %v, want running then unreachable only", rec.stages(name))
	}
	if st, _ := rec.last(name); st.Problem != "" {
		t.Errorf("unreachable reported with a problem: %q", st.Problem)
	}

	cl.Nodes[0].SetUnreachable(false)
	p.Trigger(name)
	testenv.WaitFor(t, 5*time.Second, "back to running", func() bool { st, ok := rec.last(name); return ok && st.Stage == tenant.StageRunning })
}

func TestStatusForeignCluster(t *testing.T) {
	_, cfgs, cl, eps := simTenant(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, ep := range eps {
		if err := talos.ApplyMaintenance(ctx, ep, cfgs.Nodes[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Nodes[0].WaitStage(ctx, runtime.MachineStageRunning, false); err != nil {
		t.Fatal(err)
	}
	other, err := talos.NewSecrets("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := talos.Talosconfig(other, "other", nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := talos.Status(ctx, talos.Direct(cl.Nodes[0].Addr()), tc)
	if !errors.Is(err, talos.ErrCredentials) || st.Stage != tenant.StageUnreachable || st.Problem == "" {
		t.Errorf("foreign talosconfig: %+v %v", st, err)
	}
}

func TestWatchStatus(t *testing.T) {
	tn, cfgs, cl, eps := simTenant(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := tn.Nodes()[0].Name
	if err := talos.ApplyMaintenance(ctx, eps[name], cfgs.Nodes[name]); err != nil {
		t.Fatal(err)
	}
	if _, err := talos.WaitSecure(ctx, talos.Direct(eps[name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	done := make(chan error, 1)
	go func() {
		done <- talos.WatchStatus(ctx, talos.Direct(eps[name]), cfgs.Talosconfig, func(st talos.NodeState) { rec.record(name, st) })
	}()
	testenv.WaitFor(t, 5*time.Second, "watch sees running", func() bool { st, ok := rec.last(name); return ok && st.Stage == tenant.StageRunning })
	if err := talos.Bootstrap(ctx, talos.Direct(eps[name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "watch sees ready", func() bool { st, ok := rec.last(name); return ok && st.Ready })
	// The watch follows a reboot (the client resumes it from its last
	// bookmark once the node is back) and ends with its context.
	n0 := len(rec.stages(name))
	if err := talos.Reboot(ctx, talos.Direct(eps[name]), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "watch sees the reboot and running again", func() bool {
		st := rec.stages(name)
		return len(st) > n0+1 && slicesContains(st[n0:], tenant.StageRebooting) && st[len(st)-1] == tenant.StageRunning
	})
	t.Logf("watched %v", rec.stages(name))
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end with its context")
	}
	_ = cl
}

func slicesContains(s []tenant.Stage, v tenant.Stage) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
