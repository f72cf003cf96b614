package wsapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pool"
)

// Energy preferences in the shapes HA has stored (energy/data.py).
const (
	// 2026.3+ (storage 1.3): unified grid connections with power_config.
	prefsUnified = `{"energy_sources":[
	 {"type":"grid","stat_energy_from":"sensor.import_kwh","stat_energy_to":"sensor.export_kwh","stat_cost":null,
	  "entity_energy_price":null,"number_energy_price":null,"stat_compensation":null,"entity_energy_price_export":null,
	  "number_energy_price_export":null,"stat_rate":"sensor.energy_grid_power_inverted","power_config":{"stat_rate_inverted":"sensor.meter_net_power"},
	  "cost_adjustment_day":0.0},
	 {"type":"grid","stat_energy_from":"sensor.garage_import_kwh","stat_energy_to":null,"stat_cost":null,"entity_energy_price":null,
	  "number_energy_price":null,"stat_compensation":null,"entity_energy_price_export":null,"number_energy_price_export":null,
	  "stat_rate":"sensor.garage_power","cost_adjustment_day":0.0},
	 {"type":"solar","stat_energy_from":"sensor.pv_kwh","stat_rate":"sensor.pv_power","config_entry_solar_forecast":null},
	 {"type":"solar","stat_energy_from":"tibber:pv","stat_rate":"tibber:pv_power","config_entry_solar_forecast":null},
	 {"type":"battery","stat_energy_from":"sensor.bat_out_kwh","stat_energy_to":"sensor.bat_in_kwh",
	  "stat_rate":"sensor.energy_battery_power","power_config":{"stat_rate_from":"sensor.bat_discharge_power","stat_rate_to":"sensor.bat_charge_power"}},
	 {"type":"gas","stat_energy_from":"sensor.gas_m3","stat_rate":"sensor.gas_flow"}],
	"device_consumption":[{"stat_consumption":"sensor.rack_kwh","stat_rate":"sensor.rack_power","name":null}],
	"device_consumption_water":[]}`
	// 2025 (storage 1.2): one grid with flow_from, flow_to and power.
	prefsLegacy = `{"energy_sources":[
	 {"type":"grid","flow_from":[{"stat_energy_from":"sensor.import_kwh","stat_cost":null,"entity_energy_price":null,"number_energy_price":null}],
	  "flow_to":[{"stat_energy_to":"sensor.export_kwh","stat_compensation":null,"entity_energy_price":null,"number_energy_price":null}],
	  "power":[{"stat_rate":"sensor.grid_power"}],"cost_adjustment_day":0.0},
	 {"type":"solar","stat_energy_from":"sensor.pv_kwh","stat_rate":"sensor.pv_power","config_entry_solar_forecast":null},
	 {"type":"battery","stat_energy_from":"sensor.bat_out_kwh","stat_energy_to":"sensor.bat_in_kwh","stat_rate":"sensor.bat_power"}],
	"device_consumption":[],"device_consumption_water":[]}`
	// before power sensors: energy meters only.
	prefsOld = `{"energy_sources":[
	 {"type":"grid","flow_from":[{"stat_energy_from":"sensor.import_kwh","stat_cost":null,"entity_energy_from":"sensor.import_kwh","entity_energy_price":null,"number_energy_price":null}],
	  "flow_to":[],"cost_adjustment_day":0.0},
	 {"type":"solar","stat_energy_from":"sensor.pv_kwh","config_entry_solar_forecast":null}],
	"device_consumption":[]}`
)

func TestEnergyPrefsSensors(t *testing.T) {
	tests := []struct {
		name, prefs string
		want        EnergySensors
	}{
		{"2026.3 unified", prefsUnified, EnergySensors{
			Grid:    []PowerSensor{{Entity: "sensor.meter_net_power", Sign: -1}, {Entity: "sensor.garage_power", Sign: 1}},
			Solar:   []PowerSensor{{Entity: "sensor.pv_power", Sign: 1}},
			Battery: []PowerSensor{{Entity: "sensor.bat_discharge_power", Sign: 1, Minus: "sensor.bat_charge_power"}},
		}},
		{"2025 legacy grid", prefsLegacy, EnergySensors{
			Grid:    []PowerSensor{{Entity: "sensor.grid_power", Sign: 1}},
			Solar:   []PowerSensor{{Entity: "sensor.pv_power", Sign: 1}},
			Battery: []PowerSensor{{Entity: "sensor.bat_power", Sign: 1}},
		}},
		{"energy meters only", prefsOld, EnergySensors{}},
		{"empty", `{"energy_sources":[],"device_consumption":[]}`, EnergySensors{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p EnergyPrefs
			if err := json.Unmarshal([]byte(tc.prefs), &p); err != nil {
				t.Fatal(err)
			}
			if got := p.Sensors(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("sensors\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPowerReadings(t *testing.T) {
	st := func(state, unit string) EntityState {
		a := map[string]any{}
		if unit != "" {
			a["unit_of_measurement"] = unit
		}
		return EntityState{State: state, Attributes: a}
	}
	states := map[string]EntityState{
		"sensor.net":   st("0.4", "kW"),
		"sensor.g2":    st("-150", "W"),
		"sensor.out":   st("700", "W"),
		"sensor.in":    st("200", ""),
		"sensor.btu":   st("12", "BTU/h"),
		"sensor.unav":  st("unavailable", "W"),
		"sensor.milli": st("2500", "mW"),
	}
	read := func(e string) pool.Reading {
		s, ok := states[e]
		return powerReading(e, s, ok)
	}
	r := combine([]PowerSensor{{Entity: "sensor.net", Sign: -1}, {Entity: "sensor.g2", Sign: 1}}, read)
	if !r.OK || r.Value != -550 || r.Entity != "sensor.net+sensor.g2" {
		t.Errorf("grid: %+v", r)
	}
	if r := combine([]PowerSensor{{Entity: "sensor.out", Sign: 1, Minus: "sensor.in"}}, read); !r.OK || r.Value != 500 {
		t.Errorf("two sensors: %+v", r)
	}
	if r := combine([]PowerSensor{{Entity: "sensor.milli", Sign: 1}}, read); !r.OK || r.Value != 2.5 {
		t.Errorf("mW: %+v", r)
	}
	if r := combine([]PowerSensor{{Entity: "sensor.net", Sign: 1}, {Entity: "sensor.unav", Sign: 1}}, read); r.OK || r.Entity != "sensor.unav" || r.Raw != "unavailable" {
		t.Errorf("one unavailable: %+v", r)
	}
	if r := combine([]PowerSensor{{Entity: "sensor.btu", Sign: 1}}, read); r.OK || r.Raw != "12 BTU/h" {
		t.Errorf("not a power unit: %+v", r)
	}
	if r := combine([]PowerSensor{{Entity: "sensor.gone", Sign: 1}}, read); r.OK || r.Entity != "sensor.gone" {
		t.Errorf("no state yet: %+v", r)
	}
	if r := combine(nil, read); r.Configured() {
		t.Errorf("none configured: %+v", r)
	}
}

func TestEntityStatesApply(t *testing.T) {
	es := EntityStates{}
	steps := []string{
		`{"a":{"sensor.grid":{"s":"120","a":{"unit_of_measurement":"W","friendly_name":"Grid"},"c":"01CTX","lc":1781000000.5},
		       "sensor.price":{"s":"0.21","a":{"raw_today":[]},"c":"01CTY","lc":1781000000,"lu":1781000100}}}`,
		`{"c":{"sensor.grid":{"+":{"s":"-300","lc":1781000060,"c":"01CTZ"}}}}`,
		`{"c":{"sensor.grid":{"+":{"a":{"icon":"mdi:flash"},"lu":1781000070,"c":{"parent_id":null}}},
		       "sensor.price":{"+":{"lu":1781000200},"-":{"a":["raw_today"]}},
		       "sensor.unseen":{"+":{"s":"5"}}},
		 "r":["sensor.old"]}`,
	}
	es["sensor.old"] = EntityState{State: "1"}
	for _, s := range steps {
		if err := es.Apply(json.RawMessage(s)); err != nil {
			t.Fatal(err)
		}
	}
	g := es["sensor.grid"]
	if g.State != "-300" || g.Attributes["unit_of_measurement"] != "W" || g.Attributes["icon"] != "mdi:flash" ||
		!g.LastChanged.Equal(time.Unix(1781000060, 0)) || !g.LastUpdated.Equal(time.Unix(1781000070, 0)) {
		t.Errorf("grid %+v", g)
	}
	if p := es["sensor.price"]; p.State != "0.21" || len(p.Attributes) != 0 || !p.LastUpdated.Equal(time.Unix(1781000200, 0)) {
		t.Errorf("price %+v", p)
	}
	if _, ok := es["sensor.old"]; ok {
		t.Error("removed entity kept")
	}
	if _, ok := es["sensor.unseen"]; ok {
		t.Error("a change of an entity never added was taken as its state")
	}
	if err := es.Apply(json.RawMessage(`[1]`)); err == nil {
		t.Error("a malformed event is not an error")
	}
}
