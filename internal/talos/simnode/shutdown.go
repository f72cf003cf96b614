package simnode

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Shutdown powers the machine off as Talos does: stage shutting down, then
// the API goes away. Unlike a halting reset the machine keeps its config,
// so PowerOn boots it straight back into its cluster. Only an admin of the
// node's cluster may call it (maintenance mode refuses it).
func (s *machineServer) Shutdown(ctx context.Context, _ *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	if !s.secure {
		return nil, status.Error(codes.PermissionDenied, "not authorized")
	}
	if !peerRoles(ctx).Includes(role.Admin) {
		return nil, status.Error(codes.PermissionDenied, "not authorized")
	}
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.counts.Shutdown++
	n.sequenceLocked(
		step{do: func(n *Node) *server { n.setStageLocked(runtime.MachineStageShuttingDown, true); return nil }},
		step{delay: n.opts.ResetDelay, do: func(n *Node) *server {
			n.off = true
			return n.goDownLocked()
		}},
	)
	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{}}}, nil
}
