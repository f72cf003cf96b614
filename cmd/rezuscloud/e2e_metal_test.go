package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/redfish/redfishtest"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

const (
	metalHAToken    = "metal-ha-token-for-tests-0123456789"
	redfishUser     = "admin"
	redfishPassword = "redfish-s3cret-for-tests-42"
)

// machineDoc is a machine device's state document.
type machineDoc struct {
	Address     string `json:"address"`
	MAC         string `json:"mac"`
	Model       string `json:"model"`
	InstallDisk string `json:"install_disk"`
	Fingerprint string `json:"certificate_fingerprint"`
	Disks       []struct {
		DevPath   string `json:"dev_path"`
		Removable bool   `json:"removable"`
	} `json:"disks"`
}

func machineDevID(mac string) string { return base + "_machine_" + strings.ReplaceAll(mac, ":", "") }

// metalEnv is an installation with discovery over the machines' /24, a
// fake Home Assistant and the Redfish stand-in.
type metalEnv struct {
	*env
	ha *fakeha.Server
	rf *redfishtest.Server
}

// newMetalEnv: machine 0 is the control plane of tenant lab (declared
// with its mac), the others wait in maintenance mode to be found; a
// second tenant "cloud" is an OpenStack one (a group that takes no
// machines).
func newMetalEnv(tb testing.TB, machines int) *metalEnv {
	tb.Helper()
	e := newEnv(tb, envOptions{machines: machines, workers: 0, logLevel: "debug"})
	me := &metalEnv{env: e, ha: fakeha.New(metalHAToken), rf: redfishtest.New(redfishUser, redfishPassword, "On")}
	tb.Cleanup(me.ha.Close)
	tb.Cleanup(me.rf.Close)
	m0 := e.machines[0]
	lab := fmt.Sprintf(`# the lab: found machines are adopted from Home Assistant
display_name       = "Lab"
provider           = "metal"
talos_version      = %q
kubernetes_version = "1.35.0"

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = %q
  mac          = %q
  install_disk = %q

# workers: none yet, Adopt adds them
[[node_groups]]
name  = "workers"
role  = "worker"
count = 0   # raised by Adopt
`, simnode.DefaultTalosVersion, m0.addr, m0.node.Hardware().MAC, m0.node.Hardware().InstallDisk)
	if err := os.WriteFile(e.tenantFile, []byte(lab), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(strings.Replace(e.tenantFile, "lab.toml", "cloud.toml", 1), []byte(cloudTenantDoc), 0o644); err != nil {
		tb.Fatal(err)
	}
	cidr := m0.addr[:strings.LastIndexByte(m0.addr, '.')] + ".0/24"
	extra := fmt.Sprintf(`[homeassistant]
url   = %q
token = %q
[discovery]
cidrs    = [%q]
interval = "1h"
[credentials.redfish]
username = %q
password = %q
`, me.ha.URL, metalHAToken, cidr, redfishUser, redfishPassword)
	e.appendConfig(extra)
	return me
}

// cloudTenantDoc is an OpenStack tenant beside a metal one: a group that
// takes no machines (adopt must refuse it).
const cloudTenantDoc = `provider           = "openstack"
talos_version      = "` + simnode.DefaultTalosVersion + `"
kubernetes_version = "1.35.0"
[openstack]
region  = "RegionOne"
network = "lan"
image   = "talos"
[[node_groups]]
name   = "cp"
role   = "controlplane"
count  = 1
flavor = "m1.large"
[[node_groups]]
name   = "workers"
role   = "worker"
count  = 0
flavor = "m1.large"
`

func (e *env) machineState(mac string) (machineDoc, bool) {
	m, ok := e.cap.lastMsg(base + "/machine/" + strings.ReplaceAll(mac, ":", "") + "/state")
	if !ok || len(m.Payload) == 0 {
		return machineDoc{}, false
	}
	var d machineDoc
	return d, json.Unmarshal(m.Payload, &d) == nil
}

// deviceShown reports whether a device's discovery is retained now.
func (e *env) deviceShown(id string) bool {
	m, ok := e.cap.lastMsg(e.discTopic(id))
	return ok && len(m.Payload) > 0
}

func (e *env) mustFail(action string, body map[string]any, want ...string) string {
	e.tb.Helper()
	r := e.request(action, body)
	if r.Status != "error" {
		e.tb.Fatalf("%s %v: %s %s, want an error", action, body, r.Status, r.Data)
	}
	for _, w := range want {
		if !strings.Contains(r.Error, w) {
			e.tb.Errorf("%s %v: error %q does not say %q", action, body, r.Error, w)
		}
	}
	return r.Error
}

func (e *env) mustOK(action string, body map[string]any) json.RawMessage {
	e.tb.Helper()
	r := e.request(action, body)
	if r.Status != "ok" {
		e.tb.Fatalf("%s %v: %s", action, body, r.Error)
	}
	return r.Data
}

// TestMetal is issue 13's "done when", through the built
// binary: three machines in maintenance on a loopback /24 become three
// machine devices with their MAC, disks and model after one scan; two are
// adopted through the request API (the file keeps its comments and gets
// the internal disk, never the larger USB one); Apply brings them up and
// their devices are gone. Then power: Shut down on a node powered by a
// Home Assistant switch stops the node, then turns the switch off; Power
// on turns it on and the node answers; the same with a Redfish BMC. Bad
// input is refused naming the machine, changing nothing.
func TestMetal(t *testing.T) {
	me := newMetalEnv(t, 4)
	e := me.env
	found := e.machines[1:]
	plug := "switch.rack_plug"
	me.ha.SetState(plug, "on")
	var (
		mu        sync.Mutex
		offWasOff bool // the node had stopped answering when the switch went off
		onCalls   int
	)
	me.ha.OnService(func(c fakeha.ServiceCall) {
		if c.Domain != "switch" || !strings.Contains(string(c.ServiceData), plug) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch c.Service {
		case "turn_off":
			offWasOff = found[0].node.PoweredOff()
		case "turn_on":
			onCalls++
			found[0].node.PowerOn()
		}
	})
	me.rf.OnPowerChange(func(_, to string) {
		if to == "On" {
			found[1].node.PowerOn()
		}
	})
	mark := e.start()
	e.cap.wait(e.proc, phaseTimeout, "three machine devices after the first scan", func() bool {
		for _, m := range found {
			if !e.deviceShown(machineDevID(m.node.Hardware().MAC)) {
				return false
			}
			if _, ok := e.machineState(m.node.Hardware().MAC); !ok {
				return false
			}
		}
		return true
	})
	if e.deviceShown(machineDevID(e.machines[0].node.Hardware().MAC)) {
		t.Error("the declared control plane is shown as a found machine")
	}
	for _, m := range found {
		hw := m.node.Hardware()
		d, _ := e.machineState(hw.MAC)
		var paths []string
		for _, dk := range d.Disks {
			paths = append(paths, dk.DevPath)
		}
		if d.MAC != hw.MAC || d.Address != m.addr || d.Model != hw.Model || len(d.Disks) != 3 || d.InstallDisk != hw.InstallDisk ||
			!slices.Contains(paths, hw.InstallDisk) || d.Fingerprint == "" {
			t.Errorf("machine %s: state %+v, want mac %s model %s, 3 disks, install disk %s", m.addr, d, hw.MAC, hw.Model, hw.InstallDisk)
		}
		disc := e.discovery(machineDevID(hw.MAC))
		if dev, _ := disc["device"].(map[string]any); dev["model"] != "Talos machine" {
			t.Errorf("machine device model %v", dev["model"])
		}
	}

	// bad input: nothing changes, the errors name the machine
	before, _ := os.ReadFile(e.tenantFile)
	mac1 := found[0].node.Hardware().MAC
	e.mustFail("adopt", map[string]any{"mac": mac1, "tenant": "cloud", "group": "workers"}, mac1, "openstack")
	e.mustFail("adopt", map[string]any{"mac": mac1, "tenant": "nosuch", "group": "workers"}, mac1, "nosuch")
	e.mustFail("adopt", map[string]any{"mac": mac1, "tenant": "lab", "group": "cp"}, mac1, "odd")
	e.mustFail("adopt", map[string]any{"mac": e.machines[0].node.Hardware().MAC, "tenant": "lab", "group": "workers"},
		e.machines[0].node.Hardware().MAC, "already declares")
	usb := "/dev/sda"
	if found[0].node.Hardware().InstallDisk == "/dev/sda" {
		usb = "/dev/sdb"
	}
	e.mustFail("adopt", map[string]any{"mac": mac1, "tenant": "lab", "group": "workers", "install_disk": usb}, mac1, "removable")
	if after, _ := os.ReadFile(e.tenantFile); string(after) != string(before) {
		t.Fatalf("a refused adopt changed the tenant file:\n%s", after)
	}

	// adopt two
	for _, m := range found[:2] {
		var got struct {
			InstallDisk string `json:"install_disk"`
		}
		_ = json.Unmarshal(e.mustOK("adopt", map[string]any{"mac": m.node.Hardware().MAC, "tenant": "lab", "group": "workers"}), &got)
		if got.InstallDisk != m.node.Hardware().InstallDisk {
			t.Errorf("adopted %s on %s, want the internal disk %s", m.addr, got.InstallDisk, m.node.Hardware().InstallDisk)
		}
	}
	file, _ := os.ReadFile(e.tenantFile)
	for _, keep := range []string{"# the lab: found machines are adopted from Home Assistant", "# workers: none yet, Adopt adds them", "# raised by Adopt"} {
		if !strings.Contains(string(file), keep) {
			t.Errorf("comment %q lost", keep)
		}
	}
	if !regexp.MustCompile(`count = 2\s+# raised by Adopt`).Match(file) {
		t.Errorf("the workers' count was not raised to 2:\n%s", file)
	}
	for _, m := range found[:2] {
		hw := m.node.Hardware()
		if !strings.Contains(string(file), fmt.Sprintf("address      = %q\n  mac          = %q\n  install_disk = %q\n", m.addr, hw.MAC, hw.InstallDisk)) {
			t.Errorf("the file does not hold machine %s on %s:\n%s", m.addr, hw.InstallDisk, file)
		}
	}

	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.waitTenant("running with three nodes", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	for _, m := range found[:2] {
		if e.deviceShown(machineDevID(m.node.Hardware().MAC)) {
			t.Errorf("adopted machine %s still has a machine device", m.addr)
		}
	}
	if !e.deviceShown(machineDevID(found[2].node.Hardware().MAC)) {
		t.Error("the machine not adopted lost its device")
	}

	// power: first a switch that does not exist and a BMC that refuses us
	w1, w2 := e.node("workers", 1), e.node("workers", 2)
	setPower := func(addr, value string) {
		t.Helper()
		data, _ := os.ReadFile(e.tenantFile)
		re := regexp.MustCompile(`(?m)(address      = "` + regexp.QuoteMeta(addr) + `"\n(?:  [a-z_]+ += .*\n)*?  install_disk = "[^"]+"\n)(?:  power .*\n(?:  redfish_insecure .*\n)?)?`)
		out := re.ReplaceAllString(string(data), "${1}"+value)
		if out == string(data) && value != "" {
			t.Fatalf("setting power of %s: no change", addr)
		}
		if err := os.WriteFile(e.tenantFile, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		e.mustOK("reload", map[string]any{})
	}
	bad := redfishtest.New("someone", "else", "On")
	defer bad.Close()
	setPower(found[0].addr, "  power = \"switch.missing_plug\"\n")
	setPower(found[1].addr, fmt.Sprintf("  power = \"redfish+%s\"\n  redfish_insecure = true\n", bad.SystemURL()))
	e.mustFail("power", map[string]any{"tenant": "lab", "node": w1, "state": "off"}, w1, "switch.missing_plug", "no such entity")
	e.mustFail("power", map[string]any{"tenant": "lab", "node": w2, "state": "off"}, w2, found[1].addr)
	if bad.AuthFailures() == 0 || len(bad.Resets()) > 0 {
		t.Errorf("the refusing BMC: %d auth failures, resets %v", bad.AuthFailures(), bad.Resets())
	}
	if found[0].node.Calls().Shutdown+found[1].node.Calls().Shutdown != 0 || found[0].node.PoweredOff() || found[1].node.PoweredOff() {
		t.Fatal("a refused power command shut a node down")
	}

	// the switch
	setPower(found[0].addr, "  power = \""+plug+"\"\n")
	press := func(node, comp string) {
		t.Helper()
		e.publish(commandTopic(t, e.discovery(e.nodeID(node)), comp), "PRESS")
	}
	m := e.cap.mark()
	press(w1, "shutdown")
	e.mustSucceed(m, "power_off")
	mu.Lock()
	if !offWasOff {
		t.Error("the switch was turned off before the node stopped answering (or never)")
	}
	mu.Unlock()
	if st, _ := me.ha.State(plug); st != "off" || !found[0].node.PoweredOff() {
		t.Errorf("after Shut down: switch %s, node powered off %v", st, found[0].node.PoweredOff())
	}
	e.waitNode(w1, "power off", func(d nodeDoc) bool { return d.Stage == "unreachable" })
	m = e.cap.mark()
	press(w1, "power_on")
	e.mustSucceed(m, "power_on")
	mu.Lock()
	if onCalls != 1 {
		t.Errorf("switch.turn_on called %d times, want 1", onCalls)
	}
	mu.Unlock()
	e.waitNode(w1, "running again", func(d nodeDoc) bool { return d.Stage == "running" })

	// Redfish
	setPower(found[1].addr, fmt.Sprintf("  power = \"redfish+%s\"\n  redfish_insecure = true\n", me.rf.SystemURL()))
	m = e.cap.mark()
	e.mustOK("power", map[string]any{"tenant": "lab", "node": w2, "state": "off"})
	e.mustSucceed(m, "power_off")
	if !found[1].node.PoweredOff() || me.rf.PowerState() != "Off" || !slices.Contains(me.rf.Resets(), "GracefulShutdown") {
		t.Errorf("after power off: node off %v, BMC %s, resets %v", found[1].node.PoweredOff(), me.rf.PowerState(), me.rf.Resets())
	}
	m = e.cap.mark()
	e.mustOK("power", map[string]any{"tenant": "lab", "node": w2, "state": "on"})
	e.mustSucceed(m, "power_on")
	e.waitNode(w2, "running again", func(d nodeDoc) bool { return d.Stage == "running" })
	if rs := me.rf.Resets(); rs[len(rs)-1] != "On" {
		t.Errorf("resets %v, want On last", rs)
	}

	checkDiscovery(t, e.cap.since(mark))
	known := append(tenantSecrets(t, talos.SecretsPath(filepath.Join(e.dataDir, "tenants", "lab"))), metalHAToken, redfishPassword, e.passphrase)
	checkNoSecrets(t, e.cap.all(), known)
	checkLogNoSecrets(t, e.proc.stderr.String()+e.proc.stdout.String(), []string{metalHAToken, redfishPassword, e.passphrase})
	e.stop()
}

// BenchmarkDiscoverSlash24 is the time of one scan of a loopback /24 with
// five machines in maintenance mode, through the binary and MQTT: the
// request "discover" until its answer lists the five (the first scan at
// start-up is reported as first_announce_ms: until all five devices were
// announced).
func BenchmarkDiscoverSlash24(b *testing.B) {
	me := newMetalEnv(b, 6)
	e := me.env
	start := time.Now()
	e.start()
	e.cap.wait(e.proc, phaseTimeout, "five machine devices", func() bool {
		for _, m := range e.machines[1:] {
			if !e.deviceShown(machineDevID(m.node.Hardware().MAC)) {
				return false
			}
		}
		return true
	})
	first := time.Since(start)
	b.ResetTimer()
	for b.Loop() {
		var got struct {
			Machines []json.RawMessage `json:"machines"`
		}
		if err := json.Unmarshal(e.mustOK("discover", map[string]any{}), &got); err != nil || len(got.Machines) != 5 {
			b.Fatalf("discover: %d machines (%v), want 5", len(got.Machines), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(first.Milliseconds()), "start_to_announce_ms")
	e.stop()
}
