package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/cloudsim"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

const cloudPassword = "cloud-test-Pa55word-never-shown"

// cloudFixture is an engine over an OpenStack tenant on the stand-in cloud,
// with the real tofu and the real OpenStack provider.
type cloudFixture struct {
	*fixture
	cloud *cloudsim.Cloud
}

func newCloudFixture(t *testing.T, cps, workers int) *cloudFixture {
	return newCloudFixtureB(t, cps, workers)
}

// newCloudFixtureB is newCloudFixture for tests and benchmarks; stage
// delays are short for tests and off for benchmarks.
func newCloudFixtureB(t testing.TB, cps, workers int) *cloudFixture {
	t.Helper()
	bin, rc := testenv.Tofu(t)
	if rc == "" {
		t.Skip("no provider mirror (make tools)")
	}
	cloud, err := cloudsim.Start(context.Background(), cloudsim.Options{
		Cloud: simcloud.Options{Password: cloudPassword},
		Node:  cloudDelays(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Close)
	f := &fixture{t: t, dir: t.TempDir(), rec: newRecorder(), tofuBin: bin}
	tenants := filepath.Join(f.dir, "tenants")
	if err := os.MkdirAll(tenants, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tenants, "lab.toml"), []byte(cloudsim.TenantFile("Lab", simnode.DefaultTalosVersion, cps, workers, false)), 0o600); err != nil {
		t.Fatal(err)
	}
	f.store = &tenant.Store{Dir: tenants}
	f.tweak = func(o *Options) {
		o.CloudEnv = func(tenant.Provider) map[string]string { return cloud.Env() }
		r, err := tofu.New(tofu.Config{Binary: bin, CLIConfigFile: rc, DataDir: filepath.Join(f.dir, "data", "tofu"), Passphrase: pass})
		if err != nil {
			t.Fatal(err)
		}
		f.runner.Close(context.Background())
		f.runner = r
		o.Runner = r
	}
	f.start()
	return &cloudFixture{fixture: f, cloud: cloud}
}

func cloudDelays(t testing.TB) simnode.Options {
	if _, bench := t.(*testing.B); bench {
		return simnode.Options{}
	}
	return simnode.Options{InstallDelay: 20 * time.Millisecond, RebootDelay: 20 * time.Millisecond,
		DownDelay: 50 * time.Millisecond, BootDelay: 20 * time.Millisecond, ResetDelay: 20 * time.Millisecond}
}

// An OpenStack tenant from nothing to running and back to nothing: the
// network first (Plan creates nothing), instances booted from their
// user_data, every Talos call to a worker routed through the control plane
// (no connection ever reaches a private address), scaling up and down, and
// a destroy that leaves the cloud empty.
func TestCloudLifecycle(t *testing.T) {
	f := newCloudFixture(t, 1, 2)
	r := f.rec
	ctx := context.Background()

	if err := f.eng.Plan(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "plan done", long, func(r *recorder) bool { ev, ok := r.lastEvent("plan"); return ok && ev.Result != tenant.ResultStarted })
	if ev, _ := r.lastEvent("plan"); ev.Result != tenant.ResultSucceeded || !strings.Contains(ev.Message, "network part") {
		t.Fatalf("plan: %s: %s", ev.Result, ev.Message)
	}
	if inv := f.cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Fatalf("a plan created something: %+v", inv)
	}

	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("apply")
		if ok && ev.Result == tenant.ResultFailed {
			t.Fatalf("apply failed: %s", ev.Message)
		}
		return phaseIs(tenant.PhaseRunning)(r) && r.status["lab"].NodesReady == 3
	})
	if inv := f.cloud.Inventory(); inv.Servers != 3 || inv.FloatingIPs != 1 {
		t.Fatalf("inventory after apply: %+v", inv)
	}
	cp := f.cloud.Node("lab-cp-1")
	if cp == nil || cp.PublicAddr() == "" {
		t.Fatal("the control plane has no floating IP")
	}
	fip := strings.Split(cp.PublicAddr(), ":")[0]
	r.mu.Lock()
	w := r.nstatus["lab-workers-1"]
	r.mu.Unlock()
	if w.PrivateAddress == "" || w.Address != fip {
		t.Fatalf("worker state: address %q private %q; want the endpoint host %s and its private address", w.Address, w.PrivateAddress, fip)
	}
	c := f.cloud.Calls()
	if c.DirectPrivate != 0 {
		t.Fatalf("%d connections reached a private address directly", c.DirectPrivate)
	}
	if c.Bootstrapped != 1 || c.Routed == 0 {
		t.Fatalf("calls: %+v", c)
	}
	if c.Apply != 0 {
		t.Fatalf("nodes booted from their user_data were sent their config again (%d applies)", c.Apply)
	}
	kc := filepath.Join(f.dir, "data", "tenants", "lab", "kubeconfig")
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v %v", fi, err)
	}

	// scale 2 → 3 → 1: the removed instances are reset through the control
	// plane and deleted
	for _, n := range []int{3, 1} {
		if err := f.eng.Scale(ctx, "lab", "workers", n); err != nil {
			t.Fatal(err)
		}
		// Scale of a provisioned tenant plans; Apply applies that plan.
		// The press is matched to its own apply by the started events (an
		// earlier apply's result may still be on its way to the recorder).
		r.mu.Lock()
		started := r.started("apply")
		r.mu.Unlock()
		if err := f.eng.Apply(ctx, "lab"); err != nil {
			t.Fatal(err)
		}
		r.wait(t, fmt.Sprintf("%d workers running", n), long, func(r *recorder) bool {
			ev, ok := r.endOf("apply", started)
			if ok && ev.Result != tenant.ResultSucceeded {
				t.Errorf("apply %s: %s", ev.Result, ev.Message)
				return true
			}
			st := r.status["lab"]
			return ok && st.Phase == tenant.PhaseRunning && st.NodesTotal == 1+n && st.NodesReady == 1+n
		})
		if t.Failed() {
			t.FailNow()
		}
		if inv := f.cloud.Inventory(); inv.Servers != 1+n {
			r.mu.Lock()
			t.Fatalf("after scaling to %d: %+v\nevents: %+v", n, inv, r.events)
		}
	}
	if c := f.cloud.Calls(); c.DirectPrivate != 0 || c.ResetGraceful != 2 {
		t.Fatalf("after scaling: %+v", c)
	}

	if err := f.eng.Destroy(ctx, "lab", "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "destroyed", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("destroy")
		return ok && ev.Result != tenant.ResultStarted
	})
	if ev, _ := r.lastEvent("destroy"); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("destroy: %s", ev.Message)
	}
	if inv := f.cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Fatalf("the cloud is not empty after destroy: %+v", inv)
	}
	if c := f.cloud.Calls(); c.DirectPrivate != 0 {
		t.Fatalf("%d connections reached a private address directly", c.DirectPrivate)
	}
	if errs := f.cloud.Errors(); len(errs) > 0 {
		t.Fatalf("the stand-in cloud's nodes could not follow its floating IPs: %v", errs)
	}
}

// started counts the started events of an operation.
func (r *recorder) started(name string) int {
	n := 0
	for _, ev := range r.events {
		if ev.Name == name && ev.Result == tenant.ResultStarted {
			n++
		}
	}
	return n
}

// endOf is the result event of the operation that started after the first
// `before` ones of that name.
func (r *recorder) endOf(name string, before int) (tenant.OperationEvent, bool) {
	seen := 0
	for i, ev := range r.events {
		if ev.Name != name || ev.Result != tenant.ResultStarted {
			continue
		}
		if seen++; seen <= before {
			continue
		}
		for _, end := range r.events[i+1:] {
			if end.Name == name && end.Result != tenant.ResultStarted {
				return end, true
			}
		}
		return tenant.OperationEvent{}, false
	}
	return tenant.OperationEvent{}, false
}

// waitApply waits for the end of the next apply after `before` ended ones
// and returns its event.
func (f *cloudFixture) applyAndWait(t *testing.T) tenant.OperationEvent {
	t.Helper()
	f.rec.mu.Lock()
	before := 0
	for _, ev := range f.rec.events {
		if ev.Name == "apply" && ev.Result != tenant.ResultStarted {
			before++
		}
	}
	f.rec.mu.Unlock()
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	var last tenant.OperationEvent
	f.rec.wait(t, "the apply's end", long, func(r *recorder) bool {
		n := 0
		for _, ev := range r.events {
			if ev.Name == "apply" && ev.Result != tenant.ResultStarted {
				n++
				last = ev
			}
		}
		return n > before && r.status["lab"].Operation == nil
	})
	return last
}

// Cloud failures reach the user with the cloud's reason, keep the state,
// and a later Apply converges without duplicates.
func TestCloudFailures(t *testing.T) {
	t.Run("quota", func(t *testing.T) {
		f := newCloudFixture(t, 1, 2)
		f.cloud.SetInstanceQuota(2)
		ev := f.applyAndWait(t)
		if ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "Quota exceeded for instances") {
			t.Fatalf("apply over quota: %s: %s", ev.Result, ev.Message)
		}
		if inv := f.cloud.Inventory(); inv.Servers != 2 {
			t.Fatalf("servers after the refusal: %+v", inv)
		}
		f.cloud.SetInstanceQuota(10)
		if ev := f.applyAndWait(t); ev.Result != tenant.ResultSucceeded {
			t.Fatalf("apply after raising the quota: %s", ev.Message)
		}
		if inv := f.cloud.Inventory(); inv.Servers != 3 {
			t.Fatalf("duplicates or missing servers: %+v", inv)
		}
	})
	t.Run("server_error", func(t *testing.T) {
		f := newCloudFixture(t, 1, 1)
		f.cloud.FailNextServers(1, "No valid host was found. There are not enough hosts available.")
		ev := f.applyAndWait(t)
		if ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "No valid host was found") {
			t.Fatalf("apply with a server in ERROR: %s: %s", ev.Result, ev.Message)
		}
		if ev := f.applyAndWait(t); ev.Result != tenant.ResultSucceeded {
			t.Fatalf("the next apply did not replace the server: %s", ev.Message)
		}
		if inv := f.cloud.Inventory(); inv.Servers != 2 {
			t.Fatalf("servers: %+v", inv)
		}
	})
	t.Run("wrong_credentials", func(t *testing.T) {
		f := newCloudFixture(t, 1, 1)
		f.eng.opts.CloudEnv = func(tenant.Provider) map[string]string {
			env := f.cloud.Env()
			env["OS_PASSWORD"] = "not-the-" + cloudPassword
			return env
		}
		ev := f.applyAndWait(t)
		if ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "401") {
			t.Fatalf("apply with a wrong password: %s: %s", ev.Result, ev.Message)
		}
		if strings.Contains(ev.Message, cloudPassword) {
			t.Fatal("the password is in the message")
		}
	})
	t.Run("api_down", func(t *testing.T) {
		f := newCloudFixture(t, 1, 1)
		if err := f.cloud.SetDown(true); err != nil {
			t.Fatal(err)
		}
		ev := f.applyAndWait(t)
		if ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "connection refused") {
			t.Fatalf("apply with the API down: %s: %s", ev.Result, ev.Message)
		}
	})
}

// BenchmarkCloudApply: Apply → running for an OpenStack tenant of 1 + 2 and
// 3 + 5 nodes on the stand-in cloud (stage delays off), with the time spent
// in tofu; the destroy between iterations is not timed.
func BenchmarkCloudApply(b *testing.B) {
	for _, size := range []struct{ cps, workers int }{{1, 2}, {3, 5}} {
		b.Run(fmt.Sprintf("nodes=%d+%d", size.cps, size.workers), func(b *testing.B) {
			var total, inTofu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := newCloudFixtureB(b, size.cps, size.workers)
				start := time.Now()
				b.StartTimer()
				if err := f.eng.Apply(context.Background(), "lab"); err != nil {
					b.Fatal(err)
				}
				f.rec.wait(b, "running", long, func(r *recorder) bool {
					return phaseIs(tenant.PhaseRunning)(r) && r.status["lab"].NodesReady == size.cps+size.workers
				})
				b.StopTimer()
				total += time.Since(start)
				ts, _ := f.eng.lookup("lab")
				ts.mu.Lock()
				inTofu += ts.last.tofu
				ts.mu.Unlock()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/apply")
			b.ReportMetric(inTofu.Seconds()/float64(b.N), "s-in-tofu/apply")
		})
	}
}
