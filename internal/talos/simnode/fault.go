package simnode

import "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

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
