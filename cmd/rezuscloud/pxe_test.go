package main

import (
	"net"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestBootInventory: what the responder is told about a MAC follows the
// tenant files, discovery and the node stages the engine publishes.
func TestBootInventory(t *testing.T) {
	inv := newBootInventory()
	sch := "ab" + "cdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"[:62]
	inv.setTenants([]*tenant.Tenant{{Name: "lab", Provider: tenant.ProviderMetal, TalosVersion: "v1.12.4", Schematic: sch,
		NodeGroups: []tenant.NodeGroup{{Name: "workers", Role: tenant.RoleWorker, Count: 1, Machines: []tenant.Machine{
			{Address: "192.0.2.10", MAC: "02:AA:00:00:00:01"}, {Address: "192.0.2.11", MAC: "02:aa:00:00:00:02"}}}}}})
	inv.setMachines([]talos.Machine{{MAC: "02:aa:00:00:00:09"}})
	mac := func(s string) net.HardwareAddr { hw, _ := net.ParseMAC(s); return hw }
	node := mac("02:aa:00:00:00:01")
	if m := inv.BootMachine(node); !m.Known || m.Node != "lab-workers-1" || m.TalosVersion != "v1.12.4" || m.Schematic != sch || m.Installed {
		t.Fatalf("declared node: %+v", m)
	}
	if m := inv.BootMachine(mac("02:aa:00:00:00:02")); !m.Known || m.Node != "" {
		t.Fatalf("spare pool machine: %+v", m)
	}
	if m := inv.BootMachine(mac("02:aa:00:00:00:09")); !m.Known || m.Tenant != "" {
		t.Fatalf("discovered machine: %+v", m)
	}
	if m := inv.BootMachine(mac("02:aa:00:00:00:08")); m.Known {
		t.Fatalf("stranger: %+v", m)
	}
	for _, c := range []struct {
		stage                tenant.Stage
		installed, resetting bool
	}{
		{tenant.StageMaintenance, false, false},
		{tenant.StageInstalling, true, false}, // its reboot after the install goes to disk
		{tenant.StageRunning, true, false},
		{tenant.StageUnreachable, true, false}, // powered off: still installed
		{tenant.StageResetting, true, true},
		{tenant.StageUnreachable, true, true}, // rebooting out of its reset
		{tenant.StageMaintenance, false, false},
	} {
		inv.setNodeStatus("lab", "lab-workers-1", tenant.NodeStatus{Stage: c.stage})
		if m := inv.BootMachine(node); m.Installed != c.installed || m.Resetting != c.resetting {
			t.Fatalf("after %s: installed %v resetting %v, want %v %v", c.stage, m.Installed, m.Resetting, c.installed, c.resetting)
		}
	}
}
