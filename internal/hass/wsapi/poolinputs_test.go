package wsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/pool"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func runPoolInputs(t *testing.T, fake *fakeha.Server, o PoolInputsOptions) (*PoolInputs, *runningClient) {
	t.Helper()
	rc := startClient(t, fake, testOptions(fake.URL, testToken))
	pi := NewPoolInputs(rc.Client, o, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = pi.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return pi, rc
}

func watts(unit string) map[string]any {
	return map[string]any{"unit_of_measurement": unit, "device_class": "power", "state_class": "measurement"}
}

// TestPoolInputsFollowHomeAssistant: the Energy preferences (2026 shape)
// name the sensors, one subscribe_entities follows them, the price entity
// and the battery level; changes, an unavailable sensor and a lost
// connection all show in the inputs.
func TestPoolInputsFollowHomeAssistant(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetEnergyPrefs(json.RawMessage(prefsUnified))
	fake.SetStateAttrs("sensor.meter_net_power", "0.35", watts("kW")) // inverted: +0.35 kW is export
	fake.SetStateAttrs("sensor.garage_power", "50", watts("W"))
	fake.SetStateAttrs("sensor.pv_power", "2100", watts("W"))
	fake.SetStateAttrs("sensor.bat_discharge_power", "0", watts("W"))
	fake.SetStateAttrs("sensor.bat_charge_power", "400", watts("W"))
	fake.SetStateAttrs("sensor.battery_soc", "91", map[string]any{"unit_of_measurement": "%", "device_class": "battery"})
	fake.SetStateAttrs("sensor.rack_plug_1_power", "38.2", watts("W"))
	fake.SetStateAttrs("sensor.unrelated", "1", nil)
	day := time.Now().Truncate(time.Hour)
	var raw []any
	for h := -2; h < 24; h++ {
		raw = append(raw, map[string]any{"start": day.Add(time.Duration(h) * time.Hour).Format(time.RFC3339),
			"end": day.Add(time.Duration(h+1) * time.Hour).Format(time.RFC3339), "value": 0.20 + float64(h)/100})
	}
	fake.SetStateAttrs("sensor.nordpool_kwh_se3", "0.2", map[string]any{"unit": "kWh", "raw_today": raw, "raw_tomorrow": []any{}})

	pi, _ := runPoolInputs(t, fake, PoolInputsOptions{PriceEntity: "sensor.nordpool_kwh_se3", BatteryEntity: "sensor.battery_soc"})
	pi.SetPlugs([]string{"sensor.rack_plug_1_power"})
	testenv.WaitFor(t, 5*time.Second, "the inputs", func() bool {
		e := pi.Energy()
		_, ok := e.Grid.Known()
		return ok && pi.Plug("sensor.rack_plug_1_power").OK
	})
	e := pi.Energy()
	if v, _ := e.Grid.Known(); v != -300 {
		t.Errorf("grid = %+v, want -350 + 50", e.Grid)
	}
	if v, _ := e.Solar.Known(); v != 2100 {
		t.Errorf("solar = %+v", e.Solar)
	}
	if v, _ := e.Battery.Known(); v != -400 {
		t.Errorf("battery = %+v (discharge 0 - charge 400)", e.Battery)
	}
	if v, _ := e.BatteryLevel.Known(); v != 91 {
		t.Errorf("battery level = %+v", e.BatteryLevel)
	}
	if s, ok := pool.Spare(e); !ok || s != 700 {
		t.Errorf("spare = %v %v (export 300 + a 91 %% battery's 400 W)", s, ok)
	}
	pr := pi.Price()
	if v, _ := pr.Now.Known(); v != 0.2 || len(pr.Forecast) != 26 {
		t.Errorf("price %+v with %d slots", pr.Now, len(pr.Forecast))
	}
	if r := pi.Plug("sensor.rack_plug_1_power"); r.Value != 38.2 {
		t.Errorf("plug %+v", r)
	}
	// one subscription, for exactly the entities the pool reads
	if n := fake.Subscribers("subscribe_entities"); n != 1 {
		t.Errorf("%d subscribe_entities subscriptions", n)
	}

	// a change arrives as a compressed diff
	fake.SetState("sensor.meter_net_power", "-0.2") // importing 200 W
	testenv.WaitFor(t, 5*time.Second, "the change", func() bool { v, _ := pi.Energy().Grid.Known(); return v == 250 })

	// an unavailable sensor makes its reading unknown, naming it
	fake.SetState("sensor.garage_power", "unavailable")
	testenv.WaitFor(t, 5*time.Second, "unavailable", func() bool { return !pi.Energy().Grid.OK })
	if g := pi.Energy().Grid; g.Entity != "sensor.garage_power" || g.Raw != "unavailable" {
		t.Errorf("grid %+v", g)
	}
	fake.SetState("sensor.garage_power", "40")
	testenv.WaitFor(t, 5*time.Second, "back", func() bool { v, _ := pi.Energy().Grid.Known(); return v == 240 })

	// Home Assistant gone: the inputs say so; back: the states again
	fake.SetRefuse(true)
	fake.DropConnections()
	testenv.WaitFor(t, 5*time.Second, "unreachable", func() bool { return pi.Energy().Err != "" })
	fake.SetState("sensor.meter_net_power", "1.0") // changed while away
	fake.SetRefuse(false)
	testenv.WaitFor(t, 5*time.Second, "the state after reconnecting", func() bool {
		v, ok := pi.Energy().Grid.Known()
		return ok && v == -960
	})

	// a new plug is followed once the engine names it
	fake.SetStateAttrs("sensor.rack_plug_2_power", "0.061", watts("kW"))
	pi.SetPlugs([]string{"sensor.rack_plug_1_power", "sensor.rack_plug_2_power"})
	testenv.WaitFor(t, 5*time.Second, "plug 2", func() bool { return pi.Plug("sensor.rack_plug_2_power").Value == 61 })
	testenv.WaitFor(t, 5*time.Second, "one subscription", func() bool { return fake.Subscribers("subscribe_entities") == 1 })
}

// TestPoolInputsOlderShapesAndNone: the 2025 preferences are read the same
// way; preferences never saved (not_found) configure nothing.
func TestPoolInputsOlderShapesAndNone(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetEnergyPrefs(json.RawMessage(prefsLegacy))
	fake.SetStateAttrs("sensor.grid_power", "-120", watts("W"))
	fake.SetStateAttrs("sensor.pv_power", "900", watts("W"))
	fake.SetStateAttrs("sensor.bat_power", "-80", watts("W"))
	pi, _ := runPoolInputs(t, fake, PoolInputsOptions{PrefsInterval: 50 * time.Millisecond})
	testenv.WaitFor(t, 5*time.Second, "the inputs", func() bool { _, ok := pi.Energy().Grid.Known(); return ok })
	e := pi.Energy()
	if v, _ := e.Battery.Known(); v != -80 || e.BatteryLevel.Configured() {
		t.Errorf("battery %+v level %+v", e.Battery, e.BatteryLevel)
	}
	if s, ok := pool.Spare(e); !ok || s != 120 {
		t.Errorf("spare %v (a battery without a level keeps its charge)", s)
	}
	if pi.Price().Now.Configured() {
		t.Error("a price without a price entity")
	}
	// the preferences are cleared in HA: nothing configured any more
	fake.SetEnergyPrefs(nil)
	testenv.WaitFor(t, 5*time.Second, "no preferences", func() bool {
		e := pi.Energy()
		return e.Err == "" && !e.Grid.Configured() && !e.Solar.Configured()
	})
}

// TestPoolInputsForecastFromService: a core Nord Pool sensor has no
// forecast attribute; its integration's service gives one (today and
// tomorrow), in per MWh, brought to the sensor's per kWh.
func TestPoolInputsForecastFromService(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetEnergyPrefs(json.RawMessage(`{"energy_sources":[],"device_consumption":[]}`))
	fake.AddEntity(fakeha.Entity{EntityID: "sensor.nord_pool_se3_current_price", Platform: "nordpool", ConfigEntryID: "01NORDPOOLENTRY"})
	now := time.Now()
	fake.SetStateAttrs("sensor.nord_pool_se3_current_price", "0.1", map[string]any{"unit_of_measurement": "SEK/kWh"})
	var mu sync.Mutex
	var asked []string
	fake.RespondService("nordpool", "get_prices_for_date", func(data json.RawMessage) (any, error) {
		var d struct {
			ConfigEntry string `json:"config_entry"`
			Date        string `json:"date"`
		}
		_ = json.Unmarshal(data, &d)
		if d.ConfigEntry != "01NORDPOOLENTRY" {
			return nil, fmt.Errorf("entry_not_found")
		}
		mu.Lock()
		asked = append(asked, d.Date)
		mu.Unlock()
		day, _ := time.ParseInLocation(time.DateOnly, d.Date, now.Location())
		if day.After(now) {
			return nil, fmt.Errorf("empty_response") // tomorrow's prices are not out yet
		}
		var slots []map[string]any
		for h := range 24 {
			slots = append(slots, map[string]any{"start": day.Add(time.Duration(h) * time.Hour).Format(time.RFC3339),
				"end": day.Add(time.Duration(h+1) * time.Hour).Format(time.RFC3339), "price": 100.0})
		}
		return map[string]any{"SE3": slots}, nil
	})
	pi, _ := runPoolInputs(t, fake, PoolInputsOptions{PriceEntity: "sensor.nord_pool_se3_current_price"})
	testenv.WaitFor(t, 5*time.Second, "the forecast", func() bool { return len(pi.Price().Forecast) == 24 })
	if f := pi.Price().Forecast; f[0].Price != 0.1 {
		t.Errorf("per MWh not brought to per kWh: %+v", f[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || !strings.HasPrefix(asked[0], now.Format("2006-01")) {
		t.Errorf("asked for %v", asked)
	}
}

// TestSubscribeEntitiesAndServiceResponse: the client's two new commands
// against the stand-in: the initial states, the changes, cancel, and a
// service that returns a response (and one that does not).
func TestSubscribeEntitiesAndServiceResponse(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetStateAttrs("sensor.a", "1", map[string]any{"unit_of_measurement": "W"})
	fake.SetState("sensor.b", "2")
	rc := startClient(t, fake, testOptions(fake.URL, testToken))
	if err := rc.WaitConnected(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	events := make(chan json.RawMessage, 10)
	cancel := rc.SubscribeEntities([]string{"sensor.a"}, func(ev json.RawMessage) { events <- ev })
	first := <-events
	if !strings.Contains(string(first), `"sensor.a"`) || strings.Contains(string(first), `"sensor.b"`) {
		t.Fatalf("initial states %s", first)
	}
	fake.SetState("sensor.b", "3") // not followed
	fake.SetStateAttrs("sensor.a", "4", map[string]any{})
	ev := <-events
	es := EntityStates{}
	_ = es.Apply(first)
	_ = es.Apply(ev)
	if es["sensor.a"].State != "4" || len(es["sensor.a"].Attributes) != 0 {
		t.Fatalf("after %s: %+v", ev, es["sensor.a"])
	}
	cancel()
	testenv.WaitFor(t, 5*time.Second, "unsubscribed", func() bool { return fake.Subscribers("subscribe_entities") == 0 })

	fake.RespondService("tibber", "get_prices", func(json.RawMessage) (any, error) {
		return map[string]any{"prices": map[string]any{"Home": []any{}}}, nil
	})
	resp, err := rc.CallServiceResponse(waitCtx(t), "tibber", "get_prices", map[string]any{"start": "2026-06-21 00:00:00"})
	if err != nil || string(resp) != `{"prices":{"Home":[]}}` {
		t.Fatalf("response %s, %v", resp, err)
	}
	if err := rc.CallService(waitCtx(t), "tibber", "get_prices", nil); err == nil || !strings.Contains(err.Error(), "return_response=True") {
		t.Errorf("a response-only service without return_response: %v", err)
	}
	if _, err := rc.CallServiceResponse(waitCtx(t), "light", "turn_on", nil); err == nil || !strings.Contains(err.Error(), "service_validation_error") {
		t.Errorf("return_response on a service without responses: %v", err)
	}
}

// TestPoolInputsWithoutLink: without a WebSocket link nothing is
// configured (the pools follow the pods), but a price entity that cannot
// be read is unknown, not absent.
func TestPoolInputsWithoutLink(t *testing.T) {
	pi := NewPoolInputs(New(Options{}, nil), PoolInputsOptions{PriceEntity: "sensor.price"}, nil)
	if err := pi.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := pi.Energy(); e.Err != "" || e.Grid.Configured() {
		t.Errorf("energy %+v", e)
	}
	if p := pi.Price(); !p.Now.Configured() || p.Now.OK {
		t.Errorf("price %+v", p.Now)
	}
}
