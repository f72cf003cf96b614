package hass

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func (p *fakeCmd) Pool(_ context.Context, t, g string, mode *string, min, max *int) error {
	s := func(v any) string {
		switch x := v.(type) {
		case *string:
			if x != nil {
				return *x
			}
		case *int:
			if x != nil {
				return fmt.Sprint(*x)
			}
		}
		return "-"
	}
	return p.rec("pool %s %s %s %s %s", t, g, s(mode), s(min), s(max))
}

func pooledLab() *tenant.Tenant {
	t := labTenant()
	mn, mx := 0, 2
	t.NodeGroups[1].Pool = &tenant.Pool{Mode: tenant.PoolObserve, Min: &mn, Max: &mx, Watts: 60}
	return t
}

// TestPoolEntities: a pooled group's entities pass the conformance
// checker, read their values from the tenant state document, exist only
// for the pooled group, and show the engine's pool status.
func TestPoolEntities(t *testing.T) {
	m := broker(t)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{pooledLab()})
	at := time.Date(2026, 6, 21, 10, 5, 0, 0, time.FixedZone("CEST", 7200))
	setStatus(b, "lab", tenant.Status{Phase: tenant.PhaseRunning, Pools: map[string]tenant.PoolStatus{"workers": {
		Mode: tenant.PoolOn, Decision: "add", Node: "lab-workers-2", Reason: "420 W to spare covers one more worker (60 W) for 10m0s",
		At: at, NextPossible: at.Add(5 * time.Minute), Inputs: map[string]any{"grid_w": -420.0, "pending_pods": 0},
		PowerW: 61.5, EnergyKWh: 12.25, SolarShare: 87.5}}})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	obs := newObserver(t, m.URL, "#")
	obs.sync(t)
	disc, ok := obs.get("homeassistant/device/rezuscloud_lab/config")
	if !ok {
		t.Fatal("no tenant discovery")
	}
	for _, err := range hasstest.NewChecker().Check(disc.topic, disc.payload, disc.retained) {
		t.Errorf("conformance: %v", err)
	}
	var d struct {
		Components map[string]map[string]any `json:"components"`
	}
	if err := json.Unmarshal(disc.payload, &d); err != nil {
		t.Fatal(err)
	}
	state, _ := obs.get("rezuscloud/lab/state")
	want := map[string]string{ // component -> platform and name
		"workers_pool": "select Workers pool", "workers_pool_min": "number Workers pool min",
		"workers_pool_max": "number Workers pool max", "workers_pool_decision": "sensor Workers pool decision",
		"workers_pool_event": "event Workers pool", "workers_pool_power": "sensor Workers pool power",
		"workers_pool_energy": "sensor Workers pool energy", "workers_pool_solar_share": "sensor Workers pool solar share",
	}
	for id, pn := range want {
		c, ok := d.Components[id]
		if !ok {
			t.Errorf("component %s missing", id)
			continue
		}
		if got := fmt.Sprint(c["platform"], " ", c["name"]); got != pn {
			t.Errorf("%s: %s, want %s", id, got, pn)
		}
		for _, k := range []string{"value_template", "json_attributes_template"} {
			if tpl, ok := c[k].(string); ok {
				for _, err := range hasstest.CheckTemplate(tpl, state.payload) {
					t.Errorf("%s: %v", id, err)
				}
			}
		}
	}
	for id := range d.Components {
		if strings.HasPrefix(id, "cp_pool") {
			t.Errorf("the control-plane group has pool entity %s", id)
		}
	}
	if c := d.Components["workers_pool_energy"]; c["device_class"] != "energy" || c["state_class"] != "total_increasing" || c["unit_of_measurement"] != "kWh" {
		t.Errorf("energy sensor %v", c)
	}
	if c := d.Components["workers_pool_power"]; c["device_class"] != "power" || c["state_class"] != "measurement" || c["unit_of_measurement"] != "W" {
		t.Errorf("power sensor %v", c)
	}
	if c := d.Components["workers_pool_max"]; c["min"] != 0.0 || c["max"] != 2.0 || c["command_topic"] != "rezuscloud/lab/workers/pool_max/set" {
		t.Errorf("max number %v (bounds: the group's count 2)", c)
	}
	if c := d.Components["workers_pool_event"]; c["state_topic"] != "rezuscloud/lab/workers/pool/event" ||
		fmt.Sprint(c["event_types"]) != "[hold add remove blocked]" {
		t.Errorf("event entity %v", c)
	}
	var doc struct {
		Pools map[string]map[string]any `json:"pools"`
	}
	_ = json.Unmarshal(state.payload, &doc)
	w := doc.Pools["workers"]
	if w["mode"] != "observe" || w["max"] != 2.0 || w["decision"] != "add" || w["node"] != "lab-workers-2" ||
		w["energy_kwh"] != 12.25 || w["solar_share"] != 87.5 || w["next_possible"] != "2026-06-21T10:10:00.000+02:00" {
		t.Errorf("pool doc %v (mode and max are the file's)", w)
	}
	if _, ok := doc.Pools["cp"]; ok {
		t.Error("a pool doc for cp")
	}

	// before the engine reports, the meters are null (unknown), never 0
	setStatus(b, "lab", tenant.Status{Phase: tenant.PhaseRunning})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool {
		return strings.Contains(string(p), `"reason":"no decision yet"`)
	})
	if !strings.Contains(string(st.payload), `"energy_kwh":null`) {
		t.Errorf("energy before any report: %s", st.payload)
	}
}

// TestPoolCommands: the select and numbers send pool requests; the
// request API takes them with their syntax checked.
func TestPoolCommands(t *testing.T) {
	m := broker(t)
	cmd := newFakeCmd()
	startBridge(t, fastOptions(m.URL), cmd, []*tenant.Tenant{pooledLab()})
	publish(t, m.URL, "rezuscloud/lab/workers/pool/set", []byte("on"), false)
	cmd.waitCall(t, "pool lab workers on - -")
	publish(t, m.URL, "rezuscloud/lab/workers/pool_max/set", []byte("1.0"), false)
	cmd.waitCall(t, "pool lab workers - - 1")
	publish(t, m.URL, "rezuscloud/lab/workers/pool_min/set", []byte("0"), false)
	cmd.waitCall(t, "pool lab workers - 0 -")
	publish(t, m.URL, "rezuscloud/lab/workers/pool/set", []byte("auto"), false) // refused before the engine
	publish(t, m.URL, "rezuscloud/lab/cp/pool/set", []byte("on"), false)        // no such entity
	cmd.noCall(t, 200*time.Millisecond)

	obs := newObserver(t, m.URL, "rezuscloud/bridge/response/#")
	ask := func(payload string) Response {
		t.Helper()
		before := obs.count("rezuscloud/bridge/response/pool")
		publish(t, m.URL, "rezuscloud/bridge/request/pool", []byte(payload), false)
		testenv.WaitFor(t, 5*time.Second, "response", func() bool { return obs.count("rezuscloud/bridge/response/pool") > before })
		mm, _ := obs.get("rezuscloud/bridge/response/pool")
		var r Response
		if err := json.Unmarshal(mm.payload, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(`{"tenant":"lab","group":"workers","mode":"observe","min":0,"max":2,"transaction":7}`); !r.OK() ||
		fmt.Sprint(r.Data) != "map[group:workers max:2 min:0 mode:observe tenant:lab]" {
		t.Errorf("pool request: %+v", r)
	}
	cmd.waitCall(t, "pool lab workers observe 0 2")
	for payload, want := range map[string]string{
		`{"tenant":"lab","group":"workers"}`:                 `needs at least one of "mode", "min", "max"`,
		`{"tenant":"lab","group":"workers","mode":"auto"}`:   `mode "auto" is not one of off, observe, on`,
		`{"tenant":"lab","group":"workers","min":3,"max":1}`: "min 3 is more than max 1",
		`{"tenant":"lab","group":"workers","max":-1}`:        "max -1 is not a whole number",
		`{"tenant":"lab","group":"workers","max":"x"}`:       "max \"x\" is not a whole number",
		`{"tenant":"lab","mode":"on"}`:                       `needs field "group"`,
		`{"tenant":"lab","group":"workers","count":2}`:       "does not apply",
	} {
		if r := ask(payload); r.OK() || !strings.Contains(r.Error, want) {
			t.Errorf("%s: %+v, want %q", payload, r, want)
		}
	}
	cmd.noCall(t, 100*time.Millisecond)
}

// TestPoolDecisionEvents: decisions fire the event entity, not retained,
// on the group's topic; a group without a pool gets none.
func TestPoolDecisionEvents(t *testing.T) {
	m := broker(t)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{pooledLab()})
	obs := newObserver(t, m.URL, "rezuscloud/lab/+/pool/event")
	at := time.Date(2026, 6, 21, 18, 20, 0, 0, time.UTC)
	b.PublishPoolDecision("lab", "workers", tenant.PoolStatus{Decision: "remove", Node: "lab-workers-1",
		Reason: "the pool draws 60 W from the grid for 10m0s and lab-workers-1 is empty", At: at, NextPossible: at.Add(5 * time.Minute)})
	b.PublishPoolDecision("lab", "cp", tenant.PoolStatus{Decision: "add"})
	b.PublishPoolDecision("lab", "workers", tenant.PoolStatus{Decision: "explode"})
	b.PublishPoolDecision("lab", "workers", tenant.PoolStatus{Decision: "hold", Reason: "nothing to do", At: at.Add(time.Minute)})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	obs.sync(t)
	if n := obs.count("rezuscloud/lab/workers/pool/event"); n != 2 {
		t.Fatalf("%d events", n)
	}
	if obs.count("rezuscloud/lab/cp/pool/event") != 0 {
		t.Error("an event for a group without a pool")
	}
	obs.mu.Lock()
	mm := obs.all[0]
	obs.mu.Unlock()
	var ev map[string]any
	_ = json.Unmarshal(mm.payload, &ev)
	if mm.retained || ev["event_type"] != "remove" || ev["node"] != "lab-workers-1" || ev["at"] != "2026-06-21T18:20:00.000+00:00" {
		t.Errorf("event %s retained=%v", mm.payload, mm.retained)
	}
}
