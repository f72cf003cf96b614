package hass

import (
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestUpdateDoc(t *testing.T) {
	ro := &tenant.Rollout{Component: ComponentTalos, Version: "v1.13.1", Done: 1, Total: 3}
	for _, c := range []struct {
		name                    string
		component, running, tgt string
		ro                      *tenant.Rollout
		installed               any
		inProgress              bool
		pct                     any
	}{
		{"no cluster: no installed_version", ComponentTalos, "", "v1.13.0", nil, nil, false, nil},
		{"running", ComponentTalos, "v1.13.0", "v1.13.1", nil, "v1.13.0", false, nil},
		{"rolling out", ComponentTalos, "v1.13.0", "v1.13.1", ro, "v1.13.0", true, 33},
		{"other component's rollout", ComponentKubernetes, "1.35.0", "1.35.0", ro, "1.35.0", false, nil},
	} {
		d := updateDoc(c.component, c.running, c.tgt, c.ro, 33)
		if d["installed_version"] != c.installed || d["in_progress"] != c.inProgress || d["update_percentage"] != c.pct {
			t.Errorf("%s: %v", c.name, d)
		}
		if _, ok := d["installed_version"]; !ok && c.installed != nil {
			t.Errorf("%s: installed_version missing", c.name)
		}
		for k, v := range d {
			if v == nil && k != "update_percentage" {
				t.Errorf("%s: %s is null (HA drops the message)", c.name, k)
			}
		}
		if !strings.Contains(d["release_url"].(string), strings.TrimPrefix(c.tgt, "v")) {
			t.Errorf("%s: release_url %v", c.name, d["release_url"])
		}
	}
}

func TestDecodeUpgradeRequest(t *testing.T) {
	for _, c := range []struct {
		action, payload string
		bad             string
	}{
		{ActionUpgrade, `{"tenant":"lab","component":"talos","version":"v1.13.1"}`, ""},
		{ActionUpgrade, `{"tenant":"lab","component":"kubernetes"}`, ""},
		{ActionUpgrade, `{"tenant":"lab"}`, `needs field "component"`},
		{ActionUpgrade, `{"tenant":"lab","component":"etcd"}`, "not talos or kubernetes"},
		{ActionUpgrade, `{"tenant":"lab","component":"talos","version":"1.13.1"}`, "not a Talos version"},
		{ActionUpgrade, `{"tenant":"lab","component":"kubernetes","version":"v1.35.1"}`, "no leading v"},
		{ActionBackup, `{"tenant":"lab"}`, ""},
		{ActionBackup, `{"tenant":"lab","version":"v1"}`, "does not apply"},
	} {
		_, err := decodeRequest(c.action, []byte(c.payload))
		if (err == nil) != (c.bad == "") || (err != nil && !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("%s %s: %v; want %q", c.action, c.payload, err, c.bad)
		}
	}
}
