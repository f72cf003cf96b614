package hass

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// expectedDevices lists the discovery topics for the bridge and tenants.
func expectedDevices(ts ...*tenant.Tenant) []string {
	tp := topics{base: "rezuscloud", prefix: "homeassistant"}
	out := []string{tp.discovery(kindBridge, ref{})}
	for _, t := range ts {
		out = append(out, tp.discovery(kindTenant, ref{tenant: t.Name}))
		for _, n := range t.Nodes() {
			out = append(out, tp.discovery(kindNode, ref{tenant: t.Name, node: n.Name}))
		}
	}
	return out
}

func TestDiscoveryConformanceAndState(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL)
	cmd := newFakeCmd()
	lab, cloud := labTenant(), cloudTenant("prod", 3)
	opts := fastOptions(m.URL)
	opts.ConfigurationURL = "homeassistant://hassio/ingress/a0d7b954_rezuscloud"
	b := startBridge(t, opts, cmd, []*tenant.Tenant{lab, cloud})
	op := "apply"
	setStatus(b, "lab", tenant.Status{Phase: tenant.PhaseRunning, NodesReady: 3, NodesTotal: 3, Progress: 100,
		Operation: &op, Pending: tenant.Changes{Add: 1},
		LastOperation: &tenant.OperationResult{Name: "apply", Result: tenant.ResultSucceeded,
			At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)), Message: "ok"}})
	setNode(b, "lab", "lab-workers-1", tenant.NodeStatus{Stage: tenant.StageRunning, Ready: true, Address: "192.168.1.31", TalosVersion: "v1.13.0"})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := expectedDevices(lab, cloud)
	testenv.WaitFor(t, 5*time.Second, "all discovery", func() bool {
		for _, tp := range want {
			if _, ok := obs.get(tp); !ok {
				return false
			}
		}
		return true
	})
	testenv.WaitFor(t, 5*time.Second, "lab state", func() bool {
		mm, ok := obs.get("rezuscloud/lab/state")
		return ok && strings.Contains(string(mm.payload), `"running"`)
	})
	// A fresh subscriber gets the retained copies (with the retain flag).
	obs = newObserver(t, m.URL, "#")
	testenv.WaitFor(t, 5*time.Second, "retained copies", func() bool {
		_, ok := obs.get("rezuscloud/lab/state")
		return ok
	})
	obs.sync(t) // every retained copy has arrived

	checker := hasstest.NewChecker()
	snap := obs.snapshot()
	entitiesSeen := 0
	for topic, mm := range snap {
		if secrets := hasstest.ScanSecrets(mm.payload, "192.168.1.21/secret"); len(secrets) > 0 {
			t.Errorf("%s: secrets: %v", topic, secrets)
		}
		if !isDiscovery(topic) {
			continue
		}
		for _, err := range checker.Check(topic, mm.payload, mm.retained) {
			t.Errorf("conformance: %v", err)
		}
		if len(mm.payload) > 0 && !strings.Contains(string(mm.payload), `"configuration_url":"homeassistant://hassio/ingress/a0d7b954_rezuscloud"`) {
			t.Errorf("%s: no configuration_url to the panel", topic)
		}
		// Every template finds its value in the device's state document.
		var d struct {
			Components map[string]map[string]any `json:"components"`
		}
		if err := json.Unmarshal(mm.payload, &d); err != nil {
			t.Fatal(err)
		}
		for id, c := range d.Components {
			entitiesSeen++
			st, _ := c["state_topic"].(string)
			for _, k := range []string{"value_template", "json_attributes_template"} {
				tpl, ok := c[k].(string)
				if !ok {
					continue
				}
				sm, ok := snap[st]
				if !ok {
					t.Errorf("%s/%s: state topic %q has no retained message", topic, id, st)
					continue
				}
				if !sm.retained {
					t.Errorf("%s not retained", st)
				}
				for _, err := range hasstest.CheckTemplate(tpl, sm.payload) {
					t.Errorf("%s/%s: %v", topic, id, err)
				}
			}
			if u, _ := c["unique_id"].(string); !strings.HasPrefix(u, "rezuscloud_") {
				t.Errorf("unique_id %q", u)
			}
		}
	}
	if entitiesSeen < 40 {
		t.Errorf("only %d entities", entitiesSeen)
	}

	// Nodes exist from the start with stage pending; timestamps with offset.
	n2, _ := obs.get("rezuscloud/lab/lab-workers-2/state")
	var nd map[string]any
	_ = json.Unmarshal(n2.payload, &nd)
	if nd["stage"] != "pending" || nd["role"] != "worker" || nd["group"] != "workers" {
		t.Errorf("pending node doc %s", n2.payload)
	}
	ls, _ := obs.get("rezuscloud/lab/state")
	if !strings.Contains(string(ls.payload), `"at":"2026-01-02T03:04:05.000+01:00"`) {
		t.Errorf("timestamp not ISO 8601 with offset: %s", ls.payload)
	}
	bs, _ := obs.get("rezuscloud/bridge/state")
	if !strings.Contains(string(bs.payload), `"version":"1.2.3"`) || !strings.Contains(string(bs.payload), `"tenants":2`) {
		t.Errorf("bridge doc %s", bs.payload)
	}
	av, _ := obs.get("rezuscloud/bridge/availability")
	if string(av.payload) != "online" || !av.retained {
		t.Errorf("availability %q retained=%v", av.payload, av.retained)
	}

	// Specific shapes: node device via tenant, tenant via bridge; origin.
	var nodeDisc map[string]any
	_ = json.Unmarshal(snap["homeassistant/device/rezuscloud_lab_workers-1/config"].payload, &nodeDisc)
	dev := nodeDisc["device"].(map[string]any)
	if dev["via_device"] != "rezuscloud_lab" {
		t.Errorf("node via_device %v", dev["via_device"])
	}
	o := nodeDisc["origin"].(map[string]any)
	if o["name"] != "rezuscloud" || o["sw_version"] != "1.2.3" || o["support_url"] == nil {
		t.Errorf("origin %v", o)
	}
}

func TestStatePublishedOnlyWhenChanged(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL, "rezuscloud/#")
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	topic := "rezuscloud/lab/state"
	obs.waitPayload(t, topic, 5*time.Second, func([]byte) bool { return true })
	st := tenant.Status{Phase: tenant.PhaseProvisioning, Progress: 10}
	for i := 0; i < 5; i++ {
		setStatus(b, "lab", st)
		_ = b.Sync(context.Background())
	}
	obs.waitPayload(t, topic, 5*time.Second, func(p []byte) bool { return strings.Contains(string(p), "provisioning") })
	obs.sync(t) // everything the broker acknowledged so far has arrived
	before := obs.count(topic)
	for i := 0; i < 5; i++ {
		setStatus(b, "lab", st)
		if err := b.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Sync returned: a republish would have been acknowledged by the broker,
	// so it is queued for the observer ahead of the marker.
	obs.sync(t)
	if after := obs.count(topic); after != before {
		t.Errorf("unchanged state republished: %d -> %d messages", before, after)
	}
	st.Progress = 20
	setStatus(b, "lab", st)
	obs.waitPayload(t, topic, 5*time.Second, func(p []byte) bool { return strings.Contains(string(p), `"progress":20`) })
}

func TestAvailabilityHardCloseAndReconnect(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL, "rezuscloud/bridge/availability")
	px := newProxy(t, m.URL)
	startBridge(t, fastOptions(px.URL()), newFakeCmd(), []*tenant.Tenant{labTenant()})
	obs.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "online" })
	mk := obs.mark()
	px.cut()
	// The broker publishes the will (offline), then the bridge reconnects
	// and says online again.
	obs.waitSequence(t, "rezuscloud/bridge/availability", mk, 5*time.Second, "offline", "online")
	// Subscriptions are restored: a request is answered after the reconnect.
	resp := newObserver(t, m.URL, "rezuscloud/bridge/response/#")
	publish(t, m.URL, "rezuscloud/bridge/request/apply", []byte(`{"tenant":"lab","transaction":7}`), false)
	r := resp.waitPayload(t, "rezuscloud/bridge/response/apply", 5*time.Second, func([]byte) bool { return true })
	if !strings.Contains(string(r.payload), `"status":"ok"`) || !strings.Contains(string(r.payload), `"transaction":7`) {
		t.Errorf("response after reconnect: %s", r.payload)
	}
}

func TestAvailabilityOfflineWhileDeadOnlineWhenBack(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL, "rezuscloud/bridge/availability")
	px := newProxy(t, m.URL)
	startBridge(t, fastOptions(px.URL()), newFakeCmd(), []*tenant.Tenant{labTenant()})
	obs.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "online" })
	// The client "dies": its connection is reset without DISCONNECT and it
	// cannot come back for a while.
	px.refuse.Store(true)
	px.cut()
	obs.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "offline" })
	// Still offline after the client tried to come back and was refused.
	testenv.WaitFor(t, 5*time.Second, "two refused reconnect attempts", func() bool { return px.refused.Load() >= 2 })
	obs.sync(t)
	if mm, _ := obs.get("rezuscloud/bridge/availability"); string(mm.payload) != "offline" {
		t.Fatalf("availability %q while the client is dead", mm.payload)
	}
	// Back: it reconnects on its own and says online.
	px.refuse.Store(false)
	obs.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "online" })
}

func TestCloseSaysOffline(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL, "rezuscloud/bridge/availability")
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), nil)
	obs.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "online" })
	b.Close()
	mm := obs.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "offline" })
	if !mm.retained {
		// Live delivery of a retained publish arrives without the flag;
		// check with a fresh subscriber.
		o2 := newObserver(t, m.URL, "rezuscloud/bridge/availability")
		o2.waitPayload(t, "rezuscloud/bridge/availability", 5*time.Second, func(p []byte) bool { return string(p) == "offline" })
	}
}

func TestBirthRepublish(t *testing.T) {
	m := broker(t)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	_ = b
	obs := newObserver(t, m.URL, "homeassistant/device/#", "rezuscloud/+/state")
	testenv.WaitFor(t, 5*time.Second, "retained discovery", func() bool {
		_, ok := obs.get("homeassistant/device/rezuscloud_lab/config")
		return ok
	})
	obs.sync(t) // every retained replay has arrived
	obs.mu.Lock()
	obs.all = nil
	obs.mu.Unlock()
	publish(t, m.URL, "homeassistant/status", []byte("online"), false)
	testenv.WaitFor(t, 5*time.Second, "republished discovery and state (not retained replays)", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		var disc, st int
		for _, x := range obs.all {
			if isDiscovery(x.topic) {
				disc++
			} else {
				st++
			}
		}
		return disc >= 5 && st >= 2
	})
}

func TestBrokerRestartRepublishes(t *testing.T) {
	m := broker(t) // no persistence: the restart loses every retained message
	opts := fastOptions(m.URL)
	opts.MaxReconnectInterval = 0 // the default backoff
	b := startBridge(t, opts, newFakeCmd(), []*tenant.Tenant{labTenant()})
	setStatus(b, "lab", tenant.Status{Phase: tenant.PhaseRunning})
	_ = b.Sync(context.Background())
	m.Stop()
	// Test setup, not synchronisation: nothing to wait for while the broker
	// is down; the reconnect backoff has to grow before the restart.
	time.Sleep(3 * time.Second) // let paho's backoff grow
	m.Restart()
	start := time.Now()
	back := func(obs *observer) (ok, d1, d2, s1, a1 bool) {
		_, d1 = obs.get("homeassistant/device/rezuscloud_lab/config")
		_, d2 = obs.get("homeassistant/device/rezuscloud_lab_workers-2/config")
		s, s1 := obs.get("rezuscloud/lab/state")
		a, a1 := obs.get("rezuscloud/bridge/availability")
		return d1 && d2 && s1 && a1 && strings.Contains(string(s.payload), "running") && string(a.payload) == "online", d1, d2, s1, a1
	}
	// Wait for the republish (live, or as retained copies if it came before
	// the subscription); the broker stores a retained message before it
	// delivers it.
	live := newObserver(t, m.URL, "homeassistant/device/#", "rezuscloud/#")
	deadline := start.Add(5 * time.Second)
	for {
		ok, d1, d2, s1, a1 := back(live)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not back within 5 s: disc %v %v state %v avail %v", d1, d2, s1, a1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start).Round(time.Millisecond)
	// A fresh subscriber gets retained copies only: they must be back.
	fresh := newObserver(t, m.URL, "homeassistant/device/#", "rezuscloud/#")
	fresh.sync(t)
	if ok, d1, d2, s1, a1 := back(fresh); !ok {
		t.Fatalf("not retained after the broker restart: disc %v %v state %v avail %v", d1, d2, s1, a1)
	}
	t.Logf("discovery, state and availability back %v after the broker restart", took)
}

func TestCleanupStaleAndForeign(t *testing.T) {
	m := broker(t)
	ours := func(id, state string) []byte {
		return []byte(`{"device":{"identifiers":["` + id + `"],"name":"x"},"origin":{"name":"rezuscloud"},"components":{"phase":{"platform":"sensor","unique_id":"` + id + `_phase","state_topic":"` + state + `","availability_topic":"rezuscloud/bridge/availability"}}}`)
	}
	// Stale devices of ours.
	publish(t, m.URL, "homeassistant/device/rezuscloud_old/config", ours("rezuscloud_old", "rezuscloud/old/state"), true)
	publish(t, m.URL, "rezuscloud/old/state", []byte(`{"phase":"running"}`), true)
	publish(t, m.URL, "homeassistant/device/rezuscloud_lab_workers-9/config", ours("rezuscloud_lab_workers-9", "rezuscloud/lab/lab-workers-9/state"), true)
	// Foreign: another program, another base with a similar prefix, and
	// one with our id prefix but another availability topic.
	foreign := map[string][]byte{
		"homeassistant/device/zigbee_1234/config":          []byte(`{"device":{"identifiers":["z"]},"origin":{"name":"z2m"},"components":{}}`),
		"homeassistant/device/rezuscloud_lab2_x/config":    []byte(`{"device":{"identifiers":["q"]},"origin":{"name":"rezuscloud"},"components":{"a":{"platform":"sensor","unique_id":"q","state_topic":"rezuscloud_lab2/x/state","availability_topic":"rezuscloud_lab2/bridge/availability"}}}`),
		"homeassistant/device/rezuscloud_other/config":     []byte(`{"device":{"identifiers":["o"]},"origin":{"name":"other"},"components":{"a":{"platform":"sensor","unique_id":"o","state_topic":"other/state"}}}`),
		"homeassistant/sensor/rezuscloud_lab/phase/config": []byte(`{"state_topic":"x"}`),
		"other/state": []byte(`keep`),
	}
	for tp, p := range foreign {
		publish(t, m.URL, tp, p, true)
	}
	lab, prod := labTenant(), cloudTenant("prod", 2)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{lab, prod})

	obs := newObserver(t, m.URL, "#")
	obs.sync(t) // startBridge's Sync published the clears; every retained copy has arrived
	for _, gone := range []string{"homeassistant/device/rezuscloud_old/config", "rezuscloud/old/state",
		"homeassistant/device/rezuscloud_lab_workers-9/config"} {
		if mm, ok := obs.get(gone); ok {
			t.Errorf("stale %s still retained: %s", gone, mm.payload)
		}
	}
	for tp, p := range foreign {
		mm, ok := obs.get(tp)
		if !ok || string(mm.payload) != string(p) {
			t.Errorf("foreign %s touched (present %v)", tp, ok)
		}
	}
	for _, tp := range expectedDevices(lab, prod) {
		if _, ok := obs.get(tp); !ok {
			t.Errorf("missing %s", tp)
		}
	}

	// Removing a tenant and shrinking a group clears at once.
	lab2 := labTenant()
	lab2.NodeGroups[1].Count = 1
	obs2 := newObserver(t, m.URL, "#")
	b.SetTenants(views(lab2))
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	gone := []string{"homeassistant/device/rezuscloud_prod/config", "rezuscloud/prod/state",
		"homeassistant/device/rezuscloud_prod_workers-1/config", "rezuscloud/prod/prod-workers-1/state",
		"homeassistant/device/rezuscloud_lab_workers-2/config", "rezuscloud/lab/lab-workers-2/state"}
	testenv.WaitFor(t, 5*time.Second, "removed devices cleared", func() bool {
		for _, tp := range gone {
			mm, ok := obs2.get(tp)
			if !ok || len(mm.payload) != 0 {
				return false
			}
		}
		return true
	})
	obs3 := newObserver(t, m.URL, "#")
	obs3.sync(t) // every retained copy has arrived
	for _, tp := range gone {
		if _, ok := obs3.get(tp); ok {
			t.Errorf("%s still retained", tp)
		}
	}
	for tp, p := range foreign {
		if mm, ok := obs3.get(tp); !ok || string(mm.payload) != string(p) {
			t.Errorf("foreign %s touched", tp)
		}
	}
	if _, ok := obs3.get("homeassistant/device/rezuscloud_lab_workers-1/config"); !ok {
		t.Error("kept node removed")
	}
	// The lab count number now says 1.
	ls, _ := obs3.get("rezuscloud/lab/state")
	if !strings.Contains(string(ls.payload), `"workers":1`) {
		t.Errorf("counts not updated: %s", ls.payload)
	}
}

func TestFiltersDoNotOverlap(t *testing.T) {
	b := New(Options{URL: "tcp://127.0.0.1:1"}, nil, nil)
	b.SetTenants(views(labTenant(), cloudTenant("prod", 2), cloudTenant("request", 1)))
	b.mu.Lock()
	defer b.mu.Unlock()
	var topicsToCheck []string
	for tp := range b.routes {
		topicsToCheck = append(topicsToCheck, tp)
	}
	for _, a := range append(Actions(), "bogus") {
		topicsToCheck = append(topicsToCheck, b.topics.request(a))
	}
	for _, tp := range topicsToCheck {
		var matched []string
		for f := range b.filters {
			if topicMatch(f, tp) {
				matched = append(matched, f)
			}
		}
		if len(matched) != 1 {
			t.Errorf("%s matched by %d filters %v", tp, len(matched), matched)
		}
	}
	// Nothing we publish (state, discovery, availability) is one of our commands.
	for tp := range b.states {
		for f := range b.filters {
			if topicMatch(f, tp) {
				t.Errorf("state %s matches filter %s", tp, f)
			}
		}
	}
	if len(b.routes) < 20 {
		t.Errorf("routes: %d", len(b.routes))
	}
}

func topicMatch(filter, topic string) bool {
	f, p := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, l := range f {
		if l == "#" {
			return true
		}
		if i >= len(p) || (l != "+" && l != p[i]) {
			return false
		}
	}
	return len(f) == len(p)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestActionTable: every action has a call, and its optional fields are
// fields it takes.
func TestActionTable(t *testing.T) {
	for name, a := range actions {
		if a.call == nil {
			t.Errorf("%s: no call", name)
		}
		if a.optional&^a.fields != 0 {
			t.Errorf("%s: optional fields it does not take", name)
		}
	}
}

func TestEntityTableInvariants(t *testing.T) {
	keys := map[string]bool{}
	for _, e := range entities {
		k := e.kind.String() + "/" + e.key
		if keys[k] {
			t.Errorf("duplicate key %s", k)
		}
		keys[k] = true
		if e.hasCommand() && e.action == "" && e.set == nil && e.request == nil {
			t.Errorf("%s takes commands but has no action", k)
		}
		if n := btoi(e.action != "") + btoi(e.set != nil) + btoi(e.request != nil); n > 1 {
			t.Errorf("%s: action, request and set are exclusive", k)
		}
		if e.action != "" {
			if _, ok := actions[e.action]; !ok {
				t.Errorf("%s: unknown action %s", k, e.action)
			}
		}
	}
	for _, want := range []string{"bridge/connection", "bridge/operations", "bridge/log_level", "bridge/reload",
		"bridge/republish", "bridge/operation", "tenant/phase", "tenant/nodes_ready", "tenant/progress",
		"tenant/pending", "tenant/last_operation", "tenant/problem", "tenant/talos_version",
		"tenant/kubernetes_version", "tenant/count", "tenant/apply", "tenant/plan", "tenant/cancel",
		"tenant/auto_apply", "tenant/destroy_armed", "tenant/destroy", "node/stage", "node/ready",
		"node/address", "node/role", "node/talos_version", "node/reboot"} {
		if !keys[want] {
			t.Errorf("minimum entity %s missing", want)
		}
	}
	if !slices.Contains(logging.Levels, "info") {
		t.Error("log levels")
	}
}

func TestOperationEvent(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL, "rezuscloud/bridge/event")
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	b.PublishOperation(tenant.OperationEvent{Tenant: "lab", Name: "apply", Result: tenant.ResultSucceeded,
		Message: "done", Duration: 3 * time.Second, At: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)})
	mm := obs.waitPayload(t, "rezuscloud/bridge/event", 5*time.Second, func([]byte) bool { return true })
	if mm.retained {
		t.Error("event retained")
	}
	var ev map[string]any
	_ = json.Unmarshal(mm.payload, &ev)
	if ev["event_type"] != "succeeded" || ev["tenant"] != "lab" || ev["at"] != "2026-05-01T12:00:00.000+00:00" {
		t.Errorf("event %s", mm.payload)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{URL: "http://x:1"}, {URL: "tcp://x:1", BaseTopic: "a/b"}, {URL: ""}} {
		if err := New(o, nil, nil).Start(context.Background()); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestTenantNamedBridgeSkipped(t *testing.T) {
	b := New(Options{URL: "tcp://127.0.0.1:1"}, nil, nil)
	b.SetTenants(views(cloudTenant("bridge", 1), labTenant()))
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.views["bridge"]; ok || b.views["lab"].Spec == nil {
		t.Error("bridge tenant not skipped")
	}
}
