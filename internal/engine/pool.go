package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/kube"
	"github.com/rezuscloud/rezuscloud/internal/pool"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Worker pools (docs/design.md §11.2): every PoolInterval each pooled group
// of a running cluster is decided on by package pool (a pure function of
// the pods, the house's energy, the price and the time), and, in mode on,
// the decision is carried out as an operation of the tenant: add powers a
// worker on and waits until Kubernetes has it Ready; remove drains it
// (cordon, evictions that PodDisruptionBudgets may refuse) and shuts it
// down gracefully. Observe mode decides the same and does nothing. The
// pool's memory and energy meter are kept per group in the data folder.

const opPool = "pool"

// PoolInputs is what Home Assistant tells the pools (wsapi.PoolInputs).
type PoolInputs interface {
	Energy() pool.Energy
	Price() pool.Price
	Plug(entity string) pool.Reading
	SetPlugs(entities []string)
}

// Kube is a cluster's Kubernetes API as the pools use it (internal/kube).
type Kube interface {
	Pending(ctx context.Context, now time.Time, delay time.Duration) ([]kube.PendingPod, error)
	Nodes(ctx context.Context) ([]kube.Node, error)
	Uncordon(ctx context.Context, node string) error
	Drain(ctx context.Context, node string, timeout time.Duration) ([]kube.PodRef, error)
	WaitReady(ctx context.Context, node string, timeout time.Duration) error
}

// PoolPublisher is a Publisher that also fires the pools' decision events
// (the MQTT bridge).
type PoolPublisher interface {
	PublishPoolDecision(tenantName, group string, st tenant.PoolStatus)
}

// poolOf is one pooled group's memory and its last status.
type poolOf struct {
	state  pool.State
	status tenant.PoolStatus
	loaded bool
	// acting: a decision is queued or carried out; the pool decides again
	// once it is done (its memory is the operation's to write meanwhile)
	acting bool
}

func (e *Engine) poolPath(name, group string) string {
	return filepath.Join(e.tenantDir(name), "pool-"+group+".json")
}

// loadPool reads a group's pool state once (a missing or damaged file
// starts afresh, which the guarantees tolerate).
func (ts *tenantState) loadPool(group string) *poolOf {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.pools == nil {
		ts.pools = map[string]*poolOf{}
	}
	p := ts.pools[group]
	if p == nil {
		p = &poolOf{}
		ts.pools[group] = p
	}
	if !p.loaded {
		p.loaded = true
		if data, err := safefile.Read(ts.e.poolPath(ts.name, group), 1<<20); err == nil {
			_ = json.Unmarshal(data, &p.state)
		}
	}
	return p
}

// savePool writes a group's pool state (0600).
func (ts *tenantState) savePool(group string, st pool.State) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return atomicfile.Write(ts.e.poolPath(ts.name, group), data, 0o600)
}

// poolLoop decides for every pooled group every PoolInterval.
func (e *Engine) poolLoop(ctx context.Context) {
	everyTick(ctx, e.opts.PoolInterval, func() {
		var plugs []string
		for _, ts := range e.states() {
			t, rec := ts.snapshot()
			if t == nil || ts.orphaned() || !rec.Bootstrapped {
				continue
			}
			for _, g := range t.NodeGroups {
				if g.Pool == nil {
					continue
				}
				for _, m := range g.Machines {
					if m.PowerSensor != "" {
						plugs = append(plugs, m.PowerSensor)
					}
				}
				if err := ts.poolStep(ctx, t, g.Name); err != nil && ctx.Err() == nil {
					e.log.Warn("worker pool", zap.String("tenant", ts.name), zap.String("group", g.Name), zap.Error(err))
				}
			}
		}
		if e.opts.PoolInputs != nil {
			slices.Sort(plugs)
			e.opts.PoolInputs.SetPlugs(slices.Compact(plugs))
		}
	})
}

// poolStep makes one decision for a pooled group and, in mode on, queues
// the action.
func (ts *tenantState) poolStep(ctx context.Context, t *tenant.Tenant, group string) error {
	e := ts.e
	cfg, ok := t.PoolConfig(group)
	if !ok || cfg.Mode == tenant.PoolOff {
		return nil
	}
	now := e.now()
	in := pool.Inputs{Now: now.Local(), Config: cfg}
	if e.opts.PoolInputs != nil {
		in.Energy, in.Price = e.opts.PoolInputs.Energy(), e.opts.PoolInputs.Price()
	}
	kc, kerr := ts.kube()
	var knodes map[string]kube.Node
	if kerr == nil {
		cctx, cancel := context.WithTimeout(ctx, kube.DefaultTimeout)
		pending, err := kc.Pending(cctx, now, cfg.PendingDelay)
		var nodes []kube.Node
		if err == nil {
			nodes, err = kc.Nodes(cctx)
		}
		cancel()
		kerr = err
		if err == nil {
			in.Pods.Pending = len(pending)
			if len(pending) > 0 {
				in.Pods.OldestPending = pending[0].For
			}
			knodes = map[string]kube.Node{}
			for _, n := range nodes {
				knodes[n.Name] = n
			}
		}
	}
	if kerr != nil {
		in.Pods.Err = kerr.Error()
	}
	v := ts.view()
	for _, n := range t.Nodes() {
		if n.Group != group {
			continue
		}
		ns := v.Nodes[n.Name]
		w := pool.Worker{Name: n.Name, ControlPlane: n.Role == tenant.RoleControlPlane, Power: pool.PowerState(ns.Power)}
		if o, ok, _ := ts.observed(n.Name); ok {
			w.Since = o.since
		}
		w.CyclesLastHour = ts.powerOnsSince(n.Name, now.Add(-time.Hour))
		if kn, ok := knodes[n.Name]; ok {
			w.Ready, w.Empty = kn.Ready && !kn.Unschedulable, kn.Empty()
			w.Drainable = w.Empty || (kn.Ready && kn.Drainable() && kn.Moving.Fits(freeBesides(knodes, n.Name)))
		} else if ns.Power == "off" {
			w.Empty, w.Drainable = true, true
		}
		if n.Machine != nil && n.Machine.PowerSensor != "" && e.opts.PoolInputs != nil {
			w.Plug = e.opts.PoolInputs.Plug(n.Machine.PowerSensor)
		}
		in.Workers = append(in.Workers, w)
	}
	p := ts.loadPool(group)
	busy := ts.busy()
	ts.mu.Lock()
	if p.acting {
		ts.mu.Unlock()
		return nil
	}
	st := p.state
	d, next, changed := st.Step(in)
	acts := d.Acts() && cfg.Mode == tenant.PoolOn && !busy
	status := pool.Status(cfg, d, next.Meter)
	p.state, p.status, p.acting = next, status, acts
	ts.mu.Unlock()
	if err := ts.savePool(group, next); err != nil {
		return err
	}
	ts.changed()
	if changed {
		if pp, ok := e.opts.Publisher.(PoolPublisher); ok {
			pp.PublishPoolDecision(ts.name, group, status)
		}
	}
	if !acts {
		return nil
	}
	if err := e.enqueue(ts.name, ts.poolOp(t, group, d, kc)); err != nil {
		ts.mu.Lock()
		p.acting = false
		ts.mu.Unlock()
		return err
	}
	return nil
}

// freeBesides is what the ready, schedulable workers other than node
// have free: where a drain of node would move its pods.
func freeBesides(nodes map[string]kube.Node, node string) kube.Resources {
	var free kube.Resources
	for name, n := range nodes {
		if name != node && n.Ready && !n.Unschedulable && !n.ControlPlane {
			free = free.Add(n.Free())
		}
	}
	return free
}

// kube is the tenant's cluster API, through its kubeconfig (one client
// while the kubeconfig stays the same: its connections are kept).
func (ts *tenantState) kube() (Kube, error) {
	kc, err := ts.e.Secret(ts.name, "kubeconfig")
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.kubeClient != nil && bytes.Equal(ts.kubeFor, kc) {
		return ts.kubeClient, nil
	}
	c, err := ts.e.opts.Kube(kc)
	if err != nil {
		return nil, err
	}
	ts.kubeClient, ts.kubeFor = c, kc
	return c, nil
}

// poolOp is the operation that carries out a pool's decision.
func (ts *tenantState) poolOp(t *tenant.Tenant, group string, d pool.Decision, kc Kube) operation {
	e := ts.e
	activity := tenant.ActivityPowering
	if d.Action == pool.Remove {
		activity = tenant.ActivityDraining
	}
	dropped := func() {
		p := ts.loadPool(group)
		ts.mu.Lock()
		p.acting = false
		ts.mu.Unlock()
	}
	return operation{name: opPool, activity: activity, dropped: dropped, do: func(ctx context.Context, r *run) (string, error) {
		msg, err := ts.poolAct(ctx, r, t, group, d, kc)
		var blocked *kube.BlockedError
		if errors.As(err, &blocked) {
			// a budget or an unowned pod keeps the node: the pool says so
			// and passes over it (the node is uncordoned, in service)
			msg, err = fmt.Sprintf("pool %s: %s stays on: %v", group, d.Node, blocked), nil
		}
		p := ts.loadPool(group)
		ts.mu.Lock()
		p.acting = false
		st := p.state
		switch {
		case blocked != nil:
			st.Memory = st.Memory.DrainRefused(d.Node, e.now())
			p.status.Decision, p.status.Node, p.status.Reason = string(pool.Blocked), d.Node, blocked.Error()
		case err == nil:
			st.Memory = st.Memory.Acted(d)
		}
		p.state = st
		status := p.status
		ts.mu.Unlock()
		if serr := ts.savePool(group, st); serr != nil {
			e.log.Warn("saving the pool's state", zap.String("tenant", ts.name), zap.Error(serr))
		}
		if blocked != nil {
			if pp, ok := e.opts.Publisher.(PoolPublisher); ok {
				pp.PublishPoolDecision(ts.name, group, status)
			}
		}
		return msg, err
	}}
}

// poolAct carries out one add or remove.
func (ts *tenantState) poolAct(ctx context.Context, r *run, t *tenant.Tenant, group string, d pool.Decision, kc Kube) (string, error) {
	e := ts.e
	node := d.Node
	if kc == nil {
		return "", errors.New("the cluster's Kubernetes API is unknown (no kubeconfig)")
	}
	if t.Provider != tenant.ProviderMetal {
		return ts.poolScaleCloud(ctx, r, group, d)
	}
	switch d.Action {
	case pool.Add:
		r.setStep("power on " + node)
		if _, err := ts.powerOn(ctx, r, node); err != nil {
			return "", err
		}
		r.setStep("wait for " + node + " in Kubernetes")
		if err := kc.WaitReady(ctx, node, e.opts.NodeTimeout); err != nil {
			return "", fmt.Errorf("node %s is on, but Kubernetes does not have it Ready: %w", node, err)
		}
		// the pool's own drain cordoned it
		if err := kc.Uncordon(ctx, node); err != nil {
			return "", fmt.Errorf("node %s is Ready, but could not be uncordoned: %w", node, err)
		}
		return fmt.Sprintf("pool %s: %s is on and Ready (%s)", group, node, d.Reason), nil
	case pool.Remove:
		r.setStep("drain " + node)
		r.intend(node, "", false)
		evicted, err := kc.Drain(ctx, node, e.opts.NodeTimeout)
		if err != nil {
			return "", fmt.Errorf("pool %s: %s stays on: %w", group, node, err)
		}
		r.setStep("shut down " + node)
		if _, err := ts.powerOff(ctx, r, node); err != nil {
			// it could not be shut down: back into service
			if uerr := kc.Uncordon(ctx, node); uerr != nil {
				e.log.Warn("uncordoning a node the pool could not shut down", zap.String("node", node), zap.Error(uerr))
			}
			return "", err
		}
		return fmt.Sprintf("pool %s: %s drained (%d pods moved) and shut down (%s)", group, node, len(evicted), d.Reason), nil
	}
	return "", fmt.Errorf("pool %s: nothing to do for %s", group, d.Action)
}

// poolScaleCloud changes a cloud group's count by one through the file and
// the normal apply (a removal drains the highest node first).
func (ts *tenantState) poolScaleCloud(ctx context.Context, r *run, group string, d pool.Decision) (string, error) {
	e := ts.e
	t := ts.shownSpec()
	g := t.Group(group)
	if g == nil {
		return "", fmt.Errorf("tenant %s has no group %q", ts.name, group)
	}
	count := g.Count + 1
	if d.Action == pool.Remove {
		count = g.Count - 1
		if kc, err := ts.kube(); err == nil {
			if _, err := kc.Drain(ctx, d.Node, e.opts.NodeTimeout); err != nil {
				return "", fmt.Errorf("pool %s: %s stays: %w", group, d.Node, err)
			}
		}
	}
	nt, err := e.opts.Store.SetCount(ts.name, group, count)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	ts.setSpec(nt)
	e.mu.Unlock()
	msg, err := ts.planOrApply(ctx, r, true)
	if err != nil {
		return "", err
	}
	return "pool " + group + ": count " + strconv.Itoa(count) + "; " + msg, nil
}

// powerOnsSince counts a node's power-ons (notePowerOnLocked) since t.
func (ts *tenantState) powerOnsSince(node string, t time.Time) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for _, at := range ts.powerOns[node] {
		if at.After(t) {
			n++
		}
	}
	return n
}

// Pool changes a pooled group's mode, min or max in the tenant file (in
// place, comments kept); the next decision uses them.
func (e *Engine) Pool(ctx context.Context, name, group string, mode *string, lo, hi *int) error {
	return e.editSpec(name, func() (*tenant.Tenant, error) { return e.opts.Store.SetPool(name, group, mode, lo, hi) })
}

// notePowerOnLocked records a power-on of a node (rezuscloud switched it
// on: the pool, or a Power on) and forgets those older than an hour.
// Called with ts.mu held. A node that was only out of reach for a while
// (a missed poll on a busy box, a network blip) is not a power-on: counting
// those held a pool's node off for an hour after it merely went quiet.
func (ts *tenantState) notePowerOnLocked(node string, at time.Time) {
	if ts.powerOns == nil {
		ts.powerOns = map[string][]time.Time{}
	}
	kept := ts.powerOns[node][:0]
	for _, t := range ts.powerOns[node] {
		if t.After(at.Add(-time.Hour)) {
			kept = append(kept, t)
		}
	}
	ts.powerOns[node] = append(kept, at)
}
