package config

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/config/supervisortest"
)

func newStandIn(t *testing.T, persist map[string]any) *supervisortest.Supervisor {
	return supervisortest.New(t, "../../config.yaml", persist)
}

func client(s *supervisortest.Supervisor) Supervisor {
	return Supervisor{URL: s.URL(), Token: supervisortest.Token, Client: s.Client()}
}

// flat010 is what a user of 0.1.0 had saved in the form: the Supervisor
// stores every option the form sends, defaults included.
func flat010() map[string]any {
	return map[string]any{
		"log_level": "debug", "tenants_dir": "/config/tenants", "parallel_applies": float64(3),
		"mqtt_url": "tcp://broker.lan:1883", "mqtt_username": "rc", "mqtt_password": "mqtt-secret-pw",
		"discovery_prefix": "homeassistant", "base_topic": "lab",
		"state_passphrase": "a-passphrase-of-the-user-1234",
		"assist_expose":    true, "discovery_cidrs": []any{"192.168.1.0/24"}, "discovery_interval": "10m",
		"redfish_username": "admin", "redfish_password": "bmc-secret-pw",
		"openstack_auth_url": "https://keystone.invalid:5000/v3", "openstack_username": "u",
		"openstack_password": "os-secret-pw", "openstack_project_name": "p", "openstack_region": "RegionOne",
		"oci_region": "", // cleared in 0.1.0's form: nothing to move
	}
}

func checkFlat010(t *testing.T, c Config) {
	t.Helper()
	want := []bool{
		c.LogLevel == "debug", c.Tofu.ParallelApplies == 3,
		c.MQTT.URL == "tcp://broker.lan:1883", c.MQTT.Username == "rc", c.MQTT.Password.Reveal() == "mqtt-secret-pw",
		c.MQTT.BaseTopic == "lab", c.Tofu.StatePassphrase.Reveal() == "a-passphrase-of-the-user-1234",
		c.HomeAssistant.AssistExpose, slices.Equal(c.Discovery.CIDRs, []string{"192.168.1.0/24"}), c.Discovery.Interval == "10m",
		c.Credentials.Redfish.Password.Reveal() == "bmc-secret-pw", c.Credentials.OpenStack.Password.Reveal() == "os-secret-pw",
		c.Credentials.OpenStack.Region == "RegionOne", c.Credentials.OpenStack.UserDomainName == "Default",
	}
	for i, ok := range want {
		if !ok {
			t.Errorf("value %d of the 0.1.0 options was lost: %+v", i, c)
		}
	}
}

// TestMigrateFromFlatOptions: an update from 0.1.0 (flat options) to the
// sectioned schema. The Supervisor then writes /data/options.json without
// any of the user's flat options (it drops what the schema no longer has),
// which would silently lose the broker, the credentials and the state
// passphrase; rezuscloud reads them from the Supervisor's stored options,
// moves them into their sections, saves them back once, and the next start
// has them from /data/options.json with nothing left to move.
func TestMigrateFromFlatOptions(t *testing.T) {
	sup := newStandIn(t, flat010())
	first := sup.Start()
	b, _ := os.ReadFile(first)
	if strings.Contains(string(b), "a-passphrase-of-the-user") || strings.Contains(string(b), "broker.lan") {
		t.Fatalf("the stand-in keeps dropped options in options.json (the Supervisor does not): %s", b)
	}
	c, err := LoadAddon(context.Background(), first, client(sup))
	if err != nil {
		t.Fatal(err)
	}
	checkFlat010(t, c)
	m := c.Migration
	if !m.Saved || m.Err != nil || sup.Posts() != 1 {
		t.Fatalf("migration = %+v, %d posts", m, sup.Posts())
	}
	if !slices.Contains(m.Moved, "state_passphrase → state.passphrase") || !slices.Contains(m.Moved, "mqtt_url → mqtt.url") ||
		slices.ContainsFunc(m.Moved, func(s string) bool { return strings.HasPrefix(s, "oci_region") }) {
		t.Errorf("moved = %v", m.Moved)
	}
	for _, s := range m.Moved {
		if strings.Contains(s, "secret") || strings.Contains(s, "passphrase-of") {
			t.Errorf("a value in the migration report: %q", s)
		}
	}
	if _, flat := sup.Persist()["mqtt_url"]; flat {
		t.Fatalf("the Supervisor still keeps flat options: %v", sup.Persist())
	}
	if c.Addon.Slug != "a0d7b954_rezuscloud" || c.ConfigurationURL() != "homeassistant://config/app/a0d7b954_rezuscloud/info" {
		t.Errorf("slug %q, url %q", c.Addon.Slug, c.ConfigurationURL())
	}

	// the next start: the sections are in /data/options.json
	c2, err := LoadAddon(context.Background(), sup.Start(), client(sup))
	if err != nil {
		t.Fatal(err)
	}
	checkFlat010(t, c2)
	if len(c2.Migration.Moved) != 0 || c2.Migration.Saved || sup.Posts() != 1 {
		t.Fatalf("second start migrated again: %+v, %d posts", c2.Migration, sup.Posts())
	}
}

// TestMigrateRefused: when the Supervisor does not take the migrated
// options, this run still uses them and says why they were not saved.
func TestMigrateRefused(t *testing.T) {
	sup := newStandIn(t, flat010())
	sup.Refuse(true)
	c, err := LoadAddon(context.Background(), sup.Start(), client(sup))
	if err != nil {
		t.Fatal(err)
	}
	checkFlat010(t, c)
	if c.Migration.Saved || c.Migration.Err == nil || !strings.Contains(c.Migration.Err.Error(), "/addons/self/options") {
		t.Fatalf("migration = %+v", c.Migration)
	}
}

// TestMigrateFlatFile: a flat /data/options.json (no Supervisor to ask) is
// read in its sections too, and nothing is saved.
func TestMigrateFlatFile(t *testing.T) {
	b, _ := json.Marshal(flat010())
	c, err := LoadAddon(context.Background(), writeFile(t, "options.json", string(b)), Supervisor{})
	if err != nil {
		t.Fatal(err)
	}
	checkFlat010(t, c)
	if len(c.Migration.Moved) == 0 || c.Migration.Saved || c.Migration.Err != nil {
		t.Fatalf("migration = %+v", c.Migration)
	}
}

func TestMigrateFlat(t *testing.T) {
	current := map[string]any{"log_level": "info", "mqtt": map[string]any{"base_topic": "rezuscloud", "discovery_prefix": "homeassistant"}}
	stored := map[string]any{"log_level": "info", "base_topic": "lab", "mqtt_url": "", "discovery_cidrs": []any{}, "mqtt": map[string]any{"base_topic": "rezuscloud"}}
	out, moved, found := MigrateFlat(current, stored)
	if !found[sourceStored] || found[sourceFile] {
		t.Errorf("found = %v", found)
	}
	if !slices.Equal(moved, []string{"base_topic → mqtt.base_topic"}) {
		t.Errorf("moved = %v", moved)
	}
	mq := out["mqtt"].(map[string]any)
	if mq["base_topic"] != "lab" || mq["discovery_prefix"] != "homeassistant" || mq["url"] != nil {
		t.Errorf("mqtt = %v", mq)
	}
	if current["mqtt"].(map[string]any)["base_topic"] != "rezuscloud" {
		t.Error("MigrateFlat changed its input")
	}
	if _, moved, found := MigrateFlat(current, current); len(moved) != 0 || len(found) != 0 {
		t.Errorf("sectioned options migrated: %v %v", moved, found)
	}
}

func TestConfigurationURL(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, DocsURL},
		{Config{AddonMode: true}, DocsURL},
		{Config{AddonMode: true, Addon: AddonInfo{Slug: "local_rezuscloud"}}, "homeassistant://config/app/local_rezuscloud/info"},
		{Config{AddonMode: true, Addon: AddonInfo{Slug: "a0d7b954_rezuscloud", Ingress: true}}, "homeassistant://app/a0d7b954_rezuscloud"},
	} {
		if got := tc.c.ConfigurationURL(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c.Addon, got, tc.want)
		}
	}
	for h, want := range map[string]string{"a0d7b954-rezuscloud": "a0d7b954_rezuscloud", "local-rezuscloud": "local_rezuscloud",
		"rezuscloud": "", "x-y-rezuscloud": "", "a0d7b954-other": "", "": ""} {
		if got := slugFromHostname(h); got != want {
			t.Errorf("slugFromHostname(%q) = %q, want %q", h, got, want)
		}
	}
}
