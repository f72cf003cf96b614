package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The cost of the pool's questions and actions against a real API server
// (and scheduler, and kubesim kubelets), on loopback:
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/kube
func BenchmarkKube(b *testing.B) {
	cl := startCluster(b)
	ctx := context.Background()

	b.Run("Pending200", func(b *testing.B) {
		// 200 pods no node can take, beside 3 nodes running 20 pods each
		ns := cl.namespace(b, "bench-pending")
		for i := range 3 {
			cl.node(b, fmt.Sprintf("bench-p%d", i))
		}
		rs := cl.owner(b, ns, "ReplicaSet", "filler")
		for i := range 60 {
			cl.pod(b, ns, podSpec{name: fmt.Sprintf("filler-%d", i), node: fmt.Sprintf("bench-p%d", i%3), owner: &rs})
		}
		for i := range 200 {
			cl.pod(b, ns, podSpec{name: fmt.Sprintf("huge-%d", i), cpu: "64"})
		}
		var n int
		deadline := time.Now().Add(2 * time.Minute)
		for n < 200 {
			got, err := cl.c.Pending(ctx, time.Now(), 0)
			if err != nil {
				b.Fatal(err)
			}
			if n = len(got); time.Now().After(deadline) {
				b.Fatalf("only %d of 200 pods unschedulable", n)
			}
		}
		b.ResetTimer()
		for b.Loop() {
			got, err := cl.c.Pending(ctx, time.Now(), 0)
			if err != nil || len(got) != 200 {
				b.Fatal(len(got), err)
			}
		}
	})

	b.Run("Nodes", func(b *testing.B) {
		for b.Loop() {
			if _, err := cl.c.Nodes(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("Drain10", func(b *testing.B) {
		// drain a node running 10 pods (and a DaemonSet pod): cordon, 10
		// evictions, wait until the kubelet has removed them
		ns := cl.namespace(b, "bench-drain")
		cl.node(b, "bench-d")
		rs := cl.owner(b, ns, "ReplicaSet", "app")
		ds := cl.owner(b, ns, "DaemonSet", "agent")
		cl.pod(b, ns, podSpec{name: "agent", node: "bench-d", owner: &ds})
		round := 0
		for b.Loop() {
			b.StopTimer()
			if err := cl.c.Uncordon(ctx, "bench-d"); err != nil {
				b.Fatal(err)
			}
			var names []string
			for i := range 10 {
				names = append(names, fmt.Sprintf("app-%d-%d", round, i))
				cl.pod(b, ns, podSpec{name: names[i], node: "bench-d", owner: &rs})
			}
			cl.waitRunning(b, ns, names...)
			round++
			b.StartTimer()
			evicted, err := cl.c.Drain(ctx, "bench-d", time.Minute)
			if err != nil || len(evicted) != 10 {
				b.Fatal(evicted, err)
			}
		}
	})

	b.Run("CordonUncordon", func(b *testing.B) {
		for b.Loop() {
			if err := cl.c.Cordon(ctx, "bench-d"); err != nil {
				b.Fatal(err)
			}
			if err := cl.c.Uncordon(ctx, "bench-d"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
