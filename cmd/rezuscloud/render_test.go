package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

const openstackTenant = `provider = "openstack"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"
endpoint = "https://203.0.113.7:6443"
[openstack]
region = "RegionOne"
network = "lan"
image = "talos-v1.13.0"
floating_ip_pool = "public"
[[node_groups]]
name = "cp"
role = "controlplane"
count = 1
flavor = "m1.large"
[[node_groups]]
name = "workers"
role = "worker"
count = 2
flavor = "m1.medium"
volume_gb = 40
`

// TestRenderValidates renders a metal and an OpenStack tenant with the
// command and has the real tofu validate both against the real providers.
func TestRenderValidates(t *testing.T) {
	bin, rc := testenv.Tofu(t)
	dir := t.TempDir()
	osFile := filepath.Join(dir, "cloud.toml")
	if err := os.WriteFile(osFile, []byte(openstackTenant), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, file := range map[string]string{"metal": "../../internal/tenant/testdata/lab.toml", "openstack": osFile} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, name)
			if code, stdout, stderr := runCLI(t, "render", "--tenant", file, "--out", out); code != 0 {
				t.Fatalf("render: exit %d\n%s%s", code, stdout, stderr)
			}
			for _, f := range []string{"main.tf.json", "controlplane.yaml", "worker.yaml", "talosconfig", "secrets.yaml"} {
				fi, err := os.Stat(filepath.Join(out, f))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s mode %v, want 0600", f, fi.Mode().Perm())
				}
			}
			doc, _ := os.ReadFile(filepath.Join(out, "main.tf.json"))
			ca, _ := os.ReadFile(filepath.Join(out, "secrets.yaml"))
			if name == "metal" && strings.Contains(string(doc), "BEGIN") {
				t.Error("metal main.tf.json carries key material")
			}
			if len(ca) == 0 {
				t.Fatal("no secrets bundle")
			}
			if _, code := testenv.RunTofu(t, bin, rc, out, "init", "-input=false", "-backend=false"); code != 0 {
				t.Fatalf("tofu init: exit %d", code)
			}
			validate, _ := testenv.RunTofu(t, bin, rc, out, "validate", "-json")
			var v struct {
				Valid       bool `json:"valid"`
				Diagnostics []struct{ Summary, Detail string }
			}
			if err := json.Unmarshal(validate, &v); err != nil {
				t.Fatal(err)
			}
			if !v.Valid {
				t.Fatalf("tofu validate: %+v", v.Diagnostics)
			}
		})
	}
	// bad input changes nothing and says where
	code, stdout, _ := runCLI(t, "render", "--tenant", "../../internal/tenant/testdata/broken.toml", "--out", filepath.Join(dir, "bad"))
	if code != 1 || !strings.Contains(stdout, "broken.toml:8:1") {
		t.Fatalf("broken tenant: exit %d\n%s", code, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil {
		t.Error("a failed render created its output dir")
	}
	if code, _, _ := runCLI(t, "render", "--tenant", osFile); code != 2 {
		t.Errorf("missing --out: exit %d, want 2", code)
	}
}
