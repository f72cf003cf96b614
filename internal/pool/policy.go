package pool

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Action is what a decision does.
type Action string

// Actions (the states of the "<group> pool decision" sensor and the event
// types of the "<group> pool" event entity).
const (
	// Hold: nothing to do, or an input is unknown, or the cooldown runs.
	Hold Action = "hold"
	// Add: power Node on (a cloud group: raise the count by one).
	Add Action = "add"
	// Remove: drain Node and power it off (a cloud group: lower the count).
	Remove Action = "remove"
	// Blocked: the pool wants to act but a guarantee stops every node
	// (min on/off time, one power-on an hour, a drain a
	// PodDisruptionBudget refused), or no node can be drained.
	Blocked Action = "blocked"
)

// Actions lists every action.
var Actions = []Action{Hold, Add, Remove, Blocked}

// Timing constants of the policy.
const (
	// CycleWindow: a node is powered on at most once in this window.
	CycleWindow = time.Hour
	// BootGrace is how long a powered-on node that is not Ready yet counts
	// as booting: pending pods wait for it rather than add another node.
	BootGrace = 10 * time.Minute
	// DrainRetry is how long a node whose drain a PodDisruptionBudget
	// blocked is passed over.
	DrainRetry = 30 * time.Minute
)

// Decision is the outcome of one Decide.
type Decision struct {
	Action Action `json:"decision"`
	// Node is the node to power on or off (add, remove), or the node the
	// pool waits for (blocked); "" otherwise.
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason"`
	// Observe: the pool is in observe mode; the caller shows the
	// decision and does not act on it.
	Observe bool      `json:"observe"`
	At      time.Time `json:"at"`
	// NextPossible is the earliest time the pool could act next (at
	// least At).
	NextPossible time.Time `json:"next_possible"`
	// Inputs is what the decision saw.
	Inputs Seen `json:"inputs"`
}

// Acts reports whether the caller should act on the decision: an add or
// a remove outside observe mode.
func (d Decision) Acts() bool { return !d.Observe && (d.Action == Add || d.Action == Remove) }

// Changed reports whether d differs from prev in what it does (action or
// node): the moments the "<group> pool" event fires.
func (d Decision) Changed(prev Decision) bool { return d.Action != prev.Action || d.Node != prev.Node }

// Seen is what a decision saw, for the decision sensor's inputs
// attribute. Pointers are nil for an input not configured or unknown.
type Seen struct {
	Mode          tenant.PoolMode `json:"mode"`
	Min           int             `json:"min"`
	Max           int             `json:"max"`
	Workers       int             `json:"workers"`
	On            int             `json:"on"`
	Ready         int             `json:"ready"`
	PendingPods   int             `json:"pending_pods"`
	OldestPending float64         `json:"oldest_pending_s"`
	PoolW         float64         `json:"pool_w"`
	SolarW        *float64        `json:"solar_w"`
	GridW         *float64        `json:"grid_w"`
	BatteryW      *float64        `json:"battery_w"`
	BatteryLevel  *float64        `json:"battery_level"`
	// SpareW is the surplus beyond the pool's draw (Spare).
	SpareW *float64 `json:"spare_w"`
	Price  *float64 `json:"price"`
	// CheapHour: now is one of the forecast's cheapest hours of the day
	// (nil: the forecast does not cover now, or cheap_hours is 0).
	CheapHour *bool `json:"cheap_hour"`
}

// Map is Seen as a JSON-ready map (the tenant state document's inputs).
func (s Seen) Map() map[string]any {
	m := map[string]any{"mode": string(s.Mode), "min": s.Min, "max": s.Max, "workers": s.Workers, "on": s.On,
		"ready": s.Ready, "pending_pods": s.PendingPods, "oldest_pending_s": s.OldestPending, "pool_w": s.PoolW}
	opt := func(k string, v *float64) {
		if v == nil {
			m[k] = nil
		} else {
			m[k] = *v
		}
	}
	opt("solar_w", s.SolarW)
	opt("grid_w", s.GridW)
	opt("battery_w", s.BatteryW)
	opt("battery_level", s.BatteryLevel)
	opt("spare_w", s.SpareW)
	opt("price", s.Price)
	if s.CheapHour == nil {
		m["cheap_hour"] = nil
	} else {
		m["cheap_hour"] = *s.CheapHour
	}
	return m
}

// Memory is the pool's own memory between decisions: when it last acted,
// how long the surplus and the grid draw have lasted, and per node when
// the pool last powered it on or off. It is plain data for JSON: the
// caller persists it with the meter.
type Memory struct {
	LastAction time.Time `json:"last_action"`
	// SurplusSince: the spare surplus has covered one more worker since
	// then (zero: it does not now).
	SurplusSince time.Time `json:"surplus_since"`
	// GridSince: the pool has drawn at least half a worker from the grid,
	// with no pods pending and outside a cheap hour, since then.
	GridSince time.Time             `json:"grid_since"`
	Nodes     map[string]NodeMemory `json:"nodes,omitempty"`
}

// NodeMemory is what the pool remembers of one node.
type NodeMemory struct {
	LastOn  time.Time `json:"last_on"`
	LastOff time.Time `json:"last_off"`
	// IdleSince: the node has been empty or drainable since then.
	IdleSince time.Time `json:"idle_since"`
	// DrainBlocked is when a PodDisruptionBudget last refused its drain.
	DrainBlocked time.Time `json:"drain_blocked"`
}

func (m Memory) clone() Memory {
	m.Nodes = maps.Clone(m.Nodes)
	if m.Nodes == nil {
		m.Nodes = map[string]NodeMemory{}
	}
	return m
}

// Acted records that the caller carried out d (an add or a remove) at
// d.At. Call it once the power-on or the drain has started, not in
// observe mode.
func (m Memory) Acted(d Decision) Memory {
	if d.Action != Add && d.Action != Remove {
		return m
	}
	m = m.clone()
	m.LastAction = d.At
	n := m.Nodes[d.Node]
	if d.Action == Add {
		n.LastOn = d.At
		m.SurplusSince = time.Time{} // the next worker needs surplus of its own
	} else {
		n.LastOff = d.At
		n.IdleSince = time.Time{}
		m.GridSince = time.Time{}
	}
	m.Nodes[d.Node] = n
	return m
}

// DrainRefused records that a PodDisruptionBudget blocked the drain of
// node at that time: the pool passes over it for DrainRetry and counts
// the attempt as an action (the cooldown runs).
func (m Memory) DrainRefused(node string, at time.Time) Memory {
	m = m.clone()
	n := m.Nodes[node]
	n.DrainBlocked = at
	m.Nodes[node] = n
	m.LastAction = at
	return m
}

// Decide makes one decision. It is a pure function of its arguments: the
// returned memory carries the timers it updated (surplus and grid
// durations, idle nodes); it does not record an action (see Acted).
func Decide(in Inputs, mem Memory) (Decision, Memory) {
	p := newPlan(in, mem)
	p.decide()
	p.d.Inputs = p.seen
	if p.d.NextPossible.Before(in.Now) {
		p.d.NextPossible = in.Now
	}
	return p.d, p.mem
}

// plan is one decision being made.
type plan struct {
	in   Inputs
	c    tenant.PoolConfig
	now  time.Time
	mem  Memory
	d    Decision
	seen Seen

	on, booting []Worker
	off         []Worker
	poolW       float64
	spare       float64
	spareKnown  bool
	cheap       bool
}

func newPlan(in Inputs, mem Memory) *plan {
	p := &plan{in: in, c: in.Config, now: in.Now, mem: mem.clone()}
	p.d = Decision{Action: Hold, At: in.Now, Observe: p.c.Mode == tenant.PoolObserve}
	s := &p.seen
	s.Mode, s.Min, s.Max = p.c.Mode, p.c.Min, p.c.Max
	for _, w := range in.Workers {
		if w.ControlPlane {
			continue
		}
		s.Workers++
		switch w.Power {
		case PowerOn:
			p.on = append(p.on, w)
			if w.Ready {
				s.Ready++
			} else if w.Since.IsZero() || in.Now.Sub(w.Since) < BootGrace {
				p.booting = append(p.booting, w)
			}
		case PowerOff:
			p.off = append(p.off, w)
		}
	}
	s.On = len(p.on)
	s.PendingPods, s.OldestPending = in.Pods.Pending, in.Pods.OldestPending.Seconds()
	p.poolW = PoolPower(in.Workers, p.c.Watts)
	s.PoolW = p.poolW
	known := func(r Reading) *float64 {
		if v, ok := r.Known(); ok {
			return &v
		}
		return nil
	}
	s.SolarW, s.GridW, s.BatteryW, s.BatteryLevel = known(in.Energy.Solar), known(in.Energy.Grid),
		known(in.Energy.Battery), known(in.Energy.BatteryLevel)
	s.Price = known(in.Price.Now)
	p.spare, p.spareKnown = Spare(in.Energy)
	if p.spareKnown {
		v := p.spare
		s.SpareW = &v
	}
	if p.c.CheapHours > 0 {
		if cheap, ok := in.Price.cheap(in.Now, p.c.CheapHours); ok {
			p.cheap = cheap
			s.CheapHour = &cheap
		}
	}
	return p
}

// problem names the first unknown input this decision needs.
func (p *plan) problem() string {
	in := p.in
	if in.Energy.Err != "" {
		return "Home Assistant is unreachable (" + truncate(in.Energy.Err, 120) + ")"
	}
	if in.Pods.Err != "" {
		return "the cluster API is unreachable (" + truncate(in.Pods.Err, 120) + ")"
	}
	for _, r := range []Reading{in.Energy.Grid, in.Energy.Battery} {
		if s := r.problem(); s != "" {
			return s
		}
	}
	if b, ok := in.Energy.Battery.Known(); ok && b < 0 {
		if s := in.Energy.BatteryLevel.problem(); s != "" {
			return s
		}
	}
	if p.c.PriceCeiling != nil || p.c.CheapHours > 0 {
		if s := in.Price.Now.problem(); s != "" {
			return s
		}
	}
	for _, w := range in.Workers {
		if !w.ControlPlane && w.Power != PowerOn && w.Power != PowerOff {
			return "the power of node " + w.Name + " is unknown"
		}
	}
	return ""
}

func (p *plan) hold(reason string, next time.Time) {
	p.d.Action, p.d.Node, p.d.Reason, p.d.NextPossible = Hold, "", reason, next
}

func (p *plan) decide() {
	c := p.c
	if c.Mode == tenant.PoolOff || c.Mode == "" {
		p.mem.SurplusSince, p.mem.GridSince = time.Time{}, time.Time{}
		p.hold("the pool is off", time.Time{})
		return
	}
	if s := p.problem(); s != "" {
		// an unknown input restarts the timers: a surplus or a grid draw
		// must be seen for the whole delay
		p.mem.SurplusSince, p.mem.GridSince = time.Time{}, time.Time{}
		p.hold(s+": holding", time.Time{})
		return
	}
	p.updateTimers()
	cooldownEnd := time.Time{}
	if !p.mem.LastAction.IsZero() {
		cooldownEnd = p.mem.LastAction.Add(c.Cooldown)
	}
	p.d.NextPossible = cooldownEnd

	on := len(p.on)
	pods := p.in.Pods
	pendingDue := pods.Pending > 0 && pods.OldestPending >= c.PendingDelay
	surplusDue := !p.mem.SurplusSince.IsZero() && p.now.Sub(p.mem.SurplusSince) >= c.SurplusDelay
	gridDue := !p.mem.GridSince.IsZero() && p.now.Sub(p.mem.GridSince) >= c.SurplusDelay

	switch {
	case on < c.Min:
		p.add(fmt.Sprintf("%d of at least %d workers on", on, c.Min), cooldownEnd)
	case on > c.Max:
		p.remove(fmt.Sprintf("%d workers on, more than max %d", on, c.Max), cooldownEnd, true)
	case pendingDue && on >= c.Max:
		p.hold(fmt.Sprintf("%d pods pending, but all %d workers the pool may run are on", pods.Pending, c.Max), cooldownEnd)
	case pendingDue && len(p.booting) > 0:
		b := p.booting[0]
		p.hold(fmt.Sprintf("%d pods pending: waiting for %s to become ready", pods.Pending, b.Name), b.Since.Add(BootGrace))
	case pendingDue:
		why := fmt.Sprintf("%d pods pending for %s", pods.Pending, round(pods.OldestPending))
		if ok, held := p.priceAllows(); ok {
			p.add(why+held, cooldownEnd)
		} else {
			p.hold(why+held, later(cooldownEnd, p.in.Price.nextAtMost(p.now, *c.PriceCeiling)))
		}
	case surplusDue && on < c.Max && len(p.booting) == 0:
		p.add(fmt.Sprintf("%.0f W to spare covers one more worker (%.0f W) for %s", p.spare, c.Watts, round(p.now.Sub(p.mem.SurplusSince))), cooldownEnd)
	case p.cheap && on < c.Max && len(p.booting) == 0:
		p.add(fmt.Sprintf("one of the day's %d cheapest hours (price %s)", c.CheapHours, p.priceText()), cooldownEnd)
	case gridDue && on > c.Min:
		p.remove(fmt.Sprintf("the pool draws %.0f W from the grid for %s", p.gridDraw(), round(p.now.Sub(p.mem.GridSince))), cooldownEnd, false)
	default:
		p.idle(cooldownEnd)
	}
}

// idle explains a hold with nothing to do, and when something might be.
func (p *plan) idle(cooldownEnd time.Time) {
	c, on := p.c, len(p.on)
	var parts []string
	next := cooldownEnd
	switch {
	case p.in.Pods.Pending > 0:
		parts = append(parts, fmt.Sprintf("%d pods pending for %s (of %s)", p.in.Pods.Pending, round(p.in.Pods.OldestPending), round(c.PendingDelay)))
		next = later(next, p.now.Add(c.PendingDelay-p.in.Pods.OldestPending))
	case !p.mem.SurplusSince.IsZero() && on < c.Max:
		parts = append(parts, fmt.Sprintf("%.0f W to spare for %s (of %s)", p.spare, round(p.now.Sub(p.mem.SurplusSince)), round(c.SurplusDelay)))
		next = later(next, p.mem.SurplusSince.Add(c.SurplusDelay))
	case !p.mem.GridSince.IsZero() && on > c.Min && p.anyIdle():
		parts = append(parts, fmt.Sprintf("drawing %.0f W from the grid for %s (of %s)", p.gridDraw(), round(p.now.Sub(p.mem.GridSince)), round(c.SurplusDelay)))
		next = later(next, p.mem.GridSince.Add(c.SurplusDelay))
	case p.cheap:
		parts = append(parts, "a cheap hour")
	case p.spareKnown && p.spare >= 0:
		parts = append(parts, fmt.Sprintf("%.0f W to spare", p.spare))
	case p.spareKnown:
		parts = append(parts, fmt.Sprintf("drawing %.0f W from the grid", -p.spare))
	}
	parts = append(parts, fmt.Sprintf("%d of %d workers on (min %d, max %d)", on, p.seen.Workers, c.Min, c.Max))
	p.hold("nothing to do: "+strings.Join(parts, "; "), next)
}

// anyIdle reports whether a worker that is on is empty or drainable.
func (p *plan) anyIdle() bool {
	return slices.ContainsFunc(p.on, func(w Worker) bool { return w.Empty || w.Drainable })
}

// priceAllows says whether pending pods may add a worker at this price:
// yes without a ceiling, at or below it, with surplus to spare or in a
// cheap hour. The text is appended to the reason.
func (p *plan) priceAllows() (bool, string) {
	ceil := p.c.PriceCeiling
	switch {
	case ceil == nil:
		return true, ""
	case p.spareKnown && p.spare >= p.c.Watts:
		return true, fmt.Sprintf(" (on surplus: %.0f W to spare)", p.spare)
	case p.cheap:
		return true, " (a cheap hour)"
	}
	price, ok := p.in.Price.Now.Known()
	if !p.in.Price.Now.Configured() {
		return false, ", but price_ceiling is set and no price entity is configured (pool.price_entity)"
	}
	if ok && price <= *ceil {
		return true, fmt.Sprintf(" (price %s, ceiling %s)", p.priceText(), num(*ceil))
	}
	return false, fmt.Sprintf(", but the price %s is above the ceiling %s and there is no surplus", p.priceText(), num(*ceil))
}

func (p *plan) priceText() string {
	if v, ok := p.in.Price.Now.Known(); ok {
		return num(v)
	}
	return "unknown"
}

// gridDraw is what the pool draws from the grid (W).
func (p *plan) gridDraw() float64 {
	if !p.spareKnown {
		return p.poolW
	}
	return min(p.poolW, max(0, -p.spare))
}

// updateTimers starts or stops the surplus and grid timers and the
// nodes' idle times.
func (p *plan) updateTimers() {
	c := p.c
	surplus := p.spareKnown && p.spare >= c.Watts
	switch {
	case !surplus:
		p.mem.SurplusSince = time.Time{}
	case p.mem.SurplusSince.IsZero():
		p.mem.SurplusSince = p.now
	}
	// on grid: at least half a worker drawn from the grid (without a grid
	// sensor every worker is on grid power); not while pods wait or in a
	// cheap hour
	onGrid := len(p.on) > 0 && (!p.spareKnown || p.spare <= -c.Watts/2)
	grid := onGrid && p.in.Pods.Pending == 0 && !p.cheap
	switch {
	case !grid:
		p.mem.GridSince = time.Time{}
	case p.mem.GridSince.IsZero():
		p.mem.GridSince = p.now
	}
	seen := map[string]bool{}
	for _, w := range p.in.Workers {
		seen[w.Name] = true
		n := p.mem.Nodes[w.Name]
		idle := w.on() && (w.Empty || w.Drainable)
		switch {
		case !idle:
			n.IdleSince = time.Time{}
		case n.IdleSince.IsZero():
			n.IdleSince = p.now
		}
		p.mem.Nodes[w.Name] = n
	}
	for name := range p.mem.Nodes { // nodes no longer declared
		if !seen[name] {
			delete(p.mem.Nodes, name)
		}
	}
}

// onSince and offSince are when a node last went on or off, by what the
// engine saw and what the pool did.
func (p *plan) onSince(w Worker) time.Time  { return later(w.Since, p.mem.Nodes[w.Name].LastOn) }
func (p *plan) offSince(w Worker) time.Time { return later(w.Since, p.mem.Nodes[w.Name].LastOff) }

// add powers on one off worker: the one off longest (wear levelling)
// that min_off and the once-an-hour rule allow.
func (p *plan) add(why string, cooldownEnd time.Time) {
	if cooldownEnd.After(p.now) {
		p.hold(why+": after the cooldown", cooldownEnd)
		return
	}
	type cand struct {
		w     Worker
		since time.Time
		ready time.Time // when the guarantees allow it
	}
	var ok []cand
	var held []string
	next := time.Time{}
	for _, w := range p.off {
		since := p.offSince(w)
		allowed := since.Add(p.c.MinOff)
		var why []string
		if p.now.Before(allowed) {
			why = append(why, fmt.Sprintf("off for %s of min_off %s", round(p.now.Sub(since)), round(p.c.MinOff)))
		}
		if last := p.mem.Nodes[w.Name].LastOn; !last.IsZero() && p.now.Sub(last) < CycleWindow {
			allowed = later(allowed, last.Add(CycleWindow))
			why = append(why, "powered on within the hour")
		} else if w.CyclesLastHour > 0 {
			allowed = later(allowed, p.now.Add(CycleWindow/4)) // by someone else; look again later
			why = append(why, "powered on within the hour")
		}
		if len(why) > 0 {
			held = append(held, w.Name+" "+strings.Join(why, ", "))
			if next.IsZero() || allowed.Before(next) {
				next = allowed
			}
			continue
		}
		ok = append(ok, cand{w, since, allowed})
	}
	if len(ok) == 0 {
		if len(p.off) == 0 {
			p.hold(why+", but no worker is off", cooldownEnd)
			return
		}
		p.d.Action, p.d.Node, p.d.NextPossible = Blocked, "", next
		p.d.Reason = why + ", but every worker that is off is held: " + strings.Join(held, "; ")
		return
	}
	slices.SortFunc(ok, func(a, b cand) int {
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return cmp.Compare(a.w.Name, b.w.Name)
	})
	p.d.Action, p.d.Node, p.d.Reason = Add, ok[0].w.Name, why
	p.d.NextPossible = p.now.Add(p.c.Cooldown)
}

// remove drains and powers off one on worker: an empty one before a
// drainable one, the one on longest first. force (above max) drains a
// node even if it has not been idle for the delay.
func (p *plan) remove(why string, cooldownEnd time.Time, force bool) {
	if cooldownEnd.After(p.now) {
		p.hold(why+": after the cooldown", cooldownEnd)
		return
	}
	type cand struct {
		w     Worker
		since time.Time
	}
	var ok []cand
	var held []string
	next := time.Time{}
	for _, w := range p.on {
		if !w.Empty && !w.Drainable {
			held = append(held, w.Name+" runs pods that cannot be evicted")
			continue
		}
		n := p.mem.Nodes[w.Name]
		since := p.onSince(w)
		allowed := since.Add(p.c.MinOn)
		var why []string
		if p.now.Before(allowed) {
			why = append(why, fmt.Sprintf("on for %s of min_on %s", round(p.now.Sub(since)), round(p.c.MinOn)))
		}
		if !n.DrainBlocked.IsZero() && p.now.Sub(n.DrainBlocked) < DrainRetry {
			allowed = later(allowed, n.DrainBlocked.Add(DrainRetry))
			why = append(why, "its drain was refused by a PodDisruptionBudget "+round(p.now.Sub(n.DrainBlocked))+" ago")
		}
		if !force && (n.IdleSince.IsZero() || p.now.Sub(n.IdleSince) < p.c.SurplusDelay) {
			allowed = later(allowed, n.IdleSince.Add(p.c.SurplusDelay))
			why = append(why, "idle for "+round(p.now.Sub(n.IdleSince))+" of "+round(p.c.SurplusDelay))
		}
		if len(why) > 0 {
			held = append(held, w.Name+" "+strings.Join(why, ", "))
			if next.IsZero() || allowed.Before(next) {
				next = allowed
			}
			continue
		}
		ok = append(ok, cand{w, since})
	}
	if len(ok) == 0 {
		p.d.Action, p.d.Node, p.d.NextPossible = Blocked, "", next
		if next.IsZero() {
			p.d.NextPossible = p.now.Add(p.c.Cooldown) // look again when pods may have moved
		}
		p.d.Reason = why + ", but no worker can go: " + strings.Join(held, "; ")
		return
	}
	slices.SortFunc(ok, func(a, b cand) int {
		if a.w.Empty != b.w.Empty {
			if a.w.Empty {
				return -1
			}
			return 1
		}
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return cmp.Compare(b.w.Name, a.w.Name)
	})
	w := ok[0].w
	state := "empty"
	if !w.Empty {
		state = "drainable"
	}
	p.d.Action, p.d.Node, p.d.Reason = Remove, w.Name, why+" and "+w.Name+" is "+state
	p.d.NextPossible = p.now.Add(p.c.Cooldown)
}

// later is the later of two times (zero counts as the earliest).
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// round shows a duration to the second ("2m10s").
func round(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// num shows a price or value compactly.
func num(v float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
}
