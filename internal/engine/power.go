package engine

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/power"
	"github.com/rezuscloud/rezuscloud/internal/redfish"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// PowerOptions are what the power controllers of metal machines are made
// with (docs/design.md §10.5); Wake-on-LAN uses Options.Wake.
type PowerOptions struct {
	// HA is Home Assistant for entity power (power.FromWS over the
	// WebSocket client); nil when no WebSocket API is configured.
	HA power.HA
	// Redfish holds the BMC credentials (Insecure comes per machine).
	Redfish redfish.Options
	// IPMI holds the credentials of power = "ipmi://…" BMCs.
	IPMI power.IPMICredentials
	// GracePeriod and PollInterval of Redfish Off (power.Deps).
	GracePeriod, PollInterval time.Duration
	// ShutdownTimeout bounds the wait for a node to stop answering after a
	// shutdown, and to answer after power on (default NodeTimeout).
	ShutdownTimeout time.Duration
}

// Power states a Power command takes.
const (
	PowerOn  = "on"
	PowerOff = "off"
)

// controller is the power controller of a metal machine.
func (e *Engine) controller(m *tenant.Machine) (power.Controller, power.Spec, error) {
	spec, err := power.Parse(m.Power, m.MAC)
	if err != nil {
		return nil, spec, err
	}
	rf := e.opts.Power.Redfish
	rf.Insecure = m.RedfishInsecure
	c, err := power.New(spec, power.Deps{MAC: m.MAC, SendWOL: e.opts.Wake, HA: e.opts.Power.HA, Redfish: rf, IPMI: e.opts.Power.IPMI,
		GracePeriod: e.opts.Power.GracePeriod, PollInterval: e.opts.Power.PollInterval})
	return c, spec, err
}

// canPowerOff reports whether a removed machine is halted (and switched
// off) rather than rebooted into maintenance: whenever something can power
// it on again.
func (e *Engine) canPowerOff(m *tenant.Machine) bool {
	if m == nil {
		return false
	}
	c, spec, err := e.controller(m)
	if err != nil || c == nil || spec.Kind == power.KindNone {
		return false
	}
	return spec.Kind != power.KindWOL || e.opts.Wake != nil
}

// Power switches a provisioned metal node on or off. Off is a Talos
// shutdown, a wait until the node stops answering, then the machine's
// controller (switch off, Redfish GracefulShutdown); on is the controller,
// then a wait until the node answers. A controller that cannot be used (no
// such entity, no WebSocket link, a BMC that refuses the credentials) is
// refused before anything is shut down.
func (e *Engine) Power(ctx context.Context, name, node, state string) error {
	if state != PowerOn && state != PowerOff {
		return fmt.Errorf("power %q: want \"on\" or \"off\"", state)
	}
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if err := ts.provisioned(node); err != nil {
		return err
	}
	t, _ := ts.snapshot()
	m := machineOf(t, node)
	if m == nil {
		return fmt.Errorf("tenant %s: node %s is not a metal machine: only metal machines are powered", name, node)
	}
	c, spec, err := e.controller(m)
	if err != nil {
		return fmt.Errorf("node %s (%s): %w; nothing was changed", node, m.Address, err)
	}
	if state == PowerOn && spec.Kind == power.KindNone {
		return fmt.Errorf("node %s (%s): %w", node, m.Address, power.ErrManual)
	}
	if _, err := c.State(ctx); err != nil { // the entity exists, the BMC lets us in
		return fmt.Errorf("node %s (%s): %w; nothing was changed", node, m.Address, err)
	}
	if state == PowerOff {
		return e.enqueue(name, operation{name: opPowerOff, activity: tenant.ActivityPowering,
			do: func(ctx context.Context, r *run) (string, error) { return ts.powerOff(ctx, r, node) }})
	}
	return e.enqueue(name, operation{name: opPowerOn, activity: tenant.ActivityPowering,
		do: func(ctx context.Context, r *run) (string, error) { return ts.powerOn(ctx, r, node) }})
}

// powerOff runs a Power off: Talos shutdown, wait, controller Off. A node
// that does not answer is off as far as Talos is concerned: it is switched
// off all the same.
func (ts *tenantState) powerOff(ctx context.Context, r *run, node string) (string, error) {
	e := ts.e
	target, m, c, tc, err := ts.powerTarget(node)
	if err != nil {
		return "", err
	}
	r.intend(node, tenant.StageShuttingDown, false)
	silent := false
	if err := ts.e.opts.Nodes.Shutdown(ctx, target, tc); err != nil {
		st, serr := ts.read(ctx, node, target, tc)
		if serr != nil || st.Stage != tenant.StageUnreachable {
			return "", fmt.Errorf("node %s: %w", node, err)
		}
		silent = true
		e.log.Info("node does not answer its shutdown: it is off as far as Talos is concerned; switching it off",
			zap.String("tenant", ts.name), zap.String("node", node))
	}
	if !silent {
		wctx, cancel := context.WithTimeout(ctx, e.shutdownTimeout())
		err = ts.e.opts.Nodes.WaitGone(wctx, target, tc, 250*time.Millisecond)
		cancel()
		if err != nil {
			return "", err
		}
	}
	if err := c.Off(ctx); err != nil {
		return "", fmt.Errorf("node %s (%s) is shut down, but powering it off failed: %w", node, m.Address, err)
	}
	if err := ts.setOff(node, true); err != nil {
		return "", err
	}
	// WaitGone saw it stop answering (a read now could meet a connection
	// the machine has not closed yet): the poller takes it as silent
	ts.e.poller.Report(pollKey(ts.name, node), talos.Unreachable)
	if silent {
		return fmt.Sprintf("node %s did not answer, so it was powered off without a Talos shutdown", node), nil
	}
	return fmt.Sprintf("node %s is shut down and powered off", node), nil
}

// powerOn runs a Power on: controller On, wait until the node answers.
func (ts *tenantState) powerOn(ctx context.Context, r *run, node string) (string, error) {
	e := ts.e
	target, m, c, tc, err := ts.powerTarget(node)
	if err != nil {
		return "", err
	}
	r.expect(node)
	if err := ts.setOff(node, false); err != nil {
		return "", err
	}
	if err := c.On(ctx); err != nil {
		return "", fmt.Errorf("node %s (%s): %w", node, m.Address, err)
	}
	ts.mu.Lock()
	ts.notePowerOnLocked(node, e.now())
	ts.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, e.shutdownTimeout())
	err = ts.e.opts.Nodes.WaitAnswering(wctx, target, tc, 250*time.Millisecond)
	cancel()
	if err != nil {
		return "", err
	}
	ts.read(ctx, node, target, tc) //nolint:errcheck // the poller sees it answer now
	return fmt.Sprintf("node %s is powered on and answers", node), nil
}

// setOff records that a node is powered off on purpose, or no longer.
func (ts *tenantState) setOff(node string, off bool) error {
	if nr, ok := ts.recs.get().Nodes[node]; !ok || nr.Off == off {
		return nil
	}
	return ts.recs.save(func(rec *record) {
		if nr, ok := rec.Nodes[node]; ok {
			nr.Off = off
			rec.Nodes[node] = nr
		}
	})
}

func (ts *tenantState) powerTarget(node string) (talos.Target, *tenant.Machine, power.Controller, []byte, error) {
	target, ok := ts.target(node)
	if !ok {
		return talos.Target{}, nil, nil, nil, fmt.Errorf("node %s is not provisioned", node)
	}
	t, _ := ts.snapshot()
	m := machineOf(t, node)
	if m == nil {
		return talos.Target{}, nil, nil, nil, fmt.Errorf("node %s is not a metal machine", node)
	}
	c, _, err := ts.e.controller(m)
	if err != nil {
		return talos.Target{}, nil, nil, nil, fmt.Errorf("node %s: %w", node, err)
	}
	tc, err := ts.talosconfig()
	if err != nil {
		return talos.Target{}, nil, nil, nil, err
	}
	return target, m, c, tc, nil
}

func (e *Engine) shutdownTimeout() time.Duration {
	if d := e.opts.Power.ShutdownTimeout; d > 0 {
		return d
	}
	return e.opts.NodeTimeout
}

// afterHalt powers a machine off once a graceful reset with halt has
// stopped it answering (a scale-down), through its controller. Wake-on-LAN
// has nothing to do.
func (ts *tenantState) afterHalt(ctx context.Context, node string, target talos.Target, m *tenant.Machine, tc []byte) {
	e := ts.e
	c, spec, err := e.controller(m)
	if err != nil || spec.Kind == power.KindWOL || spec.Kind == power.KindNone {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, e.shutdownTimeout())
	err = ts.e.opts.Nodes.WaitGone(wctx, target, tc, 250*time.Millisecond)
	cancel()
	if err == nil {
		err = c.Off(ctx)
	}
	if err != nil {
		e.log.Warn("powering off a removed machine", zap.String("node", node), zap.String("power", spec.String()), zap.Error(err))
		return
	}
	e.log.Info("removed machine powered off", zap.String("node", node), zap.String("power", spec.String()))
}

// wakeMachine powers on a machine that does not answer while it is being
// configured (a scale-up). Wake-on-LAN is sent again every WakeInterval;
// any other controller is asked once per call of configureNode (woken
// non-zero), since a button toggles.
func (ts *tenantState) wakeMachine(ctx context.Context, node, mac string, woken *time.Time) {
	e := ts.e
	t, _ := ts.snapshot()
	m := machineOf(t, node)
	if m == nil && mac != "" {
		m = &tenant.Machine{MAC: mac}
	}
	if m == nil {
		return
	}
	c, spec, err := e.controller(m)
	if err != nil || spec.Kind == power.KindNone || (spec.Kind == power.KindWOL && e.opts.Wake == nil) {
		return
	}
	if spec.Kind == power.KindWOL {
		if time.Since(*woken) < e.opts.WakeInterval {
			return
		}
	} else if !woken.IsZero() {
		return
	}
	*woken = time.Now()
	if err := c.On(ctx); err != nil {
		e.log.Warn("powering on a machine that does not answer", zap.String("node", node), zap.String("power", spec.String()), zap.Error(err))
		return
	}
	e.log.Info("powered on a machine that does not answer", zap.String("node", node), zap.String("power", spec.String()))
}
