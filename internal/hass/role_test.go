package hass

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestRoleSensor: with a shared state store the bridge has the Role
// sensor (state leader, the leader's name and the standbys as attributes,
// conformant discovery); without one it has none.
func TestRoleSensor(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL)
	opts := fastOptions(m.URL)
	opts.Instance = "nuc"
	b := startBridge(t, opts, newFakeCmd(), []*tenant.Tenant{labTenant()})
	b.SetStandbys([]string{"pi"})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	state := "rezuscloud/bridge/state"
	mm := obs.waitPayload(t, state, 5*time.Second, func(p []byte) bool { return strings.Contains(string(p), `"standbys":["pi"]`) })
	var doc struct {
		Role roleDoc `json:"role"`
	}
	if err := json.Unmarshal(mm.payload, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Role.State != "leader" || doc.Role.Instance != "nuc" {
		t.Errorf("role = %+v, want leader nuc", doc.Role)
	}
	obs.sync(t)
	d, _ := obs.get("homeassistant/device/rezuscloud_bridge/config")
	var disc struct {
		Components map[string]map[string]any `json:"components"`
	}
	if err := json.Unmarshal(d.payload, &disc); err != nil {
		t.Fatal(err)
	}
	role := disc.Components["role"]
	if role == nil || role["value_template"] != "{{ value_json.role.state }}" || role["entity_category"] != "diagnostic" {
		t.Fatalf("role component = %v", role)
	}
	for _, err := range hasstest.NewChecker().Check("homeassistant/device/rezuscloud_bridge/config", d.payload, true) {
		t.Errorf("conformance: %v", err)
	}
	b.SetStandbys(nil)
	obs.waitPayload(t, state, 5*time.Second, func(p []byte) bool { return strings.Contains(string(p), `"standbys":[]`) })
}

func TestNoRoleSensorWithoutSharedStore(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	obs.sync(t)
	d, _ := obs.get("homeassistant/device/rezuscloud_bridge/config")
	if strings.Contains(string(d.payload), `"role"`) {
		t.Error("the bridge has a Role sensor without a shared store")
	}
	st, _ := obs.get("rezuscloud/bridge/state")
	if strings.Contains(string(st.payload), `"role"`) {
		t.Errorf("the bridge state has a role without a shared store: %s", st.payload)
	}
}
