package tenant

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// summaryMessageMax caps the error text a summary repeats: a voice reply
// reads the gist, the whole message is in last_operation and the log.
const summaryMessageMax = 120

// Summary is one short sentence about a tenant's status, for a voice reply
// to read out and a dashboard to show ("3 of 3 nodes ready, running Talos
// v1.13.0", "apply failed: quota exceeded", "provisioning: 40%"). It has a
// sentence for every phase and depends on st alone. It repeats only what
// the state document already carries (never a secret).
func Summary(st Status) string {
	op := ""
	if st.Operation != nil {
		op = *st.Operation
	}
	var s string
	switch st.Phase {
	case PhaseAbsent:
		switch {
		case failed(st.LastOperation):
			s = "not provisioned: " + failure(st.LastOperation)
		case st.LastOperation != nil && st.LastOperation.Name == "destroy" && st.LastOperation.Result == ResultSucceeded:
			s = "destroyed, nothing is provisioned"
		default:
			s = "not provisioned yet"
		}
	case PhasePlanned:
		s = "planned: " + changes(st.Pending) + "; Apply provisions it"
		if !anyChange(st.Pending) {
			s = "planned, nothing to change"
		}
	case PhaseProvisioning, PhaseBootstrapping:
		s = fmt.Sprintf("%s: %d%%", st.Phase, st.Progress)
		op = "" // the phase says what runs
	case PhaseRunning:
		s = nodesReady(st)
		if st.TalosVersion != "" {
			s += ", running Talos " + st.TalosVersion
		}
	case PhaseDegraded:
		s = "degraded: " + nodesReady(st)
		if failed(st.LastOperation) {
			s += "; " + failure(st.LastOperation)
		}
	case PhaseUpgrading:
		s = "upgrading"
		if st.TalosVersion != "" {
			s += " to Talos " + st.TalosVersion
		}
		s += fmt.Sprintf(": %d%%", st.Progress)
		op = ""
	case PhaseDestroying:
		s = "destroying"
		if st.Progress > 0 && st.Progress < 100 {
			s += fmt.Sprintf(": %d%%", st.Progress)
		}
		op = ""
	case PhaseFailed:
		s = "failed"
		if failed(st.LastOperation) {
			s = failure(st.LastOperation)
		}
	case PhaseOrphaned:
		s = "orphaned: its tenant file was removed"
	case "":
		s = "state unknown"
	default:
		s = string(st.Phase)
	}
	if op != "" {
		s += "; " + op + " running"
	}
	return s
}

// anyChange reports whether a plan changes anything.
func anyChange(c Changes) bool { return c.Add+c.Change+c.Destroy > 0 }

func failed(lo *OperationResult) bool { return lo != nil && lo.Result == ResultFailed }

// failure is "<operation> failed: <first line of the message>".
func failure(lo *OperationResult) string {
	name := lo.Name
	if name == "" {
		name = "operation"
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(lo.Message), "\n")
	msg = strings.TrimRight(strings.TrimSpace(msg), ".")
	if msg == "" {
		return name + " failed"
	}
	if utf8.RuneCountInString(msg) > summaryMessageMax {
		msg = string([]rune(msg)[:summaryMessageMax-1]) + "…"
	}
	return name + " failed: " + msg
}

func nodesReady(st Status) string {
	noun := "nodes"
	if st.NodesTotal == 1 {
		noun = "node"
	}
	return fmt.Sprintf("%d of %d %s ready", st.NodesReady, st.NodesTotal, noun)
}

// changes is "3 to add, 1 to change and 2 to destroy", naming only what is
// not zero.
func changes(c Changes) string {
	var parts []string
	for _, p := range []struct {
		n    int
		verb string
	}{{c.Add, "add"}, {c.Change, "change"}, {c.Destroy, "destroy"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d to %s", p.n, p.verb))
		}
	}
	switch len(parts) {
	case 0:
		return "nothing to change"
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
