package power_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/power"
	"github.com/rezuscloud/rezuscloud/internal/redfish"
	"github.com/rezuscloud/rezuscloud/internal/redfish/redfishtest"
)

func TestParse(t *testing.T) {
	tests := []struct {
		value, mac string
		want       power.Spec
		errPart    string
	}{
		{"", "aa:bb:cc:dd:ee:ff", power.Spec{Kind: power.KindWOL}, ""},
		{"", "", power.Spec{Kind: power.KindNone}, ""},
		{"wol", "aa:bb:cc:dd:ee:ff", power.Spec{Kind: power.KindWOL}, ""},
		{"wol", "", power.Spec{}, "needs the machine's mac"},
		{"none", "aa:bb:cc:dd:ee:ff", power.Spec{Kind: power.KindNone}, ""},
		{"switch.rack_plug_2", "", power.Spec{Kind: power.KindSwitch, Entity: "switch.rack_plug_2"}, ""},
		{"button.nuc_power", "", power.Spec{Kind: power.KindButton, Entity: "button.nuc_power"}, ""},
		{"redfish+https://10.0.0.5/redfish/v1/Systems/1", "", power.Spec{Kind: power.KindRedfish, URL: "https://10.0.0.5/redfish/v1/Systems/1"}, ""},
		{"switch.", "", power.Spec{}, "not a Home Assistant entity id"},
		{"switch.Rack Plug", "", power.Spec{}, "not a Home Assistant entity id"},
		{"switch.rack__plug", "", power.Spec{}, "not a Home Assistant entity id"},
		{"switch._plug", "", power.Spec{}, "not a Home Assistant entity id"},
		{"light.desk", "", power.Spec{}, `want "wol"`},
		{"redfish+http://10.0.0.5/redfish/v1/Systems/1", "", power.Spec{}, "want https"},
		{"redfish+https://root:calvin@10.0.0.5/redfish/v1/Systems/1", "", power.Spec{}, "credentials do not belong"},
		{"redfish+https://10.0.0.5/redfish/v1/Managers/1", "", power.Spec{}, "/redfish/v1/Systems/<id>"},
		{"ipmi://root:calvin@10.0.0.5", "", power.Spec{}, "no credentials in the tenant file"},
		{"ipmi://10.0.0.5:623", "", power.Spec{Kind: power.KindIPMI, URL: "ipmi://10.0.0.5:623"}, ""},
		{"ipmi://[fd00::5]:6230", "", power.Spec{Kind: power.KindIPMI, URL: "ipmi://[fd00::5]:6230"}, ""},
		{"ipmi://10.0.0.5/path", "", power.Spec{}, "no path"},
		{"ipmi://10.0.0.5:0", "", power.Spec{}, "not 1..65535"},
		{"ipmi://10.0.0.5:http", "", power.Spec{}, "ipmi://<host>[:port]"},
		{"ipmi://", "", power.Spec{}, "ipmi://<host>[:port]"},
		{"WOL", "aa:bb:cc:dd:ee:ff", power.Spec{}, `want "wol"`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			got, err := power.Parse(tt.value, tt.mac)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) || strings.Contains(err.Error(), "calvin") {
					t.Fatalf("Parse(%q) = %+v, %v; want an error with %q and no password", tt.value, got, err, tt.errPart)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tt.value, got, err, tt.want)
			}
			if tt.value != "" && got.String() != tt.value {
				t.Fatalf("String() = %q; want %q", got.String(), tt.value)
			}
		})
	}
}

// fakeHA records service calls; states holds the entities that exist.
type fakeHA struct {
	mu     sync.Mutex
	states map[string]string
	calls  []string
	getErr error
}

func (f *fakeHA) CallService(_ context.Context, domain, service string, data any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := data.(map[string]any)["entity_id"].(string)
	f.calls = append(f.calls, domain+"."+service+" "+id)
	if _, ok := f.states[id]; ok && domain == "switch" {
		f.states[id] = strings.TrimPrefix(service, "turn_")
	}
	return nil // as Home Assistant: success, even for an entity that does not exist
}

func (f *fakeHA) GetState(_ context.Context, id string) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.getErr != nil {
		return "", false, f.getErr
	}
	s, ok := f.states[id]
	return s, ok, nil
}

func (f *fakeHA) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func entity(t *testing.T, ha power.HA, value string) power.Controller {
	t.Helper()
	spec, err := power.Parse(value, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := power.New(spec, power.Deps{HA: ha})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSwitch(t *testing.T) {
	ha := &fakeHA{states: map[string]string{"switch.plug": "off"}}
	c := entity(t, ha, "switch.plug")
	ctx := context.Background()
	if err := c.On(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx); err != nil || st != power.StateOn {
		t.Fatalf("state %s, %v", st, err)
	}
	if err := c.Off(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.State(ctx); st != power.StateOff {
		t.Fatalf("state %s", st)
	}
	if got := strings.Join(ha.Calls(), "; "); got != "switch.turn_on switch.plug; switch.turn_off switch.plug" {
		t.Fatalf("calls %s", got)
	}
}

func TestButton(t *testing.T) {
	ha := &fakeHA{states: map[string]string{"button.atx": "2026-01-01T00:00:00+00:00"}}
	c := entity(t, ha, "button.atx")
	ctx := context.Background()
	if err := c.On(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Off(ctx); err != nil { // not pressed: that would start the machine again
		t.Fatal(err)
	}
	if st, err := c.State(ctx); err != nil || st != power.StateUnknown {
		t.Fatalf("state %s, %v", st, err)
	}
	if got := strings.Join(ha.Calls(), "; "); got != "button.press button.atx" {
		t.Fatalf("calls %s", got)
	}
}

// An entity Home Assistant does not have (or cannot reach) is an error
// before anything is switched.
func TestEntityMissingIsAnErrorBeforeSwitching(t *testing.T) {
	tests := []struct {
		name    string
		ha      *fakeHA
		value   string
		errPart string
	}{
		{"missing switch", &fakeHA{states: map[string]string{"switch.other": "on"}}, "switch.plug", "no such entity"},
		{"missing button", &fakeHA{states: map[string]string{}}, "button.atx", "no such entity"},
		{"unavailable", &fakeHA{states: map[string]string{"switch.plug": "unavailable"}}, "switch.plug", "unavailable"},
		{"lookup fails", &fakeHA{getErr: errors.New("home assistant websocket: not connected")}, "switch.plug", "not connected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := entity(t, tt.ha, tt.value)
			for name, do := range map[string]func(context.Context) error{"on": c.On, "off": c.Off} {
				err := do(context.Background())
				if err == nil || !strings.Contains(err.Error(), tt.errPart) || !strings.Contains(err.Error(), tt.value) {
					t.Fatalf("%s: %v; want an error naming %s with %q", name, err, tt.value, tt.errPart)
				}
			}
			if calls := tt.ha.Calls(); len(calls) != 0 {
				t.Fatalf("switched anyway: %v", calls)
			}
		})
	}
}

func TestEntityNeedsTheWebSocketAPI(t *testing.T) {
	spec, _ := power.Parse("switch.plug", "")
	if _, err := power.New(spec, power.Deps{}); err == nil || !strings.Contains(err.Error(), "WebSocket") {
		t.Fatalf("New without HA: %v", err)
	}
}

func TestWOLAndNone(t *testing.T) {
	var sent []string
	send := func(_ context.Context, mac string) error { sent = append(sent, mac); return nil }
	ctx := context.Background()
	c, err := power.New(power.Spec{Kind: power.KindWOL}, power.Deps{MAC: "aa:bb:cc:dd:ee:ff", SendWOL: send})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.On(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Off(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.State(ctx); st != power.StateUnknown || len(sent) != 1 || sent[0] != "aa:bb:cc:dd:ee:ff" {
		t.Fatalf("state %s, sent %v", st, sent)
	}
	failing, _ := power.New(power.Spec{Kind: power.KindWOL}, power.Deps{MAC: "aa:bb:cc:dd:ee:ff",
		SendWOL: func(context.Context, string) error { return errors.New("network unreachable") }})
	if err := failing.On(ctx); err == nil || !strings.Contains(err.Error(), "aa:bb:cc:dd:ee:ff") {
		t.Fatalf("failing send: %v", err)
	}

	n, _ := power.New(power.Spec{Kind: power.KindNone}, power.Deps{})
	if err := n.On(ctx); !errors.Is(err, power.ErrManual) {
		t.Fatalf("none On: %v", err)
	}
	if err := n.Off(ctx); err != nil {
		t.Fatal(err)
	}
}

func redfishController(t *testing.T, s *redfishtest.Server, grace time.Duration) power.Controller {
	t.Helper()
	spec, err := power.Parse("redfish+"+s.SystemURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := power.New(spec, power.Deps{
		Redfish:     redfish.Options{Username: "admin", Password: "pw", RootCAs: s.RootCAs()},
		GracePeriod: grace, PollInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRedfish(t *testing.T) {
	s := redfishtest.New("admin", "pw", redfish.PowerOff)
	defer s.Close()
	c := redfishController(t, s, time.Minute)
	ctx := context.Background()
	if err := c.On(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.On(ctx); err != nil { // already on: nothing sent
		t.Fatal(err)
	}
	if st, err := c.State(ctx); err != nil || st != power.StateOn {
		t.Fatalf("state %s, %v", st, err)
	}
	if err := c.Off(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Off(ctx); err != nil { // already off: nothing sent
		t.Fatal(err)
	}
	if st, _ := c.State(ctx); st != power.StateOff {
		t.Fatalf("state %s", st)
	}
	if got := strings.Join(s.Resets(), ","); got != "On,GracefulShutdown" {
		t.Fatalf("resets %s", got)
	}
}

// A system that ignores the graceful shutdown is forced off after the grace
// period.
func TestRedfishForcesOffAfterGrace(t *testing.T) {
	s := redfishtest.New("admin", "pw", redfish.PowerOn)
	defer s.Close()
	var ignored atomic.Bool
	s.OnPowerChange(func(from, to string) {
		if to == redfish.PowerOff && ignored.CompareAndSwap(false, true) {
			s.SetPowerState(redfish.PowerOn) // the OS ignores ACPI, once
		}
	})
	c := redfishController(t, s, 20*time.Millisecond)
	if err := c.Off(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Resets(), ","); got != "GracefulShutdown,ForceOff" || s.PowerState() != redfish.PowerOff {
		t.Fatalf("resets %s, state %s", got, s.PowerState())
	}
}

// fakeWS answers get_states like Home Assistant.
type fakeWS struct {
	states  string
	err     error
	service []string
}

func (f *fakeWS) Call(_ context.Context, msg map[string]any) (json.RawMessage, error) {
	if msg["type"] != "get_states" {
		return nil, errors.New("unexpected " + msg["type"].(string))
	}
	return json.RawMessage(f.states), f.err
}

func (f *fakeWS) CallService(_ context.Context, domain, service string, _ any) error {
	f.service = append(f.service, domain+"."+service)
	return nil
}

func TestFromWS(t *testing.T) {
	ws := &fakeWS{states: `[{"entity_id":"light.desk","state":"on","attributes":{}},{"entity_id":"switch.plug","state":"off","attributes":{"friendly_name":"Plug"}}]`}
	ha := power.FromWS(ws)
	ctx := context.Background()
	if st, ok, err := ha.GetState(ctx, "switch.plug"); err != nil || !ok || st != "off" {
		t.Fatalf("GetState = %q %v %v", st, ok, err)
	}
	if _, ok, err := ha.GetState(ctx, "switch.gone"); err != nil || ok {
		t.Fatalf("missing entity: %v %v", ok, err)
	}
	if err := ha.CallService(ctx, "switch", "turn_on", nil); err != nil || len(ws.service) != 1 {
		t.Fatalf("CallService: %v %v", err, ws.service)
	}
	bad := power.FromWS(&fakeWS{states: `{"not":"a list"}`})
	if _, _, err := bad.GetState(ctx, "switch.plug"); err == nil {
		t.Fatal("a malformed get_states answer is not an error")
	}
}
