package talos_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// The poller bounds concurrency, cuts slow polls at the per-node timeout
// (the node shows as unreachable), and stays responsive while OnChange is
// slow.
func TestPollerBounds(t *testing.T) {
	var inFlight, maxInFlight, polls atomic.Int32
	release := make(chan struct{})
	status := func(ctx context.Context, tg talos.Target, _ []byte) (talos.NodeState, error) {
		ep := tg.Endpoints[0]
		polls.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		if ep == "hang" {
			<-ctx.Done() // a black-holed node: only the timeout ends this
			return talos.NodeState{}, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond) // the poll's own latency (lets polls overlap), not synchronisation
		return talos.NodeState{Stage: tenant.StageRunning, Ready: true}, nil
	}
	var mu sync.Mutex
	got := map[string]talos.NodeState{}
	var slow atomic.Bool
	p := talos.NewPoller(talos.PollerOptions{
		Interval: 50 * time.Millisecond, Timeout: 100 * time.Millisecond, Concurrency: 3, MaxBackoff: time.Second,
		Status: status,
		OnChange: func(name string, st talos.NodeState) {
			if slow.Load() {
				<-release
			}
			mu.Lock()
			got[name] = st
			mu.Unlock()
		},
	})
	targets := map[string]talos.PollTarget{"hung": {Target: talos.Direct("hang")}}
	for i := range 20 {
		targets[fmt.Sprint("n", i)] = talos.PollTarget{Target: talos.Direct("ok")}
	}
	p.SetTargets(targets)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()

	testenv.WaitFor(t, 5*time.Second, "all reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 21
	})
	if m := maxInFlight.Load(); m > 3 {
		t.Errorf("%d polls in flight, limit 3", m)
	}
	mu.Lock()
	if st := got["hung"]; st.Stage != tenant.StageUnreachable {
		t.Errorf("hung node: %+v, want unreachable", st)
	}
	mu.Unlock()

	// A consumer that blocks does not block SetTargets, Trigger or State.
	slow.Store(true)
	p.SetTargets(map[string]talos.PollTarget{"new": {Target: talos.Direct("ok")}})
	p.Trigger("new")
	if _, ok := p.State("new"); ok {
		t.Error("state of a node never polled")
	}
	close(release)
	testenv.WaitFor(t, 5*time.Second, "new node reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := got["new"]
		return ok
	})
	if st, ok := p.State("new"); !ok || st.Stage != tenant.StageRunning {
		t.Errorf("State(new) = %+v %v", st, ok)
	}
	if _, ok := p.State("n1"); ok {
		t.Error("removed node still known")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
