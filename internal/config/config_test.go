package config

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// loadedAsWanted checks a load's error against the one a table row wants
// ("" none): it fails the test on any other outcome and reports whether
// there is a configuration to look at.
func loadedAsWanted(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error with %q", err, want)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFileDefaultsAndKeys(t *testing.T) {
	p := writeFile(t, "c.toml", `
data_dir = "/srv/rc"
tenants_dir = "/srv/rc/tenants"
[mqtt]
url = "ssl://broker:8883"
password = "hunter2-is-a-password"
[tofu]
parallel_applies = 3
[credentials.openstack]
auth_url = "https://keystone.invalid:5000/v3"
`)
	c, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/srv/rc" || c.MQTT.URL != "ssl://broker:8883" || c.Tofu.ParallelApplies != 3 ||
		c.MQTT.BaseTopic != "rezuscloud" || c.Credentials.OpenStack.UserDomainName != "Default" || c.LogLevel != "info" {
		t.Fatalf("config = %+v", c)
	}
	if got := fmt.Sprintf("%v %+v %#v %s", c.MQTT.Password, c, c.MQTT, c.MQTT.Password); strings.Contains(got, "hunter2") {
		t.Fatalf("secret printed: %s", got)
	}
	if b, _ := json.Marshal(c); strings.Contains(string(b), "hunter2") {
		t.Fatalf("secret marshalled: %s", b)
	}
	if c.MQTT.Password.Reveal() != "hunter2-is-a-password" {
		t.Fatal("Reveal")
	}
}

func TestPanel(t *testing.T) {
	c, err := LoadFile(writeFile(t, "c.toml", ""))
	if err != nil {
		t.Fatal(err)
	}
	if c.Panel.Listen != "" || !slices.Equal(c.Panel.Trusted, []string{"127.0.0.1", "::1"}) {
		t.Fatalf("default panel = %+v, want it off, trusting loopback once on", c.Panel)
	}
	c, err = LoadFile(writeFile(t, "c.toml", "[panel]\nlisten = \"127.0.0.1:8099\"\ntrusted = [\"127.0.0.1\", \"::ffff:10.0.0.1\", \"192.168.1.0/24\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(c.Panel.TrustedPrefixes())
	if c.Panel.Listen != "127.0.0.1:8099" || got != "[127.0.0.1/32 10.0.0.1/32 192.168.1.0/24]" {
		t.Fatalf("panel = %+v, prefixes %s", c.Panel, got)
	}
	c, err = LoadFile(writeFile(t, "c.toml", "[panel]\nlisten = \"\"\ntrusted = []\n"))
	if err != nil || c.Panel.Listen != "" {
		t.Fatalf("panel off: %+v, %v", c.Panel, err)
	}
	c, err = LoadFile(writeFile(t, "c.toml", "[panel]\nlisten = \"127.0.0.1:8099\"\n"))
	if err != nil || got != "[127.0.0.1/32 10.0.0.1/32 192.168.1.0/24]" || fmt.Sprint(c.Panel.TrustedPrefixes()) != "[127.0.0.1/32 ::1/128]" {
		t.Fatalf("panel on, default peers: %+v, %v", c.Panel, err)
	}
}

func TestLoadFileErrors(t *testing.T) {
	tests := []struct{ body, want string }{
		{"[mqtt]\nulr = \"x\"", ":2:1: mqtt.ulr: unknown key"},
		{"log_level = \"loud\"", "log_level: \"loud\" is not one of"},
		{"data_dir = \"rel\"", "data_dir: \"rel\" must be an absolute path"},
		{"[mqtt]\nurl = \"http://x\"", "mqtt.url"},
		{"[mqtt]\nbase_topic = \"a/b\"", "mqtt.base_topic"},
		{"[tofu]\nparallel_applies = 0", "tofu.parallel_applies: 0 is out of range"},
		{"[tofu]\nstate_passphrase = \"short\"", "shorter than 16"},
		{"[homeassistant]\nurl = \"ws://ha:8123/api/websocket\"", "homeassistant.token: is required"},
		{"[credentials.oci]\nprivate_key = \"nope\"", "not a PEM private key"},
		{"[tofu]\nparallel_applies = \"two\"", ":2:20:"},
		{"[panel]\nlisten = \"8099\"", "panel.listen: \"8099\" must be host:port"},
		{"[panel]\nlisten = \"ha.local:8099\"", "panel.listen: host \"ha.local\" must be an IP address"},
		{"[panel]\nlisten = \":99999\"", "panel.listen"},
		{"[panel]\nlisten = \"127.0.0.1:8099\"\ntrusted = []", "panel.trusted: must name at least one peer"},
		{"[panel]\ntrusted = [\"supervisor\"]", "panel.trusted: \"supervisor\" is not an IP address or CIDR prefix"},
	}
	for _, tc := range tests {
		_, err := LoadFile(writeFile(t, "c.toml", tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.body, err, tc.want)
		}
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.toml")); err == nil {
		t.Error("missing file accepted")
	}
}

// supervisor answers GET /services/mqtt the way the Supervisor documents it.
func supervisor(t *testing.T, status int, body string) Supervisor {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/services/mqtt" || r.Header.Get("Authorization") != "Bearer sup-token-123" {
			http.Error(w, `{"result":"error","message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return Supervisor{URL: srv.URL, Token: "sup-token-123", Client: srv.Client()}
}

func TestSupervisorMQTT(t *testing.T) {
	tests := []struct {
		status     int
		body, want string
	}{
		{200, `{"result":"ok","data":{"addon":"core_mosquitto","host":"core-mosquitto","port":"1883","ssl":false,"username":"addons","password":"pw-from-sup","protocol":"3.1.1"}}`, "tcp://core-mosquitto:1883"},
		{200, `{"result":"ok","data":{"host":"core-mosquitto","port":8883,"ssl":true,"username":"u","password":"p"}}`, "ssl://core-mosquitto:8883"},
		{400, `{"result":"error","message":"No service mqtt"}`, "error: supervisor: /services/mqtt: No service mqtt (HTTP 400); is the Mosquitto broker app installed?"},
		{200, `{"result":"ok","data":{"host":"","port":"x"}}`, "error: supervisor: /services/mqtt: incomplete answer"},
		{200, `not json`, "error: supervisor: /services/mqtt: HTTP 200, unreadable answer"},
	}
	for _, tc := range tests {
		svc, err := supervisor(t, tc.status, tc.body).MQTT(context.Background())
		got := svc.URL
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.body, got, tc.want)
		}
	}
	if _, err := (Supervisor{URL: "http://127.0.0.1:1"}).MQTT(context.Background()); err == nil || !strings.Contains(err.Error(), "SUPERVISOR_TOKEN") {
		t.Errorf("no token: %v", err)
	}
}

func TestLoadAddon(t *testing.T) {
	sup := supervisor(t, 200, `{"result":"ok","data":{"host":"core-mosquitto","port":"1883","ssl":false,"username":"addons","password":"pw-from-sup"}}`)
	opts := writeFile(t, "options.json", `{"log_level":"debug","tenants_dir":"/config/tenants","parallel_applies":2,
		"mqtt":{"discovery_prefix":"homeassistant","base_topic":"rezuscloud"},"openstack":{"password":"os-secret-pw"}}`)
	c, err := LoadAddon(context.Background(), opts, sup)
	if err != nil {
		t.Fatal(err)
	}
	if !c.AddonMode || c.LogLevel != "debug" || c.MQTT.URL != "tcp://core-mosquitto:1883" || c.MQTT.Username != "addons" ||
		c.MQTT.Password.Reveal() != "pw-from-sup" || c.HomeAssistant.URL != "ws://supervisor/core/websocket" ||
		c.Credentials.OpenStack.Password.Reveal() != "os-secret-pw" || c.Credentials.OpenStack.UserDomainName != "Default" ||
		c.Panel.Listen != ":8099" || !slices.Equal(c.Panel.Trusted, []string{"172.30.32.2"}) || c.ConfigDir != "/config" {
		t.Fatalf("config = %+v", c)
	}
	if !slices.Contains(c.Secrets(), "os-secret-pw") || !slices.Contains(c.Secrets(), "pw-from-sup") {
		t.Fatalf("Secrets() = %d values", len(c.Secrets()))
	}
	// an own broker skips the Supervisor
	own := writeFile(t, "options.json", `{"log_level":"info","tenants_dir":"/config/tenants","mqtt":{"url":"tcp://127.0.0.1:1884"}}`)
	if c, err := LoadAddon(context.Background(), own, Supervisor{}); err != nil || c.MQTT.URL != "tcp://127.0.0.1:1884" {
		t.Fatalf("own broker: %v %v", c.MQTT.URL, err)
	}
	for _, tc := range []struct{ options, want string }{
		{`{"log_levle":"info"}`, "log_levle"},
		{`{"mqtt":{"urll":"tcp://127.0.0.1:1884"}}`, "urll"},
		// errors name the option of the form, not the TOML key
		{`{"mqtt":{"url":"tcp://127.0.0.1:1884"},"state":{"passphrase":"short"}}`, "state.passphrase: is shorter than 16"},
		{`{"mqtt":{"url":"tcp://127.0.0.1:1884"},"discovery":{"interval":"1s"}}`, "discovery.interval:"},
		{`{"mqtt":{"url":"tcp://127.0.0.1:1884"},"openstack":{"auth_url":"keystone"}}`, "openstack.auth_url:"},
	} {
		if _, err := LoadAddon(context.Background(), writeFile(t, "options.json", tc.options), sup); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.options, err, tc.want)
		}
	}
	// a blank row in the ranges is no range
	blank := writeFile(t, "options.json", `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"discovery":{"cidrs":["", "192.168.1.0/24"]}}`)
	if c, err := LoadAddon(context.Background(), blank, Supervisor{}); err != nil || !slices.Equal(c.Discovery.CIDRs, []string{"192.168.1.0/24"}) {
		t.Fatalf("blank cidr: %v %v", c.Discovery.CIDRs, err)
	}
}

func TestStatePassphrase(t *testing.T) {
	dir := t.TempDir()
	p1, created, err := StatePassphrase(dir, "")
	if err != nil || !created || len(p1) < 16 {
		t.Fatalf("first: %v %v %d", err, created, len(p1))
	}
	fi, err := os.Stat(filepath.Join(dir, PassphraseFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi, err)
	}
	p2, created, err := StatePassphrase(dir, "")
	if err != nil || created || p2 != p1 {
		t.Fatalf("second call must reuse the stored one: %v %v", err, created)
	}
	p3, _, _ := StatePassphrase(dir, "configured-passphrase-1234")
	if p3 != "configured-passphrase-1234" {
		t.Fatal("configured passphrase ignored")
	}
}

// TestManifestAgrees keeps config.yaml's options and schema,
// translations/en.yaml and the Options struct key for key in step, down
// into the sections (configuration.<section>.fields.<field>).
func TestManifestAgrees(t *testing.T) {
	var manifest struct {
		Options map[string]any `yaml:"options"`
		Schema  map[string]any `yaml:"schema"`
		Slug    string         `yaml:"slug"`
		Init    bool           `yaml:"init"`
		Arch    []string       `yaml:"arch"`
		Timeout int            `yaml:"timeout"`
		Map     []struct {
			Type     string `yaml:"type"`
			ReadOnly bool   `yaml:"read_only"`
		} `yaml:"map"`
	}
	readYAML(t, "../../config.yaml", &manifest)
	var tr struct {
		Configuration map[string]translation `yaml:"configuration"`
	}
	readYAML(t, "../../translations/en.yaml", &tr)
	agree(t, "", reflect.TypeOf(Options{}), manifest.Schema, manifest.Options, tr.Configuration)

	// the options the manifest sets by default decode into Options
	b, _ := json.Marshal(manifest.Options)
	if _, err := decodeOptions(mustMap(t, b)); err != nil {
		t.Errorf("default options do not decode: %v", err)
	}
	if manifest.Slug != "rezuscloud" || manifest.Init || !slices.Equal(manifest.Arch, []string{"aarch64", "amd64"}) || manifest.Timeout < 120 {
		t.Errorf("manifest basics: %+v", manifest)
	}
	maps := map[string]bool{}
	for _, m := range manifest.Map {
		maps[m.Type] = !m.ReadOnly
	}
	if !maps["addon_config"] || !maps["share"] {
		t.Errorf("addon_config and share must be mapped read-write: %+v", manifest.Map)
	}
}

type translation struct {
	Name, Description string
	Fields            map[string]translation
}

// agree compares one level: the struct's json fields, the schema's keys,
// the translations' keys; sections (struct fields) recurse.
func agree(t *testing.T, at string, ty reflect.Type, schema, defaults map[string]any, tr map[string]translation) {
	t.Helper()
	var fields []string
	byName := map[string]reflect.StructField{}
	for i := 0; i < ty.NumField(); i++ {
		f := ty.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		fields = append(fields, name)
		byName[name] = f
	}
	slices.Sort(fields)
	if got := sortedKeys(schema); !slices.Equal(got, fields) {
		t.Errorf("%sschema keys %v\n  != Options %v", at, got, fields)
	}
	if got := sortedKeys(tr); !slices.Equal(got, fields) {
		t.Errorf("%stranslation keys %v\n  != Options %v", at, got, fields)
	}
	secret := reflect.TypeOf(Secret(""))
	for _, k := range fields {
		f, v := byName[k], tr[k]
		if v.Name == "" || v.Description == "" {
			t.Errorf("translation %s%s lacks name or description", at, k)
		}
		if sub, ok := schema[k].(map[string]any); ok {
			if f.Type.Kind() != reflect.Struct {
				t.Errorf("schema %s%s is a section, Options has %s", at, k, f.Type)
				continue
			}
			def, ok := defaults[k].(map[string]any)
			if !ok {
				t.Errorf("section %s%s has no default (at least {}): the Supervisor would not start the add-on", at, k)
			}
			agree(t, at+k+".", f.Type, sub, def, v.Fields)
			continue
		}
		if len(v.Fields) > 0 {
			t.Errorf("translation %s%s has fields but is no section", at, k)
		}
		s, _ := schemaString(schema[k])
		_, hasDefault := defaults[k]
		if hasDefault && strings.HasSuffix(s, "?") {
			t.Errorf("option %s%s has a default but its schema %q is optional", at, k, s)
		}
		if _, isList := schema[k].([]any); !hasDefault && !isList && !strings.HasSuffix(s, "?") {
			t.Errorf("schema %s%s is mandatory but has no default", at, k)
		}
		if f.Type == secret && !strings.HasPrefix(s, "password") {
			t.Errorf("secret option %s%s must use the password type, not %q", at, k, s)
		}
	}
}

func mustMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// schemaString is a schema entry as text; a list schema ([str]) is its
// element's type (a list is never optional: its default is []).
func schemaString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []any:
		if len(v) == 1 {
			s, ok := v[0].(string)
			return strings.TrimSuffix(s, "?"), ok
		}
	}
	return "", false
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
