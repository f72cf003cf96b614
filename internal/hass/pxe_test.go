package hass

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestNetworkBootEntities: with a responder the bridge shows "Let new
// machines boot", "Boot assets" and "Network boot", conformant, reading
// their own state document; the switch reaches the responder; events are
// published not retained; without a responder none of them exists.
func TestNetworkBootEntities(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL)
	var mu sync.Mutex
	var windows []bool
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()}, func(b *Bridge) {
		b.SetNetworkBoot(func(open bool) { mu.Lock(); windows = append(windows, open); mu.Unlock() })
	})
	until := time.Date(2026, 11, 1, 12, 30, 0, 0, time.UTC)
	b.SetBootWindow(true, until)
	b.SetBootAssets([]BootAsset{
		{Version: "v1.13.0", Arch: "amd64", Schematic: strings.Repeat("ab", 32), Checksum: "published", Fetched: until},
		{Version: "v1.12.4", Arch: "amd64", Schematic: strings.Repeat("cd", 32), Checksum: "recorded", Fetched: until},
	}, "")
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	disc := "homeassistant/device/rezuscloud_bridge/config"
	state := "rezuscloud/bridge/pxe"
	obs.waitPayload(t, state, 5*time.Second, func(p []byte) bool { return strings.Contains(string(p), `"window":true`) })
	obs.sync(t)
	chk := hasstest.NewChecker()
	for topic, mm := range obs.snapshot() {
		if isDiscovery(topic) {
			for _, err := range chk.Check(topic, mm.payload, true) {
				t.Errorf("conformance: %v", err)
			}
		}
	}
	d, _ := obs.get(disc)
	var doc struct {
		Components map[string]map[string]any `json:"components"`
	}
	if err := json.Unmarshal(d.payload, &doc); err != nil {
		t.Fatal(err)
	}
	sw, sensor, ev := doc.Components["boot_window"], doc.Components["boot_assets"], doc.Components["network_boot"]
	if sw == nil || sensor == nil || ev == nil {
		t.Fatalf("bridge components lack the network-boot entities: %v", doc.Components)
	}
	if sw["name"] != "Let new machines boot" || sensor["name"] != "Boot assets" || ev["name"] != "Network boot" {
		t.Errorf("names %v / %v / %v", sw["name"], sensor["name"], ev["name"])
	}
	if sw["state_topic"] != state || sensor["state_topic"] != state || ev["state_topic"] != "rezuscloud/bridge/pxe/event" {
		t.Errorf("state topics %v %v %v", sw["state_topic"], sensor["state_topic"], ev["state_topic"])
	}
	if types, _ := json.Marshal(ev["event_types"]); string(types) != `["served","refused","local_boot"]` {
		t.Errorf("event types %s", types)
	}
	late := newObserver(t, m.URL, state) // subscribes after the publish: gets the retained copy
	late.sync(t)
	if st, ok := late.get(state); !ok || !st.retained {
		t.Error("the network-boot state is not retained")
	}
	st, _ := obs.get(state)
	for _, tpl := range []string{sw["value_template"].(string), sensor["value_template"].(string),
		sw["json_attributes_template"].(string), sensor["json_attributes_template"].(string)} {
		for _, err := range hasstest.CheckTemplate(tpl, st.payload) {
			t.Errorf("template %s: %v", tpl, err)
		}
	}
	if !strings.Contains(string(st.payload), `"window_until":"2026-11-01T12:30:00.000+00:00"`) || !strings.Contains(string(st.payload), `"versions":"v1.13.0 amd64, v1.12.4 amd64"`) {
		t.Errorf("state %s", st.payload)
	}

	// the switch reaches the responder; a bad payload does not
	// (commands are handled concurrently: wait for each before the next)
	for i, p := range []string{"OFF", "maybe", "ON"} {
		if tok := obs.c.Publish(sw["command_topic"].(string), 1, false, p); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
		if i == 0 {
			testenv.WaitFor(t, 5*time.Second, "the OFF command", func() bool { mu.Lock(); defer mu.Unlock(); return len(windows) == 1 })
		}
	}
	testenv.WaitFor(t, 5*time.Second, "the switch's commands", func() bool { mu.Lock(); defer mu.Unlock(); return len(windows) >= 2 })
	mu.Lock()
	got := slices.Clone(windows)
	mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("window commands %v: the bad payload reached the responder", got)
	}
	if got[0] || !got[1] {
		t.Fatalf("window commands %v, want OFF then ON", got)
	}

	// events, not retained, with their attributes
	b.PublishNetworkBoot(NetworkBootEvent{Type: "served", MAC: "52:54:00:77:00:01", File: "/ipxe/amd64/52-54-00-77-00-01/boot.ipxe", Reason: "not installed", Step: "http", At: until})
	b.PublishNetworkBoot(NetworkBootEvent{Type: "local_boot", MAC: "52:54:00:77:00:03", Step: "http", At: until})
	b.PublishNetworkBoot(NetworkBootEvent{Type: "bogus"})
	mm := obs.waitPayload(t, "rezuscloud/bridge/pxe/event", 5*time.Second, func(p []byte) bool { return strings.Contains(string(p), "local_boot") })
	if mm.retained {
		t.Error("a network-boot event is retained")
	}
	var evs []map[string]string
	obs.mu.Lock()
	for _, x := range obs.all {
		if x.topic == "rezuscloud/bridge/pxe/event" {
			var e map[string]string
			_ = json.Unmarshal(x.payload, &e)
			evs = append(evs, e)
		}
	}
	obs.mu.Unlock()
	if len(evs) != 2 || evs[0]["event_type"] != "served" || evs[0]["mac"] != "52:54:00:77:00:01" || evs[0]["reason"] != "not installed" || evs[0]["file"] == "" {
		t.Fatalf("events %v", evs)
	}
}

func TestNetworkBootHiddenWithoutResponder(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	b.PublishNetworkBoot(NetworkBootEvent{Type: "served"}) // dropped: no responder
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	obs.sync(t)
	d, _ := obs.get("homeassistant/device/rezuscloud_bridge/config")
	for _, k := range []string{"boot_window", "boot_assets", "network_boot"} {
		if strings.Contains(string(d.payload), `"`+k+`"`) {
			t.Errorf("bridge shows %s without a responder", k)
		}
	}
	if _, ok := obs.get("rezuscloud/bridge/pxe"); ok {
		t.Error("a network-boot state without a responder")
	}
	if _, ok := obs.get("rezuscloud/bridge/pxe/event"); ok {
		t.Error("a network-boot event without a responder")
	}
	if err := setBootWindow(b, context.Background(), ref{}, "ON"); err == nil || !strings.Contains(err.Error(), "network boot is off") {
		t.Errorf("switch without a responder: %v", err)
	}
}
