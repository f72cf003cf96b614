package tenant

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// Adopt appends machine m to the pool of a metal tenant's worker group and
// raises the group's count by one, editing the file in place (comments and
// layout kept) and atomically, like the store's other edits. disks are the
// device paths the machine has; m.InstallDisk must be one of them. It
// refuses, changing nothing: an unknown tenant or group, a tenant that is
// not metal, a control-plane group (its count must stay odd), an address
// or mac that any tenant file already declares, a disk the machine does
// not have.
func (s *Store) Adopt(name, group string, m Machine, disks []string) (*Tenant, error) {
	who := m.Address
	if m.MAC != "" {
		who = fmt.Sprintf("%s (%s)", m.Address, m.MAC)
	}
	fail := func(format string, args ...any) (*Tenant, error) {
		return nil, fmt.Errorf("adopting machine %s into %s/%s: %s; nothing was changed", who, name, group, fmt.Sprintf(format, args...))
	}
	ip, err := netip.ParseAddr(m.Address)
	if err != nil {
		return fail("%q is not an IP address", m.Address)
	}
	if m.MAC != "" {
		hw, err := net.ParseMAC(m.MAC)
		if err != nil || len(hw) != 6 {
			return fail("%q is not a MAC address", m.MAC)
		}
		m.MAC = hw.String()
	}
	if !slices.Contains(disks, m.InstallDisk) {
		return fail("the machine has no disk %q (it has %s)", m.InstallDisk, orNone(disks))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.Load()
	if err != nil {
		return nil, fmt.Errorf("adopting machine %s: %w", who, err)
	}
	for _, t := range snap.Tenants {
		for _, g := range t.NodeGroups {
			for _, o := range g.Machines {
				if a, err := netip.ParseAddr(o.Address); err == nil && a == ip {
					return fail("tenant %q already declares %s in group %q", t.Name, ip, g.Name)
				}
				if m.MAC != "" && strings.EqualFold(o.MAC, m.MAC) {
					return fail("tenant %q already declares mac %s in group %q", t.Name, m.MAC, g.Name)
				}
			}
		}
	}
	path := s.Path(name)
	data, err := readTenantFile(path)
	if err != nil {
		if _, serr := os.Lstat(path); serr == nil {
			return fail("%v", err)
		}
		return fail("no tenant %q (no file %s.toml)", name, name)
	}
	t, err := Parse(path, data)
	if err != nil {
		return nil, fmt.Errorf("adopting machine %s into %s/%s: the tenant file has problems, fix them first (nothing was changed):\n%w", who, name, group, Readable(err))
	}
	if t.Provider != ProviderMetal {
		return fail("tenant %q has provider %q; only metal groups take machines", name, t.Provider)
	}
	gi := slices.IndexFunc(t.NodeGroups, func(g NodeGroup) bool { return g.Name == group })
	if gi < 0 {
		var names []string
		for _, g := range t.NodeGroups {
			names = append(names, g.Name)
		}
		return fail("tenant %q has no group %q (groups: %s)", name, group, orNone(names))
	}
	g := t.NodeGroups[gi]
	if g.Role == RoleControlPlane {
		return fail("%q is the control-plane group, whose count must stay odd (1, 3 or 5): add control-plane machines in the file, two at a time", group)
	}
	if g.Count < len(g.Machines) {
		return fail("group %q uses %d of its %d machines: raise its count first, or add the machine in the file", group, g.Count, len(g.Machines))
	}

	out, err := setValue(data, fmt.Sprintf("node_groups[%d].count", gi), strconv.Itoa(g.Count+1))
	if err != nil {
		return fail("raising the count: %v", err)
	}
	out = insertMachine(out, gi, len(t.NodeGroups), m)
	nt, err := Parse(path, out)
	if err != nil {
		return nil, fmt.Errorf("adopting machine %s into %s/%s: the edited file would not validate (nothing was changed):\n%w", who, name, group, Readable(err))
	}
	if cross := CheckAcrossTenants(append(slices.DeleteFunc(slices.Clone(snap.Tenants), func(o *Tenant) bool { return o.Name == name }), nt)); len(cross) > 0 {
		return fail("%v", cross.Text())
	}
	if err := atomicfile.Write(path, out, 0o644); err != nil {
		return nil, fmt.Errorf("adopting machine %s: %w", who, err)
	}
	return nt, nil
}

// insertMachine adds a [[node_groups.machines]] table for m at the end of
// group gi: before the comments and blank lines that lead into the next
// group's header, or at the end of the file for the last group. It indents
// like the group's last machine header (two spaces when it has none).
func insertMachine(data []byte, gi, groups int, m Machine) []byte {
	pos := positions(data)
	at := len(data)
	if gi+1 < groups {
		if p, ok := pos[fmt.Sprintf("node_groups[%d]", gi+1)]; ok {
			at = p.Offset - (p.Column - 1)
			for at > 0 { // walk back over comment and blank lines just above the header
				prevStart := bytes.LastIndexByte(data[:at-1], '\n') + 1
				t := bytes.TrimSpace(data[prevStart:at])
				if len(t) != 0 && t[0] != '#' {
					break
				}
				at = prevStart
			}
		}
	}
	indent := "  "
	key := fmt.Sprintf("node_groups[%d].machines", gi)
	for k, p := range pos {
		if strings.HasPrefix(k, key+"[") && strings.Count(k, ".") == 1 && p.Column > 1 {
			ls := p.Offset - (p.Column - 1)
			if h := bytes.IndexByte(data[ls:], '['); h >= 0 && h < p.Column {
				indent = string(data[ls : ls+h])
			}
		}
	}
	var b bytes.Buffer
	b.Write(data[:at])
	if at > 0 && data[at-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s[[node_groups.machines]]\n", indent)
	fmt.Fprintf(&b, "%saddress      = %q\n", indent, m.Address)
	if m.MAC != "" {
		fmt.Fprintf(&b, "%smac          = %q\n", indent, m.MAC)
	}
	fmt.Fprintf(&b, "%sinstall_disk = %q\n", indent, m.InstallDisk)
	if m.Power != "" {
		fmt.Fprintf(&b, "%spower        = %q\n", indent, m.Power)
	}
	if gi+1 < groups && at < len(data) {
		b.WriteByte('\n')
	}
	b.Write(data[at:])
	return b.Bytes()
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
