package web

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// describePlan is the diff as lines "<action> <address> <path>: <before> → <after>".
func describePlan(v *planView) []string {
	var out []string
	for _, list := range [][]resourceDiff{v.Add, v.Change, v.Replace, v.Destroy} {
		for _, d := range list {
			out = append(out, d.Action+" "+d.Address+" because "+d.Reason)
			for _, a := range d.Attrs {
				l := "  " + a.Path + ": " + a.Before + " → " + a.After
				if a.Forces {
					l += " (forces)"
				}
				out = append(out, l)
			}
		}
	}
	return out
}

func mustContain(t *testing.T, lines []string, want ...string) {
	t.Helper()
	all := strings.Join(lines, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("the diff lacks %q:\n%s", w, all)
		}
	}
}

// TestPlanViewOfTofu renders a plan that the real tofu made: terraform_data
// resources as the metal renderer writes them, applied, then changed so
// that the plan updates one, replaces one, destroys one and adds one.
func TestPlanViewOfTofu(t *testing.T) {
	bin, _ := testenv.Tofu(t)
	dir := t.TempDir()
	res := func(name, addr, sha string) map[string]any {
		return map[string]any{"input": map[string]any{"address": addr, "config_sha256": sha, "node": name, "tenant": "lab"},
			"triggers_replace": []string{addr}}
	}
	write := func(rs map[string]any) {
		b, _ := json.Marshal(map[string]any{"resource": map[string]any{"terraform_data": rs}})
		if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tofu := func(args ...string) []byte {
		cmd := exec.CommandContext(context.Background(), bin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"TF_IN_AUTOMATION=1", "HOME=" + dir, "PATH=/usr/bin:/bin"}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tofu %v: %v %s", args, err, out)
		}
		return out
	}
	sha := strings.Repeat("a1", 32)
	write(map[string]any{"lab-cp-1": res("lab-cp-1", "192.168.1.21", sha), "lab-w-1": res("lab-w-1", "192.168.1.31", sha),
		"lab-w-2": res("lab-w-2", "192.168.1.32", sha)})
	tofu("init", "-input=false")
	tofu("apply", "-auto-approve", "-input=false")
	write(map[string]any{"lab-cp-1": res("lab-cp-1", "192.168.1.21", strings.Repeat("b2", 32)),
		"lab-w-1": res("lab-w-1", "192.168.1.41", sha), "lab-w-3": res("lab-w-3", "192.168.1.33", sha)})
	tofu("plan", "-input=false", "-out=plan")
	var p tfjson.Plan
	if err := json.Unmarshal(tofu("show", "-json", "plan"), &p); err != nil {
		t.Fatal(err)
	}
	v := newPlanView(&p)
	if v.Counts.Add != 2 || v.Counts.Change != 1 || v.Counts.Destroy != 2 {
		t.Fatalf("counts %+v, want 2 to add, 1 to change, 2 to destroy", v.Counts)
	}
	mustContain(t, describePlan(v),
		"create terraform_data.lab-w-3 because \n  id:  → (known after apply)\n  input.address:  → \"192.168.1.33\"",
		"update terraform_data.lab-cp-1 because \n  input.config_sha256: \"a1a1a1a1a1a1…\" → \"b2b2b2b2b2b2…\"\n  output: (4 values) → (known after apply)",
		"replace terraform_data.lab-w-1 because an attribute that cannot change in place changes",
		"  triggers_replace[0]: \"192.168.1.31\" → \"192.168.1.41\" (forces)",
		"delete terraform_data.lab-w-2 because the tenant no longer declares it\n  id: \"",
	)
}

// TestPlanViewHidesSecrets: values tofu marks sensitive, keys that carry
// secrets (an instance's user_data is its machine config) and anything
// like a key or certificate never reach the page.
func TestPlanViewHidesSecrets(t *testing.T) {
	machineConfig := "version: v1alpha1\nmachine:\n  token: abcdef.0123456789abcdef\n  ca:\n    crt: LS0tLS1CRUdJTi\n    key: LS0tLS1CRUdJTi\n"
	p := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{{
		Address: "openstack_compute_instance_v2.lab-cp-1", Mode: tfjson.ManagedResourceMode,
		Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionCreate},
			After: map[string]any{"name": "lab-cp-1", "flavor_name": "m1.large", "user_data": machineConfig,
				"admin_pass": "hunter2hunter2", "metadata": map[string]any{"user_data": "c2VjcmV0", "tenant": "lab"},
				"note": "-----BEGIN PRIVATE KEY-----\nMIIE", "tags": []any{"rezuscloud", "lab"}},
			AfterUnknown:   map[string]any{"id": true},
			AfterSensitive: map[string]any{"admin_pass": true}},
	}, {
		Address: "openstack_networking_secgroup_v2.lab", Mode: tfjson.ManagedResourceMode,
		Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionUpdate},
			Before: map[string]any{"description": "old", "password": "oldpass"},
			After:  map[string]any{"description": "new", "password": "newpass"}},
	}, {
		Address: "data.openstack_images_image_v2.talos", Mode: tfjson.DataResourceMode,
		Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionRead}},
	}}}
	v := newPlanView(p)
	lines := describePlan(v)
	all := strings.Join(lines, "\n")
	for _, secret := range []string{"abcdef.0123456789abcdef", "LS0tLS1CRUdJTi", "hunter2", "c2VjcmV0", "BEGIN PRIVATE", "oldpass", "newpass"} {
		if strings.Contains(all, secret) {
			t.Errorf("the diff shows %q:\n%s", secret, all)
		}
	}
	mustContain(t, lines, `  user_data:  → (hidden)`, `  admin_pass:  → (sensitive)`, `  metadata.user_data:  → (hidden)`,
		`  metadata.tenant:  → "lab"`, `  flavor_name:  → "m1.large"`, `  id:  → (known after apply)`, `  tags[1]:  → "lab"`,
		`  note:  → (hidden)`, `  description: "old" → "new"`, `  password: (hidden) → (hidden, changed)`)
	if v.Counts.Add != 1 || v.Counts.Change != 1 || len(v.Destroy) != 0 {
		t.Fatalf("counts %+v (a data source read is no change)", v.Counts)
	}
	if !newPlanView(nil).Empty() || !newPlanView(&tfjson.Plan{}).Empty() {
		t.Fatal("no plan is not empty")
	}
}
