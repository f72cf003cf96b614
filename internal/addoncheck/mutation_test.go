package addoncheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyPackage copies the files CheckDir reads into a temporary directory.
func copyPackage(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, name := range []string{"repository.yaml", "config.yaml", "translations/en.yaml", "icon.png", "logo.png"} {
		b, err := os.ReadFile(filepath.Join("../..", name))
		if err != nil {
			t.Fatal(err)
		}
		writeAt(t, dst, name, string(b))
	}
	return dst
}

func writeAt(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckDirFailsOnBrokenCopies breaks a copy of the package in one way
// at a time: each must be reported, with the file and key named.
func TestCheckDirFailsOnBrokenCopies(t *testing.T) {
	// replace edits file: old must occur (so a mutation cannot rot silently).
	type edit struct{ file, old, new string }
	tests := []struct {
		name  string
		edits []edit
		rm    string
		add   [2]string // extra file: name, body
		want  string
	}{
		{name: "no repository.yaml", rm: "repository.yaml", want: "repository.yaml: open"},
		{name: "repository without name", edits: []edit{{"repository.yaml", "name: rezuscloud\n", ""}}, want: "repository.yaml:5: name: is required"},
		{name: "repository typo", edits: []edit{{"repository.yaml", "maintainer:", "maintaner:"}}, want: "repository.yaml:7: maintaner: unknown key"},
		{name: "repository bad url", edits: []edit{{"repository.yaml", "url: https://github.com/rezuscloud/rezuscloud", "url: github.com/rezuscloud"}}, want: "url: must be an http(s) URL"},
		{name: "no icon", rm: "icon.png", want: "icon.png: must sit next to config.yaml"},
		{name: "logo not a png", add: [2]string{"logo.png", "GIF89a"}, want: "logo.png: not a PNG"},
		{name: "unknown key", edits: []edit{{"config.yaml", "boot: auto", "boot: auto\nbooot: auto"}}, want: "config.yaml:16: booot: unknown key"},
		{name: "deprecated codenotary", edits: []edit{{"config.yaml", "boot: auto", "boot: auto\ncodenotary: x@example.com"}}, want: "codenotary: deprecated"},
		{name: "missing slug", edits: []edit{{"config.yaml", "slug: rezuscloud\n", ""}}, want: "slug: is required"},
		{name: "bad slug", edits: []edit{{"config.yaml", "slug: rezuscloud", "slug: rezus cloud"}}, want: "slug: must match"},
		{name: "unquoted version", edits: []edit{{"config.yaml", `version: "0.1.0"`, "version: 0.1"}}, want: "version: must be a quoted string"},
		{name: "deprecated arch", edits: []edit{{"config.yaml", "  - amd64\n", "  - amd64\n  - armv7\n"}}, want: `arch: "armv7" is deprecated`},
		{name: "unknown arch", edits: []edit{{"config.yaml", "  - amd64\n", "  - x86\n"}}, want: `arch: "x86" is not one of`},
		{name: "bad startup", edits: []edit{{"config.yaml", "startup: application", "startup: app"}}, want: "startup: must be one of"},
		{name: "bad stage", edits: []edit{{"config.yaml", "stage: experimental", "stage: beta"}}, want: "stage: must be one of stable, experimental, deprecated"},
		{name: "init as string", edits: []edit{{"config.yaml", "init: false", `init: "false"`}}, want: "init: must be true or false"},
		{name: "timeout too long", edits: []edit{{"config.yaml", "timeout: 300", "timeout: 600"}}, want: "timeout: must be a whole number of seconds from 10 to 300"},
		{name: "unquoted core version", edits: []edit{{"config.yaml", `homeassistant: "2025.10.0"`, "homeassistant: 2025.10"}}, want: "homeassistant: must be a quoted Core version"},
		{name: "bad service", edits: []edit{{"config.yaml", `"mqtt:need"`, `"mqtt:needs"`}}, want: `services: "mqtt:needs" must be`},
		{name: "image with tag", edits: []edit{{"config.yaml", "image: ghcr.io/rezuscloud/rezuscloud", "image: ghcr.io/rezuscloud/rezuscloud:0.1.0"}}, want: "image: \"ghcr.io/rezuscloud/rezuscloud:0.1.0\" must not carry a tag"},
		{name: "image upper case", edits: []edit{{"config.yaml", "image: ghcr.io/rezuscloud/rezuscloud", "image: GHCR.io/rezuscloud/rezuscloud"}}, want: "image: registry"},
		{name: "bad map type", edits: []edit{{"config.yaml", "type: share", "type: shared"}}, want: "map[1].type: must be one of"},
		{name: "map read_only string", edits: []edit{{"config.yaml", "type: share\n    read_only: false", "type: share\n    read_only: \"no\""}}, want: "map[1].read_only: must be true or false"},
		{name: "backup_exclude not a list", edits: []edit{{"config.yaml", "backup_exclude:\n  - \"*/tofu/plugin-cache\"\n  - \"*/tofu/work/*/.terraform\"", "backup_exclude: \"*/tofu/plugin-cache\""}}, want: "backup_exclude: must be a list"},
		{name: "bad watchdog", edits: []edit{{"config.yaml", "boot: auto", "boot: auto\nwatchdog: http://localhost:8099/"}}, want: "watchdog: must look like"},
		{name: "unknown schema type", edits: []edit{{"config.yaml", "tenants_dir: str\n", "tenants_dir: string\n"}}, want: `schema.tenants_dir: "string" is not a Supervisor schema type`},
		{name: "default out of range", edits: []edit{{"config.yaml", "parallel_applies: 2", "parallel_applies: 20"}}, want: "options.parallel_applies: int 20 does not fit its schema \"int(1,16)\": 20 is out of range"},
		{name: "default not in list", edits: []edit{{"config.yaml", "log_level: info\n", "log_level: verbose\n"}}, want: `options.log_level: the string "verbose" does not fit its schema "list(debug|info|warn|error)"`},
		{name: "base topic with space", edits: []edit{{"config.yaml", "base_topic: rezuscloud", "base_topic: rezus cloud"}}, want: `options.mqtt.base_topic: the string "rezus cloud" does not fit`},
		{name: "default with optional schema", edits: []edit{{"config.yaml", "tenants_dir: str\n", "tenants_dir: str?\n"}}, want: "options.tenants_dir: has a default but its schema \"str?\" is optional"},
		{name: "mandatory without default", edits: []edit{{"config.yaml", "    region: str?\n  openstack:", "    region: str\n  openstack:"}}, want: "schema.oci.region: is mandatory (no ?) but has no default"},
		{name: "section without default", edits: []edit{{"config.yaml", "  redfish: {}\n", ""}}, want: "schema.redfish: is a section without a default"},
		{name: "nested default with optional schema", edits: []edit{{"config.yaml", "  redfish: {}\n", "  redfish:\n    username: admin\n"}}, want: "options.redfish.username: has a default but its schema \"str?\" is optional"},
		{name: "nested option without schema", edits: []edit{{"config.yaml", "  redfish: {}\n", "  redfish:\n    user: admin\n"}}, want: "options.redfish.user: has no schema"},
		{name: "mandatory list without default", edits: []edit{{"config.yaml", "    cidrs: []\n", ""}}, want: "schema.discovery.cidrs: is a mandatory list but has no default"},
		{name: "optional field refuses empty", edits: []edit{{"config.yaml", `url: "match(^(?:(?:tcp|ssl|mqtt|mqtts)://.+)?$)?"`, `url: "match(^(tcp|ssl|mqtt|mqtts)://.+)?"`}}, want: `schema.mqtt.url: optional, but its type refuses ""`},
		{name: "refused empty without YAML hint", edits: []edit{{"translations/en.yaml", "Empty (in YAML mode, leave the line out)", "Empty"}}, want: `schema.state.passphrase: optional, but its type refuses ""`},
		{name: "section translation without fields", edits: []edit{{"translations/en.yaml", "    description: What the voice assistant may see.\n    fields:\n", "    description: What the voice assistant may see.\n    fieldz:\n"}}, want: "configuration.assist: needs fields for its nested options"},
		{name: "option without schema", edits: []edit{{"config.yaml", "  log_level: info\n", "  log_level: info\n  colour: blue\n"}}, want: "options.colour: has no schema"},
		{name: "bad regex", edits: []edit{{"config.yaml", `"match(^[A-Za-z0-9_-]+$)"`, `"match(^[A-Za-z0-9_-+$)"`}}, want: "schema.mqtt.base_topic: match("},
		{name: "translation missing", edits: []edit{{"translations/en.yaml", "  tenants_dir:\n    name: Tenants folder\n", "  tenant_dir:\n    name: Tenants folder\n"}}, want: "configuration.tenants_dir: missing"},
		{name: "translation of unknown option", edits: []edit{{"translations/en.yaml", "  tenants_dir:\n    name: Tenants folder\n", "  tenant_dir:\n    name: Tenants folder\n"}}, want: "configuration.tenant_dir: translates an option the schema does not have"},
		{name: "field translation missing", edits: []edit{{"translations/en.yaml", "      region:\n        name: Region\n        description: Home region", "      regio:\n        name: Region\n        description: Home region"}}, want: "configuration.oci.fields.region: missing"},
		{name: "translation without description", edits: []edit{{"translations/en.yaml", "        description: Region, e.g. RegionOne.\n", ""}}, want: "configuration.openstack.fields.region: has no description"},
		{name: "section without description", edits: []edit{{"translations/en.yaml", "    description: What the voice assistant may see.\n", ""}}, want: "configuration.assist: has no description"},
		{name: "translation empty name", edits: []edit{{"translations/en.yaml", "    name: Tenants folder\n", "    name: \"\"\n"}}, want: "configuration.tenants_dir.name: must be a non-empty string"},
		{name: "translation typo key", edits: []edit{{"translations/en.yaml", "    name: Tenants folder\n", "    nmae: Tenants folder\n"}}, want: "configuration.tenants_dir.nmae: unknown key"},
		{name: "translations top-level typo", edits: []edit{{"translations/en.yaml", "configuration:", "configurations:"}}, want: "configurations: unknown key"},
		{name: "no english", rm: "translations/en.yaml", add: [2]string{"translations/de.yaml", "configuration: {}\n"}, want: "translations/en.yaml: missing"},
		{name: "stray config", add: [2]string{"internal/x/testdata/config.yaml", "name: x\n"}, want: "internal/x/testdata/config.yaml: the Supervisor would read it as another add-on"},
		{name: "panel icon not mdi", edits: []edit{{"config.yaml", "panel_icon: mdi:kubernetes", "panel_icon: kubernetes.png"}}, want: `panel_icon: "kubernetes.png" must be a Material Design icon`},
		{name: "panel without ingress", edits: []edit{{"config.yaml", "ingress: true\n", ""}}, want: "panel_icon: has no effect without ingress: true"},
		{name: "ingress off", edits: []edit{{"config.yaml", "ingress: true\n", "ingress: false\n"}}, want: "ingress_port: has no effect without ingress: true"},
		{name: "ingress as string", edits: []edit{{"config.yaml", "ingress: true\n", "ingress: \"true\"\n"}}, want: "ingress: must be true or false"},
		{name: "ingress port out of range", edits: []edit{{"config.yaml", "ingress_port: 8099", "ingress_port: 80990"}}, want: "ingress_port: must be a port"},
		{name: "dynamic ingress port without host network", edits: []edit{{"config.yaml", "ingress_port: 8099", "ingress_port: 0"}, {"config.yaml", "host_network: true\n", ""}}, want: "ingress_port: 0 (a port picked at start) is for host_network: true"},
		{name: "ingress port mapped to the host", edits: []edit{{"config.yaml", "ingress_port: 8099", "ingress_port: 8099\nports:\n  8099/tcp: 8099"}}, want: "ports.8099/tcp: maps the ingress port to the host"},
		{name: "absolute ingress entry", edits: []edit{{"config.yaml", "ingress_port: 8099", "ingress_port: 8099\ningress_entry: /panel"}}, want: `ingress_entry: "/panel" must be a path relative`},
		{name: "empty panel title", edits: []edit{{"config.yaml", "panel_title: Clusters", "panel_title: \" \""}}, want: "panel_title: must not be empty"},
		{name: "backup_pre with cold backup", edits: []edit{{"config.yaml", "backup: hot", "backup: cold"}}, want: "backup_pre: is ignored with backup: cold"},
		{name: "empty backup_pre", edits: []edit{{"config.yaml", "backup_pre: rezuscloud backup-pre", "backup_pre: \"\""}}, want: "backup_pre: must be a command"},
		{name: "backup_pre not a string", edits: []edit{{"config.yaml", "backup_pre: rezuscloud backup-pre", "backup_pre: [rezuscloud]"}}, want: "backup_pre: must be a string"},
		{name: "not yaml", edits: []edit{{"config.yaml", "name: rezuscloud", "name: [rezuscloud"}}, want: "config.yaml: not valid YAML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyPackage(t)
			for _, e := range tc.edits {
				s := readAt(t, dir, e.file)
				if !strings.Contains(s, e.old) {
					t.Fatalf("mutation does not apply: %q not in %s", e.old, e.file)
				}
				writeAt(t, dir, e.file, strings.Replace(s, e.old, e.new, 1))
			}
			if tc.rm != "" {
				if err := os.Remove(filepath.Join(dir, tc.rm)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.add[0] != "" {
				writeAt(t, dir, tc.add[0], tc.add[1])
			}
			errs, _ := CheckDir(dir)
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("want an error containing %q, got:\n  %s", tc.want, strings.Join(got, "\n  "))
		})
	}
}

// TestCleanCopyPasses guards the mutation test: the unmodified copy passes.
func TestCleanCopyPasses(t *testing.T) {
	if errs, _ := CheckDir(copyPackage(t)); len(errs) > 0 {
		t.Fatalf("clean copy: %v", errs)
	}
}
