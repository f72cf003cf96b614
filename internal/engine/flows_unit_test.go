package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestUnitApplyHappyPath: an apply over fakes configures both nodes,
// bootstraps once and ends running, recorded.
func TestUnitApplyHappyPath(t *testing.T) {
	f := newUnitFixture(t, nil)
	ev := f.apply(t)
	if ev.Result != tenant.ResultSucceeded {
		t.Fatalf("apply: %s: %s", ev.Result, ev.Message)
	}
	r := f.record(t)
	if !r.Infra || !r.Bootstrapped || r.Phase != tenant.PhaseRunning || len(r.Nodes) != 2 {
		t.Fatalf("record after apply: infra %v bootstrapped %v phase %s nodes %d", r.Infra, r.Bootstrapped, r.Phase, len(r.Nodes))
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
}

// TestUnitApplyTofuFails: a failing tofu apply fails the operation with
// tofu's error, the phase is failed, and no node was configured.
func TestUnitApplyTofuFails(t *testing.T) {
	f := newUnitFixture(t, func(f *unitFixture) { f.infra.applyErr = errors.New("quota exceeded") })
	ev := f.apply(t)
	if ev.Result != tenant.ResultFailed || !strings.Contains(ev.Message, "quota exceeded") {
		t.Fatalf("apply: %s: %q, want failed with tofu's error", ev.Result, ev.Message)
	}
	if r := f.record(t); r.Phase != tenant.PhaseFailed || r.Running != "" {
		t.Errorf("record: phase %s running %q, want failed and none", r.Phase, r.Running)
	}
	f.nodes.mu.Lock()
	defer f.nodes.mu.Unlock()
	if len(f.nodes.calls) != 0 {
		t.Errorf("nodes were called after tofu failed: %v", f.nodes.calls)
	}
}

// TestUnitRecordBeforeAct: when a node is given its config the record on
// disk already says so, and says infrastructure exists and that the apply
// runs (a crash during the call converges on restart).
func TestUnitRecordBeforeAct(t *testing.T) {
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
	if ev := f.apply(t); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("apply: %s: %s", ev.Result, ev.Message)
	}
	f.nodes.mu.Lock()
	defer f.nodes.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("config given before it was recorded to %v", bad)
	}
	if len(f.nodes.calls) == 0 {
		t.Error("no node was configured")
	}
}
