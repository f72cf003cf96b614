package simnode

import (
	"context"
	"fmt"
)

// Cluster is a group of simulated nodes in a World of their own.
type Cluster struct {
	World *World
	Nodes []*Node
}

// StartCluster starts one node per address ("ip:port", port 0 for a free
// one) in a new World, each with opts (Addr and World are set per node).
func StartCluster(ctx context.Context, addrs []string, opts Options) (*Cluster, error) {
	c := &Cluster{World: NewWorld()}
	for _, a := range addrs {
		o := opts
		o.Addr, o.World = a, c.World
		n, err := Start(ctx, o)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("simnode cluster: %w", err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

// Addrs lists the nodes' "host:port" in order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// Calls sums the record of calls of all nodes.
func (c *Cluster) Calls() Counts {
	var s Counts
	for _, n := range c.Nodes {
		k := n.Calls()
		s.Apply += k.Apply
		s.ApplyRejected += k.ApplyRejected
		s.Bootstrap += k.Bootstrap
		s.Bootstrapped += k.Bootstrapped
		s.Kubeconfig += k.Kubeconfig
		s.Reboot += k.Reboot
		s.Reset += k.Reset
		s.ResetGraceful += k.ResetGraceful
		s.Version += k.Version
		s.StateReads += k.StateReads
		s.Dropped += k.Dropped
	}
	return s
}

// Close stops all nodes.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}
