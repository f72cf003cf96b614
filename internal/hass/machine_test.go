package hass

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/machine"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func testMachine(addr, mac string) machine.Machine {
	return machine.Machine{Address: addr, MAC: mac, Manufacturer: "Intel(R) Client Systems", Model: "NUC12WSHi5",
		CPU: "12th Gen Intel(R) Core(TM) i5-1240P", Cores: 12, MemoryBytes: 32 << 30, Fingerprint: "q2Zb1xK0pYxJ9v2U8mQ4bG7nR3tL6wE5sA1dF0hC9jk=",
		Disks: []machine.Disk{
			{DevPath: "/dev/nvme0n1", Size: 512e9, Transport: "nvme", Model: "Samsung SSD 980 PRO"},
			{DevPath: "/dev/sda", Size: 1024e9, Transport: "usb", Model: "Extreme 55AE"},
			{DevPath: "/dev/sr0", Size: 120 << 20, Transport: "sata", Readonly: true, CDROM: true},
		}}
}

// TestMachineDevices: machines become conforming devices with their
// hardware; the select offers the metal worker groups; Adopt sends the
// chosen group; Scan network and the node power buttons reach the engine;
// a machine no longer listed is removed.
func TestMachineDevices(t *testing.T) {
	m := broker(t)
	obs := newObserver(t, m.URL)
	cmd := newFakeCmd()
	b := startBridge(t, fastOptions(m.URL), cmd, []*tenant.Tenant{labTenant(), cloudTenant("prod", 1)})
	b.SetMachines([]machine.Machine{testMachine("192.168.1.50", "02:aa:bb:cc:dd:01"), testMachine("192.168.1.51", "02:AA:BB:CC:DD:02")})
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	disc1, disc2 := "homeassistant/device/rezuscloud_machine_02aabbccdd01/config", "homeassistant/device/rezuscloud_machine_02aabbccdd02/config"
	state1 := "rezuscloud/machine/02aabbccdd01/state"
	for _, tp := range []string{disc1, disc2, state1} {
		obs.waitPayload(t, tp, 5*time.Second, func(p []byte) bool { return len(p) > 0 })
	}
	obs.sync(t)
	chk := hasstest.NewChecker()
	for topic, mm := range obs.snapshot() {
		if isDiscovery(topic) {
			for _, err := range chk.Check(topic, mm.payload, true) { // published retained; this observer saw them live
				t.Errorf("conformance: %v", err)
			}
		}
	}
	d1, _ := obs.get(disc1)
	var disc struct {
		Device     map[string]any            `json:"device"`
		Components map[string]map[string]any `json:"components"`
	}
	if err := json.Unmarshal(d1.payload, &disc); err != nil {
		t.Fatal(err)
	}
	if disc.Device["model"] != "Talos machine" {
		t.Errorf("device model %v", disc.Device["model"])
	}
	sel := disc.Components["cluster_group"]
	if opts, _ := json.Marshal(sel["options"]); string(opts) != `["lab/workers"]` {
		t.Errorf("cluster group options %s, want the metal worker groups only", opts)
	}
	for _, k := range []string{"address", "model", "cpu", "memory", "disks", "adopt"} {
		if disc.Components[k] == nil {
			t.Errorf("machine device lacks %s", k)
		}
	}
	st, _ := obs.get(state1)
	var doc machineDoc
	if err := json.Unmarshal(st.payload, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.MAC != "02:aa:bb:cc:dd:01" || len(doc.Disks) != 3 || doc.InstallDisk == nil || *doc.InstallDisk != "/dev/nvme0n1" ||
		doc.Fingerprint == "" || doc.MemoryGiB != 32 || doc.Group != "lab/workers" {
		t.Errorf("machine state %s", st.payload)
	}
	for _, tpl := range []string{disc.Components["disks"]["json_attributes_template"].(string), disc.Components["disks"]["value_template"].(string)} {
		for _, err := range hasstest.CheckTemplate(tpl, st.payload) {
			t.Errorf("template %s: %v", tpl, err)
		}
	}

	press := func(comp string, payload string) {
		t.Helper()
		topic := sel["command_topic"].(string)
		if comp != "cluster_group" {
			topic = disc.Components[comp]["command_topic"].(string)
		}
		if tok := obs.c.Publish(topic, 1, false, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	press("cluster_group", "prod/workers") // a cloud group: refused, the select stays
	press("adopt", "PRESS")
	cmd.waitCall(t, "adopt 02:aa:bb:cc:dd:01 lab workers ")

	for _, tc := range []struct{ action, payload, want string }{
		{ActionDiscover, `{}`, "discover"},
		{ActionAdopt, `{"mac":"02:aa:bb:cc:dd:02","tenant":"lab","group":"workers","install_disk":"/dev/nvme0n1"}`, "adopt 02:aa:bb:cc:dd:02 lab workers /dev/nvme0n1"},
		{ActionPower, `{"tenant":"lab","node":"lab-workers-1","state":"off"}`, "power lab lab-workers-1 off"},
	} {
		if r := b.HandleRaw(context.Background(), tc.action, []byte(tc.payload)); !r.OK() {
			t.Errorf("%s: %s", tc.action, r.Error)
		}
		cmd.waitCall(t, tc.want)
	}
	for _, tc := range []struct{ action, payload, want string }{
		{ActionAdopt, `{"mac":"nope","tenant":"lab","group":"workers"}`, "not a MAC address"},
		{ActionAdopt, `{"mac":"02:aa:bb:cc:dd:02","tenant":"lab"}`, `needs field "group"`},
		{ActionPower, `{"tenant":"lab","node":"lab-workers-1","state":"reboot"}`, `"on" or "off"`},
		// whether the node exists is the engine's check (engine.TestCommandsCheckInput)
		{ActionPower, `{"tenant":"lab","node":"Lab_9","state":"on"}`, "not a valid node name"},
	} {
		if r := b.HandleRaw(context.Background(), tc.action, []byte(tc.payload)); r.OK() || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s %s: %+v, want an error with %q", tc.action, tc.payload, r, tc.want)
		}
	}

	b.SetMachines([]machine.Machine{testMachine("192.168.1.51", "02:aa:bb:cc:dd:02")})
	obs.waitPayload(t, disc1, 5*time.Second, func(p []byte) bool { return len(p) == 0 })
	if mm, _ := obs.get(disc2); len(mm.payload) == 0 {
		t.Error("the machine still listed was removed")
	}
}

func TestNodePower(t *testing.T) {
	for _, tc := range []struct {
		stage tenant.Stage
		want  string
	}{{tenant.StageRunning, "on"}, {tenant.StageMaintenance, "on"}, {tenant.StageUnreachable, "off"}, {tenant.StagePending, "unknown"}} {
		if got := nodePower(tc.stage); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.stage, got, tc.want)
		}
	}
}
