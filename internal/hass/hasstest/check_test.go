package hasstest

import (
	"encoding/json"
	"strings"
	"testing"
)

const good = `{"dev":{"ids":["k8s_prod_node_w1"],"name":"w1","mf":"Kubernetes","mdl":"Node","sw":"v1.31.2","via_device":"k8s_prod"},
 "o":{"name":"k8s-ha-addon","sw":"0.3.0","url":"https://example.invalid/support"},
 "avty":[{"t":"k8sha/bridge/state"},{"t":"k8sha/prod/w1/availability"}],"avty_mode":"all",
 "qos":1,
 "cmps":{
  "ready":{"p":"binary_sensor","uniq_id":"k8s_prod_w1_ready","name":"Ready","dev_cla":"connectivity","stat_t":"k8sha/prod/w1/state","val_tpl":"{{ value_json.ready }}","pl_on":"True","pl_off":"False","def_ent_id":"binary_sensor.k8s_prod_w1_ready"},
  "cpu":{"p":"sensor","uniq_id":"k8s_prod_w1_cpu","name":"CPU usage","unit_of_meas":"%","stat_cla":"measurement","stat_t":"k8sha/prod/w1/state","val_tpl":"{{ value_json.cpu_pct }}"},
  "drain":{"p":"button","uniq_id":"k8s_prod_w1_drain","name":"Drain","cmd_t":"k8sha/prod/w1/cmd/drain","pl_prs":"PRESS","ret":false,"ent_cat":"config"}}}`

const topic = "homeassistant/device/k8s_prod_node_w1/config"

func TestReferenceExamplePasses(t *testing.T) {
	if errs := CheckDiscovery(topic, []byte(good), true); len(errs) > 0 {
		t.Fatalf("reference example refused: %v", errs)
	}
	if errs := CheckDiscovery(topic, nil, true); len(errs) > 0 {
		t.Fatalf("removal refused: %v", errs)
	}
}

// mutate applies f to the decoded good payload.
func mutate(t *testing.T, f func(root map[string]any, cmps map[string]map[string]any)) []byte {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal([]byte(good), &root); err != nil {
		t.Fatal(err)
	}
	cm := map[string]map[string]any{}
	for k, v := range root["cmps"].(map[string]any) {
		cm[k] = v.(map[string]any)
	}
	f(root, cm)
	out := map[string]any{}
	for k, v := range cm {
		out[k] = v
	}
	root["cmps"] = out
	p, _ := json.Marshal(root)
	return p
}

func TestCheckerCatches(t *testing.T) {
	cases := []struct {
		name  string
		topic string
		want  string
		f     func(root map[string]any, c map[string]map[string]any)
	}{
		{"not retained", "", "retained", nil},
		{"bad topic", "homeassistant/device/a/b/c/config", "topic", nil},
		{"bad id", "homeassistant/device/a.b/config", "id", nil},
		{"unknown component", "homeassistant/thing/x/config", "not supported", nil},
		{"root key", "", "root key", func(r map[string]any, _ map[string]map[string]any) { r["name"] = "x" }},
		{"tilde at root", "", "root key", func(r map[string]any, _ map[string]map[string]any) { r["~"] = "x" }},
		{"no origin", "", "origin is required", func(r map[string]any, _ map[string]map[string]any) { delete(r, "o") }},
		{"origin no name", "", "origin.name", func(r map[string]any, _ map[string]map[string]any) { r["o"] = map[string]any{"sw": "1"} }},
		{"origin extra", "", "origin key", func(r map[string]any, _ map[string]map[string]any) {
			r["o"] = map[string]any{"name": "a", "version": "1"}
		}},
		{"device extra", "", "device key", func(r map[string]any, _ map[string]map[string]any) {
			r["dev"].(map[string]any)["ip"] = "1.2.3.4"
		}},
		{"device no ids", "", "identifier", func(r map[string]any, _ map[string]map[string]any) { delete(r["dev"].(map[string]any), "ids") }},
		{"device no name", "", "device name", func(r map[string]any, _ map[string]map[string]any) { delete(r["dev"].(map[string]any), "name") }},
		{"no unique_id", "", "unique_id is required", func(_ map[string]any, c map[string]map[string]any) { delete(c["cpu"], "uniq_id") }},
		{"dup unique_id", "", "not unique", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["uniq_id"] = "k8s_prod_w1_ready" }},
		{"bad platform", "", "platform", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["p"] = "gauge" }},
		{"config sensor", "", "entity_category config", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["ent_cat"] = "config" }},
		{"bad category", "", "entity_category", func(_ map[string]any, c map[string]map[string]any) { c["drain"]["ent_cat"] = "system" }},
		{"unit mismatch", "", "not valid for device_class", func(_ map[string]any, c map[string]map[string]any) {
			c["cpu"]["dev_cla"] = "temperature"
			c["cpu"]["unit_of_meas"] = "C"
		}},
		{"bad class", "", "device_class", func(_ map[string]any, c map[string]map[string]any) { c["ready"]["dev_cla"] = "online" }},
		{"options without enum", "", "enum", func(_ map[string]any, c map[string]map[string]any) {
			c["cpu"]["ops"] = []string{"a"}
		}},
		{"timestamp with state class", "", "no state_class", func(_ map[string]any, c map[string]map[string]any) {
			c["cpu"]["dev_cla"] = "timestamp"
			delete(c["cpu"], "unit_of_meas")
		}},
		{"object_id", "", "object_id", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["obj_id"] = "x" }},
		{"default_entity_id", "", "default_entity_id", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["def_ent_id"] = "cpu" }},
		{"default_entity_id domain", "", "must start with", func(_ map[string]any, c map[string]map[string]any) {
			c["cpu"]["def_ent_id"] = "switch.cpu"
		}},
		{"name repeats device", "", "starts with the device name", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["name"] = "w1 CPU" }},
		{"two null names", "", "main entity", func(_ map[string]any, c map[string]map[string]any) {
			c["cpu"]["name"] = nil
			c["ready"]["name"] = nil
		}},
		{"button retains", "", "retain", func(_ map[string]any, c map[string]map[string]any) { c["drain"]["ret"] = true }},
		{"command wildcard", "", "wildcards", func(_ map[string]any, c map[string]map[string]any) { c["drain"]["cmd_t"] = "a/+/b" }},
		{"no state topic", "", "requires state_topic", func(_ map[string]any, c map[string]map[string]any) { delete(c["cpu"], "stat_t") }},
		{"avail both", "", "mutually exclusive", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["avty_t"] = "x/y" }},
		{"avail extra", "", "availability key", func(r map[string]any, _ map[string]map[string]any) {
			r["avty"] = []any{map[string]any{"t": "a", "qos": 1}}
		}},
		{"avail mode", "", "availability_mode", func(r map[string]any, _ map[string]map[string]any) { r["avty_mode"] = "some" }},
		{"qos", "", "qos", func(r map[string]any, _ map[string]map[string]any) { r["qos"] = 3 }},
		{"number bounds", "", "min", func(_ map[string]any, c map[string]map[string]any) {
			c["n"] = map[string]any{"p": "number", "uniq_id": "n1", "name": "N", "cmd_t": "a/b", "min": 5, "max": 5}
		}},
		{"select no options", "", "options", func(_ map[string]any, c map[string]map[string]any) {
			c["s"] = map[string]any{"p": "select", "uniq_id": "s1", "name": "S", "cmd_t": "a/b"}
		}},
		{"event no types", "", "event_types", func(_ map[string]any, c map[string]map[string]any) {
			c["e"] = map[string]any{"p": "event", "uniq_id": "e1", "name": "E", "stat_t": "a/b"}
		}},
		{"switch class", "", "device_class", func(_ map[string]any, c map[string]map[string]any) {
			c["w"] = map[string]any{"p": "switch", "uniq_id": "w1", "name": "W", "cmd_t": "a/b", "dev_cla": "light"}
		}},
		{"icon", "", "icon", func(_ map[string]any, c map[string]map[string]any) { c["cpu"]["ic"] = "server" }},
		{"support url", "", "support_url", func(r map[string]any, _ map[string]map[string]any) {
			r["o"] = map[string]any{"name": "a", "url": "not a url"}
		}},
	}
	for _, c := range cases {
		tp := topic
		if c.topic != "" {
			tp = c.topic
		}
		payload := []byte(good)
		if c.f != nil {
			payload = mutate(t, c.f)
		}
		errs := CheckDiscovery(tp, payload, c.name != "not retained")
		found := false
		for _, e := range errs {
			if strings.Contains(e.Error(), c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want an error containing %q, got %v", c.name, c.want, errs)
		}
	}
	if errs := CheckDiscovery(topic, []byte(`[1]`), true); len(errs) == 0 {
		t.Error("non-object accepted")
	}
}

func TestUniqueAcrossMessages(t *testing.T) {
	c := NewChecker()
	if errs := c.Check(topic, []byte(good), true); len(errs) > 0 {
		t.Fatal(errs)
	}
	// Same topic again (an update): fine.
	if errs := c.Check(topic, []byte(good), true); len(errs) > 0 {
		t.Fatal(errs)
	}
	// Another device reusing the ids: refused.
	if errs := c.Check("homeassistant/device/other/config", []byte(good), true); len(errs) == 0 {
		t.Fatal("duplicate unique_id across devices accepted")
	}
	// After removal the ids are free.
	c.Check(topic, nil, true)
	if errs := c.Check("homeassistant/device/other2/config", []byte(good), true); len(errs) > 0 {
		t.Fatal(errs)
	}
}

func TestScanSecrets(t *testing.T) {
	bad := []string{
		"-----BEGIN CERTIFICATE-----\nMIIB",
		`{"key":"BEGIN RSA PRIVATE KEY"}`,
		`{"token":"abc"}`,
		`{"x":{"password":"hunter2"}}`,
		`{"a":"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"}`,
		`{"a":"abcdef.0123456789abcdef"}`,
		`{"kubeconfig":"apiVersion: v1"}`,
		`client-key-data: LS0t`,
		strings.Repeat("QUJD", 20),
	}
	for _, b := range bad {
		if len(ScanSecrets([]byte(b))) == 0 {
			t.Errorf("not found in %q", b)
		}
	}
	if f := ScanSecrets([]byte(good)); len(f) > 0 {
		t.Errorf("false positive: %v", f)
	}
	if f := ScanSecrets([]byte(`{"a":"the sky"}`), "sky"); len(f) != 1 {
		t.Errorf("known secret: %v", f)
	}
}

func TestCheckTemplate(t *testing.T) {
	doc := []byte(`{"a":1,"b":{"c":null},"counts":{"workers":2},"last":null}`)
	for _, ok := range []string{"{{ value_json.a }}", `{{ value_json.counts["workers"] }}`,
		"{{ value_json.last.at if value_json.last else None }}", "{{ value_json.b.c.d }}", "{{ value_json.b | tojson }}"} {
		if errs := CheckTemplate(ok, doc); len(errs) > 0 {
			t.Errorf("%s: %v", ok, errs)
		}
	}
	for _, bad := range []string{"{{ value_json.z }}", `{{ value_json.counts['cp'] }}`, "{{ value_json.a.b }}"} {
		if errs := CheckTemplate(bad, doc); len(errs) == 0 {
			t.Errorf("%s accepted", bad)
		}
	}
}
