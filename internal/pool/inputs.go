// Package pool decides when a worker pool powers a worker on or off
// (docs/design.md §11.2): from the pods waiting in the cluster, the solar
// surplus and the battery Home Assistant measures, and the electricity
// price and its forecast. Decide is a pure function of those inputs, the
// time and the pool's own memory; it never acts. The caller (the engine)
// feeds it, acts on its decision (unless the pool is in observe mode),
// records what it did in the memory and persists the memory and the
// energy meter (meter.go) between runs.
//
// The guarantees hold for every decision: a node stays on at least min_on
// and off at least min_off, a global cooldown separates two actions, a
// decision names at most one node, a node is powered on at most once an
// hour, the pool never goes below min or above max, and a control plane
// is never chosen. An input the decision needs that is unknown (a sensor
// unavailable, a price that is not a number, Home Assistant or the
// cluster unreachable) makes the decision hold, naming the input.
package pool

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Inputs are everything one decision looks at.
type Inputs struct {
	// Now is the time of the decision, in the local time zone: the
	// forecast's days and the meter's midnight are local days.
	Now time.Time
	// Config is the group's pool (tenant.Tenant.PoolConfig).
	Config tenant.PoolConfig
	// Workers are the group's declared nodes.
	Workers []Worker
	Pods    Pods
	Energy  Energy
	Price   Price
}

// PowerState is a worker's power.
type PowerState string

// Power states.
const (
	PowerOn      PowerState = "on"
	PowerOff     PowerState = "off"
	PowerUnknown PowerState = "unknown"
)

// Worker is one node of the pool as the engine observes it.
type Worker struct {
	Name string
	// ControlPlane: the node holds the control plane; the pool never
	// chooses it (the tenant file refuses a pool on a control-plane group;
	// this is the last guard).
	ControlPlane bool
	Power        PowerState
	// Ready: the node is Ready in Kubernetes.
	Ready bool
	// Since is when the node entered its power state (zero: unknown).
	Since time.Time
	// CyclesLastHour is how many times the node was powered on in the
	// last hour, by anyone.
	CyclesLastHour int
	// Empty: the node runs no pods but DaemonSet pods. Drainable: every
	// pod it runs can be evicted (controller-owned, PodDisruptionBudgets
	// allow it) and would fit on the other ready workers.
	Empty, Drainable bool
	// Plug is the machine's power_sensor (W), when it names one.
	Plug Reading
}

// on reports whether the worker draws power (booting counts).
func (w Worker) on() bool { return w.Power == PowerOn }

// Pods is what the cluster's API server says about pods that cannot be
// scheduled.
type Pods struct {
	// Err, when set, is why the cluster API could not be read.
	Err string
	// Pending is the number of pods unschedulable now; OldestPending how
	// long the oldest of them has waited.
	Pending       int
	OldestPending time.Duration
}

// Reading is one Home Assistant sensor's value.
type Reading struct {
	// Entity is the sensor ("" when none is configured).
	Entity string
	// Value is the state as a number, valid when OK.
	Value float64
	OK    bool
	// Raw is the state as Home Assistant gave it ("unavailable", "abc").
	Raw string
}

// Configured reports whether a sensor is configured for this input.
func (r Reading) Configured() bool { return r.Entity != "" }

// Known gives the value and whether it is configured and a number.
func (r Reading) Known() (float64, bool) { return r.Value, r.Configured() && r.OK }

// problem names the reading when it is configured but not a number.
func (r Reading) problem() string {
	if !r.Configured() || r.OK {
		return ""
	}
	switch r.Raw {
	case "", "unknown":
		return r.Entity + " is unknown"
	case "unavailable":
		return r.Entity + " is unavailable"
	}
	return fmt.Sprintf("%s is %q, not a number", r.Entity, truncate(r.Raw, 40))
}

// Number makes a Reading from a Home Assistant state: "unavailable",
// "unknown" and anything that is not a finite number are not OK.
func Number(entity, state string) Reading {
	r := Reading{Entity: entity, Raw: state}
	if v, err := strconv.ParseFloat(state, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
		r.Value, r.OK = v, true
	}
	return r
}

// Energy is the house's power flows (W) and battery level (%) as Home
// Assistant's Energy preferences and the battery entity give them. A
// reading without an entity is not configured: the rule that needs it is
// off (without a grid sensor there is no surplus, every worker counts as
// on grid power).
type Energy struct {
	// Err, when set, is why Home Assistant could not be read. Leave it
	// empty when there is no WebSocket link at all (then nothing is
	// configured and the pool follows the pods only).
	Err string
	// Solar is the panels' production (shown, not decided on).
	Solar Reading
	// Grid is the grid power: positive importing, negative exporting.
	Grid Reading
	// Battery is the battery power: positive discharging, negative
	// charging; BatteryLevel its state of charge.
	Battery      Reading
	BatteryLevel Reading
}

// BatteryPriority is the state of charge below which a charging battery
// keeps the surplus it takes (the house needs it in the evening); above
// it, the battery's charge power counts as surplus the pool may use.
const BatteryPriority = 80.0

// Spare is the surplus beyond what the pool draws now (W): the export,
// plus a charging battery's power above BatteryPriority, minus a
// discharging battery's power. Negative: the pool draws that much from
// the grid or the battery. ok is false without a grid sensor or while a
// reading it needs is unknown.
func Spare(e Energy) (w float64, ok bool) {
	g, ok := e.Grid.Known()
	if !ok {
		return 0, false
	}
	spare := -g
	if e.Battery.Configured() {
		b, ok := e.Battery.Known()
		if !ok {
			return 0, false
		}
		switch {
		case b > 0:
			spare -= b
		case b < 0:
			if lvl, ok := e.BatteryLevel.Known(); ok && lvl >= BatteryPriority {
				spare -= b
			}
		}
	}
	return spare, true
}

// Price is the electricity price now and its forecast.
type Price struct {
	Now Reading
	// Forecast is the known price slots (hourly or finer), sorted by
	// start; empty when the price entity gives none.
	Forecast []Slot
}

// Slot is one forecast interval's price.
type Slot struct {
	Start, End time.Time
	Price      float64
}

// cheap reports whether now falls in one of the n cheapest hours of its
// local day, by the forecast; known is false when the forecast does not
// cover now.
func (p Price) cheap(now time.Time, n int) (cheap, known bool) {
	if n <= 0 {
		return false, true
	}
	y, m, d := now.Date()
	dayStart := time.Date(y, m, d, 0, 0, 0, 0, now.Location())
	dayEnd := time.Date(y, m, d+1, 0, 0, 0, 0, now.Location())
	var day []Slot
	cur := -1
	for _, s := range p.Forecast {
		if !s.End.After(dayStart) || !s.Start.Before(dayEnd) {
			continue
		}
		if !now.Before(s.Start) && now.Before(s.End) {
			cur = len(day)
		}
		day = append(day, s)
	}
	if cur < 0 {
		return false, false
	}
	// rank by price, earlier first on a tie; take slots until n hours
	idx := make([]int, len(day))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(day[a].Price, day[b].Price) })
	left := time.Duration(n) * time.Hour
	for _, i := range idx {
		if left <= 0 {
			break
		}
		if i == cur {
			return true, true
		}
		left -= day[i].End.Sub(day[i].Start)
	}
	return false, true
}

// nextAtMost is the start of the first slot from now on whose price is at
// most ceiling (now itself when the current slot is); zero when the
// forecast has none.
func (p Price) nextAtMost(now time.Time, ceiling float64) time.Time {
	for _, s := range p.Forecast {
		if s.End.After(now) && s.Price <= ceiling {
			if s.Start.Before(now) {
				return now
			}
			return s.Start
		}
	}
	return time.Time{}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
