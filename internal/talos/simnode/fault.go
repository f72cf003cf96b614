package simnode

import (
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// FailInstall makes the next count maintenance-mode applies fail the way a
// real install can (a disk that cannot be written, a machine that boots the
// ISO again): the node installs, reboots, and comes back in maintenance mode
// without a config.
func (n *Node) FailInstall(count int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failInstall = count
}

// failedInstallSteps: installing, rebooting, down, maintenance again.
func (n *Node) failedInstallSteps() []step {
	return []step{
		{do: func(n *Node) *server { n.setStageLocked(runtime.MachineStageInstalling, true); return nil }},
		{delay: n.opts.InstallDelay, do: func(n *Node) *server {
			n.setStageLocked(runtime.MachineStageRebooting, true)
			return n.goDownLocked()
		}},
		{delay: n.opts.DownDelay, do: func(n *Node) *server {
			if err := n.enterMaintenanceLocked(); err != nil {
				n.down = true
			}
			return nil
		}},
	}
}

// ResetFault says how a node's resets fail (FailReset).
type ResetFault int

const (
	// ResetWorks: resets complete.
	ResetWorks ResetFault = iota
	// ResetHangs: Reset is accepted and the node enters stage resetting,
	// but the reset never completes: the node stays there, answering (as
	// a real node whose wipe hangs does), until ClearFault lets it finish
	// as asked.
	ResetHangs
	// ResetNeverBack: Reset is accepted, the node enters stage resetting,
	// goes down after ResetDelay and never answers again: neither
	// maintenance mode nor powered off (PoweredOff stays false), until
	// ClearFault lets the reset finish as asked.
	ResetNeverBack
)

func (f ResetFault) String() string {
	switch f {
	case ResetWorks:
		return "works"
	case ResetHangs:
		return "hangs"
	case ResetNeverBack:
		return "never comes back"
	}
	return "ResetFault(" + strconv.Itoa(int(f)) + ")"
}

// FailReset sets how this node's resets fail from now on, until
// ClearFault.
func (n *Node) FailReset(f ResetFault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.resetFault = f
}

// ResetHung reports a reset that was accepted and has not completed
// (ResetHangs, ResetNeverBack), until ClearFault.
func (n *Node) ResetHung() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.resetResume != nil
}

// resetLocked runs a reset's steps (resetting, then rest) as the node's
// reset fault has it.
func (n *Node) resetLocked(rest ...step) {
	resetting := step{do: func(n *Node) *server { n.setStageLocked(runtime.MachineStageResetting, true); return nil }}
	switch n.resetFault {
	case ResetHangs:
		n.sequenceLocked(resetting)
	case ResetNeverBack:
		n.sequenceLocked(resetting, step{delay: n.opts.ResetDelay, do: func(n *Node) *server { return n.goDownLocked() }})
	default:
		n.sequenceLocked(append([]step{resetting}, rest...)...)
		return
	}
	n.resetResume = func() { n.sequenceLocked(rest...) }
}

// clearResetFaultLocked (ClearFault) makes resets work again and lets a
// hung one finish.
func (n *Node) clearResetFaultLocked() {
	n.resetFault = ResetWorks
	if r := n.resetResume; r != nil {
		n.resetResume = nil
		r()
	}
}

// PowerCut takes the machine's power away at once: no stage change, no
// answer any more (connections are dropped and counted), whatever it was
// doing stops there. It keeps its config: PowerOn boots it back into its
// cluster (or maintenance mode, if it had none).
func (n *Node) PowerCut() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.gen++ // stops any sequence on its way
	n.off = true
	n.resetResume = nil
	n.upg.resume, n.upg.installing = nil, false
	old := n.goDownLocked()
	n.mu.Unlock()
	old.stop()
}

// Die is a machine gone for good (dead hardware): its power is cut as by
// PowerCut, and PowerOn and ClearFault no longer bring it back. Only a
// test's Close ends it.
func (n *Node) Die() {
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
	n.PowerCut()
}

// Dead reports a machine that Die made gone for good.
func (n *Node) Dead() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dead
}
