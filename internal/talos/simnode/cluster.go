package simnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
)

// Cluster is a group of simulated nodes in a World of their own.
type Cluster struct {
	World *World
	Nodes []*Node
}

// StartCluster starts one node per address ("ip:port", port 0 for a free
// one) in a new World, each with opts (Addr and World are set per node;
// leave opts.PublicAddr and opts.Config empty: they are per node, see
// World.Start).
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

// Start starts one more node in the World (opts.World is set), e.g. a
// cloud instance booting from its user_data with a floating IP.
func (w *World) Start(ctx context.Context, opts Options) (*Node, error) {
	opts.World = w
	return Start(ctx, opts)
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
		s.Halt += k.Halt
		s.Version += k.Version
		s.StateReads += k.StateReads
		s.Dropped += k.Dropped
		s.DirectPrivate += k.DirectPrivate
		s.DirectPublic += k.DirectPublic
		s.Routed += k.Routed
		s.Forwarded += k.Forwarded
		s.Upgrade += k.Upgrade
		s.ImagePull += k.ImagePull
		s.EtcdSnapshot += k.EtcdSnapshot
	}
	return s
}

// Close stops all nodes.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}

// StartOnLoopback starts n nodes of one new World on <network>.<10+i>:port,
// where network is three octets of 127.0.0.0/8 ("127.0.0"). With network
// "" it tries random loopback /24s until one has every address free, so
// concurrent tests and demos do not collide. All nodes share port, as real
// Talos nodes share 50000.
func StartOnLoopback(ctx context.Context, n int, network string, port int, opts Options) (*Cluster, error) {
	tries := []string{network}
	if network == "" {
		tries = tries[:0]
		for range 20 {
			tries = append(tries, fmt.Sprintf("127.%d.%d", 1+rand.IntN(254), rand.IntN(256)))
		}
	}
	var last error
	for _, nw := range tries {
		if !strings.HasPrefix(nw, "127.") || strings.Count(nw, ".") != 2 {
			return nil, fmt.Errorf("simnode: network %q is not three octets of 127.0.0.0/8", nw)
		}
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = net.JoinHostPort(fmt.Sprintf("%s.%d", nw, 10+i), strconv.Itoa(port))
		}
		c, err := StartCluster(ctx, addrs, opts)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}
