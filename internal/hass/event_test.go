package hass

import (
	"context"
	"testing"
)

// TestHandleEvent checks that a request carried as Home Assistant event
// data (the action inside) gets exactly the MQTT request API's treatment.
func TestHandleEvent(t *testing.T) {
	cmd := newFakeCmd()
	b := New(Options{URL: "tcp://127.0.0.1:1"}, cmd, nil)
	b.SetTenants(views(labTenant()))
	ctx := context.Background()
	r := b.HandleEvent(ctx, []byte(`{"action":"scale","tenant":"lab","group":"workers","count":1,"transaction":"t1"}`))
	if !r.OK() || string(r.Transaction) != `"t1"` {
		t.Fatalf("scale event: %+v", r)
	}
	cmd.waitCall(t, "scale lab workers 1")
	for name, data := range map[string]string{
		"no action":      `{"tenant":"lab","transaction":"t2"}`,
		"action number":  `{"action":3,"tenant":"lab"}`,
		"unknown action": `{"action":"explode","tenant":"lab"}`,
		"bad confirm":    `{"action":"destroy","tenant":"lab","confirm":"","transaction":"t3"}`,
		"unknown key":    `{"action":"apply","tenant":"lab","force":true}`,
		"not an object":  `["apply"]`,
		"garbage":        `{`,
	} {
		r := b.HandleEvent(ctx, []byte(data))
		if r.OK() {
			t.Errorf("%s: accepted: %+v", name, r)
		}
		if name == "bad confirm" && string(r.Transaction) != `"t3"` {
			t.Errorf("error response lost the transaction: %+v", r)
		}
	}
	if calls := cmd.Calls(); len(calls) != 1 {
		t.Fatalf("bad events reached the engine: %q", calls)
	}
}
