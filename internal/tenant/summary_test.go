package tenant

import (
	"strings"
	"testing"
	"time"
)

func TestSummary(t *testing.T) {
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	op := func(name string, r Result, msg string) *OperationResult {
		return &OperationResult{Name: name, Result: r, At: at, Message: msg}
	}
	running := func(s string) *string { return &s }
	long := strings.Repeat("x", 300)
	tests := []struct {
		name string
		st   Status
		want string
	}{
		{"absent", Status{Phase: PhaseAbsent}, "not provisioned yet"},
		{"absent, planning", Status{Phase: PhaseAbsent, Operation: running("plan")}, "not provisioned yet; plan running"},
		{"absent after a failed apply", Status{Phase: PhaseAbsent, LastOperation: op("apply", ResultFailed, "quota exceeded")},
			"not provisioned: apply failed: quota exceeded"},
		{"absent after destroy", Status{Phase: PhaseAbsent, LastOperation: op("destroy", ResultSucceeded, "")},
			"destroyed, nothing is provisioned"},
		{"planned", Status{Phase: PhasePlanned, Pending: Changes{Add: 3}}, "planned: 3 to add; Apply provisions it"},
		{"planned, mixed", Status{Phase: PhasePlanned, Pending: Changes{Add: 3, Change: 1, Destroy: 2}},
			"planned: 3 to add, 1 to change and 2 to destroy; Apply provisions it"},
		{"planned, nothing", Status{Phase: PhasePlanned}, "planned, nothing to change"},
		{"provisioning", Status{Phase: PhaseProvisioning, Progress: 40, Operation: running("apply")}, "provisioning: 40%"},
		{"bootstrapping", Status{Phase: PhaseBootstrapping, Progress: 75}, "bootstrapping: 75%"},
		{"running", Status{Phase: PhaseRunning, NodesReady: 3, NodesTotal: 3, TalosVersion: "v1.13.0"},
			"3 of 3 nodes ready, running Talos v1.13.0"},
		{"running, one node", Status{Phase: PhaseRunning, NodesReady: 1, NodesTotal: 1}, "1 of 1 node ready"},
		{"running, scaling", Status{Phase: PhaseRunning, NodesReady: 3, NodesTotal: 4, TalosVersion: "v1.13.0", Operation: running("apply")},
			"3 of 4 nodes ready, running Talos v1.13.0; apply running"},
		{"degraded", Status{Phase: PhaseDegraded, NodesReady: 2, NodesTotal: 3, Problem: true}, "degraded: 2 of 3 nodes ready"},
		{"degraded after a failure", Status{Phase: PhaseDegraded, NodesReady: 2, NodesTotal: 3,
			LastOperation: op("reboot", ResultFailed, "node lab-workers-1 unreachable\ndetails")},
			"degraded: 2 of 3 nodes ready; reboot failed: node lab-workers-1 unreachable"},
		{"upgrading", Status{Phase: PhaseUpgrading, Progress: 40, TalosVersion: "v1.13.1"}, "upgrading to Talos v1.13.1: 40%"},
		{"upgrading, no version", Status{Phase: PhaseUpgrading, Progress: 5}, "upgrading: 5%"},
		{"destroying", Status{Phase: PhaseDestroying, Operation: running("destroy")}, "destroying"},
		{"destroying, progress", Status{Phase: PhaseDestroying, Progress: 50}, "destroying: 50%"},
		{"failed", Status{Phase: PhaseFailed, Problem: true, LastOperation: op("apply", ResultFailed, "quota exceeded.")},
			"apply failed: quota exceeded"},
		{"failed, no message", Status{Phase: PhaseFailed, LastOperation: op("apply", ResultFailed, "  ")}, "apply failed"},
		{"failed, nameless", Status{Phase: PhaseFailed, LastOperation: op("", ResultFailed, "boom")}, "operation failed: boom"},
		{"failed, no record", Status{Phase: PhaseFailed}, "failed"},
		{"failed, long message", Status{Phase: PhaseFailed, LastOperation: op("apply", ResultFailed, long)},
			"apply failed: " + strings.Repeat("x", summaryMessageMax-1) + "…"},
		{"failed, retrying", Status{Phase: PhaseFailed, LastOperation: op("apply", ResultFailed, "quota exceeded"), Operation: running("plan")},
			"apply failed: quota exceeded; plan running"},
		{"orphaned", Status{Phase: PhaseOrphaned, Problem: true}, "orphaned: its tenant file was removed"},
		{"empty phase", Status{}, "state unknown"},
		{"unknown phase", Status{Phase: "hibernating"}, "hibernating"},
	}
	covered := map[Phase]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summary(tc.st); got != tc.want {
				t.Errorf("Summary = %q, want %q", got, tc.want)
			}
		})
		covered[tc.st.Phase] = true
	}
	for _, p := range Phases {
		if !covered[p] {
			t.Errorf("phase %s has no summary case", p)
		}
	}
}
