package engine

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestBootMachine: what the network-boot responder is told about a MAC
// follows the tenant files, the record, the running operation and
// discovery.
func TestBootMachine(t *testing.T) {
	file := `provider = "metal"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"
schematic = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
[[node_groups]]
name = "cp"
role = "controlplane"
count = 1
  [[node_groups.machines]]
  address = "127.0.0.10"
  mac = "02:aa:00:00:00:01"
  install_disk = "/dev/sda"
[[node_groups]]
name = "workers"
role = "worker"
count = 1
  [[node_groups.machines]]
  address = "127.0.0.11"
  mac = "02:AA:00:00:00:02"
  install_disk = "/dev/sda"
  [[node_groups.machines]]
  address = "127.0.0.12"
  mac = "02:aa:00:00:00:03"
  install_disk = "/dev/sda"
`
	e, _ := bareEngine(t, file)
	ts := e.addIdle(t, "lab", record{Infra: true, Bootstrapped: true, TalosVersion: "v1.13.0",
		Nodes: map[string]nodeRecord{"lab-cp-1": {Address: "127.0.0.10", ConfigHash: "h", Role: tenant.RoleControlPlane, Group: "cp",
			TalosVersion: "v1.13.1"}}})
	e.disc.machines = map[string]*seenMachine{"02:aa:00:00:00:09": {m: talos.Machine{MAC: "02:aa:00:00:00:09"}}}

	if m := e.BootMachine("02:AA:00:00:00:01"); !m.Known || m.Node != "lab-cp-1" || !m.Installed || m.Resetting ||
		m.TalosVersion != "v1.13.1" || m.Schematic == "" {
		t.Errorf("installed control plane: %+v", m)
	}
	if m := e.BootMachine("02:aa:00:00:00:02"); !m.Known || m.Node != "lab-workers-1" || m.Installed {
		t.Errorf("declared worker not configured yet: %+v", m)
	}
	if m := e.BootMachine("02:aa:00:00:00:03"); !m.Known || m.Node != "" || m.Tenant != "lab" {
		t.Errorf("spare pool machine: %+v", m)
	}
	if m := e.BootMachine("02:aa:00:00:00:09"); !m.Known || m.Tenant != "" {
		t.Errorf("discovered machine: %+v", m)
	}
	if m := e.BootMachine("02:aa:00:00:00:08"); m.Known {
		t.Errorf("stranger: %+v", m)
	}
	ts.mu.Lock()
	ts.run = &run{ts: ts, intents: map[string]intent{"lab-cp-1": {stage: tenant.StageResetting}}}
	ts.mu.Unlock()
	if m := e.BootMachine("02:aa:00:00:00:01"); !m.Resetting || m.Installed {
		t.Errorf("node being reset: %+v", m)
	}
}
