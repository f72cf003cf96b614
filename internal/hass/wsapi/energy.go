package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/pool"
)

// EnergyPrefs is what the pools read of Home Assistant's Energy
// preferences (energy/get_prefs): the sources' power sensors. It reads
// every shape HA has stored (homeassistant/components/energy/data.py):
//
//   - since 2026.3 (storage 1.3): one "grid" source per connection, each
//     with an optional stat_rate (W or kW, positive importing) and the
//     user's power_config; "solar" sources with stat_rate; "battery"
//     sources with stat_rate (positive discharging) and power_config;
//   - 2025 (storage 1.2): one "grid" source with flow_from, flow_to and a
//     "power" list of {stat_rate, power_config};
//   - before: sources with energy meters only (no power sensor: nothing
//     to read).
//
// A power_config is one of stat_rate (as is), stat_rate_inverted (the
// opposite sign) or stat_rate_from and stat_rate_to (from minus to); HA
// also writes a stat_rate it generates for the last two, which the pool
// does not need (it reads the user's sensors themselves).
type EnergyPrefs struct {
	EnergySources []EnergySource `json:"energy_sources"`
}

// EnergySource is one source of the preferences.
type EnergySource struct {
	Type        string       `json:"type"`
	StatRate    string       `json:"stat_rate"`
	PowerConfig *PowerConfig `json:"power_config"`
	// Power is the 2025 grid's list of power sensors.
	Power []struct {
		StatRate    string       `json:"stat_rate"`
		PowerConfig *PowerConfig `json:"power_config"`
	} `json:"power"`
}

// PowerConfig is how a user configured a power sensor.
type PowerConfig struct {
	StatRate         string `json:"stat_rate"`
	StatRateInverted string `json:"stat_rate_inverted"`
	StatRateFrom     string `json:"stat_rate_from"`
	StatRateTo       string `json:"stat_rate_to"`
}

// PowerSensor is one power sensor and how it counts: Entity times Sign,
// minus Minus when that is set (the two-sensor form).
type PowerSensor struct {
	Entity string
	Sign   float64
	Minus  string
}

// EnergySensors are the power sensors of each kind (several grid
// connections or solar arrays add up).
type EnergySensors struct {
	Solar, Grid, Battery []PowerSensor
}

// Entities lists every entity the sensors read.
func (s EnergySensors) Entities() []string {
	var out []string
	for _, l := range [][]PowerSensor{s.Solar, s.Grid, s.Battery} {
		for _, p := range l {
			out = append(out, p.Entity)
			if p.Minus != "" {
				out = append(out, p.Minus)
			}
		}
	}
	return out
}

// entityRxp is an entity id; statistic ids of other sources
// ("tibber:energy_…") have no state to follow and are skipped.
var entityRxp = regexp.MustCompile(`^[a-z0-9_]+\.[a-z0-9_]+$`)

func sensorOf(statRate string, pc *PowerConfig) (PowerSensor, bool) {
	var p PowerSensor
	switch {
	case pc != nil && pc.StatRate != "":
		p = PowerSensor{Entity: pc.StatRate, Sign: 1}
	case pc != nil && pc.StatRateInverted != "":
		p = PowerSensor{Entity: pc.StatRateInverted, Sign: -1}
	case pc != nil && pc.StatRateFrom != "" && pc.StatRateTo != "":
		p = PowerSensor{Entity: pc.StatRateFrom, Sign: 1, Minus: pc.StatRateTo}
	case statRate != "":
		p = PowerSensor{Entity: statRate, Sign: 1}
	default:
		return p, false
	}
	if !entityRxp.MatchString(p.Entity) || (p.Minus != "" && !entityRxp.MatchString(p.Minus)) {
		return p, false
	}
	return p, true
}

// Sensors lists the power sensors the preferences name.
func (p EnergyPrefs) Sensors() EnergySensors {
	var s EnergySensors
	for _, src := range p.EnergySources {
		var list *[]PowerSensor
		switch src.Type {
		case "grid":
			list = &s.Grid
		case "solar":
			list = &s.Solar
		case "battery":
			list = &s.Battery
		default:
			continue
		}
		if ps, ok := sensorOf(src.StatRate, src.PowerConfig); ok {
			*list = append(*list, ps)
		}
		for _, pw := range src.Power {
			if ps, ok := sensorOf(pw.StatRate, pw.PowerConfig); ok {
				*list = append(*list, ps)
			}
		}
	}
	return s
}

// GetEnergyPrefs reads the Energy preferences. Preferences never saved
// (HA answers not_found "No prefs") are empty, not an error.
func (c *Client) GetEnergyPrefs(ctx context.Context) (EnergyPrefs, error) {
	raw, err := c.Call(ctx, map[string]any{"type": "energy/get_prefs"})
	var herr *Error
	if errors.As(err, &herr) && herr.Code == "not_found" {
		return EnergyPrefs{}, nil
	}
	if err != nil {
		return EnergyPrefs{}, fmt.Errorf("energy/get_prefs: %w", err)
	}
	var p EnergyPrefs
	if err := json.Unmarshal(raw, &p); err != nil {
		return EnergyPrefs{}, fmt.Errorf("energy/get_prefs: unexpected answer: %w", err)
	}
	return p, nil
}

// powerScale converts a power unit to watts (HA's UnitOfPower).
var powerScale = map[string]float64{"mW": 0.001, "W": 1, "kW": 1000, "MW": 1e6, "GW": 1e9, "": 1}

// powerReading reads a power sensor's state in watts: a number with a
// power unit (no unit counts as W).
func powerReading(entity string, st EntityState, ok bool) pool.Reading {
	if !ok {
		return pool.Reading{Entity: entity, Raw: "unknown"}
	}
	r := pool.Number(entity, st.State)
	unit, _ := st.Attributes["unit_of_measurement"].(string)
	scale, known := powerScale[strings.TrimSpace(unit)]
	if r.OK && !known {
		return pool.Reading{Entity: entity, Raw: st.State + " " + unit}
	}
	r.Value *= scale
	return r
}

// combine adds sensors into one reading: not OK, naming the first sensor
// that is not, when any is unknown; Entity lists them all.
func combine(ps []PowerSensor, read func(string) pool.Reading) pool.Reading {
	if len(ps) == 0 {
		return pool.Reading{}
	}
	var names []string
	total := 0.0
	var bad *pool.Reading
	for _, p := range ps {
		names = append(names, p.Entity)
		r := read(p.Entity)
		v := r.Value * p.Sign
		if p.Minus != "" {
			names = append(names, p.Minus)
			m := read(p.Minus)
			if !m.OK && bad == nil {
				bad = &m
			}
			v -= m.Value
		}
		if !r.OK && bad == nil {
			bad = &r
		}
		total += v
	}
	if bad != nil {
		return *bad
	}
	return pool.Reading{Entity: strings.Join(names, "+"), Value: total, OK: true, Raw: strconv.FormatFloat(total, 'f', -1, 64)}
}
