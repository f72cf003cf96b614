package hass

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/machine"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Machines found on the LAN (docs/design.md §10.4) are devices of their own,
// <base>_machine_<mac without colons>, until a tenant file declares them
// (the engine then stops listing them) or three scans miss them. Their
// "Cluster group" select offers every metal group as "<tenant>/<group>"
// and "Adopt" adds the machine to the chosen one. Node power (§10.5) is
// here too: the Power sensor and the "Power on" and "Shut down" buttons.

// powerOptions are the states of a node's Power sensor.
var powerOptions = []string{"on", "off", "unknown"}

// noMetalGroup is the one option of "Cluster group" when no tenant has a
// metal worker group (a select needs at least one option).
const noMetalGroup = "no metal group"

// machineID is a device's MAC without colons, lower case.
func machineID(mac string) string {
	return strings.ToLower(strings.ReplaceAll(mac, ":", ""))
}

// SetMachines declares the machines found on the LAN; devices of machines
// no longer listed are removed.
func (b *Bridge) SetMachines(ms []machine.Machine) {
	b.mu.Lock()
	b.machines = make(map[string]machine.Machine, len(ms))
	b.machineOrder = b.machineOrder[:0]
	if b.machineGroup == nil {
		b.machineGroup = map[string]string{}
	}
	for _, m := range ms {
		hw, err := net.ParseMAC(m.MAC)
		if err != nil || len(hw) != 6 {
			b.log.Warn("machine without a usable MAC address not shown")
			continue
		}
		id := machineID(hw.String())
		if _, dup := b.machines[id]; dup {
			continue
		}
		m.MAC = hw.String()
		b.machines[id] = m
		b.machineOrder = append(b.machineOrder, id)
	}
	slices.Sort(b.machineOrder)
	for id := range b.machineGroup {
		if _, ok := b.machines[id]; !ok {
			delete(b.machineGroup, id)
		}
	}
	b.rebuildLocked()
	b.mu.Unlock()
	b.trigger()
}

// metalGroupOptions are "<tenant>/<group>" of every metal worker group
// (control-plane groups keep an odd count and are not offered). Callers
// hold b.mu.
func metalGroupOptions(b *Bridge) []string {
	var out []string
	for _, name := range b.order {
		t := b.views[name].Spec
		if t.Provider != tenant.ProviderMetal {
			continue
		}
		for _, g := range t.NodeGroups {
			if g.Role != tenant.RoleControlPlane {
				out = append(out, name+"/"+g.Name)
			}
		}
	}
	if len(out) == 0 {
		return []string{noMetalGroup}
	}
	return out
}

// machineDevice fills a machine device's discovery fields.
func (b *Bridge) machineDevice(dev map[string]any, r ref) {
	m := b.machines[r.machine]
	name := strings.TrimSpace(m.Model)
	if name == "" {
		name = "Machine"
	}
	dev["name"] = fmt.Sprintf("%s %s", name, m.MAC[len(m.MAC)-5:]) // "NUC12WSHi5 3f:a1"
	dev["model"] = "Talos machine"
	if m.Manufacturer != "" {
		dev["model_id"] = m.Manufacturer
	}
	dev["connections"] = [][]string{{"mac", m.MAC}}
	dev["via_device"] = b.topics.deviceID(kindBridge, ref{})
}

type machineDiskDoc struct {
	DevPath   string  `json:"dev_path"`
	SizeGB    float64 `json:"size_gb"`
	Model     string  `json:"model"`
	Transport string  `json:"transport"`
	Removable bool    `json:"removable"`
	Readonly  bool    `json:"readonly"`
	CDROM     bool    `json:"cdrom"`
}

type machineDoc struct {
	Address      string           `json:"address"`
	MAC          string           `json:"mac"`
	Model        string           `json:"model"`
	Manufacturer string           `json:"manufacturer"`
	Serial       string           `json:"serial"`
	CPU          string           `json:"cpu"`
	Cores        int              `json:"cores"`
	MemoryGiB    float64          `json:"memory_gib"`
	Disks        []machineDiskDoc `json:"disks"`
	InstallDisk  *string          `json:"install_disk"`
	Fingerprint  string           `json:"certificate_fingerprint"`
	Group        string           `json:"group"`
}

// machineDoc is a machine device's state document. Callers hold b.mu.
func (b *Bridge) machineDoc(id string) machineDoc {
	m := b.machines[id]
	d := machineDoc{Address: m.Address, MAC: m.MAC, Model: m.Model, Manufacturer: m.Manufacturer, Serial: m.Serial,
		CPU: m.CPU, Cores: m.Cores, MemoryGiB: float64(m.MemoryBytes) / (1 << 30), Fingerprint: m.Fingerprint,
		Disks: []machineDiskDoc{}}
	for _, dk := range m.Disks {
		d.Disks = append(d.Disks, machineDiskDoc{DevPath: dk.DevPath, SizeGB: float64(dk.Size/1e7) / 100, Model: dk.Model,
			Transport: dk.Transport, Removable: dk.Removable(), Readonly: dk.Readonly, CDROM: dk.CDROM})
	}
	if dk, err := machine.InstallDisk(m.Disks); err == nil {
		d.InstallDisk = &dk.DevPath
	}
	opts := metalGroupOptions(b)
	d.Group = b.machineGroup[id]
	if !slices.Contains(opts, d.Group) {
		d.Group = opts[0]
	}
	return d
}

// nodePower is a node's Power state as far as the bridge can tell: on
// while it answers, off when it does not, unknown before it exists.
func nodePower(s tenant.Stage) string { return s.Power() }

// setMachineGroup takes the "Cluster group" select.
func setMachineGroup(b *Bridge, _ context.Context, r ref, p string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.machines[r.machine]; !ok {
		return fmt.Errorf("machine %s is no longer found", r.machine)
	}
	if !slices.Contains(metalGroupOptions(b), p) || p == noMetalGroup {
		return fmt.Errorf("cluster group %q is not a metal worker group (<tenant>/<group>)", truncate(p, 60))
	}
	b.machineGroup[r.machine] = p
	b.refreshStateLocked(kindMachine, r)
	b.trigger()
	return nil
}

// adoptRequest adopts the machine into the group its select shows.
func adoptRequest(b *Bridge, r ref, p string) (Request, error) {
	if p != "PRESS" {
		return Request{}, fmt.Errorf("unexpected payload %q (want PRESS)", truncate(p, 40))
	}
	b.mu.Lock()
	m, ok := b.machines[r.machine]
	var group string
	if ok {
		group = b.machineDoc(r.machine).Group
	}
	b.mu.Unlock()
	if !ok {
		return Request{}, fmt.Errorf("machine %s is no longer found", r.machine)
	}
	tn, g, found := strings.Cut(group, "/")
	if !found {
		return Request{}, fmt.Errorf("machine %s (%s): no metal worker group to adopt it into", m.MAC, m.Address)
	}
	return Request{Action: ActionAdopt, MAC: m.MAC, Tenant: tn, Group: g}, nil
}

// powerRequest is the request of the "Power on" and "Shut down" buttons.
// forgetRequest is the "Forget machine" button: a confirmed forget (the
// button is available only while the node has been unreachable past
// unreachable_after; the engine checks again).
func forgetRequest(_ *Bridge, r ref, p string) (Request, error) {
	if p != "PRESS" {
		return Request{}, fmt.Errorf("unexpected payload %q (want PRESS)", truncate(p, 40))
	}
	return Request{Action: ActionForget, Tenant: r.tenant, Node: r.node, Confirm: "true"}, nil
}

func powerRequest(state string) func(b *Bridge, r ref, p string) (Request, error) {
	return func(_ *Bridge, r ref, p string) (Request, error) {
		if p != "PRESS" {
			return Request{}, fmt.Errorf("unexpected payload %q (want PRESS)", truncate(p, 40))
		}
		return Request{Action: ActionPower, Tenant: r.tenant, Node: r.node, State: state}, nil
	}
}

// machinesData is the data of a discover response: the machines a scan
// found, as the request API documents them.
func machinesData(ms []machine.Machine) []map[string]any {
	out := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		d := map[string]any{"mac": m.MAC, "address": m.Address, "model": strings.TrimSpace(m.Manufacturer + " " + m.Model),
			"cpu": m.CPU, "cores": m.Cores, "memory_bytes": m.MemoryBytes, "certificate_fingerprint": m.Fingerprint}
		var disks []map[string]any
		for _, dk := range m.Disks {
			disks = append(disks, map[string]any{"dev_path": dk.DevPath, "size": dk.Size, "model": dk.Model, "transport": dk.Transport,
				"removable": dk.Removable(), "readonly": dk.Readonly, "cdrom": dk.CDROM})
		}
		d["disks"] = disks
		if dk, err := machine.InstallDisk(m.Disks); err == nil {
			d["install_disk"] = dk.DevPath
		}
		out = append(out, d)
	}
	return out
}

// checkMachineFields checks the fields of discover, adopt and power.
func checkMachineFields(req Request, fields int) error {
	if fields&fMAC != 0 {
		if hw, err := net.ParseMAC(req.MAC); err != nil || len(hw) != 6 {
			return fmt.Errorf("mac %q is not a MAC address like aa:bb:cc:dd:ee:ff", truncate(req.MAC, 40))
		}
	}
	if fields&fDisk != 0 && req.InstallDisk != "" && (!strings.HasPrefix(req.InstallDisk, "/dev/") || strings.ContainsAny(req.InstallDisk, " \t\n")) {
		return fmt.Errorf("install_disk %q must be a device path such as /dev/nvme0n1", truncate(req.InstallDisk, 40))
	}
	if fields&fState != 0 && req.State != "on" && req.State != "off" {
		return errors.New(`state must be "on" or "off"`)
	}
	return nil
}
