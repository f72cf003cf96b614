package simcloud_test

import (
	"bufio"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
)

// drift runs a refresh-only plan and returns the resource_drift events it
// printed, address -> action.
func (w *workspace) drift() map[string]string {
	w.t.Helper()
	out, code := w.run("plan", "-refresh-only", "-json", "-input=false")
	if code != 0 {
		w.t.Fatalf("refresh-only plan: exit %d\n%s", code, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Type   string `json:"type"`
			Change struct {
				Resource struct {
					Addr string `json:"addr"`
				} `json:"resource"`
				Action string `json:"action"`
			} `json:"change"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == "resource_drift" {
			got[ev.Change.Resource.Addr] = ev.Change.Action
		}
	}
	return got
}

// TestServerDeletedOutside: a server and its port deleted in the console
// are seen by the real provider's refresh (404: gone from state, reported
// as drift); the next apply recreates them, once; a destroy of what is left
// succeeds.
func TestServerDeletedOutside(t *testing.T) {
	var rec recorder
	cloud := start(t, rec.hooks())
	w := newWorkspace(t, cloud, render(t, lab(1, 2)))
	if _, code := w.apply(); code != 0 {
		t.Fatal("tofu apply failed")
	}
	before := cloud.Inventory()
	if err := cloud.DeleteServerOutside("lab-workers-1"); err != nil {
		t.Fatal(err)
	}
	if err := cloud.DeleteServerOutside("lab-workers-9"); err == nil {
		t.Error("deleting a server that does not exist succeeded")
	}
	rec.mu.Lock()
	deleted := slices.Clone(rec.deleted)
	rec.mu.Unlock()
	if !slices.Equal(deleted, []string{"lab-workers-1"}) {
		t.Errorf("ServerDeleted for %v", deleted)
	}
	want := before
	want.Servers, want.Ports, want.Volumes = before.Servers-1, before.Ports-1, before.Volumes-1
	if inv := cloud.Inventory(); inv != want {
		t.Errorf("after the delete outside: %+v, want %+v", inv, want)
	}

	got := w.drift()
	for _, addr := range []string{"openstack_compute_instance_v2.lab-workers-1", "openstack_networking_port_v2.lab-workers-1"} {
		if got[addr] != "delete" {
			t.Errorf("drift of %s = %q, want delete (all drift: %v)", addr, got[addr], got)
		}
	}
	// Ports and floating IPs show as updated too, as on a real cloud: the
	// provider's values after the server was attached (device_id, port_id)
	// were not in the state apply wrote. Nothing else is gone.
	for addr, action := range got {
		if action == "delete" && !strings.HasSuffix(addr, ".lab-workers-1") {
			t.Errorf("%s reported deleted, but nobody touched it", addr)
		}
	}
	if out, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 2 ||
		!strings.Contains(out, "openstack_compute_instance_v2.lab-workers-1 will be created") ||
		!strings.Contains(out, "Plan: 2 to add, 0 to change, 0 to destroy") {
		t.Errorf("plan after the delete outside: exit %d, want the server and port to be created:\n%s", code, out)
	}
	if _, code := w.apply(); code != 0 {
		t.Fatal("apply after the delete outside failed")
	}
	if inv := cloud.Inventory(); inv != before {
		t.Errorf("after the apply: %+v, want %+v again (no duplicates)", inv, before)
	}
	w.planClean()
	for addr, action := range w.drift() {
		if action != "update" || !strings.Contains(addr, "port") && !strings.Contains(addr, "floatingip") {
			t.Errorf("drift after the apply: %s %s", addr, action)
		}
	}

	// A destroy after the console deleted a server (the provider says 404)
	// succeeds: with the refresh, and without one (the delete meets the 404).
	if err := cloud.DeleteServerOutside("lab-workers-2"); err != nil {
		t.Fatal(err)
	}
	if out, code := w.run("destroy", "-auto-approve", "-input=false", "-no-color", "-refresh=false"); code != 0 {
		t.Fatalf("destroy without refresh after a delete outside: exit %d\n%s", code, out)
	}
	if inv := cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Errorf("after destroy the cloud holds %+v", inv)
	}
}

// TestServerChangedOutside: metadata and flavor changed in the console are
// reported by a refresh-only plan as drift of that server only; the next
// apply resizes it back (the provider does not read metadata back into
// "metadata", so a plan leaves the console's key alone, as on a real
// cloud).
func TestServerChangedOutside(t *testing.T) {
	cloud := start(t, simcloud.Hooks{})
	w := newWorkspace(t, cloud, render(t, lab(1, 1)))
	if _, code := w.apply(); code != 0 {
		t.Fatal("tofu apply failed")
	}
	if d := w.drift(); d["openstack_compute_instance_v2.lab-cp-1"] != "" {
		t.Fatalf("drift right after the apply: %v", d)
	}
	if err := cloud.ChangeServerOutside("lab-cp-1", simcloud.ServerChange{
		Metadata: map[string]string{"owner": "console", "rezuscloud_group": ""}, Flavor: "m1.small"}); err != nil {
		t.Fatal(err)
	}
	if err := cloud.ChangeServerOutside("lab-cp-1", simcloud.ServerChange{Flavor: "m9.huge"}); err == nil {
		t.Error("a flavor that does not exist was accepted")
	}
	got := w.drift()
	if got["openstack_compute_instance_v2.lab-cp-1"] != "update" || got["openstack_compute_instance_v2.lab-workers-1"] != "" {
		t.Fatalf("drift = %v, want the control plane's server updated, not the worker's", got)
	}
	out, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color")
	if code != 2 || !strings.Contains(out, "openstack_compute_instance_v2.lab-cp-1 will be updated in-place") ||
		!regexp.MustCompile(`flavor_name +=\s+"m1.small" -> "m1.medium"`).MatchString(out) {
		t.Errorf("plan after the change outside: exit %d\n%s", code, out)
	}
	if _, code := w.apply(); code != 0 {
		t.Fatal("apply after the change outside failed")
	}
	s := cloud.Servers()[0]
	if s.Name != "lab-cp-1" || s.Flavor != "m1.medium" || s.Status != "ACTIVE" || s.Metadata["owner"] != "console" {
		t.Errorf("after the apply: %s %s %s %v, want lab-cp-1 resized back to m1.medium, ACTIVE", s.Name, s.Flavor, s.Status, s.Metadata)
	}
	w.planClean()
	w.destroy()
}
