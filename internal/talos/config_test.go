package talos_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestGenerateConfigsMetal(t *testing.T) {
	b := sharedBundle(t)
	tn := metalTenant("lab", []string{"192.168.1.21", "192.168.1.31", "192.168.1.32"}, 1, 2)
	tn.NodeGroups[1].Machines[1].InstallDisk = "" // default disk
	cfgs, err := talos.GenerateConfigs(tn, b, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfgs.Endpoint != "https://192.168.1.21:6443" {
		t.Errorf("endpoint = %q", cfgs.Endpoint)
	}
	if len(cfgs.Nodes) != 3 {
		t.Fatalf("nodes = %d, want 3", len(cfgs.Nodes))
	}
	wantDisk := map[string]string{"lab-cp-1": "/dev/nvme0n1", "lab-workers-1": "/dev/nvme0n1", "lab-workers-2": "/dev/sda"}
	for _, n := range tn.Nodes() {
		data := cfgs.Nodes[n.Name]
		if strings.Contains(string(data), "\n#") || strings.HasPrefix(string(data), "#") {
			t.Errorf("%s: config has comments", n.Name)
		}
		cfg, err := talos.ValidateConfig(data, talos.Metal)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		wantType := machine.TypeWorker
		if n.Role == tenant.RoleControlPlane {
			wantType = machine.TypeControlPlane
		}
		if got := cfg.Machine().Type(); got != wantType {
			t.Errorf("%s: type %s, want %s", n.Name, got, wantType)
		}
		if hc := cfg.NetworkHostnameConfig(); hc == nil || hc.Hostname() != n.Name {
			t.Errorf("%s: hostname config = %v", n.Name, hc)
		}
		if got := cfg.Machine().Install().Disk(); got != wantDisk[n.Name] {
			t.Errorf("%s: install disk %q, want %q", n.Name, got, wantDisk[n.Name])
		}
		if got := cfg.Machine().Install().Image(); got != "ghcr.io/siderolabs/installer:v1.13.0" {
			t.Errorf("%s: installer %q", n.Name, got)
		}
		if got := cfg.Cluster().Name(); got != "lab" {
			t.Errorf("%s: cluster name %q", n.Name, got)
		}
		if got := cfg.Cluster().Endpoint().String(); got != "https://192.168.1.21:6443" {
			t.Errorf("%s: endpoint %q", n.Name, got)
		}
		if got := cfg.Machine().Kubelet().ExtraArgs()["rotate-server-certificates"]; len(got) != 1 || got[0] != "true" {
			t.Errorf("%s: patch not applied: kubelet extra args %v", n.Name, cfg.Machine().Kubelet().ExtraArgs())
		}
		if !strings.Contains(string(data), "kubelet:v1.35.0") {
			t.Errorf("%s: kubelet image not 1.35.0", n.Name)
		}
		sans := strings.Join(cfg.Machine().Security().CertSANs(), ",")
		if !strings.Contains(sans, "192.168.1.21") {
			t.Errorf("%s: cert SANs %q lack the endpoint", n.Name, sans)
		}
		hasKey := len(cfg.Machine().Security().IssuingCA().Key) > 0
		if hasKey != (n.Role == tenant.RoleControlPlane) {
			t.Errorf("%s: OS CA key present = %v", n.Name, hasKey)
		}
	}
	cp, err := configloader.NewFromBytes(cfgs.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	if !cp.Cluster().ScheduleOnControlPlanes() {
		t.Error("controlplane base: allowSchedulingOnControlPlanes patch not applied")
	}
	if _, err := talos.ValidateConfig(cfgs.Worker, nil); err != nil {
		t.Error(err)
	}
	tc, err := clientconfig.FromBytes(cfgs.Talosconfig)
	if err != nil {
		t.Fatal(err)
	}
	if ctx := tc.Contexts[tc.Context]; ctx == nil || strings.Join(ctx.Endpoints, ",") != "192.168.1.21" {
		t.Errorf("talosconfig context %q: %+v", tc.Context, tc.Contexts[tc.Context])
	}
}

func TestGenerateConfigsCloud(t *testing.T) {
	b := sharedBundle(t)
	tn := &tenant.Tenant{Name: "cloudy", Provider: tenant.ProviderOpenStack, TalosVersion: "v1.12.0", KubernetesVersion: "1.34.1",
		NodeGroups: []tenant.NodeGroup{{Name: "cp", Role: tenant.RoleControlPlane, Count: 1}, {Name: "w", Role: tenant.RoleWorker, Count: 1}}}
	if _, err := talos.GenerateConfigs(tn, b, ""); err == nil {
		t.Fatal("cloud tenant without endpoint: want error")
	}
	cfgs, err := talos.GenerateConfigs(tn, b, "https://203.0.113.7:6443")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range cfgs.Nodes {
		cfg, err := talos.ValidateConfig(data, talos.Cloud)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := cfg.Machine().Install().Disk(); got != talos.DefaultInstallDisk {
			t.Errorf("%s: install disk %q", name, got)
		}
		if cfg.NetworkHostnameConfig().Hostname() != name {
			t.Errorf("%s: hostname %q", name, cfg.NetworkHostnameConfig().Hostname())
		}
	}
}

func TestGenerateConfigsBadPatches(t *testing.T) {
	b := sharedBundle(t)
	for name, patch := range map[string]string{
		"json6902": `[{"op": "add", "path": "/machine/foo", "value": 1}]`,
		"garbage":  "machine: [unclosed",
		"invalid":  "machine:\n  network:\n    kubespan:\n      enabled: true\ncluster:\n  discovery:\n    enabled: false\n",
		"unknown":  "machine:\n  nonsense: 1\n",
	} {
		tn := metalTenant("lab", []string{"192.168.1.21"}, 1, 0)
		tn.ConfigPatches = []string{patch}
		if _, err := talos.GenerateConfigs(tn, b, ""); err == nil {
			t.Errorf("%s patch: want an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestSecrets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenants", "lab")
	b1, err := talos.LoadOrCreateSecrets(dir, "lab", "v1.13.0", false)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(talos.SecretsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", di.Mode().Perm())
	}
	// Loaded on every start, never regenerated (even with infrastructure).
	b2, err := talos.LoadOrCreateSecrets(dir, "lab", "v1.13.0", true)
	if err != nil {
		t.Fatal(err)
	}
	if string(b1.Certs.OS.Crt) != string(b2.Certs.OS.Crt) || b1.Secrets.BootstrapToken != b2.Secrets.BootstrapToken ||
		string(b1.Certs.K8s.Key) != string(b2.Certs.K8s.Key) || b1.Cluster.ID != b2.Cluster.ID {
		t.Error("reloaded bundle differs")
	}
	if b2.Clock == nil {
		t.Error("reloaded bundle has no clock")
	}
	// Configs from the reloaded bundle work.
	if _, err := talos.GenerateConfigs(metalTenant("lab", []string{"10.0.0.2"}, 1, 0), b2, ""); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data dir holds %d files, want only secrets.yaml", len(entries))
	}

	// Missing while the tenant has infrastructure: refused, with the way out.
	if err := os.Remove(talos.SecretsPath(dir)); err != nil {
		t.Fatal(err)
	}
	_, err = talos.LoadOrCreateSecrets(dir, "lab", "v1.13.0", true)
	if !errors.Is(err, talos.ErrSecretsMissing) {
		t.Fatalf("err = %v, want ErrSecretsMissing", err)
	}
	if !strings.Contains(err.Error(), "restore "+talos.SecretsPath(dir)) {
		t.Errorf("error does not say how to restore: %v", err)
	}
	if _, serr := os.Stat(talos.SecretsPath(dir)); !errors.Is(serr, fs.ErrNotExist) {
		t.Error("a bundle was written although refused")
	}

	// A corrupt file is an error, never replaced.
	if err := os.WriteFile(talos.SecretsPath(dir), []byte("certs: [nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := talos.LoadOrCreateSecrets(dir, "lab", "v1.13.0", false); err == nil {
		t.Error("corrupt secrets: want error")
	}
}

func TestTalosconfig(t *testing.T) {
	b := sharedBundle(t)
	data, err := talos.Talosconfig(b, "lab", []string{"10.0.0.1", "10.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := clientconfig.FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	c := tc.Contexts["lab"]
	if tc.Context != "lab" || c == nil || len(c.Endpoints) != 2 || c.CA == "" || c.Crt == "" || c.Key == "" {
		t.Errorf("talosconfig = %+v", tc)
	}
}
