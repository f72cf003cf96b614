package hass

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// availableTpl is the one availability template shape the bridge emits.
var availableTpl = regexp.MustCompile(`^\{\{ 'online' if value_json\.([a-z_]+) else 'offline' \}\}$`)

// available evaluates an availability item's template against a state
// document the way Jinja would for this shape: null, false, 0 and "" are
// false.
func available(t *testing.T, tpl string, doc []byte) bool {
	t.Helper()
	m := availableTpl.FindStringSubmatch(tpl)
	if m == nil {
		t.Fatalf("availability template %q has an unexpected shape", tpl)
	}
	if errs := hasstest.CheckTemplate(tpl, doc); len(errs) > 0 {
		t.Fatalf("availability template: %v", errs)
	}
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	switch v := d[m[1]].(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case float64:
		return v != 0
	}
	return true
}

// TestDashboardSafety checks what an auto-generated dashboard offers:
// Reboot and Destroy are configuration entities, Destroy is available only
// while armed and Cancel only while an operation runs, and every discovery
// message still passes the conformance checker.
func TestDashboardSafety(t *testing.T) {
	m := broker(t)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	obs := newObserver(t, m.URL, "#") // after start: the retained copies
	obs.sync(t)

	comps := func(topic string) map[string]map[string]any {
		t.Helper()
		mm := obs.waitPayload(t, topic, 5*time.Second, func(p []byte) bool { return len(p) > 0 })
		for _, err := range hasstest.NewChecker().Check(topic, mm.payload, mm.retained) {
			t.Errorf("conformance: %v", err)
		}
		var d struct {
			Components map[string]map[string]any `json:"components"`
		}
		if err := json.Unmarshal(mm.payload, &d); err != nil {
			t.Fatal(err)
		}
		return d.Components
	}
	lab := comps("homeassistant/device/rezuscloud_lab/config")
	node := comps("homeassistant/device/rezuscloud_lab_cp-1/config")
	bridge := comps("homeassistant/device/rezuscloud_bridge/config")

	for _, tc := range []struct {
		name     string
		c        map[string]any
		category any
	}{
		{"destroy", lab["destroy"], "config"},
		{"destroy_armed", lab["destroy_armed"], "config"},
		{"reboot", node["reboot"], "config"},
		{"apply", lab["apply"], nil},
		{"cancel", lab["cancel"], nil},
	} {
		if tc.c == nil {
			t.Fatalf("%s: no component", tc.name)
		}
		if got := tc.c["entity_category"]; got != tc.category {
			t.Errorf("%s: entity_category %v, want %v", tc.name, got, tc.category)
		}
	}
	if et, _ := bridge["operation"]["event_types"].([]any); !containsAny(et, "refused") {
		t.Errorf("operation event_types %v lack refused", et)
	}

	// availability: the bridge topic and a template over the tenant state
	gated := func(name string) string {
		t.Helper()
		c := lab[name]
		if _, ok := c["availability_topic"]; ok {
			t.Fatalf("%s: availability_topic next to availability", name)
		}
		if c["availability_mode"] != "all" {
			t.Errorf("%s: availability_mode %v, want all", name, c["availability_mode"])
		}
		list, _ := c["availability"].([]any)
		if len(list) != 2 {
			t.Fatalf("%s: availability %v", name, c["availability"])
		}
		first, _ := list[0].(map[string]any)
		second, _ := list[1].(map[string]any)
		if first["topic"] != "rezuscloud/bridge/availability" || second["topic"] != "rezuscloud/lab/state" {
			t.Fatalf("%s: availability topics %v", name, list)
		}
		tpl, _ := second["value_template"].(string)
		return tpl
	}
	destroyTpl, cancelTpl := gated("destroy"), gated("cancel")
	if _, ok := lab["apply"]["availability"]; ok {
		t.Error("apply must stay available")
	}
	state := func() []byte {
		mm, _ := obs.get("rezuscloud/lab/state")
		return mm.payload
	}
	if available(t, destroyTpl, state()) || available(t, cancelTpl, state()) {
		t.Fatalf("destroy or cancel available while idle and not armed: %s", state())
	}

	// armed: Destroy becomes available; disarmed again after the timeout
	publish(t, m.URL, "rezuscloud/lab/destroy_armed/set", []byte("ON"), false)
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return available(t, destroyTpl, p) })
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return !available(t, destroyTpl, p) })

	// an operation runs: Cancel becomes available, then not again
	op := "apply"
	setStatus(b, "lab", tenant.Status{Phase: tenant.PhaseProvisioning, Operation: &op})
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return available(t, cancelTpl, p) })
	setStatus(b, "lab", tenant.Status{Phase: tenant.PhaseRunning})
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return !available(t, cancelTpl, p) })
}

func containsAny(xs []any, want string) bool {
	for _, x := range xs {
		if x == want {
			return true
		}
	}
	return false
}

// TestRefusedCommands checks that a refused entity command becomes a
// "refused" operation event with the reason (and reaches OnRefused, the
// WebSocket link's notification), and that an accepted one does not.
func TestRefusedCommands(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL, "rezuscloud/bridge/event")
	var mu sync.Mutex
	var hooked []tenant.OperationEvent
	opts := fastOptions(m.URL)
	opts.OnRefused = func(ev tenant.OperationEvent) {
		mu.Lock()
		hooked = append(hooked, ev)
		mu.Unlock()
	}
	cmd := newFakeCmd()
	b := startBridge(t, opts, cmd, []*tenant.Tenant{labTenant()})

	tests := []struct {
		topic, payload  string
		operation, want string
	}{
		{"rezuscloud/lab/destroy", "PRESS", "destroy", `turn on \"Allow destroy\" first`},
		{"rezuscloud/lab/workers/count/set", "abc", "scale", "abc"},
		{"rezuscloud/lab/lab-workers-1/reboot", "press", "reboot", `lab-workers-1: unexpected payload \"press\"`},
		{"rezuscloud/lab/auto_apply/set", "maybe", "auto_apply", "want ON or OFF"},
	}
	for i, tc := range tests {
		mk := obs.mark()
		publish(t, m.URL, tc.topic, []byte(tc.payload), false)
		ev := waitEvent(t, obs, mk)
		var d map[string]any
		if err := json.Unmarshal(ev, &d); err != nil {
			t.Fatal(err)
		}
		if d["event_type"] != "refused" || d["tenant"] != "lab" || d["operation"] != tc.operation ||
			!strings.Contains(string(ev), tc.want) {
			t.Errorf("%s %s: event %s, want refused %s with %q", tc.topic, tc.payload, ev, tc.operation, tc.want)
		}
		testenv.WaitFor(t, 5*time.Second, "OnRefused", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(hooked) == i+1
		})
	}

	// the engine refuses: its error is the reason
	cmd.mu.Lock()
	cmd.fail = errFake("a plan of \"lab\" is already running")
	cmd.mu.Unlock()
	mk := obs.mark()
	publish(t, m.URL, "rezuscloud/lab/plan", []byte("PRESS"), false)
	if ev := waitEvent(t, obs, mk); !bytes.Contains(ev, []byte(`"event_type":"refused"`)) || !bytes.Contains(ev, []byte("already running")) {
		t.Errorf("engine refusal: %s", ev)
	}
	cmd.mu.Lock()
	cmd.fail = nil
	cmd.mu.Unlock()

	// accepted: no refused event
	mk = obs.mark()
	publish(t, m.URL, "rezuscloud/lab/apply", []byte("PRESS"), false)
	cmd.waitCall(t, "apply lab")
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	obs.sync(t)
	if n := len(eventsAfter(obs, mk)); n != 0 {
		t.Errorf("%d events after an accepted press", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != len(tests)+1 || hooked[0].Result != tenant.ResultRefused || hooked[0].Name != "destroy" {
		t.Errorf("OnRefused got %+v", hooked)
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }

func eventsAfter(o *observer, mark int) [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out [][]byte
	for _, x := range o.all[mark:] {
		if x.topic == "rezuscloud/bridge/event" {
			out = append(out, x.payload)
		}
	}
	return out
}

func waitEvent(t *testing.T, o *observer, mark int) []byte {
	t.Helper()
	var ev []byte
	testenv.WaitFor(t, 5*time.Second, "operation event", func() bool {
		evs := eventsAfter(o, mark)
		if len(evs) > 0 {
			ev = evs[0]
		}
		return ev != nil
	})
	return ev
}
