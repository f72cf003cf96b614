package tenant

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/rezuscloud/rezuscloud/internal/machine"
)

// MaxNameLen bounds tenant and group names (docs/design.md §3).
const MaxNameLen = 40

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	talosSemver  = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	kubeSemver   = regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	installDisk  = regexp.MustCompile(`^/dev/[A-Za-z0-9/_.-]+$`)
	ocidPattern  = regexp.MustCompile(`^ocid1\.[a-z0-9]+\.[a-z0-9-]*\.[a-z0-9-]*\.[A-Za-z0-9._-]+$`)
	flexShapeRxp = regexp.MustCompile(`\.Flex$`)
	schematicRxp = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// violation is one broken rule at a key path.
type violation struct{ field, msg string }

// MaxLabelLen is DNS-1123's label limit, so the bound of node names (they
// are hostnames).
const MaxLabelLen = 63

// IsDNSLabel reports whether s is a DNS-1123 label: 1 to 63 lower-case
// letters, digits and '-', starting and ending with a letter or digit. It is
// the one name rule; tenant and group names add checkName's limits on top.
func IsDNSLabel(s string) bool { return len(s) <= MaxLabelLen && dnsLabel.MatchString(s) }

// checkName reports whether s is a valid tenant or group name.
func checkName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case len(s) > MaxNameLen:
		return fmt.Errorf("%q is longer than %d characters", s, MaxNameLen)
	case !IsDNSLabel(s):
		return fmt.Errorf("%q must be lower-case letters, digits and '-', starting and ending with a letter or digit", s)
	case s == "bridge":
		return fmt.Errorf(`"bridge" is reserved for the add-on's own device`)
	}
	return nil
}

// checkVersions reports whether the Talos and Kubernetes versions are well
// formed and Kubernetes is supported by that Talos (machinery's tables).
func checkVersions(talos, kubernetes string) (talosErr, kubeErr error) {
	if !talosSemver.MatchString(talos) {
		talosErr = fmt.Errorf("%q is not a Talos version like v1.13.0", talos)
	}
	if !kubeSemver.MatchString(kubernetes) {
		kubeErr = fmt.Errorf("%q is not a Kubernetes version like 1.35.0 (no leading v)", kubernetes)
	}
	if talosErr != nil || kubeErr != nil {
		return talosErr, kubeErr
	}
	tv, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: talos})
	if err != nil {
		return fmt.Errorf("%s is not a Talos version this rezuscloud knows: %v", talos, err), nil
	}
	kv, err := compatibility.ParseKubernetesVersion(kubernetes)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", kubernetes, err)
	}
	if err := kv.SupportedWith(tv); err != nil {
		return nil, fmt.Errorf("Kubernetes %s is not supported by Talos %s: %v", kubernetes, talos, err)
	}
	return nil, nil
}

// validate checks every rule of docs/design.md §3 that one file can check alone.
// pos tells which keys the file sets.
func (t *Tenant) validate(pos posMap) []violation {
	var vs []violation
	add := func(field, format string, args ...any) {
		vs = append(vs, violation{field, fmt.Sprintf(format, args...)})
	}
	if err := checkName(t.Name); err != nil {
		add("", "tenant name (the file name) %v", err)
	}
	if len(t.DisplayName) > 64 {
		add("display_name", "longer than 64 characters")
	}
	switch t.Provider {
	case ProviderMetal, ProviderOCI, ProviderOpenStack:
	case "":
		add("provider", "missing: set provider to metal, oci or openstack")
	default:
		add("provider", "%q is not one of metal, oci, openstack", t.Provider)
	}
	switch {
	case !pos.has("talos_version"):
		add("talos_version", "missing: set talos_version, e.g. \"v1.13.0\"")
	case !pos.has("kubernetes_version"):
		add("kubernetes_version", "missing: set kubernetes_version, e.g. \"1.35.0\"")
	}
	if pos.has("talos_version") && pos.has("kubernetes_version") {
		te, ke := checkVersions(t.TalosVersion, t.KubernetesVersion)
		if te != nil {
			add("talos_version", "%v", te)
		}
		if ke != nil {
			add("kubernetes_version", "%v", ke)
		}
	}
	if t.Endpoint != "" {
		if err := checkEndpoint(t.Endpoint); err != nil {
			add("endpoint", "%v", err)
		}
	}
	if t.Schematic != "" && !schematicRxp.MatchString(t.Schematic) {
		add("schematic", "%q is not an Image Factory schematic id (64 lower-case hex characters)", t.Schematic)
	}
	if t.EtcdBackupInterval != "" {
		if d, err := time.ParseDuration(t.EtcdBackupInterval); err != nil || d < 0 || (d > 0 && d < time.Minute) {
			add("etcd_backup_interval", "%q is not a duration of at least 1m like \"24h\" (\"0\" turns backups off)", t.EtcdBackupInterval)
		}
	}
	if pos.has("etcd_backup_keep") && (t.EtcdBackupKeep < 1 || t.EtcdBackupKeep > 100) {
		add("etcd_backup_keep", "%d is out of range 1..100", t.EtcdBackupKeep)
	}
	for i, p := range t.ConfigPatches {
		if err := checkPatch(p); err != nil {
			add(fmt.Sprintf("config_patches[%d]", i), "%v", err)
		}
	}
	vs = append(vs, t.validatePlatform(pos)...)
	vs = append(vs, t.validateGroups(pos)...)
	return vs
}

func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%q must look like https://<address>:6443", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q has an invalid port", s)
	}
	return nil
}

// checkPatch accepts strategic-merge patches only: JSON6902 patches fail on
// Talos 1.12+ multi-document configs (reference/talos-machinery.md).
func checkPatch(s string) error {
	p, err := configpatcher.LoadPatch([]byte(s))
	if err != nil {
		return fmt.Errorf("not a Talos machine config patch: %v", err)
	}
	if _, ok := p.(configpatcher.StrategicMergePatch); !ok {
		return fmt.Errorf("JSON patches are not supported: write a strategic merge patch (a partial machine config)")
	}
	return nil
}

func (t *Tenant) validatePlatform(pos posMap) []violation {
	var vs []violation
	add := func(field, format string, args ...any) {
		vs = append(vs, violation{field, fmt.Sprintf(format, args...)})
	}
	if t.Provider != ProviderOCI && t.OCI != nil {
		add("oci", "an [oci] table only belongs to a tenant with provider = \"oci\"")
	}
	if t.Provider != ProviderOpenStack && t.OpenStack != nil {
		add("openstack", "an [openstack] table only belongs to a tenant with provider = \"openstack\"")
	}
	required := func(table string, fields map[string]string) {
		if !pos.has(table) {
			add(table, "missing: a tenant with provider = %q needs an [%s] table", t.Provider, table)
			return
		}
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			if fields[k] == "" {
				add(table+"."+k, "missing")
			}
		}
	}
	switch t.Provider {
	case ProviderOCI:
		o := t.OCI
		if o == nil {
			o = &OCI{}
		}
		required("oci", map[string]string{"compartment_ocid": o.CompartmentOCID, "region": o.Region,
			"subnet_ocid": o.SubnetOCID, "image_ocid": o.ImageOCID})
		for k, v := range map[string]string{"compartment_ocid": o.CompartmentOCID, "subnet_ocid": o.SubnetOCID, "image_ocid": o.ImageOCID} {
			if v != "" && !ocidPattern.MatchString(v) {
				add("oci."+k, "%q is not an OCID (ocid1.<type>.<realm>.<region>.<id>)", v)
			}
		}
	case ProviderOpenStack:
		o := t.OpenStack
		if o == nil {
			o = &OpenStack{}
		}
		required("openstack", map[string]string{"region": o.Region, "network": o.Network, "image": o.Image})
	}
	return vs
}

func (t *Tenant) validateGroups(pos posMap) []violation {
	var vs []violation
	add := func(field, format string, args ...any) {
		vs = append(vs, violation{field, fmt.Sprintf(format, args...)})
	}
	if len(t.NodeGroups) == 0 {
		add("node_groups", "missing: declare at least a control-plane group with [[node_groups]]")
		return vs
	}
	seen := map[string]int{}
	controlPlanes := 0
	addrs := map[string]string{}
	for i, g := range t.NodeGroups {
		f := fmt.Sprintf("node_groups[%d]", i)
		if err := checkName(g.Name); err != nil {
			add(f+".name", "%v", err)
		} else if j, dup := seen[g.Name]; dup {
			add(f+".name", "%q is already the name of the %s group", g.Name, ordinal(j+1))
		} else {
			seen[g.Name] = i
			if n := len(NodeName(t.Name, g.Name, 100)); n > MaxLabelLen {
				add(f+".name", "node names %q are too long for a hostname (%d > %d characters): shorten the tenant or group name", NodeName(t.Name, g.Name, 1), n, MaxLabelLen)
			}
		}
		switch g.Role {
		case RoleControlPlane:
			controlPlanes++
			if controlPlanes > 1 {
				add(f+".role", "only one group may hold the control plane")
			}
		case RoleWorker:
		case "":
			add(f+".role", "missing: set role to controlplane or worker")
		default:
			add(f+".role", "%q is not one of controlplane, worker", g.Role)
		}
		if !pos.has(f + ".count") {
			add(f+".count", "missing: set count, the number of nodes")
		} else {
			lo, hi := CountBounds(g.Role)
			switch {
			case g.Count < lo || g.Count > hi:
				add(f+".count", "%d is out of range %d..%d for a %s group", g.Count, lo, hi, g.Role)
			case g.Role == RoleControlPlane && g.Count%2 == 0:
				add(f+".count", "a control plane needs an odd count (1, 3 or 5) for etcd quorum, not %d", g.Count)
			}
		}
		vs = append(vs, t.validateGroupPlatform(f, g, addrs)...)
		vs = append(vs, t.validatePool(f, &t.NodeGroups[i], pos)...)
	}
	if controlPlanes == 0 {
		add("node_groups", "no group has role = \"controlplane\": exactly one must hold the control plane")
	}
	return vs
}

func (t *Tenant) validateGroupPlatform(f string, g NodeGroup, addrs map[string]string) []violation {
	var vs []violation
	add := func(field, format string, args ...any) {
		vs = append(vs, violation{field, fmt.Sprintf(format, args...)})
	}
	switch t.Provider {
	case ProviderMetal, ProviderOCI, ProviderOpenStack:
	default:
		return nil // reported at provider; the platform's fields cannot be judged
	}
	notFor := func(key string, set bool) {
		if set {
			add(f+"."+key, "does not apply to provider %q", t.Provider)
		}
	}
	isOCI, isOS := t.Provider == ProviderOCI, t.Provider == ProviderOpenStack
	notFor("machines", t.Provider != ProviderMetal && len(g.Machines) > 0)
	notFor("shape", !isOCI && g.Shape != "")
	notFor("ocpus", !isOCI && g.OCPUs != 0)
	notFor("memory_gb", !isOCI && g.MemoryGB != 0)
	notFor("boot_volume_gb", !isOCI && g.BootVolumeGB != 0)
	notFor("flavor", !isOS && g.Flavor != "")
	notFor("volume_gb", !isOS && g.VolumeGB != 0)
	switch t.Provider {
	case ProviderMetal:
		if g.Count > len(g.Machines) {
			add(f+".count", "%d nodes but the group's pool has %d machines: add [[node_groups.machines]] or lower the count", g.Count, len(g.Machines))
		}
		for j, m := range g.Machines {
			mf := fmt.Sprintf("%s.machines[%d]", f, j)
			if a, err := netip.ParseAddr(m.Address); err != nil {
				add(mf+".address", "%q is not an IP address", m.Address)
			} else if other, dup := addrs[a.String()]; dup {
				add(mf+".address", "%s is already used by %s", a, other)
			} else {
				addrs[a.String()] = t.place(f) // group "cp"
			}
			if m.MAC != "" {
				if hw, err := net.ParseMAC(m.MAC); err != nil || len(hw) != 6 {
					add(mf+".mac", "%q is not a MAC address like aa:bb:cc:dd:ee:ff", m.MAC)
				}
			}
			if !installDisk.MatchString(m.InstallDisk) {
				add(mf+".install_disk", "%q must name a disk device such as /dev/sda or /dev/nvme0n1", m.InstallDisk)
			}
			if spec, err := machine.ParsePower(m.Power, m.MAC); err != nil {
				add(mf+".power", "%v", err)
			} else if m.RedfishInsecure && spec.Kind != machine.KindRedfish {
				add(mf+".redfish_insecure", "applies only to a power = \"redfish+https://…\" machine")
			}
		}
	case ProviderOCI:
		if g.Shape == "" {
			add(f+".shape", "missing: set the OCI shape, e.g. \"VM.Standard.A1.Flex\"")
		} else if flexShapeRxp.MatchString(g.Shape) && (g.OCPUs <= 0 || g.MemoryGB <= 0) {
			add(f+".shape", "a Flex shape needs ocpus and memory_gb")
		}
		if g.OCPUs < 0 || g.MemoryGB < 0 {
			add(f+".ocpus", "must not be negative")
		}
		if g.BootVolumeGB != 0 && (g.BootVolumeGB < 50 || g.BootVolumeGB > 32768) {
			add(f+".boot_volume_gb", "%d is out of OCI's range 50..32768", g.BootVolumeGB)
		}
	case ProviderOpenStack:
		if g.Flavor == "" {
			add(f+".flavor", "missing: set the OpenStack flavor, e.g. \"m1.large\"")
		}
		if g.VolumeGB < 0 || g.VolumeGB > 16384 {
			add(f+".volume_gb", "%d is out of range 1..16384", g.VolumeGB)
		}
	}
	return vs
}

// positions locates the tenant's keys in the contents it was parsed from
// (a file not written yet has no other), else in its file.
func (t *Tenant) positions() posMap {
	if t.Source != nil {
		return positions(t.Source)
	}
	return positionsOfFile(t.Path)
}

// CheckAcrossTenants finds metal machine addresses that more than one tenant
// uses. The problems are reported against the later tenant (in the order
// given), at its machine's address key.
func CheckAcrossTenants(ts []*Tenant) Problems {
	owner := map[string]string{}
	var probs Problems
	for _, t := range ts {
		if t.Provider != ProviderMetal {
			continue
		}
		var pos posMap
		for gi, g := range t.NodeGroups {
			for mi, m := range g.Machines {
				a, err := netip.ParseAddr(m.Address)
				if err != nil {
					continue
				}
				if o, dup := owner[a.String()]; dup && o != t.Name {
					if pos == nil {
						pos = t.positions()
					}
					field := fmt.Sprintf("node_groups[%d].machines[%d].address", gi, mi)
					line, col := pos.find(field)
					probs = append(probs, Problem{File: t.Path, Line: line, Column: col, Field: field, Place: t.place(field),
						Msg: fmt.Sprintf("%s is already a machine of tenant %q", a, o)})
					continue
				}
				owner[a.String()] = t.Name
			}
		}
	}
	return probs
}
