package pool

import (
	"encoding/json"
	"testing"
	"time"
)

// TestStateStep: a caller's loop over Step: decisions, the meter, the
// changed flag, and a JSON round trip in the middle (a restart).
func TestStateStep(t *testing.T) {
	in := with(func(in *Inputs) { in.Energy.Grid = Number("sensor.grid", "-500") }) // exporting
	var st State
	var changes []Action
	for i := range 30 { // 15 minutes, a step every 30 s
		in.Now = t0.Add(time.Duration(i) * 30 * time.Second)
		d, next, changed := st.Step(in)
		if changed {
			changes = append(changes, d.Action)
		}
		if d.Acts() {
			next.Memory = next.Memory.Acted(d)
			for j := range in.Workers {
				if in.Workers[j].Name == d.Node {
					in.Workers[j].Power, in.Workers[j].Ready, in.Workers[j].Since = PowerOn, true, in.Now
				}
			}
		}
		st = next
		if i == 15 { // restart: the state comes back from disk
			b, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			st = State{}
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatal(err)
			}
		}
	}
	// hold while the surplus lasts 10 minutes, then add w2; hold again
	if len(changes) != 3 || changes[0] != Hold || changes[1] != Add || changes[2] != Hold {
		t.Fatalf("changes %v", changes)
	}
	if st.Last == nil || st.Memory.Nodes["w2"].LastOn.IsZero() {
		t.Fatalf("state %+v", st)
	}
	// 60 W until the sample after the add (10.5 minutes: a sample's power
	// holds until the next), then 120 W for 4 minutes, all surplus
	want := (60*10.5/60 + 120*4.0/60) / 1000
	if !near(st.Meter.EnergyKWh, want) || !near(st.Meter.SolarShare(in.Now), 100) {
		t.Fatalf("meter %+v, want %v kWh", st.Meter, want)
	}
}
