package tenant

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/machine"
)

// Pool is a worker group's energy-aware pool (docs/design.md §11.2): the
// table [node_groups.pool]. The pool powers the group's declared metal
// nodes on and off (it never installs or removes one), or changes a cloud
// group's count, between Min and Max, following pending pods, solar
// surplus and the price. Unset keys take the defaults below; PoolConfig
// gives the values with the defaults applied.
type Pool struct {
	// Mode is off, observe (decide and show, never act) or on.
	Mode PoolMode `toml:"mode" json:"mode"`
	// Min and Max bound the workers powered on; nil: 0 and the group's
	// declared count (metal) or count bound (cloud).
	Min *int `toml:"min" json:"min,omitempty"`
	Max *int `toml:"max" json:"max,omitempty"`
	// Watts is the rated draw of one worker (W), required: it is the
	// surplus a worker needs and the pool power where no plug measures it.
	Watts float64 `toml:"watts" json:"watts"`
	// PriceCeiling: pending pods add a worker on grid power only while
	// the price is at most this (in the price entity's unit); nil: no
	// ceiling.
	PriceCeiling *float64 `toml:"price_ceiling" json:"price_ceiling,omitempty"`
	// CheapHours is how many of the forecast's cheapest hours a day the
	// pool keeps workers on up to Max (0, the default: none).
	CheapHours int `toml:"cheap_hours" json:"cheap_hours,omitempty"`
	// Durations (Go syntax, "10m"): how long export must exceed one
	// worker's watts (and the pool run on grid) before a worker is added
	// (removed); how long a pod must be pending; the least time a node
	// stays on and off; the least time between two actions.
	SurplusDelay string `toml:"surplus_delay" json:"surplus_delay,omitempty"`
	PendingDelay string `toml:"pending_delay" json:"pending_delay,omitempty"`
	MinOn        string `toml:"min_on" json:"min_on,omitempty"`
	MinOff       string `toml:"min_off" json:"min_off,omitempty"`
	Cooldown     string `toml:"cooldown" json:"cooldown,omitempty"`
}

// PoolMode is a pool's mode.
type PoolMode string

// Pool modes (the options of the "<group> pool" select).
const (
	PoolOff     PoolMode = "off"
	PoolObserve PoolMode = "observe"
	PoolOn      PoolMode = "on"
)

// PoolModes lists every mode.
var PoolModes = []PoolMode{PoolOff, PoolObserve, PoolOn}

// Pool defaults (docs/design.md §11.2).
const (
	DefaultPoolMode     = PoolObserve
	DefaultSurplusDelay = 10 * time.Minute
	DefaultPendingDelay = 60 * time.Second
	DefaultMinOn        = 30 * time.Minute
	DefaultMinOff       = 20 * time.Minute
	DefaultCooldown     = 5 * time.Minute
	// MaxPoolDelay bounds every pool duration.
	MaxPoolDelay = 24 * time.Hour
)

// PoolConfig is a pool with every default applied.
type PoolConfig struct {
	Mode         PoolMode
	Min, Max     int
	Watts        float64
	PriceCeiling *float64
	CheapHours   int
	SurplusDelay time.Duration
	PendingDelay time.Duration
	MinOn        time.Duration
	MinOff       time.Duration
	Cooldown     time.Duration
}

// PoolConfig is the group's pool with the defaults applied; ok is false
// for a group without a pool. A valid file (Parse) gives valid values.
func (t *Tenant) PoolConfig(group string) (PoolConfig, bool) {
	g := t.Group(group)
	if g == nil || g.Pool == nil {
		return PoolConfig{}, false
	}
	p := g.Pool
	c := PoolConfig{Mode: p.Mode, Min: 0, Max: t.poolMaxBound(g), Watts: p.Watts, CheapHours: p.CheapHours}
	if c.Mode == "" {
		c.Mode = DefaultPoolMode
	}
	if p.Min != nil {
		c.Min = *p.Min
	}
	if p.Max != nil {
		c.Max = *p.Max
	}
	if p.PriceCeiling != nil {
		v := *p.PriceCeiling
		c.PriceCeiling = &v
	}
	c.SurplusDelay = poolDuration(p.SurplusDelay, DefaultSurplusDelay)
	c.PendingDelay = poolDuration(p.PendingDelay, DefaultPendingDelay)
	c.MinOn = poolDuration(p.MinOn, DefaultMinOn)
	c.MinOff = poolDuration(p.MinOff, DefaultMinOff)
	c.Cooldown = poolDuration(p.Cooldown, DefaultCooldown)
	return c, true
}

// PooledGroups lists the names of the groups that declare a pool, in file
// order.
func (t *Tenant) PooledGroups() []string {
	var out []string
	for _, g := range t.NodeGroups {
		if g.Pool != nil {
			out = append(out, g.Name)
		}
	}
	return out
}

// PoolBounds are the values a group's pool min and max may take: up to the
// declared nodes of a metal group (the pool powers them, it does not
// install more), up to the count bound of a cloud group.
func (t *Tenant) PoolBounds(g *NodeGroup) (lo, hi int) { return 0, t.poolMaxBound(g) }

func (t *Tenant) poolMaxBound(g *NodeGroup) int {
	if t.Provider == ProviderMetal {
		return g.Count
	}
	_, hi := CountBounds(g.Role)
	return hi
}

func poolDuration(s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return def // validation refuses such files
	}
	return d
}

// powerSensorRxp is a sensor entity id (Home Assistant's object id rule).
var powerSensorRxp = regexp.MustCompile(`^sensor\.[a-z0-9]+(_[a-z0-9]+)*$`)

// validatePool checks a group's pool table (f is the group's key path).
func (t *Tenant) validatePool(f string, g *NodeGroup, pos posMap) []violation {
	var vs []violation
	add := func(field, format string, args ...any) {
		vs = append(vs, violation{field, fmt.Sprintf(format, args...)})
	}
	for j, m := range g.Machines {
		if m.PowerSensor != "" && !powerSensorRxp.MatchString(m.PowerSensor) {
			add(fmt.Sprintf("%s.machines[%d].power_sensor", f, j),
				"%q is not a sensor entity id like \"sensor.rack_plug_power\"", m.PowerSensor)
		}
	}
	p := g.Pool
	if p == nil {
		return vs
	}
	pf := f + ".pool"
	if g.Role == RoleControlPlane {
		add(pf, "a control-plane group cannot have a pool: the pool never powers a control plane off (put the pool on a worker group)")
		return vs
	}
	switch p.Mode {
	case "", PoolOff, PoolObserve, PoolOn:
	default:
		add(pf+".mode", "%q is not one of off, observe, on", p.Mode)
	}
	_, hi := t.PoolBounds(g)
	what := fmt.Sprintf("the group's count bound %d", hi)
	if t.Provider == ProviderMetal {
		what = fmt.Sprintf("the group's count %d (the pool powers declared nodes on and off)", hi)
	}
	lo, max := 0, hi
	if p.Min != nil {
		lo = *p.Min
		if lo < 0 {
			add(pf+".min", "%d must not be negative", lo)
		}
	}
	if p.Max != nil {
		max = *p.Max
		switch {
		case max < 0:
			add(pf+".max", "%d must not be negative", max)
		case max > hi:
			add(pf+".max", "%d is more than %s", max, what)
		}
	}
	if p.Min != nil && lo > max && lo >= 0 && max >= 0 {
		field := pf + ".min"
		if p.Max == nil {
			add(field, "%d is more than %s", lo, what)
		} else {
			add(field, "%d is more than max %d", lo, max)
		}
	}
	switch {
	case !pos.has(pf + ".watts"):
		add(pf+".watts", "missing: set watts, the rated draw of one worker in W (e.g. 60)")
	case p.Watts <= 0 || p.Watts > 100000 || math.IsNaN(p.Watts):
		add(pf+".watts", "%s must be more than 0 W (and at most 100000)", strconv.FormatFloat(p.Watts, 'g', -1, 64))
	}
	if p.PriceCeiling != nil && (math.IsNaN(*p.PriceCeiling) || math.IsInf(*p.PriceCeiling, 0)) {
		add(pf+".price_ceiling", "must be a number")
	}
	if p.CheapHours < 0 || p.CheapHours > 24 {
		add(pf+".cheap_hours", "%d is out of range 0..24", p.CheapHours)
	}
	for _, d := range []struct{ key, val string }{
		{"surplus_delay", p.SurplusDelay}, {"pending_delay", p.PendingDelay}, {"min_on", p.MinOn},
		{"min_off", p.MinOff}, {"cooldown", p.Cooldown},
	} {
		if d.val == "" {
			continue
		}
		if v, err := time.ParseDuration(d.val); err != nil || v < 0 || v > MaxPoolDelay {
			add(pf+"."+d.key, "%q is not a duration between 0s and 24h like \"10m\" or \"90s\"", d.val)
		}
	}
	if t.Provider == ProviderMetal {
		for j := 0; j < g.Count && j < len(g.Machines); j++ {
			m := g.Machines[j]
			if spec, err := machine.ParsePower(m.Power, m.MAC); err == nil && spec.Kind == machine.KindNone {
				add(fmt.Sprintf("%s.machines[%d].power", f, j),
					"the pool cannot switch machine %s: give it a mac (Wake-on-LAN) or a power entity, or take the group's pool out", m.Address)
			}
		}
	}
	return vs
}

// PoolStatus is what a pool shows in Home Assistant: its settings, its
// last decision and its accounting. It is part of the tenant state
// document (Status.Pools, by group); the engine fills it from the pool
// package's decision and meter.
type PoolStatus struct {
	Mode PoolMode `json:"mode"`
	Min  int      `json:"min"`
	Max  int      `json:"max"`
	// Decision is hold, add, remove or blocked; Node the node it names.
	Decision string `json:"decision"`
	Node     string `json:"node,omitempty"`
	Reason   string `json:"reason"`
	// Observe: the decision was only shown (observe mode), not acted on.
	Observe bool      `json:"observe"`
	At      time.Time `json:"at"`
	// NextPossible is the earliest time the pool could act next (zero:
	// now).
	NextPossible time.Time `json:"next_possible"`
	// Inputs is what the decision saw (sensor values, pods, workers).
	Inputs map[string]any `json:"inputs,omitempty"`
	// PowerW is the pool's draw now, EnergyKWh its total energy (never
	// decreasing), SolarShare today's share of that energy from surplus
	// (percent, since local midnight).
	PowerW     float64 `json:"power_w"`
	EnergyKWh  float64 `json:"energy_kwh"`
	SolarShare float64 `json:"solar_share"`
}

// OnlyPoolsDiffer reports whether a and b differ at most in what the
// worker pools read: the pool tables and the machines' power sensors. Such
// a change (a pool's mode, min or max from Home Assistant) needs no plan
// or apply: the next decision uses it.
func OnlyPoolsDiffer(a, b *Tenant) bool {
	if a == nil || b == nil {
		return false
	}
	return reflect.DeepEqual(withoutPools(a), withoutPools(b))
}

func withoutPools(t *Tenant) Tenant {
	c := *t
	c.Path, c.Source = "", nil
	c.NodeGroups = make([]NodeGroup, len(t.NodeGroups))
	for i, g := range t.NodeGroups {
		g.Pool = nil
		g.Machines = slices.Clone(g.Machines)
		for j := range g.Machines {
			g.Machines[j].PowerSensor = ""
		}
		c.NodeGroups[i] = g
	}
	return c
}
