package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// recorder is a Publisher that keeps the last state of everything and
// wakes waiters on every change.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{}
	tenants []string
	nodes   map[string][]string // tenant -> declared node names, as last set
	status  map[string]tenant.Status
	nstatus map[string]tenant.NodeStatus
	events  []tenant.OperationEvent
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), nodes: map[string][]string{},
		status: map[string]tenant.Status{}, nstatus: map[string]tenant.NodeStatus{}}
}

func (r *recorder) notify() { close(r.changed); r.changed = make(chan struct{}) }

func (r *recorder) SetTenants(vs []tenant.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tenants = nil
	r.nodes = map[string][]string{}
	for _, v := range vs {
		r.tenants = append(r.tenants, v.Name)
		r.setLocked(v)
	}
	r.notify()
}

func (r *recorder) SetTenant(v tenant.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(v)
	r.notify()
}

// setLocked keeps a view: its status, its nodes' states and the names of
// the nodes it shows.
func (r *recorder) setLocked(v tenant.View) {
	r.status[v.Name] = v.Status
	var names []string
	for n, ns := range v.Nodes {
		r.nstatus[n] = ns
		names = append(names, n)
	}
	slices.Sort(names)
	r.nodes[v.Name] = names
}

func (r *recorder) SetBridgeStatus(int) {}
func (r *recorder) PublishOperation(ev tenant.OperationEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.notify()
}

// wait waits until cond holds (checked under the lock after every change).
func (r *recorder) wait(t testing.TB, what string, timeout time.Duration, cond func(r *recorder) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ok := cond(r)
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out waiting for %s\nstatus: %+v\nevents: %+v", what, r.status, r.events)
		}
	}
}

// succeeded counts the successful operations of a name.
// statusOf is a tenant's last published status, read under the lock.
func (r *recorder) statusOf(name string) tenant.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status[name]
}

func (r *recorder) succeeded(name string) int {
	n := 0
	for _, ev := range r.events {
		if ev.Name == name && ev.Result == tenant.ResultSucceeded {
			n++
		}
	}
	return n
}

func (r *recorder) lastEvent(name string) (tenant.OperationEvent, bool) {
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Name == name && r.events[i].Result != tenant.ResultStarted {
			return r.events[i], true
		}
	}
	return tenant.OperationEvent{}, false
}

// fixture is an engine over simulated nodes with the real tofu.
type fixture struct {
	t       testing.TB
	dir     string
	store   *tenant.Store
	rec     *recorder
	sims    []*simnode.Node
	runner  *tofu.Runner
	eng     *Engine
	cancel  context.CancelFunc
	done    chan error
	tofuBin string
	tweak   func(*Options)    // changes the options of the next start
	states  httpstate.Backend // the OpenTofu state's store (nil: the data folder)
}

const pass = "engine-test-passphrase-0123"

// startSims starts n simulated nodes on port 50000 of a random loopback /24.
func startSims(t testing.TB, n int) []*simnode.Node {
	t.Helper()
	c, err := simnode.StartOnLoopback(context.Background(), n, "", 50000, simnode.Options{
		InstallDelay: 50 * time.Millisecond, RebootDelay: 50 * time.Millisecond, DownDelay: 100 * time.Millisecond,
		BootDelay: 50 * time.Millisecond, ResetDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.Nodes
}

func tenantFile(addrs []string, workers int, auto bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider = \"metal\"\ntalos_version = \"%s\"\nkubernetes_version = \"1.35.0\"\nauto_apply = %v\n", simnode.DefaultTalosVersion, auto)
	fmt.Fprintf(&b, "[[node_groups]]\nname = \"cp\"\nrole = \"controlplane\"\ncount = 1\n  [[node_groups.machines]]\n  address = \"%s\"\n  install_disk = \"/dev/sda\"\n", addrs[0])
	fmt.Fprintf(&b, "[[node_groups]]\nname = \"workers\"\nrole = \"worker\"\ncount = %d\n", workers)
	for _, a := range addrs[1:] {
		fmt.Fprintf(&b, "  [[node_groups.machines]]\n  address = \"%s\"\n  install_disk = \"/dev/sda\"\n", a)
	}
	return b.String()
}

func newFixture(t testing.TB, nodes, workers int, auto bool) *fixture {
	t.Helper()
	return newFixtureTweak(t, nodes, workers, auto, nil)
}

// newFixtureTweak is newFixture with options changed before the start.
func newFixtureTweak(t testing.TB, nodes, workers int, auto bool, tweak func(*Options)) *fixture {
	t.Helper()
	return (&fixture{t: t}).init(nodes, workers, auto, tweak)
}

// init starts the fixture's nodes and engine.
func (f *fixture) init(nodes, workers int, auto bool, tweak func(*Options)) *fixture {
	t := f.t
	bin, _ := testenv.Tofu(t)
	f.dir, f.rec, f.tofuBin, f.tweak = t.TempDir(), newRecorder(), bin, tweak
	f.sims = startSims(t, nodes)
	tenants := filepath.Join(f.dir, "tenants")
	os.MkdirAll(tenants, 0o700)
	var addrs []string
	for _, s := range f.sims {
		addrs = append(addrs, s.Host())
	}
	if err := os.WriteFile(filepath.Join(tenants, "lab.toml"), []byte(tenantFile(addrs, workers, auto)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.store = &tenant.Store{Dir: tenants}
	f.start()
	return f
}

// start runs a new engine over the fixture's data dir.
func (f *fixture) start() {
	t := f.t
	r, err := tofu.New(tofu.Config{Binary: f.tofuBin, DataDir: filepath.Join(f.dir, "data", "tofu"), Passphrase: pass, States: f.states})
	if err != nil {
		t.Fatal(err)
	}
	f.runner = r
	opts := Options{DataDir: filepath.Join(f.dir, "data"), Store: f.store, Runner: r, Publisher: f.rec,
		PollInterval: 200 * time.Millisecond, NodeTimeout: 2 * time.Minute}
	if f.tweak != nil {
		f.tweak(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.eng = e
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done = make(chan error, 1)
	go func() { f.done <- e.Run(ctx, 100*time.Millisecond) }()
	select {
	case <-e.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("engine not ready")
	}
	t.Cleanup(f.stop)
}

func (f *fixture) stop() {
	if f.cancel == nil {
		return
	}
	f.cancel()
	select {
	case <-f.done:
	case <-time.After(3 * time.Minute):
		f.t.Error("engine did not stop")
	}
	f.runner.Close(context.Background())
	f.cancel = nil
}

func phaseIs(p tenant.Phase) func(*recorder) bool {
	return func(r *recorder) bool { return r.status["lab"].Phase == p && r.status["lab"].Operation == nil }
}

const long = 3 * time.Minute

func TestApplyScaleDestroy(t *testing.T) {
	f := newFixture(t, 4, 1, true)
	r := f.rec
	r.wait(t, "declared nodes pending", 10*time.Second, func(r *recorder) bool {
		return len(r.nodes["lab"]) == 2 && r.nstatus["lab-cp-1"].Stage == tenant.StagePending && r.status["lab"].Phase == tenant.PhaseAbsent
	})
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "phase running", long, phaseIs(tenant.PhaseRunning))
	r.mu.Lock()
	st := r.status["lab"]
	ready := r.nstatus["lab-workers-1"]
	r.mu.Unlock()
	if st.NodesReady != 2 || st.NodesTotal != 2 || st.Progress != 100 || st.Problem {
		t.Fatalf("status after apply: %+v", st)
	}
	if ready.Stage != tenant.StageRunning || !ready.Ready || ready.Address != f.sims[1].Host() {
		t.Fatalf("worker status: %+v", ready)
	}
	kc := filepath.Join(f.dir, "data", "tenants", "lab", "kubeconfig")
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v %v", fi, err)
	}
	if c := f.sims[0].Calls(); c.Bootstrapped != 1 {
		t.Fatalf("control plane bootstrapped %d times", c.Bootstrapped)
	}

	// scale up: the file changes and the new node comes up
	if err := f.eng.Scale(context.Background(), "lab", "workers", 3); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "4 nodes running", long, func(r *recorder) bool {
		st := r.status["lab"]
		return st.Phase == tenant.PhaseRunning && st.NodesReady == 4 && st.Operation == nil
	})
	data, _ := os.ReadFile(f.store.Path("lab"))
	if !strings.Contains(string(data), "count = 3") {
		t.Fatalf("tenant file not updated:\n%s", data)
	}

	// scale down: the removed nodes are reset gracefully and leave
	if err := f.eng.Scale(context.Background(), "lab", "workers", 1); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "2 nodes after scale down", long, func(r *recorder) bool {
		st := r.status["lab"]
		return st.Phase == tenant.PhaseRunning && st.NodesTotal == 2 && st.NodesReady == 2 && st.Operation == nil &&
			len(r.nodes["lab"]) == 2 && r.succeeded("apply") == 3
	})
	for _, s := range f.sims[2:] {
		if c := s.Calls(); c.ResetGraceful != 1 {
			t.Errorf("node %s: %d graceful resets (calls %+v; events %+v)", s.Host(), c.ResetGraceful, c, f.rec.events)
		}
		if err := s.WaitStage(ctxTimeout(t, long), runtime.MachineStageMaintenance, false); err != nil {
			t.Errorf("node %s not back in maintenance: %v", s.Host(), err)
		}
	}
	if err := f.eng.Scale(context.Background(), "lab", "cp", 2); err == nil {
		t.Fatal("even control plane count accepted")
	}

	// destroy: refused without the confirmation, then done
	if err := f.eng.Destroy(context.Background(), "lab", "nope"); err == nil {
		t.Fatal("destroy without confirm accepted")
	}
	if err := f.eng.Destroy(context.Background(), "lab", "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "phase absent", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("destroy")
		return ok && ev.Result == tenant.ResultSucceeded && r.status["lab"].Phase == tenant.PhaseAbsent
	})
	r.mu.Lock()
	for _, n := range r.nodes["lab"] {
		if s := r.nstatus[n]; s.Stage != tenant.StagePending || s.Ready {
			t.Errorf("node %s after destroy: %+v", n, s)
		}
	}
	r.mu.Unlock()
	for _, s := range f.sims[:2] {
		if err := s.WaitStage(ctxTimeout(t, long), runtime.MachineStageMaintenance, false); err != nil {
			t.Errorf("node %s not reset: %v", s.Host(), err)
		}
	}
	if _, err := os.Stat(kc); err == nil {
		t.Error("kubeconfig kept after destroy")
	}
	if _, err := os.Stat(filepath.Join(f.dir, "data", "tenants", "lab", "secrets.yaml")); err != nil {
		t.Errorf("secrets bundle removed by destroy: %v", err)
	}

	// a second life of the same tenant works (the bundle is reused)
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running again", long, phaseIs(tenant.PhaseRunning))
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestPlanThenApplyAndOrphan checks that without auto_apply a change only
// plans, that Apply applies that plan, and that removing the file of a
// provisioned tenant orphans it without destroying anything.
func TestPlanThenApplyAndOrphan(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	r := f.rec
	if err := f.eng.Plan(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "planned", long, func(r *recorder) bool {
		st := r.status["lab"]
		return st.Phase == tenant.PhasePlanned && st.Pending.Add == 2 && st.Operation == nil
	})
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, phaseIs(tenant.PhaseRunning))
	if r.status["lab"].Pending != (tenant.Changes{}) {
		t.Fatalf("pending after apply: %+v", r.status["lab"].Pending)
	}
	// scaling without auto_apply only plans
	if err := f.eng.Scale(context.Background(), "lab", "workers", 0); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "plan of the scale down", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("plan")
		return ok && ev.Result == tenant.ResultSucceeded && r.status["lab"].Pending.Destroy == 1
	})
	if c := f.sims[1].Calls(); c.Reset != 0 {
		t.Fatalf("a plan reset a node: %+v", c)
	}
	// removing the file orphans the tenant; nothing is reset
	if err := os.Remove(f.store.Path("lab")); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "orphaned", long, func(r *recorder) bool {
		return r.status["lab"].Phase == tenant.PhaseOrphaned && r.status["lab"].Problem
	})
	for _, s := range f.sims {
		if c := s.Calls(); c.Reset != 0 {
			t.Fatalf("removing the file reset %s", s.Host())
		}
	}
	if err := f.eng.Apply(context.Background(), "lab"); err == nil {
		t.Fatal("apply of an orphaned tenant accepted")
	}
	// an orphan survives a restart and can still be destroyed
	f.stop()
	f.start()
	r.wait(t, "orphaned after restart", long, func(r *recorder) bool { return r.status["lab"].Phase == tenant.PhaseOrphaned })
	if err := f.eng.Destroy(context.Background(), "lab", "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "orphan destroyed and gone", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("destroy")
		return ok && ev.Result == tenant.ResultSucceeded && len(r.tenants) == 0
	})
	for _, s := range f.sims {
		if err := s.WaitStage(ctxTimeout(t, long), runtime.MachineStageMaintenance, false); err != nil {
			t.Errorf("node %s not reset: %v", s.Host(), err)
		}
	}
}

// TestInterruptedApplyConverges stops the engine in the middle of an apply
// (while nodes install) and checks that a new engine shows the
// interruption and that the next apply reaches running.
func TestInterruptedApplyConverges(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	r := f.rec
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "a node installing", long, func(r *recorder) bool {
		return r.nstatus["lab-cp-1"].Stage == tenant.StageInstalling || r.status["lab"].Phase == tenant.PhaseBootstrapping
	})
	f.stop() // like SIGTERM: cancels the running apply gracefully
	r.mu.Lock()
	ev, ok := r.lastEvent("apply")
	r.mu.Unlock()
	if !ok || ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "interrupted when rezuscloud stopped") {
		t.Fatalf("apply after stop: %+v", ev)
	}
	f.start()
	r.wait(t, "shown as interrupted after the restart", 30*time.Second, func(r *recorder) bool {
		st := r.status["lab"]
		return st.Phase == tenant.PhaseFailed && st.Problem && st.LastOperation != nil &&
			strings.Contains(st.LastOperation.Message, "interrupted")
	})
	r.mu.Lock()
	starts := len(r.events)
	r.mu.Unlock()
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running after restart", long, phaseIs(tenant.PhaseRunning))
	r.mu.Lock()
	if r.events[starts].Name != "apply" || r.events[starts].Result != tenant.ResultStarted {
		t.Errorf("the restart ran an operation by itself: %+v", r.events[starts])
	}
	r.mu.Unlock()
	if c := f.sims[0].Calls(); c.Bootstrapped != 1 {
		t.Fatalf("bootstrapped %d times", c.Bootstrapped)
	}
}

func TestCommandsCheckInput(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	ctx := context.Background()
	// The semantic checks live here, once (the bridge checks syntax only):
	// each refusal says what is wrong and where.
	for name, c := range map[string]struct {
		call func() error
		want string
	}{
		"apply unknown":      {func() error { return f.eng.Apply(ctx, "nope") }, `unknown tenant "nope"`},
		"scale unknown":      {func() error { return f.eng.Scale(ctx, "lab", "nope", 1) }, `no group "nope"`},
		"scale over pool":    {func() error { return f.eng.Scale(ctx, "lab", "workers", 5) }, "pool has"},
		"scale out of range": {func() error { return f.eng.Scale(ctx, "lab", "workers", 101) }, "out of range"},
		"scale cp zero":      {func() error { return f.eng.Scale(ctx, "lab", "cp", 0) }, "out of range"},
		"scale cp even":      {func() error { return f.eng.Scale(ctx, "lab", "cp", 2) }, `group "cp": count`},
		"reboot undeclared":  {func() error { return f.eng.Reboot(ctx, "lab", "lab-workers-9") }, `has no node "lab-workers-9"`},
		"reboot unprovided":  {func() error { return f.eng.Reboot(ctx, "lab", "lab-cp-1") }, "not provisioned"},
		"cancel idle":        {func() error { return f.eng.Cancel(ctx, "lab") }, "no operation is running"},
		"destroy confirm":    {func() error { return f.eng.Destroy(ctx, "lab", "") }, "not confirmed"},
		"destroy other name": {func() error { return f.eng.Destroy(ctx, "lab", "prod") }, `confirm must be the tenant name "lab"`},
		"destroy unknown":    {func() error { return f.eng.Destroy(ctx, "nope", "nope") }, `unknown tenant "nope"`},
	} {
		if err := c.call(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", name, err, c.want)
		}
	}
	data, _ := os.ReadFile(f.store.Path("lab"))
	if !strings.Contains(string(data), "count = 1") {
		t.Fatalf("a refused command changed the file:\n%s", data)
	}
}

// TestConfigChangeReachesRunningNodes edits the tenant file of a running
// cluster (a new config patch) and checks that every node gets its new
// machine config through the secure API, once.
func TestConfigChangeReachesRunningNodes(t *testing.T) {
	f := newFixture(t, 2, 1, true)
	r := f.rec
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, phaseIs(tenant.PhaseRunning))
	// Apply again: nothing changed, so no node is given its config again
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "second apply", long, func(r *recorder) bool { return r.succeeded("apply") == 2 })
	for _, s := range f.sims {
		if c := s.Calls(); c.Apply != 1 {
			t.Fatalf("node %s: %d config applies after an unchanged apply", s.Host(), c.Apply)
		}
	}
	data, _ := os.ReadFile(f.store.Path("lab"))
	patched := strings.Replace(string(data), "auto_apply = true\n",
		"auto_apply = true\nconfig_patches = [\"\"\"machine: {kubelet: {extraArgs: {max-pods: \"150\"}}}\"\"\"]\n", 1)
	if err := os.WriteFile(f.store.Path("lab"), []byte(patched), 0o644); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "apply of the changed file", long, func(r *recorder) bool {
		return r.succeeded("apply") == 3 && r.status["lab"].Phase == tenant.PhaseRunning
	})
	for _, s := range f.sims {
		if c := s.Calls(); c.Apply != 2 || c.ApplyRejected != 0 {
			t.Errorf("node %s: calls %+v, want 2 applies", s.Host(), c)
		}
		if !strings.Contains(string(s.Config()), "max-pods") {
			t.Errorf("node %s does not run the patched config", s.Host())
		}
	}
}

// TestWakeOnLAN powers a worker "off" (it does not answer) and checks that
// the apply wakes it through its mac, once, and then finishes.
func TestWakeOnLAN(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	r := f.rec
	worker := f.sims[1]
	worker.SetUnreachable(true)
	var mu sync.Mutex
	var woken []string
	f.stop()
	f.tweak = func(o *Options) {
		o.WakeInterval = time.Hour // once is enough
		o.Wake = func(_ context.Context, mac string) error {
			mu.Lock()
			woken = append(woken, mac)
			mu.Unlock()
			worker.SetUnreachable(false) // the machine powers on
			worker.PowerOn()
			return nil
		}
	}
	data, _ := os.ReadFile(f.store.Path("lab"))
	withMAC := strings.Replace(string(data), fmt.Sprintf("address = \"%s\"", worker.Host()),
		fmt.Sprintf("address = \"%s\"\n  mac = \"aa:bb:cc:dd:ee:31\"", worker.Host()), 1)
	if err := os.WriteFile(f.store.Path("lab"), []byte(withMAC), 0o644); err != nil {
		t.Fatal(err)
	}
	f.start()
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, phaseIs(tenant.PhaseRunning))
	mu.Lock()
	if len(woken) != 1 || woken[0] != "aa:bb:cc:dd:ee:31" {
		t.Fatalf("woken %v", woken)
	}
	mu.Unlock()

	// scaling the worker away powers its machine off (it has a mac) ...
	if err := f.eng.Scale(context.Background(), "lab", "workers", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "scaled down", long, func(r *recorder) bool {
		return r.succeeded("apply") == 2 && r.status["lab"].Phase == tenant.PhaseRunning && r.status["lab"].NodesTotal == 1
	})
	if c := worker.Calls(); c.ResetGraceful != 1 || c.Halt != 1 || !worker.PoweredOff() {
		t.Fatalf("worker after scale down: %+v, off %v", c, worker.PoweredOff())
	}
	// ... and growing the group again wakes it and brings it back
	if err := f.eng.Scale(context.Background(), "lab", "workers", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "scaled up again", long, func(r *recorder) bool {
		return r.succeeded("apply") == 3 && r.status["lab"].Phase == tenant.PhaseRunning && r.status["lab"].NodesReady == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if len(woken) != 2 {
		t.Fatalf("woken %v, want the worker woken twice", woken)
	}
	// the control plane has no mac: it was never halted
	if c := f.sims[0].Calls(); c.Halt != 0 {
		t.Fatalf("control plane halted: %+v", c)
	}
}
