package pool

import (
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// PoolPower is what the pool's workers draw now (W): a machine's plug
// sensor where it names one and the sensor has a number, else the rated
// watts of a worker that is on (booting included); 0 for a worker that is
// off without a plug sensor.
func PoolPower(ws []Worker, watts float64) float64 {
	total := 0.0
	for _, w := range ws {
		if w.ControlPlane {
			continue
		}
		if v, ok := w.Plug.Known(); ok && v >= 0 {
			total += v
			continue
		}
		if w.on() {
			total += watts
		}
	}
	return total
}

// SurplusPower is the part of the pool's draw poolW that the surplus
// covers (W): all of it while the house exports at least that much, none
// without a grid sensor (conservative: unknown counts as grid).
func SurplusPower(e Energy, poolW float64) float64 {
	spare, ok := Spare(e)
	if !ok {
		return 0
	}
	return min(poolW, max(0, poolW+spare))
}

// MaxGap is the longest time between two samples the meter integrates
// over: a longer gap (the add-on was stopped) is not counted, as nobody
// knows what the pool drew meanwhile.
const MaxGap = 15 * time.Minute

// Meter integrates the pool's power into energy. It is plain data for
// JSON: the caller persists it (with Memory) so that EnergyKWh survives
// restarts and never decreases (a total_increasing sensor).
type Meter struct {
	// EnergyKWh is the pool's energy since the meter started.
	EnergyKWh float64 `json:"energy_kwh"`
	// Day is the local date (2006-01-02) TodayKWh and TodaySurplusKWh
	// count; they start again at local midnight.
	Day             string  `json:"day"`
	TodayKWh        float64 `json:"today_kwh"`
	TodaySurplusKWh float64 `json:"today_surplus_kwh"`
	// At is the last sample; PowerW and SurplusW its values, held until
	// the next sample.
	At       time.Time `json:"at"`
	PowerW   float64   `json:"power_w"`
	SurplusW float64   `json:"surplus_w"`
}

// Sample adds the energy since the last sample (the last power held over
// the interval, split at local midnights in now's zone) and records the
// new power and its surplus part. Samples going back in time or after a
// gap longer than MaxGap add nothing.
func (m Meter) Sample(now time.Time, powerW, surplusW float64) Meter {
	surplusW = min(max(surplusW, 0), max(powerW, 0))
	if !m.At.IsZero() && now.After(m.At) && now.Sub(m.At) <= MaxGap {
		from := m.At.In(now.Location())
		for from.Before(now) {
			to := now
			if mid := nextMidnight(from); mid.Before(now) {
				to = mid
			}
			m = m.roll(from)
			h := to.Sub(from).Hours()
			m.EnergyKWh += m.PowerW * h / 1000
			m.TodayKWh += m.PowerW * h / 1000
			m.TodaySurplusKWh += m.SurplusW * h / 1000
			from = to
		}
	}
	m = m.roll(now)
	m.At, m.PowerW, m.SurplusW = now, max(powerW, 0), surplusW
	return m
}

// roll starts the day counters again when t is on another local day.
func (m Meter) roll(t time.Time) Meter {
	if day := t.Format(time.DateOnly); day != m.Day {
		m.Day, m.TodayKWh, m.TodaySurplusKWh = day, 0, 0
	}
	return m
}

// SolarShare is today's share of the pool's energy that came from surplus
// (percent, 0 before any energy today); now gives the local day.
func (m Meter) SolarShare(now time.Time) float64 {
	if m.Day != now.Format(time.DateOnly) || m.TodayKWh <= 0 {
		return 0
	}
	return 100 * m.TodaySurplusKWh / m.TodayKWh
}

func nextMidnight(t time.Time) time.Time {
	y, mo, d := t.Date()
	return time.Date(y, mo, d+1, 0, 0, 0, 0, t.Location())
}

// Status is what Home Assistant shows of a pool (the tenant state
// document's pools entry): its settings, the decision and the meter.
func Status(c tenant.PoolConfig, d Decision, m Meter) tenant.PoolStatus {
	return tenant.PoolStatus{
		Mode: c.Mode, Min: c.Min, Max: c.Max,
		Decision: string(d.Action), Node: d.Node, Reason: d.Reason, Observe: d.Observe,
		At: d.At, NextPossible: d.NextPossible, Inputs: d.Inputs.Map(),
		PowerW: m.PowerW, EnergyKWh: m.EnergyKWh, SolarShare: m.SolarShare(d.At),
	}
}
