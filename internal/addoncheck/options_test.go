package addoncheck

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func manifest(t *testing.T) Manifest {
	t.Helper()
	b, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	man, errs := CheckConfig("config.yaml", b)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return man
}

// TestValidateOptions: what the Supervisor's AppOptions does with options
// for this schema, case by case.
func TestValidateOptions(t *testing.T) {
	man := manifest(t)
	defs, err := man.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, errs := ValidateOptions(man.Schema, defs); len(errs) > 0 {
		t.Fatalf("the defaults do not validate: %v", errs)
	}
	with := func(edit string) map[string]any {
		b, _ := json.Marshal(defs)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		var e map[string]any
		if err := json.Unmarshal([]byte(edit), &e); err != nil {
			t.Fatal(err)
		}
		for k, v := range e {
			if sub, ok := v.(map[string]any); ok {
				for sk, sv := range sub {
					if sv == "DELETE" {
						delete(m[k].(map[string]any), sk)
					} else {
						m[k].(map[string]any)[sk] = sv
					}
				}
				continue
			}
			if v == "DELETE" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		name, edit string
		err        string   // "" = valid
		dropped    []string // options the Supervisor drops with a warning
	}{
		{"a cleared optional string", `{"mqtt":{"username":""}}`, "", nil},
		{"a cleared broker URL", `{"mqtt":{"url":""}}`, "", nil},
		{"a cleared auth URL", `{"openstack":{"auth_url":""}}`, "", nil},
		{"a passphrase", `{"state":{"passphrase":"0123456789abcdef"}}`, "", nil},
		// the one optional field that cannot accept "": the form drops a
		// cleared field, YAML mode must leave the line out
		{"a cleared passphrase", `{"state":{"passphrase":""}}`, "state.passphrase: length of value 0 is out of range", nil},
		{"a short passphrase", `{"state":{"passphrase":"short"}}`, "state.passphrase: length", nil},
		{"flat 0.1.0 options", `{"mqtt_url":"tcp://x:1883","state_passphrase":"0123456789abcdef"}`, "", []string{"mqtt_url", "state_passphrase"}},
		{"an unknown field in a section", `{"mqtt":{"server":"x"}}`, "", []string{"mqtt.server"}},
		{"a missing section", `{"state":"DELETE"}`, `state: missing option "state" in root`, nil},
		{"a missing mandatory field", `{"mqtt":{"base_topic":"DELETE"}}`, `mqtt.base_topic: missing option "base_topic" in mqtt`, nil},
		{"a missing list", `{"discovery":{"cidrs":"DELETE"}}`, `discovery.cidrs: missing option "cidrs" in discovery`, nil},
		{"a number as a string", `{"parallel_applies":"3"}`, "", nil},
		{"out of range", `{"parallel_applies":17}`, "parallel_applies: value 17 is out of range", nil},
		{"a bool as yes", `{"assist":{"expose":"yes"}}`, "", nil},
		{"a bool as maybe", `{"assist":{"expose":"maybe"}}`, "assist.expose: expected boolean", nil},
		{"a number for a string", `{"mqtt":{"username":5}}`, "mqtt.username: expected str", nil},
		{"not in the list", `{"log_level":"loud"}`, "log_level: value must be one of", nil},
		{"a bad base topic", `{"mqtt":{"base_topic":"a/b"}}`, "mqtt.base_topic: does not match", nil},
		{"a section as a string", `{"oci":"x"}`, "oci: invalid dict", nil},
		{"a secret", `{"openstack":{"password":"!secret openstack_password"}}`, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, dropped, errs := ValidateOptions(man.Schema, with(tc.edit))
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			got := strings.Join(msgs, "; ")
			if (tc.err == "") != (got == "") || !strings.Contains(got, tc.err) {
				t.Errorf("errors %q, want %q", got, tc.err)
			}
			if !slices.Equal(dropped, tc.dropped) {
				t.Errorf("dropped %v, want %v", dropped, tc.dropped)
			}
		})
	}
}

func TestEmptyRefused(t *testing.T) {
	if got := EmptyRefused(manifest(t).Schema); !slices.Equal(got, []string{"state.passphrase"}) {
		t.Errorf("optional fields that refuse \"\": %v, want only state.passphrase (its description says how to clear it)", got)
	}
}
