package hass

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestEntityNamesReadWell: Home Assistant shows an entity as "<device
// name> <entity name>" and Assist reads it aloud, so no word may come
// twice in it ("Lab Workers nodes" was one word short of that, "Lab Lab
// count" would be it) and the entity name never repeats the device's.
// Every entity of every device kind is checked, with group names that
// collide with the device's name and with the entity's own words.
func TestEntityNamesReadWell(t *testing.T) {
	b := New(Options{URL: "tcp://127.0.0.1:1883", ConfigurationURL: "homeassistant://app/a0d7b954_rezuscloud"}, newFakeCmd(), nil)
	odd := &tenant.Tenant{Name: "home", DisplayName: "Lab", Provider: tenant.ProviderOCI,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{
			{Name: "lab", Role: tenant.RoleControlPlane, Count: 1},
			{Name: "count", Role: tenant.RoleWorker, Count: 1},
			{Name: "lab-gpu", Role: tenant.RoleWorker, Count: 1},
			{Name: "worker-nodes", Role: tenant.RoleWorker, Count: 1},
		}}
	mac := "aa:bb:cc:dd:ee:31"
	b.mu.Lock()
	b.machines = map[string]talos.Machine{"aabbccddee31": {MAC: mac, Model: "NUC12WSHi5"}}
	payloads := map[string][]byte{}
	add := func(k kind, r ref, tn *tenant.Tenant, n *tenant.Node) {
		payloads[b.topics.discovery(k, r)] = b.discoveryPayload(k, r, tn, n)
	}
	add(kindBridge, ref{}, nil, nil)
	add(kindMachine, ref{machine: "aabbccddee31"}, nil, nil)
	for _, tn := range []*tenant.Tenant{labTenant(), cloudTenant("prod", 2), odd} {
		add(kindTenant, ref{tenant: tn.Name}, tn, nil)
		for _, n := range tn.Nodes() {
			add(kindNode, ref{tenant: tn.Name, node: n.Name}, tn, &n)
		}
	}
	b.mu.Unlock()

	checker := hasstest.NewChecker() // Home Assistant's rules, configuration_url included
	for topic, p := range payloads {
		for _, err := range checker.Check(topic, p, true) {
			t.Errorf("conformance: %v", err)
		}
	}

	names := map[string]bool{}
	for _, p := range payloads {
		var d struct {
			Device     map[string]any            `json:"device"`
			Components map[string]map[string]any `json:"components"`
		}
		if err := json.Unmarshal(p, &d); err != nil {
			t.Fatal(err)
		}
		dev, _ := d.Device["name"].(string)
		if d.Device["configuration_url"] != "homeassistant://app/a0d7b954_rezuscloud" {
			t.Errorf("device %q: configuration_url %v", dev, d.Device["configuration_url"])
		}
		if w := repeated(dev); w != "" {
			t.Errorf("device name %q says %q twice", dev, w)
		}
		for id, c := range d.Components {
			name, _ := c["name"].(string)
			full := dev + " " + name
			names[full] = true
			switch {
			case name == "":
				t.Errorf("%s/%s has no name", dev, id)
			case strings.Contains(strings.ToLower(name), strings.ToLower(dev)):
				t.Errorf("%s/%s: the name %q repeats the device's", dev, id, name)
			case repeated(full) != "":
				t.Errorf("%s/%s: %q says %q twice", dev, id, full, repeated(full))
			}
		}
	}
	for _, want := range []string{"Lab Workers count", "Lab CP count", "Lab Count", "Lab GPU count",
		"Lab Worker nodes count", "Lab 1 Stage", "Lab workers 2 Ready", "prod Workers count"} {
		if !names[want] {
			t.Errorf("no entity reads %q", want)
		}
	}
}

// repeated returns a word that s says twice ("" when none).
func repeated(s string) string {
	seen := map[string]bool{}
	for _, w := range strings.Fields(strings.ToLower(s)) {
		if seen[w] {
			return w
		}
		seen[w] = true
	}
	return ""
}
