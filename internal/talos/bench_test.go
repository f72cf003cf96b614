package talos_test

import (
	"context"
	"fmt"
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

// BenchmarkPollCycle100 is one status poll cycle over 100 simulated nodes
// (running, mTLS), with the default concurrency of 8.
func BenchmarkPollCycle100(b *testing.B) {
	const nodes = 100
	hosts := loopbackHosts(nodes)
	tn := metalTenant("big", hosts, 1, nodes-1)
	addrs := make([]string, nodes)
	for i, h := range hosts {
		addrs[i] = h + ":0"
	}
	cl, err := simnode.StartCluster(context.Background(), addrs, simnode.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	cfgs, err := talos.GenerateConfigs(tn, sharedBundle(b), "")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	targets := map[string]talos.Target{}
	for i, n := range tn.Nodes() {
		if err := talos.ApplyMaintenance(ctx, cl.Nodes[i].Addr(), cfgs.Nodes[n.Name]); err != nil {
			b.Fatal(err)
		}
		targets[n.Name] = talos.Target{Endpoint: cl.Nodes[i].Addr(), Talosconfig: cfgs.Talosconfig}
	}
	for _, nd := range cl.Nodes {
		if _, err := talos.WaitSecure(ctx, nd.Addr(), cfgs.Talosconfig); err != nil {
			b.Fatal(err)
		}
	}
	changes := 0
	p := talos.NewPoller(talos.PollerOptions{OnChange: func(string, talos.NodeState) { changes++ }})
	p.SetTargets(targets)
	p.PollOnce(ctx)
	if changes != nodes {
		b.Fatalf("first cycle reported %d nodes, want %d", changes, nodes)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p.PollOnce(ctx)
	}
	b.StopTimer()
	for name := range targets {
		if st, _ := p.State(name); st.Stage != "running" {
			b.Fatal(fmt.Sprintf("%s: %+v", name, st))
		}
	}
}
