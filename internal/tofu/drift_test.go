package tofu

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// cloudWorkspace is a workspace of an OpenStack tenant (one control plane,
// one worker) on a stand-in cloud, applied.
func cloudWorkspace(t *testing.T) (*Runner, *Workspace, *simcloud.Cloud) {
	t.Helper()
	r := newRunner(t, "", nil)
	if r.cfg.CLIConfigFile == "" {
		t.Skip("no tofu CLI config with a provider mirror (.tools/tofurc): run make tools")
	}
	cloud, err := simcloud.Start(simcloud.Options{Password: "drift-Pa55word"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Close)
	t.Cleanup(func() {
		if u := cloud.Unhandled(); len(u) > 0 {
			t.Errorf("requests the stand-in does not implement: %v", u)
		}
	})
	ten := &tenant.Tenant{
		Name: "lab", Provider: tenant.ProviderOpenStack, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		OpenStack: &tenant.OpenStack{Region: "RegionOne", Network: "private", Image: "talos", FloatingIPPool: "public"},
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Flavor: "m1.medium"},
			{Name: "workers", Role: tenant.RoleWorker, Count: 1, Flavor: "m1.large"},
		},
	}
	cfg := map[string][]byte{}
	for _, n := range ten.Nodes() {
		cfg[n.Name] = fmt.Appendf(nil, "version: v1alpha1\nmachine:\n  type: %s\n", n.Role)
	}
	doc, err := openstack.Renderer{}.Render(provider.Input{Tenant: ten, Stage: provider.StageFull, MachineConfigs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := r.Workspace("lab", WorkspaceOptions{Env: map[string]string{
		"OS_AUTH_URL": cloud.AuthURL(), "OS_USERNAME": "admin", "OS_PASSWORD": "drift-Pa55word",
		"OS_PROJECT_NAME": "demo", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteConfig(doc); err != nil {
		t.Fatal(err)
	}
	apply(t, ws)
	return r, ws, cloud
}

// apply plans and applies, and returns the plan's summary.
func apply(t *testing.T, ws *Workspace) ChangeSummary {
	t.Helper()
	ctx := context.Background()
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return plan.Summary
}

// drift runs Drift and checks that it wrote no state and, when refreshes
// (the state holds resources), that it refreshed them.
func drift(t *testing.T, r *Runner, ws *Workspace, refreshes bool) *Drift {
	t.Helper()
	before, err := r.file.Versions("lab")
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	d, err := ws.Drift(context.Background(), RunOptions{OnEvent: func(ev Event) { events = append(events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := r.file.Versions("lab")
	if !slices.Equal(before, after) {
		t.Errorf("the drift check wrote state: versions %v, then %v", before, after)
	}
	if refreshes && !slices.ContainsFunc(events, func(ev Event) bool { return ev.Type == EventRefreshComplete }) {
		t.Error("the drift check refreshed nothing")
	}
	return d
}

// TestDrift: a refresh-only plan against the stand-in cloud with the real
// provider reports a server deleted outside as deleted (with its port), one
// resized outside as changed (naming the attribute), and nothing when
// nothing was touched (the provider's own values that the refresh brings
// in, e.g. a port's device_id, are settled, not drift); an apply puts it
// right, once; a destroy after a server was deleted outside succeeds.
func TestDrift(t *testing.T) {
	r, ws, cloud := cloudWorkspace(t)

	d := drift(t, r, ws, true)
	if !d.Empty() {
		t.Fatalf("drift right after the apply: %s", d)
	}
	t.Logf("settled after the apply: %v", d.Settled)

	if err := cloud.DeleteServerOutside("lab-workers-1"); err != nil {
		t.Fatal(err)
	}
	d = drift(t, r, ws, true)
	wantDeleted := []string{"openstack_compute_instance_v2.lab-workers-1", "openstack_networking_port_v2.lab-workers-1"}
	if got := d.Deleted(); !slices.Equal(got, wantDeleted) || len(d.Changed()) != 0 {
		t.Fatalf("drift after a delete outside: %s; want %v deleted", d, wantDeleted)
	}
	if !strings.Contains(d.String(), "openstack_compute_instance_v2.lab-workers-1 deleted") {
		t.Errorf("String() = %q", d.String())
	}
	if s := apply(t, ws); s.Add != 2 || s.Change != 0 || s.Remove != 0 {
		t.Errorf("apply after the delete outside: %+v, want the server and its port created", s)
	}
	if inv := cloud.Inventory(); inv.Servers != 2 || inv.Ports != 2 {
		t.Errorf("after the apply: %+v", inv)
	}
	if d = drift(t, r, ws, true); !d.Empty() {
		t.Errorf("drift after the apply: %s", d)
	}

	if err := cloud.ChangeServerOutside("lab-cp-1", simcloud.ServerChange{
		Metadata: map[string]string{"owner": "console"}, Flavor: "m1.small"}); err != nil {
		t.Fatal(err)
	}
	d = drift(t, r, ws, true)
	if len(d.Resources) != 1 || d.Resources[0].Address != "openstack_compute_instance_v2.lab-cp-1" ||
		d.Resources[0].Kind != DriftChanged || !slices.Equal(d.Resources[0].Attributes, []string{"flavor_name"}) {
		// the provider reads metadata back into all_metadata only: no
		// apply would touch it, so it is no drift of ours
		t.Fatalf("drift after a change outside: %s; want the control plane's server changed in flavor_name", d)
	}
	if s := apply(t, ws); s.Change != 1 || s.Add != 0 || s.Remove != 0 {
		t.Errorf("apply after the change outside: %+v, want one change", s)
	}
	if d = drift(t, r, ws, true); !d.Empty() {
		t.Errorf("drift after the apply: %s", d)
	}

	// destroy after the console deleted a server: the provider says 404,
	// which is no error
	if err := cloud.DeleteServerOutside("lab-cp-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Destroy(context.Background(), RunOptions{}); err != nil {
		t.Fatalf("destroy with a server deleted outside: %v", err)
	}
	if inv := cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Errorf("after destroy the cloud holds %+v", inv)
	}
	if d = drift(t, r, ws, false); !d.Empty() {
		t.Errorf("drift after destroy: %s", d)
	}
}

// TestDriftOf classifies resource_drift by what the document sets.
func TestDriftOf(t *testing.T) {
	doc := []byte(`{"resource": {
	  "openstack_compute_instance_v2": {"a": {"name": "a", "metadata": {"k": "v"}, "user_data": "x",
	    "lifecycle": {"ignore_changes": ["user_data", "${image_id}"]}}},
	  "openstack_networking_port_v2": {"p": [{"name": "p", "tags": ["t"]}]},
	  "terraform_data": {"all": {"input": 1, "lifecycle": {"ignore_changes": "all"}}}
	}}`)
	cfg, err := configuredAttributes(doc)
	if err != nil {
		t.Fatal(err)
	}
	change := func(addr string, actions tfjson.Actions, before, after map[string]any) *tfjson.ResourceChange {
		return &tfjson.ResourceChange{Address: addr, Mode: tfjson.ManagedResourceMode,
			Change: &tfjson.Change{Actions: actions, Before: before, After: after}}
	}
	upd := tfjson.Actions{tfjson.ActionUpdate}
	p := &tfjson.Plan{ResourceDrift: []*tfjson.ResourceChange{
		change("openstack_compute_instance_v2.a", upd, map[string]any{"name": "a", "metadata": map[string]any{"k": "v"}, "user_data": "x", "flavor_id": "1"},
			map[string]any{"name": "a", "metadata": map[string]any{"k": "w"}, "user_data": "y", "flavor_id": "2"}),
		change("openstack_networking_port_v2.p", upd, map[string]any{"name": "p", "device_id": ""}, map[string]any{"name": "p", "device_id": "srv"}),
		change("openstack_networking_port_v2.gone", tfjson.Actions{tfjson.ActionDelete}, map[string]any{"name": "gone"}, nil),
		change("terraform_data.all", upd, map[string]any{"input": 1}, map[string]any{"input": 2}),
		change(`terraform_data.keyed["x"]`, tfjson.Actions{tfjson.ActionDelete}, map[string]any{}, nil),
		{Address: "data.x.y", Mode: tfjson.DataResourceMode, Change: &tfjson.Change{Actions: upd}},
	}}
	d := driftOf(p, cfg)
	want := []DriftedResource{
		{Address: "openstack_compute_instance_v2.a", Kind: DriftChanged, Attributes: []string{"metadata"}},
		{Address: "openstack_networking_port_v2.gone", Kind: DriftDeleted},
		{Address: `terraform_data.keyed["x"]`, Kind: DriftDeleted},
	}
	if fmt.Sprint(d.Resources) != fmt.Sprint(want) {
		t.Errorf("resources = %v, want %v", d.Resources, want)
	}
	if wantSettled := []string{"openstack_networking_port_v2.p", "terraform_data.all"}; !slices.Equal(d.Settled, wantSettled) {
		t.Errorf("settled = %v, want %v", d.Settled, wantSettled)
	}
	if (&Drift{}).String() != "no drift" || !(&Drift{Settled: []string{"x"}}).Empty() {
		t.Error("an empty drift is not empty")
	}
	if _, err := configuredAttributes([]byte(`{"resource": {"t": {"n": 3}}}`)); err == nil {
		t.Error("a resource that is not an object was accepted")
	}
}
