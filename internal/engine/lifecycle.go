package engine

import "github.com/rezuscloud/rezuscloud/internal/tenant"

// event is something that happens to a tenant and may move its phase.
// Every phase change in the engine goes through next, so the rules of the
// lifecycle live in one place (docs/design.md §4).
type event int

// Events, in the order a tenant usually meets them.
const (
	evRestore        event = iota // start-up: the record was read
	evPlanned                     // a plan was made (Plan pressed)
	evApplyStarted                // an apply is about to change infrastructure
	evConfiguring                 // Talos configs are being sent to the nodes
	evBootstrapping               // etcd bootstrap and kubeconfig
	evApplyDone                   // every node is running after an apply
	evUpgradeStarted              // a rollout of Talos or Kubernetes began
	evUpgradeDone                 // the rollout reached every node
	evDestroyStarted              // a destroy began
	evDestroyDone                 // the infrastructure is gone
	evFailed                      // an operation failed
	evCancelled                   // an operation was cancelled by the user
	evInterrupted                 // an operation was interrupted by a stop of rezuscloud
	evFileRemoved                 // the tenant file was removed
	evFileBack                    // a tenant file appeared where there was none
	evNodesPolled                 // the poller changed what the nodes report
	numEvents                     // the number of events (tests)
)

var eventNames = [...]string{"restore", "planned", "apply-started", "configuring", "bootstrapping", "apply-done",
	"upgrade-started", "upgrade-done", "destroy-started", "destroy-done", "failed", "cancelled", "interrupted",
	"file-removed", "file-back", "nodes-polled"}

func (ev event) String() string {
	if ev >= 0 && int(ev) < len(eventNames) {
		return eventNames[ev]
	}
	return "event?"
}

// facts are what next needs to know besides the phase and the event; each
// event reads only the fields its rule names.
type facts struct {
	infra        bool         // the record says infrastructure exists
	bootstrapped bool         // the record says etcd was bootstrapped
	recorded     tenant.Phase // the phase in the record
	interrupted  bool         // restore: the record names a running operation
	changes      bool         // planned/apply-started: the plan changes something
	backup       bool         // failed/cancelled/interrupted: the operation was a backup
	busy         bool         // nodes-polled: an operation is running
	file         bool         // nodes-polled: the tenant file exists
	allPolled    bool         // nodes-polled: every recorded node was polled once
	ready, total int          // nodes-polled: declared nodes ready and running, declared
}

// next is the tenant lifecycle: the phase after ev happens in phase p.
// It is pure; an event that does not apply leaves the phase unchanged.
func next(p tenant.Phase, ev event, f facts) tenant.Phase {
	switch ev {
	case evRestore:
		// the phase in memory starts absent; the record decides
		switch {
		case f.interrupted:
			return tenant.PhaseFailed
		case f.infra && f.recorded != "":
			return f.recorded
		}
		return tenant.PhaseAbsent
	case evPlanned:
		if f.changes && (p == tenant.PhaseAbsent || p == tenant.PhaseFailed) {
			return tenant.PhasePlanned
		}
	case evApplyStarted:
		if f.changes {
			return tenant.PhaseProvisioning
		}
	case evConfiguring:
		return tenant.PhaseProvisioning
	case evBootstrapping:
		return tenant.PhaseBootstrapping
	case evApplyDone, evUpgradeDone:
		return tenant.PhaseRunning
	case evUpgradeStarted:
		return tenant.PhaseUpgrading
	case evDestroyStarted:
		return tenant.PhaseDestroying
	case evDestroyDone:
		return tenant.PhaseAbsent
	case evFailed, evCancelled, evInterrupted:
		// an orphan stays orphaned; a failed backup leaves the cluster as it was
		if p != tenant.PhaseOrphaned && !f.backup {
			return tenant.PhaseFailed
		}
	case evFileRemoved:
		return tenant.PhaseOrphaned
	case evFileBack:
		if p == tenant.PhaseOrphaned && f.infra {
			if f.recorded == "" || f.recorded == tenant.PhaseOrphaned {
				return tenant.PhaseDegraded
			}
			return f.recorded
		}
	case evNodesPolled:
		if f.busy || !f.file || !f.allPolled {
			return p
		}
		switch {
		case p == tenant.PhaseRunning && f.ready < f.total:
			return tenant.PhaseDegraded
		case p == tenant.PhaseDegraded && f.ready == f.total && f.total > 0 && f.bootstrapped:
			return tenant.PhaseRunning
		}
	}
	return p
}

// advanceLocked moves the phase by ev; called with ts.mu held.
func (ts *tstate) advanceLocked(ev event, f facts) {
	ts.status.Phase = next(ts.status.Phase, ev, f)
}

// advance moves the phase by ev and publishes the status.
func (ts *tstate) advance(ev event, f facts) {
	ts.setStatus(func(s *tenant.Status) { s.Phase = next(s.Phase, ev, f) })
}
