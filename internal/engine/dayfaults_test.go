package engine

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// The day-2 faults of the third fault matrix (issue 19), each reproduced
// here as it was seen from outside.

// Item 1: a Kubernetes rollout cancelled after its first step, then Apply:
// the apply moves no kubelet (it moved every one at once), and the
// cancel's message sends the user to Install, not to Apply.
func TestKubernetesCancelledThenApplyMovesNothing(t *testing.T) {
	f, _ := newUpgradeFixture(t, 2)
	r := f.rec
	// the first step is the control plane's components; cancel once it is done
	kubernetesPastFirstStep(t, f)
	if err := f.eng.Cancel(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	var ev tenant.OperationEvent
	r.wait(t, "the rollout to stop", long, func(r *recorder) bool {
		var ok bool
		ev, ok = r.lastEvent("upgrade")
		return ok && r.status["lab"].Operation == nil
	})
	if ev.Result != tenant.ResultCancelled || strings.Contains(ev.Message, "Apply") || !strings.Contains(ev.Message, "Install") {
		t.Fatalf("cancelled rollout: %s: %q, want cancelled, pointing at Install and not at Apply", ev.Result, ev.Message)
	}
	kubelets := func() []string {
		var out []string
		for _, s := range f.sims {
			out = append(out, s.KubeletVersion())
		}
		return out
	}
	before := kubelets()
	applies := r.succeeded("apply")
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the apply", long, func(r *recorder) bool { return r.succeeded("apply") == applies+1 })
	if after := kubelets(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("the apply moved kubelets: %v -> %v", before, after)
	}
	if strings.Count(strings.Join(before, ","), "1.35.0") < 2 {
		t.Errorf("kubelets before the apply %v: the cancel did not stop the rollout", before)
	}
	st := r.statusOf("lab")
	if !strings.Contains(strings.Join(st.Problems, " "), "press Install to resume") {
		t.Errorf("the stopped rollout is not shown: problems %q", st.Problems)
	}
}

// Item 4: a burst of discover requests runs one scan; later requests join
// it instead of each holding a slot for a scan of its own.
func TestDiscoverBurstJoinsOneScan(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	var probes atomic.Int32
	release := make(chan struct{})
	probing := make(chan struct{}, 64)
	probe := func(ctx context.Context, endpoint string) (talos.Machine, error) {
		probes.Add(1)
		probing <- struct{}{}
		select { // a machine that stalls its answer
		case <-release:
		case <-ctx.Done():
			return talos.Machine{}, ctx.Err()
		}
		return talos.Machine{Address: "127.0.0.1", MAC: "02:00:00:00:00:01"}, nil
	}
	e, _ := bareEngine(t, tenantFile([]string{"127.0.0.10", "127.0.0.11"}, 1, false))
	e.opts.Discovery = DiscoveryOptions{CIDRs: []string{"127.0.0.1/32"}, Port: port, Timeout: time.Minute, Probe: probe}
	const burst = 30
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms, err := e.Discover(context.Background())
			if err == nil && len(ms) != 1 {
				err = &net.AddrError{Err: "want one machine, got " + strconv.Itoa(len(ms))}
			}
			errs <- err
		}()
	}
	select {
	case <-probing:
	case <-time.After(30 * time.Second):
		t.Fatal("no scan started")
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := probes.Load(); n > 2 {
		t.Fatalf("%d discover requests ran %d scans, want them to join one (two at most: one may start after the first ended)", burst, n)
	}
}

// Item 5: snapshots taken in the same second never overwrite each other,
// and rotation counts files.
func TestSnapshotsInOneSecondAreKept(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := range 3 {
		if _, err := writeSnapshot(context.Background(), dir, at.Add(time.Duration(i)*time.Millisecond), func(f *os.File) (int64, error) {
			n, err := f.WriteString(strings.Repeat("x", 10+i))
			return int64(n), err
		}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := listBackups(dir)
	if err != nil || len(list) != 3 {
		t.Fatalf("%d snapshots after three in one second (%v), want 3: %+v", len(list), err, list)
	}
	if list[0].Size != 12 || list[2].Size != 10 {
		t.Fatalf("order: newest first wanted, got sizes %d %d %d", list[0].Size, list[1].Size, list[2].Size)
	}
	if _, err := pruneBackups(dir, 2); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("rotation kept %d files, want 2", len(ents))
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd-20261202T100000Z-3.snapshot")); err != nil {
		t.Fatalf("the newest snapshot was not kept: %v", err)
	}
}

// Item 6: "Shut down" of a node that is already off (a power cut, unplugged)
// switches it off instead of failing with connection refused.
func TestShutDownOfANodeThatIsOff(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	r := f.rec
	worker := f.sims[1]
	ha := &fakeHA{states: map[string]string{"switch.rack_plug": "on"}}
	f.stop()
	f.tweak = func(o *Options) { o.Power.HA = ha }
	data, _ := os.ReadFile(f.store.Path("lab"))
	s := strings.Replace(string(data), `address = "`+worker.Host()+`"`, `address = "`+worker.Host()+`"`+"\n  power = \"switch.rack_plug\"", 1)
	if err := os.WriteFile(f.store.Path("lab"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	f.start()
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, phaseIs(tenant.PhaseRunning))
	node := tenant.NodeName("lab", "workers", 1)
	worker.SetUnreachable(true) // it lost power behind our back
	if err := f.eng.Power(context.Background(), "lab", node, "off"); err != nil {
		t.Fatal(err)
	}
	var ev tenant.OperationEvent
	r.wait(t, "power off to end", long, func(r *recorder) bool {
		var ok bool
		ev, ok = r.lastEvent("power_off")
		return ok
	})
	if ev.Result != tenant.ResultSucceeded {
		t.Fatalf("power off of a node that is off: %s: %s", ev.Result, ev.Message)
	}
	if st, _, _ := ha.GetState(context.Background(), "switch.rack_plug"); st != "off" {
		t.Fatalf("the plug is %s, want off", st)
	}
	r.wait(t, "the node shown off", long, func(r *recorder) bool {
		ns := r.nstatus[node]
		return ns.Stage == tenant.StageUnreachable && ns.Power == "off"
	})
}

// Item 2: a node that never comes back from a Talos upgrade is named as a
// problem well before the node timeout, and Cancel ends the wait at once
// (it answered done and the rollout held the tenant for the 20-minute
// timeout).
func TestUpgradeNodeNeverBack(t *testing.T) {
	f := newFixtureTweak(t, 2, 1, false, func(o *Options) {
		o.NodeTimeout = 20 * time.Minute
		o.StallAfter = 2 * time.Second
	})
	r := f.rec
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, func(r *recorder) bool {
		return phaseIs(tenant.PhaseRunning)(r) && r.status["lab"].TalosVersionRunning != ""
	})
	f.sims[1].FailUpgrade(simnode.UpgradeNeverBack)
	if err := f.eng.Upgrade(context.Background(), "lab", "talos", "v1.13.1"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the stuck worker named as a problem", time.Minute, func(r *recorder) bool {
		st := r.status["lab"]
		return st.Problem && strings.Contains(strings.Join(st.Problems, " "), "node lab-workers-1 has been upgrading since")
	})
	if err := f.eng.Cancel(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	var ev tenant.OperationEvent
	r.wait(t, "the rollout to end at the cancel", 30*time.Second, func(r *recorder) bool {
		var ok bool
		ev, ok = r.lastEvent("upgrade")
		return ok && r.status["lab"].Operation == nil
	})
	if ev.Result != tenant.ResultCancelled || !strings.Contains(ev.Message, "Install") {
		t.Fatalf("upgrade: %s: %s", ev.Result, ev.Message)
	}
	// the tenant takes the next operation at once
	if err := f.eng.Plan(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "a plan after the cancel", time.Minute, func(r *recorder) bool { ev, ok := r.lastEvent("plan"); return ok && ev.Result != "" })
}

// Item 7: a rollout interrupted by a restart leaves a trace: the new
// engine says the upgrade was interrupted after how many nodes and that
// Install resumes it, and Install does.
func TestUpgradeInterruptedByRestart(t *testing.T) {
	f, _ := newUpgradeFixture(t, 2)
	r := f.rec
	kubernetesPastFirstStep(t, f)
	f.stop() // like SIGTERM in the middle of the rollout
	f.start()
	r.wait(t, "the interrupted rollout shown after the restart", 30*time.Second, func(r *recorder) bool {
		st := r.status["lab"]
		return st.LastOperation != nil && strings.Contains(st.LastOperation.Message, "interrupted") &&
			strings.Contains(strings.Join(st.Problems, " "), "press Install to resume")
	})
	st := r.statusOf("lab")
	if !strings.Contains(st.LastOperation.Message, "Kubernetes upgrade to 1.35.2") || !strings.Contains(st.LastOperation.Message, "press Install to resume") {
		t.Errorf("after the restart the last operation says %q, want the interrupted upgrade and Install", st.LastOperation.Message)
	}
	r.mu.Lock()
	upgrades := r.succeeded("upgrade")
	r.mu.Unlock()
	if err := f.eng.Upgrade(context.Background(), "lab", "kubernetes", "1.35.2"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "Install to finish the rollout", long, func(r *recorder) bool { return r.succeeded("upgrade") == upgrades+1 })
	for _, s := range f.sims {
		if v := s.KubeletVersion(); v != "1.35.2" {
			t.Errorf("after Install: kubelet %s, want 1.35.2", v)
		}
	}
	if p := strings.Join(r.statusOf("lab").Problems, " "); strings.Contains(p, "Install") {
		t.Errorf("problems after the rollout finished: %q", p)
	}
}

// kubernetesPastFirstStep starts a Kubernetes rollout to 1.35.2 and returns
// once its first step (the control plane's components) is done.
func kubernetesPastFirstStep(t *testing.T, f *fixture) {
	t.Helper()
	if err := f.eng.Upgrade(context.Background(), "lab", "kubernetes", "1.35.2"); err != nil {
		t.Fatal(err)
	}
	f.rec.wait(t, "the first step done", long, func(r *recorder) bool {
		ro := r.status["lab"].Rollout
		return ro != nil && ro.Done >= 1
	})
}
