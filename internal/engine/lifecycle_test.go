package engine

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// same marks a cell where the phase stays what it was.
const same tenant.Phase = "(unchanged)"

// lifecycleRule is one row of the lifecycle table: under these facts, the
// event moves every phase to def, except those named in except.
type lifecycleRule struct {
	name   string
	ev     event
	f      facts
	def    tenant.Phase
	except map[tenant.Phase]tenant.Phase
}

// lifecycleTable is the tenant lifecycle as the engine must run it. Every
// event has at least one row; TestUnitLifecycle expands each row over every
// phase and checks each cell.
var lifecycleTable = []lifecycleRule{
	{name: "fresh", ev: evRestore, f: facts{}, def: tenant.PhaseAbsent},
	{name: "recorded running", ev: evRestore, f: facts{infra: true, recorded: tenant.PhaseRunning}, def: tenant.PhaseRunning},
	{name: "recorded orphaned", ev: evRestore, f: facts{infra: true, recorded: tenant.PhaseOrphaned}, def: tenant.PhaseOrphaned},
	{name: "infra, no phase", ev: evRestore, f: facts{infra: true}, def: tenant.PhaseAbsent},
	{name: "phase, no infra", ev: evRestore, f: facts{recorded: tenant.PhaseRunning}, def: tenant.PhaseAbsent},
	{name: "stopped mid-operation", ev: evRestore, f: facts{infra: true, recorded: tenant.PhaseRunning, interrupted: true}, def: tenant.PhaseFailed},

	{name: "changes", ev: evPlanned, f: facts{changes: true}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseAbsent: tenant.PhasePlanned, tenant.PhaseFailed: tenant.PhasePlanned}},
	{name: "no changes", ev: evPlanned, f: facts{}, def: same},

	{name: "changes", ev: evApplyStarted, f: facts{changes: true}, def: tenant.PhaseProvisioning},
	{name: "no changes", ev: evApplyStarted, f: facts{}, def: same},
	{ev: evConfiguring, def: tenant.PhaseProvisioning},
	{ev: evBootstrapping, def: tenant.PhaseBootstrapping},
	{ev: evApplyDone, def: tenant.PhaseRunning},
	{ev: evUpgradeStarted, def: tenant.PhaseUpgrading},
	{ev: evUpgradeDone, def: tenant.PhaseRunning},
	{ev: evDestroyStarted, def: tenant.PhaseDestroying},
	{ev: evDestroyDone, def: tenant.PhaseAbsent},

	{ev: evFailed, def: tenant.PhaseFailed, except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: same}},
	{name: "backup", ev: evFailed, f: facts{backup: true}, def: same},
	{ev: evCancelled, def: tenant.PhaseFailed, except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: same}},
	{name: "backup", ev: evCancelled, f: facts{backup: true}, def: same},
	{ev: evInterrupted, def: tenant.PhaseFailed, except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: same}},
	{name: "backup", ev: evInterrupted, f: facts{backup: true}, def: same},

	{ev: evFileRemoved, def: tenant.PhaseOrphaned},

	{name: "recorded running", ev: evFileBack, f: facts{infra: true, recorded: tenant.PhaseRunning}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: tenant.PhaseRunning}},
	{name: "recorded failed", ev: evFileBack, f: facts{infra: true, recorded: tenant.PhaseFailed}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: tenant.PhaseFailed}},
	{name: "recorded orphaned", ev: evFileBack, f: facts{infra: true, recorded: tenant.PhaseOrphaned}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: tenant.PhaseDegraded}},
	{name: "nothing recorded", ev: evFileBack, f: facts{infra: true}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseOrphaned: tenant.PhaseDegraded}},
	{name: "no infra", ev: evFileBack, f: facts{recorded: tenant.PhaseRunning}, def: same},

	{name: "one down", ev: evNodesPolled, f: facts{file: true, allPolled: true, bootstrapped: true, ready: 2, total: 3}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseRunning: tenant.PhaseDegraded}},
	{name: "all ready", ev: evNodesPolled, f: facts{file: true, allPolled: true, bootstrapped: true, ready: 3, total: 3}, def: same,
		except: map[tenant.Phase]tenant.Phase{tenant.PhaseDegraded: tenant.PhaseRunning}},
	{name: "all ready, not bootstrapped", ev: evNodesPolled, f: facts{file: true, allPolled: true, ready: 3, total: 3}, def: same},
	{name: "no nodes", ev: evNodesPolled, f: facts{file: true, allPolled: true, bootstrapped: true}, def: same},
	{name: "one down, busy", ev: evNodesPolled, f: facts{busy: true, file: true, allPolled: true, bootstrapped: true, ready: 2, total: 3}, def: same},
	{name: "all ready, busy", ev: evNodesPolled, f: facts{busy: true, file: true, allPolled: true, bootstrapped: true, ready: 3, total: 3}, def: same},
	{name: "one down, no file", ev: evNodesPolled, f: facts{allPolled: true, bootstrapped: true, ready: 2, total: 3}, def: same},
	{name: "all ready, not all polled", ev: evNodesPolled, f: facts{file: true, bootstrapped: true, ready: 3, total: 3}, def: same},
}

// TestUnitLifecycle checks every phase × every event (each under the facts
// of its rows) against the table.
func TestUnitLifecycle(t *testing.T) {
	covered := map[event]bool{}
	cells := 0
	for _, r := range lifecycleTable {
		covered[r.ev] = true
		for _, p := range tenant.Phases {
			want, ok := r.except[p]
			if !ok {
				want = r.def
			}
			if want == same {
				want = p
			}
			cells++
			if got := next(p, r.ev, r.f); got != want {
				t.Errorf("%s × %s (%s): got %s, want %s", p, r.ev, r.name, got, want)
			}
		}
		for p := range r.except {
			if !isPhase(p) {
				t.Errorf("rule %s (%s) names an unknown phase %q", r.ev, r.name, p)
			}
		}
	}
	for ev := event(0); ev < numEvents; ev++ {
		if !covered[ev] {
			t.Errorf("event %s has no row in the lifecycle table", ev)
		}
	}
	if len(eventNames) != int(numEvents) {
		t.Errorf("%d event names for %d events", len(eventNames), numEvents)
	}
	if want := len(tenant.Phases) * int(numEvents); cells < want {
		t.Errorf("%d cells checked, want at least %d", cells, want)
	}
}

// TestUnitLifecycleUnknownEvent: an event next does not know changes nothing.
func TestUnitLifecycleUnknownEvent(t *testing.T) {
	for _, p := range tenant.Phases {
		if got := next(p, numEvents, facts{changes: true, infra: true}); got != p {
			t.Errorf("%s × unknown event: got %s", p, got)
		}
	}
}

func isPhase(p tenant.Phase) bool {
	for _, q := range tenant.Phases {
		if p == q {
			return true
		}
	}
	return false
}
