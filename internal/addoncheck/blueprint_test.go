package addoncheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBlueprints checks every blueprint shipped in blueprints/automation,
// and that the voice ones can only set a count or press Apply.
func TestBlueprints(t *testing.T) {
	files, err := filepath.Glob("../../blueprints/automation/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("blueprints: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		bp, errs := CheckBlueprint(name, b)
		for _, err := range errs {
			t.Error(err)
		}
		if bp.Domain != "automation" || !strings.HasPrefix(bp.Name, "rezuscloud – ") {
			t.Errorf("%s: name %q domain %q", name, bp.Name, bp.Domain)
		}
		if !strings.Contains(string(b), "source_url: https://github.com/rezuscloud/rezuscloud/blob/main/blueprints/automation/"+name) {
			t.Errorf("%s: source_url must point at this file (Re-import blueprint uses it)", name)
		}
		if strings.HasPrefix(name, "voice_") {
			for _, a := range bp.Actions {
				if a != "number.set_value" && a != "button.press" {
					t.Errorf("%s: voice blueprint calls %s", name, a)
				}
			}
			for _, bad := range []string{"destroy", "reboot", "reset", "power", "upgrade", "rezuscloud_request"} {
				if strings.Contains(strings.ToLower(bodyOf(string(b))), bad) {
					t.Errorf("%s: voice blueprint body mentions %q", name, bad)
				}
			}
		}
	}
}

// bodyOf is a blueprint without its blueprint block (whose description may
// say what the blueprint never does).
func bodyOf(s string) string {
	i := strings.Index(s, "\nmode:")
	if i < 0 {
		return s
	}
	return s[i:]
}

const goodBlueprint = `blueprint:
  name: t
  domain: automation
  input:
    sensor:
      name: Sensor
      selector:
        entity: {}
    timing:
      name: Timing
      input:
        wait:
          name: Wait
          selector:
            duration: {}
triggers:
  - trigger: state
    entity_id: !input sensor
    for: !input wait
  - trigger: conversation
    command:
      - "how is [the] {cluster} (cluster|thing)"
actions:
  - action: notify.notify
    data:
      message: "{{ states(sensor_var) }}"
`

// TestCheckBlueprintMutations breaks a good blueprint one way at a time.
func TestCheckBlueprintMutations(t *testing.T) {
	if _, errs := CheckBlueprint("good.yaml", []byte(goodBlueprint)); len(errs) > 0 {
		t.Fatalf("good blueprint: %v", errs)
	}
	tests := []struct{ name, old, new, want string }{
		{"no blueprint block", "blueprint:\n  name: t\n  domain: automation\n  input:", "blue:\n  name: t\n  domain: automation\n  input:", "a blueprint block"},
		{"no name", "  name: t\n", "", "blueprint.name: is required"},
		{"bad domain", "domain: automation", "domain: scene", "blueprint.domain: must be automation or script"},
		{"unknown blueprint key", "  domain: automation\n", "  domain: automation\n  author_name: x\n", "blueprint.author_name: unknown key"},
		{"no inputs", "  input:\n    sensor:", "  inputs:\n    sensor:", "blueprint.input: is required"},
		{"unknown selector", "        entity: {}", "        entiti: {}", `"entiti" is not a selector type`},
		{"two selectors", "        entity: {}", "        entity: {}\n        number: {}", "exactly one selector type"},
		{"input without selector", "      selector:\n        entity: {}\n", "", "blueprint.input.sensor.selector: must be a mapping"},
		{"input without name", "      name: Sensor\n", "", "blueprint.input.sensor.name: is required"},
		{"unknown input key", "      name: Sensor\n", "      name: Sensor\n      help: x\n", "blueprint.input.sensor.help: unknown input key"},
		{"undeclared input", "entity_id: !input sensor", "entity_id: !input sensr", "!input sensr names no declared input"},
		{"unused input", "    for: !input wait\n", "", "blueprint.input.wait: is declared but never used"},
		{"duplicate across sections", "        wait:\n", "        sensor:\n          name: S\n          selector:\n            entity: {}\n        wait:\n", "input names must be unique"},
		{"literal entity", "entity_id: !input sensor", "entity_id: sensor.kitchen", `"sensor.kitchen" is written into the blueprint`},
		{"entity in a template", "states(sensor_var)", "states('sensor.kitchen')", "names the entity sensor.kitchen"},
		{"entity by states.", "states(sensor_var)", "states.sensor.kitchen.state", "names the entity sensor.kitchen"},
		{"other tag", "for: !input wait", "for: !secret wait", "tag !secret is not allowed"},
		{"no triggers", "triggers:", "trigers:", "an automation blueprint needs triggers"},
		{"no actions", "actions:", "acts:", "an automation blueprint needs actions"},
		{"bad mode", "triggers:", "mode: sometimes\ntriggers:", "mode: must be one of"},
		{"unbalanced sentence", "(cluster|thing)", "(cluster|thing", "unclosed ("},
		{"empty alternative", "(cluster|thing)", "(cluster||thing)", "empty alternative"},
		{"bad min_version", "  domain: automation\n", "  domain: automation\n  homeassistant:\n    min_version: 2025.10\n", "min_version: must be a quoted version"},
		{"not yaml", "triggers:", "triggers: [", "not valid YAML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(goodBlueprint, tc.old) {
				t.Fatalf("mutation does not apply: %q", tc.old)
			}
			_, errs := CheckBlueprint("bp.yaml", []byte(strings.Replace(goodBlueprint, tc.old, tc.new, 1)))
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("want %q, got %q", tc.want, got)
			}
		})
	}
}
