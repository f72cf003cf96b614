package engine

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// fakeHA is entity power's Home Assistant: entities with a state, calls
// recorded, and a hook per call (a smart plug powering a machine).
type fakeHA struct {
	mu     sync.Mutex
	states map[string]string
	calls  []string
	hook   func(call string)
}

func (h *fakeHA) CallService(_ context.Context, domain, service string, data any) error {
	id := data.(map[string]any)["entity_id"].(string)
	call := domain + "." + service + " " + id
	h.mu.Lock()
	h.calls = append(h.calls, call)
	if _, ok := h.states[id]; ok && domain == "switch" {
		h.states[id] = strings.TrimPrefix(service, "turn_")
	}
	hook := h.hook
	h.mu.Unlock()
	if hook != nil {
		hook(call)
	}
	return nil
}

func (h *fakeHA) GetState(_ context.Context, id string) (string, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.states[id]
	return st, ok, nil
}

func (h *fakeHA) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

// TestSwitchPower: a worker powered by a Home Assistant switch. A switch
// Home Assistant does not have is refused before anything is shut down;
// Power off shuts the node down, then turns the switch off; Power on turns
// it on and the node answers; a scale-down halts the machine and turns
// the switch off, a scale-up turns it on and the node comes back.
func TestSwitchPower(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	r := f.rec
	worker := f.sims[1]
	ha := &fakeHA{states: map[string]string{"switch.rack_plug": "on"}}
	var offWhileUp []string
	ha.hook = func(call string) {
		switch call {
		case "switch.turn_on switch.rack_plug":
			worker.PowerOn()
		case "switch.turn_off switch.rack_plug":
			if !worker.PoweredOff() {
				offWhileUp = append(offWhileUp, call)
			}
		}
	}
	f.stop()
	f.tweak = func(o *Options) { o.Power.HA = ha }
	setPower := func(value string) {
		data, _ := os.ReadFile(f.store.Path("lab"))
		s := string(data)
		if i := strings.Index(s, "\n  power = "); i >= 0 {
			s = s[:i] + s[i+strings.Index(s[i+1:], "\n")+1:]
		}
		s = strings.Replace(s, fmt.Sprintf("address = \"%s\"", worker.Host()), fmt.Sprintf("address = \"%s\"\n  power = %q", worker.Host(), value), 1)
		if err := os.WriteFile(f.store.Path("lab"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := f.eng.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f.start()
	setPower("switch.missing_plug")
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "running", long, phaseIs(tenant.PhaseRunning))
	node := tenant.NodeName("lab", "workers", 1)

	for _, tc := range []struct{ power, state, want string }{
		{"switch.missing_plug", "off", "no such entity"},
		{"none", "on", "by hand"},
		{"switch.rack_plug", "reboot", `"on" or "off"`},
	} {
		setPower(tc.power)
		if err := f.eng.Power(context.Background(), "lab", node, tc.state); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("power %s %s: %v, want %q", tc.power, tc.state, err, tc.want)
		}
	}
	if c := worker.Calls(); c.Shutdown != 0 || worker.PoweredOff() || len(ha.Calls()) != 0 {
		t.Fatalf("a refused power command did something: %+v, calls %v", c, ha.Calls())
	}

	setPower("switch.rack_plug")
	if err := f.eng.Power(context.Background(), "lab", node, "off"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "powered off", long, func(r *recorder) bool { return r.succeeded("power_off") == 1 })
	if !worker.PoweredOff() || worker.Calls().Shutdown != 1 || len(offWhileUp) != 0 {
		t.Fatalf("after power off: off %v, %+v, switched off while up %v", worker.PoweredOff(), worker.Calls(), offWhileUp)
	}
	if err := f.eng.Power(context.Background(), "lab", node, "on"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "powered on", long, func(r *recorder) bool { return r.succeeded("power_on") == 1 })
	r.wait(t, "running again", long, func(r *recorder) bool { return r.nstatus[node].Stage == tenant.StageRunning })

	// scale down: graceful reset with halt, then the switch goes off
	if err := f.eng.Scale(context.Background(), "lab", "workers", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "scaled down", long, func(r *recorder) bool {
		return r.succeeded("apply") == 2 && r.status["lab"].Phase == tenant.PhaseRunning && r.status["lab"].NodesTotal == 1
	})
	if c := worker.Calls(); c.Halt != 1 || !worker.PoweredOff() || len(offWhileUp) != 0 {
		t.Fatalf("after scale down: %+v, off %v, switched off while up %v", c, worker.PoweredOff(), offWhileUp)
	}
	want := []string{"switch.turn_off switch.rack_plug", "switch.turn_on switch.rack_plug", "switch.turn_off switch.rack_plug"}
	if got := ha.Calls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	// scale up: the switch goes on, the machine comes back
	if err := f.eng.Scale(context.Background(), "lab", "workers", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "scaled up", long, func(r *recorder) bool {
		return r.succeeded("apply") == 3 && r.status["lab"].Phase == tenant.PhaseRunning && r.status["lab"].NodesReady == 2
	})
	if got := ha.Calls(); len(got) != 4 || got[3] != "switch.turn_on switch.rack_plug" {
		t.Fatalf("calls %v, want a turn_on last", got)
	}
}
