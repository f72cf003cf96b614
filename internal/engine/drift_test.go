package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestCloudDrift: a worker's server deleted behind tofu's back is noticed
// by the refresh between operations (drift: pending changes and a problem
// that names it); Apply recreates it, once, and the drift is gone.
func TestCloudDrift(t *testing.T) {
	f := newCloudFixture(t, 1, 1)
	r := f.rec
	if ev := f.applyAndWait(t); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("apply: %s: %s", ev.Result, ev.Message)
	}
	r.wait(t, "running", long, func(r *recorder) bool { return phaseIs(tenant.PhaseRunning)(r) && r.status["lab"].NodesReady == 2 })
	ts, err := f.eng.lookup("lab")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ts.checkDrift(ctx); err != nil {
		t.Fatal(err)
	}
	if st := ts.view().Status; st.Problem || st.Pending.Any() {
		t.Fatalf("drift right after an apply: problems %q, pending %+v", st.Problems, st.Pending)
	}
	if err := f.cloud.DeleteServerOutside("lab-workers-1"); err != nil {
		t.Fatal(err)
	}
	if err := ts.checkDrift(ctx); err != nil {
		t.Fatal(err)
	}
	st := ts.view().Status
	if !st.Problem || !strings.Contains(strings.Join(st.Problems, " "), "drift") || !strings.Contains(strings.Join(st.Problems, " "), "deleted") || st.Pending.Add == 0 {
		t.Fatalf("after a server was deleted outside: problems %q, pending %+v", st.Problems, st.Pending)
	}
	if inv := f.cloud.Inventory(); inv.Servers != 1 {
		t.Fatalf("the drift check changed the cloud: %+v", inv)
	}
	if ev := f.applyAndWait(t); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("apply after drift: %s: %s", ev.Result, ev.Message)
	}
	if inv := f.cloud.Inventory(); inv.Servers != 2 {
		t.Fatalf("after the apply: %+v, want the server back", inv)
	}
	if err := ts.checkDrift(ctx); err != nil {
		t.Fatal(err)
	}
	if st := ts.view().Status; strings.Contains(strings.Join(st.Problems, " "), "drift") {
		t.Fatalf("drift after the apply put it back: %q", st.Problems)
	}
	if ev := f.applyAndWait(t); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("second apply: %s: %s", ev.Result, ev.Message)
	}
	if inv := f.cloud.Inventory(); inv.Servers != 2 {
		t.Fatalf("a second apply changed the servers: %+v", inv)
	}
}
