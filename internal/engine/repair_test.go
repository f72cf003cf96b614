package engine

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestForgetAndReplace: a dead worker is replaced by a machine a scan
// found (it takes the node's name, is installed and joins; the dead one is
// never touched), then another dead worker is forgotten (out of the record
// and the file, untouched). A node that answers is neither; Forget needs
// its confirmation.
func TestForgetAndReplace(t *testing.T) {
	f := newFixture(t, 4, 2, false) // cp, two workers, and a spare machine in maintenance mode
	spare := f.sims[3]
	_, ipnet, _ := net.ParseCIDR(spare.Host() + "/24")
	f.stop()
	f.tweak = func(o *Options) {
		o.Discovery = DiscoveryOptions{CIDRs: []string{ipnet.String()}, Interval: time.Hour, Timeout: time.Second}
	}
	// the file declares only the first three machines
	data, _ := os.ReadFile(f.store.Path("lab"))
	s := string(data)
	i := strings.LastIndex(s, "  [[node_groups.machines]]")
	if err := os.WriteFile(f.store.Path("lab"), []byte(s[:i]), 0o644); err != nil {
		t.Fatal(err)
	}
	f.start()
	r := f.rec
	ctx := context.Background()
	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, func(r *recorder) bool { return phaseIs(tenant.PhaseRunning)(r) && r.status["lab"].NodesReady == 3 })
	if _, err := f.eng.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	mac := spare.Hardware().MAC

	// refused: not confirmed, not dead
	if err := f.eng.Forget(ctx, "lab", "lab-workers-1", false); err == nil || !strings.Contains(err.Error(), "confirm") {
		t.Fatalf("unconfirmed forget: %v", err)
	}
	if err := f.eng.Forget(ctx, "lab", "lab-cp-1", true); err == nil || !strings.Contains(err.Error(), "replace it instead") {
		t.Fatalf("forget of the control plane: %v", err)
	}
	if err := f.eng.Forget(ctx, "lab", "lab-workers-1", true); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the forget refused", long, func(r *recorder) bool { ev, ok := r.lastEvent(opForget); return ok && ev.Result == tenant.ResultFailed })
	if ev, _ := r.lastEvent(opForget); !strings.Contains(ev.Message, "answers") {
		t.Fatalf("forget of a node that answers: %s", ev.Message)
	}
	if ph := r.status["lab"].Phase; ph != tenant.PhaseRunning {
		t.Fatalf("a refused forget left the cluster %s", ph)
	}

	// a worker dies and is replaced
	f.sims[2].Die()
	if err := f.eng.Replace(ctx, "lab", "lab-workers-2", mac); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the replace", long, func(r *recorder) bool { _, ok := r.lastEvent(opReplace); return ok })
	if ev, _ := r.lastEvent(opReplace); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("replace: %s: %s", ev.Result, ev.Message)
	}
	r.wait(t, "three nodes ready again", long, func(r *recorder) bool {
		return r.status["lab"].NodesReady == 3 && r.nstatus["lab-workers-2"].Address == spare.Host()
	})
	if data, _ := os.ReadFile(f.store.Path("lab")); !strings.Contains(string(data), spare.Host()) || strings.Contains(string(data), f.sims[2].Host()) {
		t.Fatalf("file after the replace:\n%s", data)
	}
	if c := f.sims[2].Calls(); c.Reset != 0 || c.Apply != 1 {
		t.Fatalf("the dead machine was touched: %+v", c)
	}

	// another worker dies and is forgotten
	f.sims[1].Die()
	if err := f.eng.Forget(ctx, "lab", "lab-workers-1", true); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the forget", long, func(r *recorder) bool {
		ev, ok := r.lastEvent(opForget)
		return ok && ev.Result == tenant.ResultSucceeded
	})
	data, _ = os.ReadFile(f.store.Path("lab"))
	if strings.Contains(string(data), f.sims[1].Host()) || !strings.Contains(string(data), "count = 1") {
		t.Fatalf("file after the forget:\n%s", data)
	}
	applies := r.succeeded("apply")
	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the apply after the forget", long, func(r *recorder) bool { return r.succeeded("apply") == applies+1 })
	r.wait(t, "two nodes running", long, func(r *recorder) bool {
		st := r.status["lab"]
		return st.Phase == tenant.PhaseRunning && st.NodesReady == 2 && st.NodesTotal == 2 &&
			r.nstatus["lab-workers-1"].Address == spare.Host()
	})
	if c := f.sims[1].Calls(); c.Reset != 0 {
		t.Fatalf("the forgotten machine was touched: %+v", c)
	}
}

// TestTeardownNeverHangs: a scale-down whose machine does not take its
// reset ends within the reset bound and names the machine and what to do;
// a destroy whose machine is dead finishes.
func TestTeardownNeverHangs(t *testing.T) {
	f := newFixtureTweak(t, 3, 2, false, func(o *Options) { o.ResetTimeout = 3 * time.Second })
	r := f.rec
	ctx := context.Background()
	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, func(r *recorder) bool { return phaseIs(tenant.PhaseRunning)(r) && r.status["lab"].NodesReady == 3 })
	f.sims[2].FailReset(simnode.ResetHangs)
	if err := f.eng.Scale(ctx, "lab", "workers", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	var ev tenant.OperationEvent
	r.wait(t, "the scale-down to end", time.Minute, func(r *recorder) bool {
		var ok bool
		ev, ok = r.lastEvent(opApply)
		return ok && ev.Result != tenant.ResultSucceeded && r.status["lab"].Operation == nil
	})
	if !strings.Contains(ev.Message, "lab-workers-2") || !strings.Contains(ev.Message, f.sims[2].Host()) || !strings.Contains(ev.Message, "Forget machine") {
		t.Fatalf("scale-down with a hanging reset: %s", ev.Message)
	}
	f.sims[2].ClearFault()
	f.sims[1].Die()
	if err := f.eng.Destroy(ctx, "lab", "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the destroy", long, func(r *recorder) bool { ev, ok := r.lastEvent(opDestroy); return ok && ev.Result != "" })
	if ev, _ := r.lastEvent(opDestroy); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("destroy with a dead machine: %s: %s", ev.Result, ev.Message)
	}
}
