package pool

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

var t0 = time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC)

func config() tenant.PoolConfig {
	return tenant.PoolConfig{Mode: tenant.PoolOn, Min: 0, Max: 3, Watts: 60,
		SurplusDelay: 10 * time.Minute, PendingDelay: time.Minute, MinOn: 30 * time.Minute,
		MinOff: 20 * time.Minute, Cooldown: 5 * time.Minute}
}

// base: three workers, w1 on and busy for hours, w2 and w3 off for hours,
// the house importing 200 W, nothing pending.
func base() Inputs {
	long := t0.Add(-5 * time.Hour)
	return Inputs{
		Now:    t0,
		Config: config(),
		Workers: []Worker{
			{Name: "w1", Power: PowerOn, Ready: true, Since: long},
			{Name: "w2", Power: PowerOff, Since: long, Empty: true},
			{Name: "w3", Power: PowerOff, Since: long, Empty: true},
		},
		Energy: Energy{Grid: Number("sensor.grid", "200"), Solar: Number("sensor.pv", "0")},
	}
}

func with(f func(*Inputs)) Inputs {
	in := base()
	f(&in)
	return in
}

func ptr[T any](v T) *T { return &v }

// TestRules: one row per rule of the policy, from a clean memory.
func TestRules(t *testing.T) {
	tests := []struct {
		name   string
		in     Inputs
		mem    Memory
		action Action
		node   string
		reason string
	}{
		{"nothing to do", base(), Memory{}, Hold, "", "nothing to do"},
		{"off", with(func(in *Inputs) { in.Config.Mode = tenant.PoolOff }), Memory{}, Hold, "", "the pool is off"},
		{"pending pods add the worker off longest", with(func(in *Inputs) {
			in.Pods = Pods{Pending: 4, OldestPending: 90 * time.Second}
			in.Workers[2].Since = t0.Add(-9 * time.Hour)
		}), Memory{}, Add, "w3", "4 pods pending for 1m30s"},
		{"pending pods younger than the delay wait", with(func(in *Inputs) {
			in.Pods = Pods{Pending: 4, OldestPending: 20 * time.Second}
		}), Memory{}, Hold, "", "4 pods pending for 20s (of 1m0s)"},
		{"pending pods wait for a booting worker", with(func(in *Inputs) {
			in.Pods = Pods{Pending: 4, OldestPending: 5 * time.Minute}
			in.Workers[1].Power, in.Workers[1].Since = PowerOn, t0.Add(-2*time.Minute)
		}), Memory{}, Hold, "", "waiting for w2 to become ready"},
		{"a worker that never got ready no longer blocks", with(func(in *Inputs) {
			in.Pods = Pods{Pending: 4, OldestPending: 15 * time.Minute}
			in.Workers[1].Power, in.Workers[1].Since = PowerOn, t0.Add(-11*time.Minute)
		}), Memory{}, Add, "w3", "pods pending"},
		{"pending at max holds", with(func(in *Inputs) {
			in.Config.Max = 1
			in.Pods = Pods{Pending: 1, OldestPending: 5 * time.Minute}
		}), Memory{}, Hold, "", "all 1 workers the pool may run are on"},
		{"price above the ceiling holds", with(func(in *Inputs) {
			in.Config.PriceCeiling = ptr(0.30)
			in.Price.Now = Number("sensor.price", "0.42")
			in.Pods = Pods{Pending: 1, OldestPending: 5 * time.Minute}
		}), Memory{}, Hold, "", "the price 0.42 is above the ceiling 0.3"},
		{"price at the ceiling adds", with(func(in *Inputs) {
			in.Config.PriceCeiling = ptr(0.30)
			in.Price.Now = Number("sensor.price", "0.30")
			in.Pods = Pods{Pending: 1, OldestPending: 5 * time.Minute}
		}), Memory{}, Add, "w2", "(price 0.3, ceiling 0.3)"},
		{"surplus beats the ceiling", with(func(in *Inputs) {
			in.Config.PriceCeiling = ptr(0.30)
			in.Price.Now = Number("sensor.price", "0.42")
			in.Energy.Grid = Number("sensor.grid", "-500")
			in.Pods = Pods{Pending: 1, OldestPending: 5 * time.Minute}
		}), Memory{}, Add, "w2", "on surplus: 500 W to spare"},
		{"ceiling without a price entity holds and says so", with(func(in *Inputs) {
			in.Config.PriceCeiling = ptr(0.30)
			in.Pods = Pods{Pending: 1, OldestPending: 5 * time.Minute}
		}), Memory{}, Hold, "", "no price entity is configured (pool.price_entity)"},
		{"surplus starts the timer", with(func(in *Inputs) {
			in.Energy.Grid = Number("sensor.grid", "-500")
		}), Memory{}, Hold, "", "500 W to spare for 0s (of 10m0s)"},
		{"surplus for the delay adds", with(func(in *Inputs) {
			in.Energy.Grid = Number("sensor.grid", "-500")
		}), Memory{SurplusSince: t0.Add(-10 * time.Minute)}, Add, "w2", "500 W to spare covers one more worker (60 W) for 10m0s"},
		{"surplus smaller than a worker does not count", with(func(in *Inputs) {
			in.Energy.Grid = Number("sensor.grid", "-50")
		}), Memory{SurplusSince: t0.Add(-time.Hour)}, Hold, "", "50 W to spare; 1 of 3"},
		{"a charging battery below priority keeps its surplus", with(func(in *Inputs) {
			in.Energy.Grid = Number("sensor.grid", "0")
			in.Energy.Battery = Number("sensor.bat", "-900")
			in.Energy.BatteryLevel = Number("sensor.soc", "40")
		}), Memory{SurplusSince: t0.Add(-time.Hour)}, Hold, "", "0 W to spare"},
		{"a nearly full battery's charge is surplus", with(func(in *Inputs) {
			in.Energy.Grid = Number("sensor.grid", "0")
			in.Energy.Battery = Number("sensor.bat", "-900")
			in.Energy.BatteryLevel = Number("sensor.soc", "85")
		}), Memory{SurplusSince: t0.Add(-time.Hour)}, Add, "w2", "900 W to spare"},
		{"grid draw removes an idle worker after the delay", with(func(in *Inputs) {
			in.Workers[0].Empty = true
		}), Memory{GridSince: t0.Add(-10 * time.Minute), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}},
			Remove, "w1", "the pool draws 60 W from the grid for 10m0s and w1 is empty"},
		{"grid draw shorter than the delay holds", with(func(in *Inputs) {
			in.Workers[0].Empty = true
		}), Memory{GridSince: t0.Add(-4 * time.Minute), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}},
			Hold, "", "drawing 60 W from the grid for 4m0s (of 10m0s)"},
		{"a worker idle shorter than the delay stays", with(func(in *Inputs) {
			in.Workers[0].Empty = true
		}), Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-2 * time.Minute)}}},
			Blocked, "", "w1 idle for 2m0s of 10m0s"},
		{"a busy worker is not drained", base(), Memory{GridSince: t0.Add(-time.Hour)}, Blocked, "", "w1 runs pods that cannot be evicted"},
		{"a drainable worker is drained", with(func(in *Inputs) {
			in.Workers[0].Drainable = true
		}), Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}},
			Remove, "w1", "w1 is drainable"},
		{"a drain refused by a PDB is passed over", with(func(in *Inputs) {
			in.Workers[0].Drainable = true
		}), Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour), DrainBlocked: t0.Add(-10 * time.Minute)}}},
			Blocked, "", "refused by a PodDisruptionBudget"},
		{"pending pods keep workers", with(func(in *Inputs) {
			in.Workers[0].Empty = true
			in.Pods = Pods{Pending: 1, OldestPending: 10 * time.Second}
		}), Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}},
			Hold, "", "1 pods pending for 10s"},
		{"a worker on surplus stays", with(func(in *Inputs) {
			in.Workers[0].Empty = true
			in.Energy.Grid = Number("sensor.grid", "20") // 40 of its 60 W are surplus
		}), Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}},
			Hold, "", "nothing to do"},
		{"without a grid sensor idle workers go (pods only)", with(func(in *Inputs) {
			in.Energy = Energy{}
			in.Workers[0].Empty = true
		}), Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}},
			Remove, "w1", "w1 is empty"},
		{"below min adds whatever the energy", with(func(in *Inputs) {
			in.Config.Min = 2
		}), Memory{}, Add, "w2", "1 of at least 2 workers on"},
		{"above max removes", with(func(in *Inputs) {
			in.Config.Max = 1
			in.Workers[1].Power, in.Workers[1].Empty = PowerOn, true
		}), Memory{}, Remove, "w2", "2 workers on, more than max 1"},
		{"cheap hour adds", with(func(in *Inputs) {
			in.Config.CheapHours = 2
			in.Price = priceDay(0.10)
		}), Memory{}, Add, "w2", "one of the day's 2 cheapest hours (price 0.1)"},
		{"an expensive hour does not", with(func(in *Inputs) {
			in.Config.CheapHours = 2
			in.Price = priceDay(0.40)
		}), Memory{}, Hold, "", "nothing to do"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := Decide(tc.in, tc.mem)
			if d.Action != tc.action || d.Node != tc.node || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("got %s %q: %s\nwant %s %q: …%s…", d.Action, d.Node, d.Reason, tc.action, tc.node, tc.reason)
			}
			if d.NextPossible.Before(d.At) {
				t.Errorf("next_possible %v before the decision %v", d.NextPossible, d.At)
			}
			if d.Observe || d.Acts() != (d.Action == Add || d.Action == Remove) {
				t.Errorf("observe %v acts %v", d.Observe, d.Acts())
			}
		})
	}
}

// priceDay is a forecast of 24 hourly slots of the base day: 0.20 + h/100
// for hour h, and now for the current hour.
func priceDay(now float64) Price {
	day := time.Date(t0.Year(), t0.Month(), t0.Day(), 0, 0, 0, 0, time.UTC)
	var p Price
	for h := range 24 {
		v := 0.20 + float64(h)/100
		if h == t0.Hour() {
			v = now
		}
		p.Forecast = append(p.Forecast, Slot{Start: day.Add(time.Duration(h) * time.Hour), End: day.Add(time.Duration(h+1) * time.Hour), Price: v})
	}
	p.Now = Number("sensor.price", formatF(now))
	return p
}

func formatF(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// TestUnknownInputsHold: every unknown input the decision needs holds it,
// naming the input, and never drains blind.
func TestUnknownInputsHold(t *testing.T) {
	// the base wants to remove an idle w1 from a long grid draw
	mem := Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}}
	idle := func(f func(*Inputs)) Inputs {
		return with(func(in *Inputs) { in.Workers[0].Empty = true; f(in) })
	}
	if d, _ := Decide(idle(func(*Inputs) {}), mem); d.Action != Remove {
		t.Fatalf("test bug: base decides %s: %s", d.Action, d.Reason)
	}
	tests := []struct {
		name, reason string
		in           Inputs
	}{
		{"grid unavailable", "sensor.grid is unavailable", idle(func(in *Inputs) { in.Energy.Grid = Number("sensor.grid", "unavailable") })},
		{"grid unknown", "sensor.grid is unknown", idle(func(in *Inputs) { in.Energy.Grid = Number("sensor.grid", "unknown") })},
		{"grid not a number", `sensor.grid is "12 W", not a number`, idle(func(in *Inputs) { in.Energy.Grid = Number("sensor.grid", "12 W") })},
		{"battery unavailable", "sensor.bat is unavailable", idle(func(in *Inputs) { in.Energy.Battery = Number("sensor.bat", "unavailable") })},
		{"battery level unknown while charging", "sensor.soc is unknown", idle(func(in *Inputs) {
			in.Energy.Battery, in.Energy.BatteryLevel = Number("sensor.bat", "-500"), Number("sensor.soc", "unknown")
		})},
		{"price not a number", `sensor.price is "n/a", not a number`, idle(func(in *Inputs) {
			in.Config.PriceCeiling = ptr(0.3)
			in.Price.Now = Number("sensor.price", "n/a")
		})},
		{"home assistant unreachable", "Home Assistant is unreachable (connection refused)", idle(func(in *Inputs) { in.Energy.Err = "connection refused" })},
		{"cluster unreachable", "the cluster API is unreachable (dial tcp 127.0.0.1:6443: refused)", idle(func(in *Inputs) {
			in.Pods.Err = "dial tcp 127.0.0.1:6443: refused"
		})},
		{"a worker's power unknown", "the power of node w2 is unknown", idle(func(in *Inputs) { in.Workers[1].Power = PowerUnknown })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, m := Decide(tc.in, mem)
			if d.Action != Hold || d.Node != "" || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("got %s %q: %s; want hold naming %q", d.Action, d.Node, d.Reason, tc.reason)
			}
			if !m.GridSince.IsZero() || !m.SurplusSince.IsZero() {
				t.Errorf("timers kept across an unknown input: %+v", m)
			}
		})
	}
	// inputs the decision does not need do not hold it: the solar sensor
	// (shown only) and a price without a ceiling or cheap hours
	in := idle(func(in *Inputs) {
		in.Energy.Solar = Number("sensor.pv", "unavailable")
		in.Price.Now = Number("sensor.price", "unavailable")
	})
	if d, _ := Decide(in, mem); d.Action != Remove {
		t.Fatalf("an unneeded unknown input held the pool: %s: %s", d.Action, d.Reason)
	}
}

// TestMinOnTime: a node on for less than min_on is never removed.
func TestMinOnTime(t *testing.T) {
	in := with(func(in *Inputs) {
		in.Workers[0].Empty = true
		in.Workers[0].Since = t0.Add(-29 * time.Minute)
	})
	mem := Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}}
	d, _ := Decide(in, mem)
	if d.Action != Blocked || !strings.Contains(d.Reason, "w1 on for 29m0s of min_on 30m0s") || !d.NextPossible.Equal(t0.Add(time.Minute)) {
		t.Fatalf("got %s: %s next %v", d.Action, d.Reason, d.NextPossible)
	}
	// the pool's own power-on counts too, even if the engine saw it later
	in.Workers[0].Since = t0.Add(-2 * time.Hour)
	mem.Nodes["w1"] = NodeMemory{LastOn: t0.Add(-10 * time.Minute), IdleSince: t0.Add(-time.Hour)}
	if d, _ := Decide(in, mem); d.Action != Blocked {
		t.Fatalf("removed 10 minutes after the pool powered it on: %s", d.Reason)
	}
	in.Now = t0.Add(20 * time.Minute)
	if d, _ := Decide(in, mem); d.Action != Remove || d.Node != "w1" {
		t.Fatalf("after min_on: %s %s", d.Action, d.Reason)
	}
}

// TestMinOffTime: a node off for less than min_off is never added.
func TestMinOffTime(t *testing.T) {
	in := with(func(in *Inputs) {
		in.Pods = Pods{Pending: 2, OldestPending: 3 * time.Minute}
		in.Workers[1].Since = t0.Add(-19 * time.Minute)
		in.Workers[2].Since = t0.Add(-5 * time.Minute)
	})
	d, _ := Decide(in, Memory{})
	if d.Action != Blocked || !strings.Contains(d.Reason, "w2 off for 19m0s of min_off 20m0s") ||
		!strings.Contains(d.Reason, "w3 off for 5m0s") || !d.NextPossible.Equal(t0.Add(time.Minute)) {
		t.Fatalf("got %s: %s next %v", d.Action, d.Reason, d.NextPossible)
	}
	in.Now = t0.Add(time.Minute)
	if d, _ := Decide(in, Memory{}); d.Action != Add || d.Node != "w2" {
		t.Fatalf("after min_off: %s %q %s", d.Action, d.Node, d.Reason)
	}
}

// TestCooldown: no action within the cooldown of the last one, whatever
// the inputs ask for.
func TestCooldown(t *testing.T) {
	in := with(func(in *Inputs) { in.Pods = Pods{Pending: 2, OldestPending: 3 * time.Minute} })
	mem := Memory{LastAction: t0.Add(-4 * time.Minute)}
	d, _ := Decide(in, mem)
	if d.Action != Hold || !strings.Contains(d.Reason, "after the cooldown") || !d.NextPossible.Equal(t0.Add(time.Minute)) {
		t.Fatalf("got %s: %s next %v", d.Action, d.Reason, d.NextPossible)
	}
	in.Now = t0.Add(time.Minute)
	if d, _ := Decide(in, mem); d.Action != Add {
		t.Fatalf("after the cooldown: %s %s", d.Action, d.Reason)
	}
	// a removal waits too, and a refused drain counts as an action
	in = with(func(in *Inputs) { in.Workers[0].Drainable = true })
	mem = Memory{GridSince: t0.Add(-time.Hour), Nodes: map[string]NodeMemory{"w1": {IdleSince: t0.Add(-time.Hour)}}}
	mem = mem.DrainRefused("w9", t0.Add(-time.Minute))
	if d, _ := Decide(in, mem); d.Action != Hold || !strings.Contains(d.Reason, "after the cooldown") {
		t.Fatalf("removal in the cooldown: %s %s", d.Action, d.Reason)
	}
}

// TestOneNodePerStep: with pods pending that need every worker, each
// step adds one node, the next only after the cooldown.
func TestOneNodePerStep(t *testing.T) {
	in := with(func(in *Inputs) {
		in.Workers[0].Power = PowerOff
		in.Pods = Pods{Pending: 30, OldestPending: 10 * time.Minute}
	})
	mem := Memory{}
	var added []string
	for step := range 40 { // 40 minutes, a decision a minute
		in.Now = t0.Add(time.Duration(step) * time.Minute)
		d, m := Decide(in, mem)
		mem = m
		if d.Action == Add {
			if len(added) > 0 && in.Now.Sub(mem.LastAction) < in.Config.Cooldown {
				t.Fatalf("second add within the cooldown at %v", in.Now)
			}
			mem = mem.Acted(d)
			added = append(added, d.Node)
			for i := range in.Workers { // it boots and is Ready at once
				if in.Workers[i].Name == d.Node {
					in.Workers[i].Power, in.Workers[i].Ready, in.Workers[i].Since = PowerOn, true, in.Now
				}
			}
		}
	}
	if strings.Join(added, ",") != "w1,w2,w3" {
		t.Fatalf("added %v", added)
	}
	if !mem.LastAction.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("last action at %v, want the third add at +10m", mem.LastAction)
	}
}

// TestOneCyclePerHour: a node powered on within the hour is not powered
// on again, by the pool's memory or the engine's count.
func TestOneCyclePerHour(t *testing.T) {
	in := with(func(in *Inputs) {
		in.Config.MinOff, in.Config.MinOn = 0, 0
		in.Workers = in.Workers[1:2] // w2 only, off for 5 hours by the engine
		in.Pods = Pods{Pending: 1, OldestPending: 5 * time.Minute}
	})
	mem := Memory{Nodes: map[string]NodeMemory{"w2": {LastOn: t0.Add(-40 * time.Minute), LastOff: t0.Add(-30 * time.Minute)}}}
	d, _ := Decide(in, mem)
	if d.Action != Blocked || !strings.Contains(d.Reason, "powered on within the hour") || !d.NextPossible.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("got %s: %s next %v", d.Action, d.Reason, d.NextPossible)
	}
	in.Now = t0.Add(20 * time.Minute)
	if d, _ := Decide(in, mem); d.Action != Add {
		t.Fatalf("after the hour: %s %s", d.Action, d.Reason)
	}
	in.Now = t0
	in.Workers[0].CyclesLastHour = 1 // powered on by hand
	if d, _ := Decide(in, Memory{}); d.Action != Blocked {
		t.Fatalf("a node cycled by hand within the hour: %s %s", d.Action, d.Reason)
	}
}

// TestNeverControlPlane: a control-plane node is never chosen, never
// counted, whatever asks for it.
func TestNeverControlPlane(t *testing.T) {
	in := with(func(in *Inputs) {
		in.Workers = []Worker{
			{Name: "cp1", ControlPlane: true, Power: PowerOff, Since: t0.Add(-5 * time.Hour), Empty: true},
			{Name: "cp2", ControlPlane: true, Power: PowerOn, Ready: true, Since: t0.Add(-5 * time.Hour), Empty: true},
		}
		in.Pods = Pods{Pending: 3, OldestPending: time.Hour}
	})
	d, _ := Decide(in, Memory{})
	if d.Node != "" || d.Action == Add || d.Inputs.Workers != 0 || d.Inputs.On != 0 {
		t.Fatalf("pending: %s %q %s (workers %d on %d)", d.Action, d.Node, d.Reason, d.Inputs.Workers, d.Inputs.On)
	}
	in.Pods = Pods{}
	in.Config.Max = 0
	d, _ = Decide(in, Memory{GridSince: t0.Add(-time.Hour)})
	if d.Node != "" || d.Action == Remove {
		t.Fatalf("grid: %s %q %s", d.Action, d.Node, d.Reason)
	}
}

// TestObserve: observe mode decides the same and says the caller does not
// act.
func TestObserve(t *testing.T) {
	in := with(func(in *Inputs) { in.Pods = Pods{Pending: 1, OldestPending: time.Hour} })
	on, _ := Decide(in, Memory{})
	in.Config.Mode = tenant.PoolObserve
	obs, _ := Decide(in, Memory{})
	if obs.Action != on.Action || obs.Node != on.Node || obs.Reason != on.Reason || !obs.Observe || obs.Acts() || !on.Acts() {
		t.Fatalf("on %+v\nobserve %+v", on, obs)
	}
}

// TestGuaranteesHold drives the policy with random inputs for a long time
// and checks every guarantee on every decision an obedient caller acts
// on.
func TestGuaranteesHold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 100 {
		c := config()
		c.Min = rng.IntN(2)
		c.Max = c.Min + rng.IntN(4)
		c.CheapHours = rng.IntN(4)
		if rng.IntN(2) == 0 {
			c.PriceCeiling = ptr(0.2 + rng.Float64()/5)
		}
		n := 1 + rng.IntN(4)
		ws := make([]Worker, n)
		for i := range ws {
			ws[i] = Worker{Name: string(rune('a' + i)), Power: PowerOff, Since: t0.Add(-3 * time.Hour), Empty: true}
		}
		if rng.IntN(3) == 0 {
			ws = append(ws, Worker{Name: "cp", ControlPlane: true, Power: PowerOn, Ready: true, Empty: true})
		}
		price := priceDay(0.25)
		mem := Memory{}
		lastOn := map[string][]time.Time{}
		now := t0
		for step := range 600 {
			now = now.Add(time.Duration(15+rng.IntN(90)) * time.Second)
			for i := range ws { // the cluster moves on
				w := &ws[i]
				if w.on() && !w.Ready && now.Sub(w.Since) > 2*time.Minute {
					w.Ready = true
				}
				if w.on() && rng.IntN(10) == 0 {
					w.Empty, w.Drainable = rng.IntN(2) == 0, rng.IntN(2) == 0
				}
				w.CyclesLastHour = 0
				for _, at := range lastOn[w.Name] {
					if now.Sub(at) < time.Hour {
						w.CyclesLastHour++
					}
				}
			}
			grid := float64(rng.IntN(1200) - 700)
			in := Inputs{Now: now, Config: c, Workers: ws, Price: price,
				Pods:   Pods{Pending: rng.IntN(3) * rng.IntN(2), OldestPending: time.Duration(rng.IntN(300)) * time.Second},
				Energy: Energy{Grid: Number("sensor.grid", formatF(grid))}}
			in.Price.Now = Number("sensor.price", formatF(0.15+rng.Float64()/4))
			if rng.IntN(50) == 0 {
				in.Energy.Grid = Number("sensor.grid", "unavailable")
			}
			on := 0
			for _, w := range ws {
				if w.on() && !w.ControlPlane {
					on++
				}
			}
			d, m := Decide(in, mem)
			mem = m
			if d.NextPossible.Before(now) {
				t.Fatalf("run %d step %d: next_possible in the past", run, step)
			}
			if !d.Acts() {
				continue
			}
			var w *Worker
			for i := range ws {
				if ws[i].Name == d.Node {
					w = &ws[i]
				}
			}
			fail := func(f string, a ...any) {
				t.Fatalf("run %d step %d (%v) %s %s: "+f, append([]any{run, step, now, d.Action, d.Node}, a...)...)
			}
			switch {
			case w == nil:
				fail("no such worker")
			case w.ControlPlane:
				fail("a control plane")
			case !mem.LastAction.IsZero() && now.Sub(mem.LastAction) < c.Cooldown:
				fail("within the cooldown")
			case d.Action == Add && (!(w.Power == PowerOff) || now.Sub(w.Since) < c.MinOff):
				fail("add of a node off for %v", now.Sub(w.Since))
			case d.Action == Add && on >= c.Max && on >= c.Min:
				fail("add at %d on, max %d", on, c.Max)
			case d.Action == Add && w.CyclesLastHour > 0:
				fail("a second power-on within the hour")
			case d.Action == Remove && (!w.on() || now.Sub(w.Since) < c.MinOn):
				fail("remove of a node on for %v", now.Sub(w.Since))
			case d.Action == Remove && on <= c.Min:
				fail("remove at %d on, min %d", on, c.Min)
			case d.Action == Remove && !w.Empty && !w.Drainable:
				fail("remove of a busy node")
			}
			mem = mem.Acted(d)
			if d.Action == Add {
				w.Power, w.Ready, w.Since = PowerOn, false, now
				lastOn[w.Name] = append(lastOn[w.Name], now)
			} else if rng.IntN(8) == 0 {
				mem = mem.DrainRefused(w.Name, now) // a PDB said no: the node stays on
			} else {
				w.Power, w.Ready, w.Since, w.Empty, w.Drainable = PowerOff, false, now, true, false
			}
		}
	}
}

func TestMemoryJSON(t *testing.T) {
	m := Memory{LastAction: t0, SurplusSince: t0.Add(time.Minute), Nodes: map[string]NodeMemory{"w1": {LastOn: t0}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Memory
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.LastAction.Equal(m.LastAction) || !back.SurplusSince.Equal(m.SurplusSince) || !back.Nodes["w1"].LastOn.Equal(t0) {
		t.Fatalf("round trip: %s -> %+v", b, back)
	}
	// Acted and Decide never change the memory they are given
	d := Decision{Action: Add, Node: "w2", At: t0}
	_ = m.Acted(d)
	if _, ok := m.Nodes["w2"]; ok {
		t.Fatal("Acted changed its receiver")
	}
}
