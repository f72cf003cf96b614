package simnode

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EtcdRemoveMemberByID removes a member from the cluster's etcd, as talosctl
// etcd remove-member does: a member of the cluster that is not this node.
// The simulated etcd lists the control planes that run, so a removed
// member is one that is gone; the removal is counted (Counts.EtcdRemoved).
func (s *machineServer) EtcdRemoveMemberByID(_ context.Context, req *machineapi.EtcdRemoveMemberByIDRequest) (*machineapi.EtcdRemoveMemberByIDResponse, error) {
	n := s.n
	n.mu.Lock()
	if err := n.checkEtcdLocked("etcd remove member"); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	c := n.cluster
	self := n.ip.String()
	n.mu.Unlock()
	for _, m := range n.world.membersOf(c) {
		m.mu.Lock()
		ip, host := m.ip.String(), m.hostnameLocked()
		m.mu.Unlock()
		sum := sha256.Sum256([]byte(ip))
		if binary.BigEndian.Uint64(sum[:8]) != req.GetMemberId() {
			continue
		}
		if ip == self {
			return nil, status.Error(codes.FailedPrecondition, "etcd: a member cannot remove itself")
		}
		n.mu.Lock()
		n.counts.EtcdRemoved = append(n.counts.EtcdRemoved, host)
		n.mu.Unlock()
		return &machineapi.EtcdRemoveMemberByIDResponse{}, nil
	}
	return nil, status.Error(codes.NotFound, fmt.Sprintf("etcd: member %x not found", req.GetMemberId()))
}
