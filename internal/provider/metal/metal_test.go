package metal_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/metal"
	"github.com/rezuscloud/rezuscloud/internal/provider/providertest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the testdata golden files")

func lab(workers int) *tenant.Tenant {
	return &tenant.Tenant{
		Name: "lab", Provider: tenant.ProviderMetal,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		Endpoint: "https://192.168.1.21:6443",
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{
				{Address: "192.168.1.21", InstallDisk: "/dev/sda"},
			}},
			{Name: "workers", Role: tenant.RoleWorker, Count: workers, Machines: []tenant.Machine{
				{Address: "192.168.1.31", MAC: "aa:bb:cc:dd:ee:31", InstallDisk: "/dev/nvme0n1"},
				{Address: "192.168.1.32", InstallDisk: "/dev/sda"},
				{Address: "192.168.1.33", InstallDisk: "/dev/sda"},
			}},
		},
	}
}

// configs gives every node a fake machine config holding template syntax
// that must stay literal.
func configs(t *tenant.Tenant) map[string][]byte {
	m := map[string][]byte{}
	for _, n := range t.Nodes() {
		m[n.Name] = []byte(fmt.Sprintf("version: v1alpha1\nmachine:\n  type: %s\n  token: secret-%s\n# ${not.a.reference} %%{ if x }\n", n.Role, n.Name))
	}
	return m
}

func render(t testing.TB, ten *tenant.Tenant) []byte {
	t.Helper()
	doc, err := metal.Renderer{}.Render(provider.Input{Tenant: ten, MachineConfigs: configs(ten)})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestGolden(t *testing.T) {
	providertest.Golden(t, *update, "metal.tf.json", render(t, lab(2)))
}

func TestDeterministic(t *testing.T) {
	a := render(t, lab(2))
	for i := 0; i < 20; i++ {
		if b := render(t, lab(2)); !bytes.Equal(a, b) {
			t.Fatal("two renders of the same tenant differ")
		}
	}
}

func TestDocumentIsSound(t *testing.T) {
	doc := render(t, lab(3))
	if err := provider.CheckDocument(doc); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"token:", "secret-lab-cp-1"} {
		if bytes.Contains(doc, []byte(secret)) {
			t.Errorf("the document holds machine config content %q", secret)
		}
	}
	var d struct {
		Resource struct {
			TerraformData map[string]struct {
				Input           map[string]string `json:"input"`
				TriggersReplace []string          `json:"triggers_replace"`
			} `json:"terraform_data"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	w := d.Resource.TerraformData["lab-workers-1"]
	if w.Input["address"] != "192.168.1.31" || w.Input["install_disk"] != "/dev/nvme0n1" || w.Input["role"] != "worker" ||
		w.Input["mac"] != "aa:bb:cc:dd:ee:31" || len(w.Input["config_sha256"]) != 64 {
		t.Errorf("lab-workers-1 input: %+v", w.Input)
	}
	if !reflect.DeepEqual(w.TriggersReplace, []string{"192.168.1.31"}) {
		t.Errorf("triggers_replace: %v", w.TriggersReplace)
	}
	if len(d.Resource.TerraformData) != 4 {
		t.Errorf("got %d terraform_data, want 4", len(d.Resource.TerraformData))
	}
}

func TestScaleChangesOnlyThatNode(t *testing.T) {
	diff, err := provider.DiffAddresses(render(t, lab(2)), render(t, lab(3)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"output.nodes", "resource.terraform_data.lab-workers-3"}
	if !reflect.DeepEqual(diff, want) {
		t.Errorf("2 -> 3 workers changed %v, want %v", diff, want)
	}
}

func TestConfigChangeChangesOnlyThatNode(t *testing.T) {
	ten := lab(2)
	a, _ := metal.Renderer{}.Render(provider.Input{Tenant: ten, MachineConfigs: configs(ten)})
	cfg := configs(ten)
	cfg["lab-workers-2"] = append(cfg["lab-workers-2"], "# changed\n"...)
	b, err := metal.Renderer{}.Render(provider.Input{Tenant: ten, MachineConfigs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	diff, _ := provider.DiffAddresses(a, b)
	if want := []string{"resource.terraform_data.lab-workers-2"}; !reflect.DeepEqual(diff, want) {
		t.Errorf("config change changed %v, want %v", diff, want)
	}
}

func TestBadInput(t *testing.T) {
	noMachine := lab(2)
	noMachine.NodeGroups[1].Count = 4
	noAddress := lab(1)
	noAddress.NodeGroups[1].Machines[0].Address = ""
	missing := configs(lab(2))
	delete(missing, "lab-workers-2")
	for _, tc := range []struct {
		name string
		in   provider.Input
		want string
	}{
		{"no tenant", provider.Input{}, "no tenant"},
		{"cloud tenant", provider.Input{Tenant: &tenant.Tenant{Name: "x", Provider: tenant.ProviderOCI}}, `has provider "oci"`},
		{"node without machine", provider.Input{Tenant: noMachine, MachineConfigs: configs(noMachine)},
			`node lab-workers-4 has no machine: group "workers" has 3 machine(s) for count 4`},
		{"machine without address", provider.Input{Tenant: noAddress, MachineConfigs: configs(noAddress)}, "has no address"},
		{"missing config", provider.Input{Tenant: lab(2), MachineConfigs: missing}, "no machine config for node(s) lab-workers-2"},
		{"network stage", provider.Input{Tenant: lab(2), Stage: provider.StageNetwork}, "no network stage"},
	} {
		_, err := metal.Renderer{}.Render(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestTofu validates the render against real tofu, applies it (terraform_data
// needs no provider and no network), maps its outputs back to nodes, checks
// that an unchanged tenant plans nothing and that scaling plans exactly one
// create.
func TestTofu(t *testing.T) {
	bin, rc := testenv.Tofu(t)
	dir := t.TempDir()
	write := func(doc []byte) {
		if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), doc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(render(t, lab(2)))
	if _, code := testenv.RunTofu(t, bin, rc, dir, "init", "-input=false", "-backend=false"); code != 0 {
		t.Fatal("tofu init failed")
	}
	out, code := testenv.RunTofu(t, bin, rc, dir, "validate", "-json")
	var v struct {
		Valid        bool              `json:"valid"`
		ErrorCount   int               `json:"error_count"`
		WarningCount int               `json:"warning_count"`
		Diagnostics  []json.RawMessage `json:"diagnostics"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("validate -json: %v: %s", err, out)
	}
	if code != 0 || !v.Valid || v.WarningCount != 0 {
		t.Fatalf("tofu validate: exit %d, valid %v, %d errors, %d warnings: %s", code, v.Valid, v.ErrorCount, v.WarningCount, out)
	}

	if _, code := testenv.RunTofu(t, bin, rc, dir, "apply", "-input=false", "-auto-approve", "-json"); code != 0 {
		t.Fatal("tofu apply failed")
	}
	out, code = testenv.RunTofu(t, bin, rc, dir, "output", "-json")
	if code != 0 {
		t.Fatal("tofu output failed")
	}
	var outs map[string]*tfjson.StateOutput
	if err := json.Unmarshal(out, &outs); err != nil {
		t.Fatal(err)
	}
	nodes, err := provider.ParseNodes(outs)
	if err != nil {
		t.Fatal(err)
	}
	wantAddr := map[string]string{"lab-cp-1": "192.168.1.21", "lab-workers-1": "192.168.1.31", "lab-workers-2": "192.168.1.32"}
	if len(nodes) != len(wantAddr) {
		t.Fatalf("nodes from outputs: %+v", nodes)
	}
	for _, n := range nodes {
		if n.Address != wantAddr[n.Name] || n.PrivateAddress != n.Address || n.ID == "" {
			t.Errorf("node %+v, want address %s and an id", n, wantAddr[n.Name])
		}
	}

	state, _ := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	if bytes.Contains(state, []byte("token:")) || bytes.Contains(state, []byte("secret-lab")) {
		t.Error("state holds machine config content")
	}

	// Unchanged tenant: identical bytes, no changes (-detailed-exitcode 0).
	write(render(t, lab(2)))
	if _, code := testenv.RunTofu(t, bin, rc, dir, "plan", "-input=false", "-no-color", "-detailed-exitcode"); code != 0 {
		t.Errorf("re-plan of an unchanged tenant: exit %d, want 0 (no changes)", code)
	}

	// One more worker: exactly one create.
	write(render(t, lab(3)))
	if _, code := testenv.RunTofu(t, bin, rc, dir, "plan", "-input=false", "-no-color", "-out=scale.plan", "-detailed-exitcode"); code != 2 {
		t.Fatalf("plan after scaling: exit %d, want 2 (changes)", code)
	}
	if got, want := planned(t, bin, rc, dir, "scale.plan"), []string{"terraform_data.lab-workers-3:create"}; !reflect.DeepEqual(got, want) {
		t.Errorf("scaling 2 -> 3 plans %v, want %v", got, want)
	}
	if _, code := testenv.RunTofu(t, bin, rc, dir, "apply", "-input=false", "-json", "scale.plan"); code != 0 {
		t.Fatal("tofu apply of the scale plan failed")
	}

	// A new machine config for one node: that node updates in place, never
	// a replacement.
	ten := lab(3)
	cfg := configs(ten)
	cfg["lab-workers-1"] = append(cfg["lab-workers-1"], "# new\n"...)
	doc, err := metal.Renderer{}.Render(provider.Input{Tenant: ten, MachineConfigs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	write(doc)
	if _, code := testenv.RunTofu(t, bin, rc, dir, "plan", "-input=false", "-no-color", "-out=config.plan"); code != 0 {
		t.Fatal("plan after a config change failed")
	}
	if got, want := planned(t, bin, rc, dir, "config.plan"), []string{"terraform_data.lab-workers-1:update"}; !reflect.DeepEqual(got, want) {
		t.Errorf("a config change plans %v, want %v", got, want)
	}
}

// planned lists "address:actions" of a plan file's changes other than no-op.
func planned(t *testing.T, bin, rc, dir, planFile string) []string {
	t.Helper()
	out, code := testenv.RunTofu(t, bin, rc, dir, "show", "-json", planFile)
	if code != 0 {
		t.Fatal("tofu show -json failed")
	}
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatalf("show -json: %v", err)
	}
	var changed []string
	for _, rc := range plan.ResourceChanges {
		if a := strings.Join(rc.Change.Actions, ","); a != "no-op" {
			changed = append(changed, rc.Address+":"+a)
		}
	}
	return changed
}

func tenant100() *tenant.Tenant {
	ten := lab(0)
	ten.NodeGroups[0].Count = 3
	ten.NodeGroups[0].Machines = nil
	ten.NodeGroups[1].Machines = nil
	ten.NodeGroups[1].Count = 97
	for i := 0; i < 3; i++ {
		ten.NodeGroups[0].Machines = append(ten.NodeGroups[0].Machines, tenant.Machine{Address: fmt.Sprintf("10.0.0.%d", i+1), InstallDisk: "/dev/sda"})
	}
	for i := 0; i < 97; i++ {
		ten.NodeGroups[1].Machines = append(ten.NodeGroups[1].Machines, tenant.Machine{Address: fmt.Sprintf("10.0.1.%d", i+1), InstallDisk: "/dev/sda"})
	}
	return ten
}

func BenchmarkRender100(b *testing.B) {
	ten := tenant100()
	cfg := map[string][]byte{}
	big := bytes.Repeat([]byte("machine: {}\n"), 1200) // ~14 KB, a realistic config size
	for _, n := range ten.Nodes() {
		cfg[n.Name] = big
	}
	in := provider.Input{Tenant: ten, MachineConfigs: cfg}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (metal.Renderer{}).Render(in); err != nil {
			b.Fatal(err)
		}
	}
}
