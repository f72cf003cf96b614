package pool

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPoolPower(t *testing.T) {
	ws := []Worker{
		{Name: "a", Power: PowerOn},                                          // rated
		{Name: "b", Power: PowerOn, Plug: Number("sensor.b", "41.5")},        // measured
		{Name: "c", Power: PowerOff, Plug: Number("sensor.c", "1.2")},        // standby, measured
		{Name: "d", Power: PowerOff},                                         // nothing
		{Name: "e", Power: PowerOn, Plug: Number("sensor.e", "unavailable")}, // rated again
		{Name: "cp", ControlPlane: true, Power: PowerOn},                     // not the pool's
	}
	if got := PoolPower(ws, 60); !near(got, 60+41.5+1.2+60) {
		t.Fatalf("pool power %v", got)
	}
	e := Energy{Grid: Number("sensor.grid", "-100")}
	if got := SurplusPower(e, 162.7); !near(got, 162.7) {
		t.Errorf("exporting: %v", got)
	}
	e.Grid = Number("sensor.grid", "100") // 62.7 W of the pool's 162.7 from surplus
	if got := SurplusPower(e, 162.7); !near(got, 62.7) {
		t.Errorf("importing part: %v", got)
	}
	e.Grid = Number("sensor.grid", "500")
	if got := SurplusPower(e, 162.7); got != 0 {
		t.Errorf("importing all: %v", got)
	}
	if got := SurplusPower(Energy{}, 162.7); got != 0 {
		t.Errorf("no grid sensor: %v", got)
	}
}

func TestMeter(t *testing.T) {
	loc := time.FixedZone("CEST", 2*3600)
	at := time.Date(2026, 6, 21, 22, 0, 0, 0, loc)
	var m Meter
	m = m.Sample(at, 120, 120) // the first sample only starts the meter
	if m.EnergyKWh != 0 || m.Day != "2026-06-21" {
		t.Fatalf("first sample: %+v", m)
	}
	for i := 1; i <= 12; i++ { // 22:00-23:00 at 120 W, all surplus, 5-minute samples
		m = m.Sample(at.Add(time.Duration(i)*5*time.Minute), 120, 120)
	}
	if !near(m.EnergyKWh, 0.12) || !near(m.SolarShare(at), 100) {
		t.Fatalf("after an hour: %+v share %v", m, m.SolarShare(at))
	}
	m = m.Sample(at.Add(65*time.Minute), 60, 0) // 120 W held to 23:05, then 60 W of grid
	at2 := at.Add(65 * time.Minute)
	for i := 1; i <= 13; i++ { // to 00:10 the next day
		m = m.Sample(at2.Add(time.Duration(i)*5*time.Minute), 60, 0)
	}
	// 23:05-24:00 is 55 min of 60 W grid on the 21st; 00:00-00:10 on the 22nd
	if m.Day != "2026-06-22" || !near(m.TodayKWh, 0.01) || m.TodaySurplusKWh != 0 {
		t.Fatalf("after midnight: %+v", m)
	}
	wantTotal := 0.12 + 0.01 + 0.055 + 0.01
	if !near(m.EnergyKWh, wantTotal) {
		t.Fatalf("total %v want %v", m.EnergyKWh, wantTotal)
	}
	if got := m.SolarShare(at2.Add(time.Hour)); got != 0 {
		t.Errorf("share on the new day = %v", got)
	}
	// restart: the persisted meter continues; a long gap is not counted
	b, _ := json.Marshal(m)
	var back Meter
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	later := back.At.Add(2 * time.Hour)
	back = back.Sample(later, 60, 60)
	if !near(back.EnergyKWh, wantTotal) {
		t.Fatalf("a 2-hour gap was counted: %v", back.EnergyKWh)
	}
	back = back.Sample(later.Add(30*time.Minute), 60, 60)
	if !near(back.EnergyKWh, wantTotal) {
		t.Fatalf("a 30-minute gap was counted: %v", back.EnergyKWh)
	}
	back = back.Sample(later.Add(40*time.Minute), 60, 30)
	if !near(back.EnergyKWh, wantTotal+0.01) {
		t.Fatalf("after the gap: %v", back.EnergyKWh)
	}
	// time going back adds nothing and never lowers the total
	before := back.EnergyKWh
	back = back.Sample(later, 60, 60)
	if back.EnergyKWh != before {
		t.Fatalf("clock back changed the total: %v -> %v", before, back.EnergyKWh)
	}
	// surplus is clamped to the power
	if s := (Meter{}).Sample(at, 50, 80); s.SurplusW != 50 {
		t.Errorf("surplus above power: %+v", s)
	}
}

func TestStatus(t *testing.T) {
	in := with(func(in *Inputs) { in.Pods = Pods{Pending: 1, OldestPending: time.Hour} })
	d, _ := Decide(in, Memory{})
	m := Meter{}.Sample(t0.Add(-time.Hour), 60, 30)
	for i := 1; i <= 4; i++ {
		m = m.Sample(t0.Add(-time.Hour+time.Duration(i)*15*time.Minute), 60, 30)
	}
	st := Status(in.Config, d, m)
	if st.Decision != "add" || st.Node != "w2" || st.Mode != "on" || st.Max != 3 || !near(st.EnergyKWh, 0.06) ||
		!near(st.SolarShare, 50) || st.Inputs["pending_pods"] != 1 || st.Inputs["solar_w"] != 0.0 {
		t.Fatalf("status %+v", st)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Fatal(err)
	}
}
