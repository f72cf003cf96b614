package config

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/internal/addoncheck"
)

// standIn is the part of the Supervisor an add-on's options go through,
// following supervisor/apps (commit 090ef31): the options it keeps for the
// add-on (persist), merged over config.yaml's defaults (deepmerge: sections
// merge, values replace) for /addons/self/info, validated by AppOptions
// before it keeps them (POST /addons/self/options) and before it writes
// /data/options.json at each start, which drops the options the schema
// does not have. The validation is addoncheck's transcription of AppOptions.
type standIn struct {
	t        *testing.T
	schema   map[string]*yaml.Node
	defaults map[string]any
	slug     string
	refuse   bool // answer POST /addons/self/options with an error

	mu      sync.Mutex
	persist map[string]any
	posts   int
	srv     *httptest.Server
}

func newStandIn(t *testing.T, persist map[string]any) *standIn {
	t.Helper()
	b, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	man, errs := addoncheck.CheckConfig("config.yaml", b)
	if len(errs) > 0 {
		t.Fatalf("config.yaml: %v", errs)
	}
	defs, err := man.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &standIn{t: t, schema: man.Schema, defaults: defs, slug: "a0d7b954_rezuscloud", persist: persist}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *standIn) supervisor() Supervisor {
	return Supervisor{URL: s.srv.URL, Token: "sup-token-123", Client: s.srv.Client()}
}

func (s *standIn) answer(w http.ResponseWriter, status int, data any, msg string) {
	w.WriteHeader(status)
	res := "ok"
	if status != http.StatusOK {
		res = "error"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"result": res, "data": data, "message": msg})
}

func (s *standIn) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer sup-token-123" {
		s.answer(w, http.StatusUnauthorized, nil, "Unauthorized")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "GET /addons/self/info":
		s.answer(w, 200, map[string]any{"slug": s.slug, "ingress": false, "options": merge(s.defaults, s.persist)}, "")
	case "POST /addons/self/options":
		var body struct {
			Options map[string]any `json:"options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.answer(w, 400, nil, err.Error())
			return
		}
		s.posts++
		kept, _, errs := addoncheck.ValidateOptions(s.schema, body.Options)
		if s.refuse {
			errs = append(errs, fmt.Errorf("refused by the test"))
		}
		if len(errs) > 0 {
			s.answer(w, 400, nil, fmt.Sprintf("App rezuscloud has invalid options: %v", errs))
			return
		}
		s.persist = kept
		s.answer(w, 200, nil, "")
	default:
		s.answer(w, 404, nil, "not found")
	}
}

// start is the Supervisor's write_options at an add-on start: the merged
// options, validated (unknown ones dropped), written to options.json.
func (s *standIn) start() string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	kept, _, errs := addoncheck.ValidateOptions(s.schema, merge(s.defaults, s.persist))
	if len(errs) > 0 {
		s.t.Fatalf("the Supervisor would not start the add-on: %v", errs)
	}
	b, _ := json.Marshal(kept)
	p := filepath.Join(s.t.TempDir(), "options.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// merge is deepmerge's Merger([(dict, ["merge"])], ["override"], ["override"]).
func merge(base, next map[string]any) map[string]any {
	out := deepCopy(base)
	for k, v := range next {
		if bm, ok := out[k].(map[string]any); ok {
			if nm, ok := v.(map[string]any); ok {
				out[k] = merge(bm, nm)
				continue
			}
		}
		out[k] = v
	}
	return out
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
	first := sup.start()
	b, _ := os.ReadFile(first)
	if strings.Contains(string(b), "a-passphrase-of-the-user") || strings.Contains(string(b), "broker.lan") {
		t.Fatalf("the stand-in keeps dropped options in options.json (the Supervisor does not): %s", b)
	}
	c, err := LoadAddon(context.Background(), first, sup.supervisor())
	if err != nil {
		t.Fatal(err)
	}
	checkFlat010(t, c)
	m := c.Migration
	if !m.Saved || m.Err != nil || sup.posts != 1 {
		t.Fatalf("migration = %+v, %d posts", m, sup.posts)
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
	if _, flat := sup.persist["mqtt_url"]; flat {
		t.Fatalf("the Supervisor still keeps flat options: %v", sup.persist)
	}
	if c.Addon.Slug != "a0d7b954_rezuscloud" || c.ConfigurationURL() != "homeassistant://config/app/a0d7b954_rezuscloud/info" {
		t.Errorf("slug %q, url %q", c.Addon.Slug, c.ConfigurationURL())
	}

	// the next start: the sections are in /data/options.json
	c2, err := LoadAddon(context.Background(), sup.start(), sup.supervisor())
	if err != nil {
		t.Fatal(err)
	}
	checkFlat010(t, c2)
	if len(c2.Migration.Moved) != 0 || c2.Migration.Saved || sup.posts != 1 {
		t.Fatalf("second start migrated again: %+v, %d posts", c2.Migration, sup.posts)
	}
}

// TestMigrateRefused: when the Supervisor does not take the migrated
// options, this run still uses them and says why they were not saved.
func TestMigrateRefused(t *testing.T) {
	sup := newStandIn(t, flat010())
	sup.refuse = true
	c, err := LoadAddon(context.Background(), sup.start(), sup.supervisor())
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
