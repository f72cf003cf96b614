package tenant

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// Repairs of a metal group whose machine died (docs/design.md §11.7): the
// machine's [[node_groups.machines]] table is removed (ForgetMachine) or
// replaced by another machine's (ReplaceMachine), in place, keeping the
// rest of the file as the user wrote it, and atomically. Either edit
// changes nothing when the result does not validate, alone or beside the
// other tenant files.

// ForgetMachine removes the machine at address from a metal group of
// tenant name and lowers the group's count by one when the machine was in
// use. The machines after it in the group move up one place, so their
// nodes take the names before (a node's name is its place in the group). A
// control plane cannot be forgotten (its count must stay odd): replace it.
func (s *Store) ForgetMachine(name, group, address string) (*Tenant, error) {
	return s.repair(name, group, address, "forgetting", func(t *Tenant, g *NodeGroup, gi, mi int, data []byte) ([]byte, error) {
		if g.Role == RoleControlPlane {
			return nil, fmt.Errorf("group %q is the control-plane group, whose count must stay odd: replace the machine instead (Replace)", group)
		}
		out, err := removeMachineTable(data, gi, mi)
		if err != nil {
			return nil, err
		}
		if mi < g.Count {
			if out, err = setValue(out, fmt.Sprintf("node_groups[%d].count", gi), strconv.Itoa(g.Count-1)); err != nil {
				return nil, fmt.Errorf("lowering the count: %w", err)
			}
		}
		return out, nil
	})
}

// ReplaceMachine puts machine m in the place of the machine at address in
// a metal group of tenant name: the node keeps its name, and runs on m. m
// must be a machine no tenant file declares.
func (s *Store) ReplaceMachine(name, group, address string, m Machine) (*Tenant, error) {
	ip, err := netip.ParseAddr(m.Address)
	if err != nil {
		return nil, fmt.Errorf("replacing machine %s of %s/%s: %q is not an IP address; nothing was changed", address, name, group, m.Address)
	}
	if m.MAC != "" {
		hw, err := net.ParseMAC(m.MAC)
		if err != nil || len(hw) != 6 {
			return nil, fmt.Errorf("replacing machine %s of %s/%s: %q is not a MAC address; nothing was changed", address, name, group, m.MAC)
		}
		m.MAC = hw.String()
	}
	return s.repair(name, group, address, "replacing", func(t *Tenant, g *NodeGroup, gi, mi int, data []byte) ([]byte, error) {
		if a, err := netip.ParseAddr(address); err == nil && a == ip {
			return nil, fmt.Errorf("the new machine is the old one (%s)", address)
		}
		old := g.Machines[mi]
		if m.Power == "" && old.MAC == "" {
			m.Power = old.Power // a switch or a BMC stays with the slot; Wake-on-LAN goes with the mac
		}
		return replaceMachineTable(data, gi, mi, m)
	})
}

// repair runs one edit of the machine at address in group of tenant name,
// with the store's lock held, and writes the result when it validates.
func (s *Store) repair(name, group, address, doing string, edit func(t *Tenant, g *NodeGroup, gi, mi int, data []byte) ([]byte, error)) (*Tenant, error) {
	fail := func(err error) (*Tenant, error) {
		return nil, fmt.Errorf("%s machine %s of %s/%s: %w; nothing was changed", doing, address, name, group, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.Path(name)
	data, err := readTenantFile(path)
	if err != nil {
		if _, serr := os.Lstat(path); serr == nil {
			return fail(err)
		}
		return fail(fmt.Errorf("no tenant %q", name))
	}
	t, err := Parse(path, data)
	if err != nil {
		return nil, fmt.Errorf("%s machine %s: the tenant file has problems, fix them first (nothing was changed):\n%w", doing, address, err)
	}
	if t.Provider != ProviderMetal {
		return fail(fmt.Errorf("tenant %q has provider %q; only metal groups have machines", name, t.Provider))
	}
	gi := slices.IndexFunc(t.NodeGroups, func(g NodeGroup) bool { return g.Name == group })
	if gi < 0 {
		return fail(fmt.Errorf("tenant %q has no group %q", name, group))
	}
	g := &t.NodeGroups[gi]
	mi := slices.IndexFunc(g.Machines, func(m Machine) bool { return m.Address == address })
	if mi < 0 {
		return fail(fmt.Errorf("group %q has no machine at %s", group, address))
	}
	out, err := edit(t, g, gi, mi, data)
	if err != nil {
		return fail(err)
	}
	nt, err := Parse(path, out)
	if err != nil {
		return nil, fmt.Errorf("%s machine %s of %s/%s: the edited file would not validate (nothing was changed):\n%w", doing, address, name, group, err)
	}
	snap, err := s.Load()
	if err != nil {
		return fail(err)
	}
	if cross := CheckAcrossTenants(append(slices.DeleteFunc(slices.Clone(snap.Tenants), func(o *Tenant) bool { return o.Name == name }), nt)); len(cross) > 0 {
		return fail(cross)
	}
	if err := atomicfile.Write(path, out, 0o644); err != nil {
		return fail(err)
	}
	return nt, nil
}

// machineTable finds the lines of machine mi of group gi: from its header
// line to the line before the next table header, leaving the comments and
// blank lines that lead into that header to it.
func machineTable(data []byte, gi, mi int) (start, end int, indent string, err error) {
	p, ok := positions(data)[fmt.Sprintf("node_groups[%d].machines[%d]", gi, mi)]
	if !ok {
		return 0, 0, "", fmt.Errorf("its [[node_groups.machines]] table is not where a table can be edited in place (edit the file by hand)")
	}
	start = p.Offset - (p.Column - 1)
	h := bytes.Index(data[start:], []byte("[[node_groups.machines]]"))
	if h < 0 || bytes.IndexByte(data[start:start+h], '\n') >= 0 {
		return 0, 0, "", fmt.Errorf("the machine is not written as a [[node_groups.machines]] table (edit the file by hand)")
	}
	indent = string(data[start : start+h])
	end = len(data)
	for at := start + bytes.IndexByte(data[start:], '\n') + 1; at > start && at < len(data); {
		next := bytes.IndexByte(data[at:], '\n')
		line := data[at:]
		if next >= 0 {
			line = data[at : at+next]
		}
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '[' {
			end = at
			break
		}
		if next < 0 {
			break
		}
		at += next + 1
	}
	for end > start { // comments and blank lines above the next header (or at the end) stay
		prev := bytes.LastIndexByte(data[:end-1], '\n') + 1
		if prev <= start {
			break
		}
		if t := bytes.TrimSpace(data[prev:end]); len(t) != 0 && t[0] != '#' {
			break
		}
		end = prev
	}
	return start, end, indent, nil
}

func removeMachineTable(data []byte, gi, mi int) ([]byte, error) {
	start, end, _, err := machineTable(data, gi, mi)
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(data[:start]), data[end:]...), nil
}

func replaceMachineTable(data []byte, gi, mi int, m Machine) ([]byte, error) {
	start, end, indent, err := machineTable(data, gi, mi)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(data[:start])
	fmt.Fprintf(&b, "%s[[node_groups.machines]]\n", indent)
	fmt.Fprintf(&b, "%saddress      = %q\n", indent, m.Address)
	if m.MAC != "" {
		fmt.Fprintf(&b, "%smac          = %q\n", indent, m.MAC)
	}
	fmt.Fprintf(&b, "%sinstall_disk = %q\n", indent, m.InstallDisk)
	if m.Power != "" {
		fmt.Fprintf(&b, "%spower        = %q\n", indent, m.Power)
	}
	b.Write(data[end:])
	return b.Bytes(), nil
}
