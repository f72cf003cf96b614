package talos_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// BenchmarkNodeConfig is one node's machine config (generate, patch,
// encode, validate) from an existing secrets bundle.
func BenchmarkNodeConfig(b *testing.B) {
	bundle := sharedBundle(b)
	tn := metalTenant("lab", []string{"10.0.0.2", "10.0.0.3"}, 1, 1)
	for _, n := range tn.Nodes() {
		b.Run(string(n.Role), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := talos.NodeConfig(tn, bundle, "", n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNodeConfigWithSecrets adds generating the secrets bundle, what
// the first config of a new tenant costs.
func BenchmarkNodeConfigWithSecrets(b *testing.B) {
	tn := metalTenant("lab", []string{"10.0.0.2"}, 1, 0)
	n := tn.Nodes()[0]
	b.ReportAllocs()
	for b.Loop() {
		bundle, err := talos.NewSecrets(tn.TalosVersion)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := talos.NodeConfig(tn, bundle, "", n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPollCycle100 is one status poll cycle over 100 running
// simulated nodes (mTLS), with the default concurrency of 8: direct (every
// node dialled at its own address) and routed (one control plane at its
// public address, 99 workers through it). conns/op counts the new
// connections the nodes accepted per cycle: the poller keeps its
// connections, so it is 0.
func BenchmarkPollCycle100(b *testing.B) {
	const nodes = 100
	for _, routed := range []bool{false, true} {
		name := "direct"
		if routed {
			name = "routed"
		}
		b.Run(name, func(b *testing.B) {
			c := startCloud(b, 1, nodes-1, simnode.Options{})
			targets := c.targets()
			if !routed {
				all := append(append([]*simnode.Node(nil), c.cps...), c.workers...)
				for i, n := range c.tn.Nodes() {
					targets[n.Name] = talos.PollTarget{Target: talos.Direct(all[i].Addr()), Talosconfig: c.cfgs.Talosconfig}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, t := range targets {
				if _, err := talos.WaitSecure(ctx, t.Target, t.Talosconfig); err != nil {
					b.Fatal(err)
				}
			}
			var changes atomic.Int32
			p := talos.NewPoller(talos.PollerOptions{OnChange: func(string, talos.NodeState) { changes.Add(1) }})
			defer p.Close()
			p.SetTargets(targets)
			p.PollOnce(ctx)
			if got := changes.Load(); got != nodes {
				b.Fatalf("first cycle reported %d nodes, want %d", got, nodes)
			}
			conns := func() int {
				sum := 0
				for _, n := range append(append([]*simnode.Node(nil), c.cps...), c.workers...) {
					k := n.Calls()
					sum += k.DirectPrivate + k.DirectPublic
				}
				return sum
			}
			before := conns()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p.PollOnce(ctx)
			}
			b.StopTimer()
			b.ReportMetric(float64(conns()-before)/float64(b.N), "conns/op")
			for name := range targets {
				if st, _ := p.State(name); st.Stage != "running" {
					b.Fatal(fmt.Sprintf("%s: %+v", name, st))
				}
			}
		})
	}
}
