package talos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// cloud is a simulated cloud cluster: instances booted from their
// user_data, control planes with a floating (public) address, workers
// with a private address only.
type cloud struct {
	tn      *tenant.Tenant
	cfgs    *talos.Configs
	world   *simnode.World
	cps     []*simnode.Node
	workers []*simnode.Node
}

// cpEndpoints are the control planes' public endpoints, in order.
func (c *cloud) cpEndpoints() []string {
	out := make([]string, len(c.cps))
	for i, n := range c.cps {
		out[i] = n.PublicAddr()
	}
	return out
}

// targets: control planes direct at their public address, workers routed
// through the control planes.
func (c *cloud) targets() map[string]talos.PollTarget {
	out := map[string]talos.PollTarget{}
	nodes := c.tn.Nodes()
	for i, n := range c.cps {
		out[nodes[i].Name] = talos.PollTarget{Target: talos.Direct(n.PublicAddr()), Talosconfig: c.cfgs.Talosconfig}
	}
	for i, n := range c.workers {
		out[nodes[len(c.cps)+i].Name] = talos.PollTarget{Target: talos.Route(c.cpEndpoints(), n.Addr()), Talosconfig: c.cfgs.Talosconfig}
	}
	return out
}

func startCloud(tb testing.TB, cps, workers int, delays simnode.Options) *cloud {
	tb.Helper()
	private := loopbackHosts(cps + workers)
	public := loopbackHosts(cps)
	tn := metalTenant("cloud", private, cps, workers)
	cfgs, err := talos.GenerateConfigs(tn, sharedBundle(tb), "")
	if err != nil {
		tb.Fatal(err)
	}
	c := &cloud{tn: tn, cfgs: cfgs, world: simnode.NewWorld()}
	for i, n := range tn.Nodes() {
		o := delays
		o.Addr, o.Config = private[i]+":0", cfgs.Nodes[n.Name]
		if i < cps {
			o.PublicAddr = public[i] + ":0"
		}
		nd, err := c.world.Start(context.Background(), o)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(nd.Close)
		if i < cps {
			c.cps = append(c.cps, nd)
		} else {
			c.workers = append(c.workers, nd)
		}
	}
	return c
}

func TestRouteTarget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target talos.Target
		routed bool
		str    string
	}{
		{"direct", talos.Direct("127.0.0.5:50000"), false, "127.0.0.5:50000"},
		{"routed ip", talos.Route([]string{"127.0.0.1:50000", "127.0.0.2:50000"}, "10.0.0.7"), true, "10.0.0.7 via 127.0.0.1:50000,127.0.0.2:50000"},
		{"routed with port", talos.Route([]string{"127.0.0.1:50000"}, "10.0.0.7:50000"), true, "10.0.0.7 via 127.0.0.1:50000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.target.Routed() != tc.routed || tc.target.String() != tc.str {
				t.Errorf("%+v: routed %v, %q", tc.target, tc.target.Routed(), tc.target.String())
			}
			if !tc.target.Equal(tc.target) || tc.target.Equal(talos.Direct("127.9.9.9:1")) {
				t.Error("Equal")
			}
		})
	}
	// Route copies the endpoints: the caller may reuse its slice.
	eps := []string{"127.0.0.1:50000"}
	r := talos.Route(eps, "10.0.0.7")
	eps[0] = "127.0.0.2:50000"
	if r.Endpoints[0] != "127.0.0.1:50000" {
		t.Error("Route kept the caller's slice")
	}
	// A routed target without control planes is an error that says so,
	// not an unreachable node.
	st, err := talos.Status(context.Background(), talos.Route(nil, "10.0.0.7"), []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "10.0.0.7") || st.Problem == "" {
		t.Errorf("routed without endpoints: %+v %v", st, err)
	}
}

// Every operation on a cloud worker goes through a control plane: the
// worker's private address never sees a connection.
func TestRoutedOperations(t *testing.T) {
	c := startCloud(t, 2, 1, fastDelays)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := c.cfgs.Talosconfig
	cps := c.cpEndpoints()
	wk := talos.Route(cps, c.workers[0].Addr())
	cp2 := talos.Route(cps[:1], c.cps[1].Addr()) // the second control plane, through the first

	for _, tg := range []talos.Target{talos.Direct(cps[0]), wk, cp2} {
		v, err := talos.WaitSecure(ctx, tg, tc)
		if err != nil {
			t.Fatal(err)
		}
		if v != simnode.DefaultTalosVersion {
			t.Errorf("%s: version %q", tg, v)
		}
	}
	// Bootstrap and kubeconfig (a server stream) through the routing: the
	// routed control plane is the one bootstrapped.
	if err := talos.Bootstrap(ctx, cp2, tc); err != nil {
		t.Fatal(err)
	}
	if got := c.cps[1].Calls(); got.Bootstrapped != 1 || got.Routed == 0 {
		t.Errorf("routed control plane: %+v", got)
	}
	kc, err := talos.Kubeconfig(ctx, cp2, tc)
	if err != nil || !strings.Contains(string(kc), "server: "+c.cfgs.Endpoint) {
		t.Fatalf("routed kubeconfig: %v\n%s", err, kc)
	}
	if c.cps[1].Calls().Kubeconfig != 1 || c.cps[0].Calls().Kubeconfig != 0 {
		t.Errorf("kubeconfig served by the wrong node: %+v / %+v", c.cps[0].Calls(), c.cps[1].Calls())
	}
	// The worker answers for itself (Unimplemented), not the control plane.
	bctx, bcancel := context.WithTimeout(ctx, time.Second)
	err = talos.Bootstrap(bctx, wk, tc)
	bcancel()
	if err == nil || !strings.Contains(err.Error(), "Unimplemented") {
		t.Errorf("bootstrap routed to a worker: %v", err)
	}

	if err := c.workers[0].WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	st, err := talos.Status(ctx, wk, tc)
	if err != nil || st.Stage != tenant.StageRunning || !st.Ready || st.TalosVersion == "" {
		t.Errorf("routed status: %+v %v", st, err)
	}
	if err := talos.ApplyConfig(ctx, wk, tc, c.cfgs.Nodes[c.tn.Nodes()[2].Name]); err != nil {
		t.Fatal(err)
	}
	if got := c.workers[0].Calls(); got.Apply != 1 || got.ApplyRejected != 0 {
		t.Errorf("routed apply: %+v", got)
	}

	// A routed watch sees the worker reboot.
	rec := &recorder{}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- talos.WatchStatus(wctx, wk, tc, func(st talos.NodeState) { rec.record("w", st) }) }()
	testenv.WaitFor(t, 5*time.Second, "watch sees running", func() bool { st, ok := rec.last("w"); return ok && st.Stage == tenant.StageRunning })
	if err := talos.Reboot(ctx, wk, tc); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "watch sees rebooting", func() bool { return slicesContains(rec.stages("w"), tenant.StageRebooting) })
	wcancel()
	<-done
	if err := c.workers[0].WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "routed status after reboot", func() bool {
		st, err := talos.Status(ctx, wk, tc)
		return err == nil && st.Stage == tenant.StageRunning
	})

	if err := talos.Reset(ctx, wk, tc, talos.ResetOptions{Graceful: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.workers[0].WaitStage(ctx, runtime.MachineStageMaintenance, false); err != nil {
		t.Fatal(err)
	}
	// Maintenance mode has no routing and the worker no address of its
	// own: it is out of reach, and reported so, not as an error.
	if st, err := talos.Status(ctx, wk, tc); err != nil || st.Stage != tenant.StageUnreachable {
		t.Errorf("reset worker: %+v %v", st, err)
	}

	w := c.workers[0].Calls()
	t.Logf("worker %+v", w)
	if w.DirectPrivate != 0 || w.DirectPublic != 0 {
		t.Errorf("worker: %d direct connections to its private address, %d to a public one; want none", w.DirectPrivate, w.DirectPublic)
	}
	if w.Routed == 0 || w.Reboot != 1 || w.Reset != 1 || w.ResetGraceful != 1 {
		t.Errorf("worker calls %+v", w)
	}
	if p := c.cps[1].Calls(); p.DirectPrivate != 0 || p.DirectPublic != 0 {
		t.Errorf("second control plane dialled directly: %+v", p)
	}
	if f := c.cps[0].Calls().Forwarded; f == 0 {
		t.Error("first control plane forwarded nothing")
	}
}

// A routed call passes to the next control plane when the first does not
// answer (refuses connections, or is gone), and the poller keeps using the
// one that answered.
func TestRoutedFallback(t *testing.T) {
	c := startCloud(t, 2, 1, simnode.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tc := c.cfgs.Talosconfig
	wk := talos.Route(c.cpEndpoints(), c.workers[0].Addr())
	if _, err := talos.WaitSecure(ctx, wk, tc); err != nil {
		t.Fatal(err)
	}
	if err := c.workers[0].WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	before := c.cps[1].Calls().Forwarded

	c.cps[0].SetUnreachable(true) // accepts and drops every connection
	st, err := talos.Status(ctx, wk, tc)
	if err != nil || st.Stage != tenant.StageRunning {
		t.Fatalf("status with the first control plane unreachable: %+v %v", st, err)
	}
	if got := c.cps[1].Calls().Forwarded; got <= before {
		t.Errorf("second control plane forwarded %d (before %d)", got, before)
	}
	if c.cps[0].Calls().Dropped == 0 {
		t.Error("the first control plane was not tried first")
	}

	// The poller: the first poll finds the second control plane, later
	// ones go there at once, over the same connection.
	p := talos.NewPoller(talos.PollerOptions{Timeout: 5 * time.Second})
	defer p.Close()
	p.SetTargets(map[string]talos.PollTarget{"w": {Target: wk, Talosconfig: tc}})
	p.PollOnce(ctx)
	if st, _ := p.State("w"); st.Stage != tenant.StageRunning {
		t.Fatalf("poller: %+v", st)
	}
	dropped, conns := c.cps[0].Calls().Dropped, c.cps[1].Calls().DirectPublic
	for range 5 {
		p.PollOnce(ctx)
	}
	if st, _ := p.State("w"); st.Stage != tenant.StageRunning {
		t.Errorf("poller: %+v", st)
	}
	if d := c.cps[0].Calls().Dropped - dropped; d != 0 {
		t.Errorf("the poller tried the unreachable control plane %d more times", d)
	}
	if n := c.cps[1].Calls().DirectPublic - conns; n != 0 {
		t.Errorf("%d new connections for 5 polls, want 0 (kept)", n)
	}

	// Gone for good (connection refused): still served by the second.
	c.cps[0].Close()
	if st, err := talos.Status(ctx, wk, tc); err != nil || st.Stage != tenant.StageRunning {
		t.Errorf("status with the first control plane gone: %+v %v", st, err)
	}
	// Both gone: unreachable, not an error.
	c.cps[1].Close()
	if st, err := talos.Status(ctx, wk, tc); err != nil || st.Stage != tenant.StageUnreachable {
		t.Errorf("status with no control plane: %+v %v", st, err)
	}
	if w := c.workers[0].Calls(); w.DirectPrivate != 0 {
		t.Errorf("worker dialled directly %d times", w.DirectPrivate)
	}
}

// The poller reads routed and direct nodes as they boot from their
// user_data, over one connection per endpoint, kept between polls and
// replaced when a node comes back from a reboot.
func TestPollerRouted(t *testing.T) {
	c := startCloud(t, 1, 3, fastDelays)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &recorder{}
	p := talos.NewPoller(talos.PollerOptions{Interval: 10 * time.Millisecond, Timeout: time.Second,
		MaxBackoff: 40 * time.Millisecond, OnChange: rec.record})
	p.SetTargets(c.targets())
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() { p.Run(pctx); close(pdone) }()
	nodes := c.tn.Nodes()
	if err := talos.Bootstrap(ctx, talos.Direct(c.cps[0].PublicAddr()), c.cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	allRunning := func() bool {
		for _, n := range nodes {
			if st, ok := rec.last(n.Name); !ok || st.Stage != tenant.StageRunning || !st.Ready {
				return false
			}
		}
		return true
	}
	testenv.WaitFor(t, 10*time.Second, "all running and ready", allRunning)
	for _, n := range nodes {
		if s := rec.stages(n.Name); slicesContains(s, tenant.StageMaintenance) {
			t.Errorf("%s booted from its user_data but was seen in maintenance: %v", n.Name, s)
		}
	}
	// Many polls later, the control plane has still seen only the poller's
	// connection (and Bootstrap's): one for all the routed workers.
	conns := c.cps[0].Calls().DirectPublic
	v0 := c.workers[0].Calls().Version
	testenv.WaitFor(t, 5*time.Second, "more polls", func() bool { return c.workers[0].Calls().Version >= v0+5 })
	if n := c.cps[0].Calls().DirectPublic - conns; n != 0 {
		t.Errorf("%d new connections while polling", n)
	}
	// A rebooted worker (its routed connection breaks) comes back.
	if err := talos.Reboot(ctx, talos.Route(c.cpEndpoints(), c.workers[1].Addr()), c.cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	if err := c.workers[1].WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	v1 := c.workers[1].Calls().Version
	testenv.WaitFor(t, 10*time.Second, "polls of the rebooted worker", func() bool { return c.workers[1].Calls().Version >= v1+3 })
	testenv.WaitFor(t, 10*time.Second, "all running again", allRunning)
	pcancel()
	<-pdone
	for _, w := range c.workers {
		if got := w.Calls(); got.DirectPrivate != 0 {
			t.Errorf("worker %s: %d direct connections", w.Addr(), got.DirectPrivate)
		}
	}
}
