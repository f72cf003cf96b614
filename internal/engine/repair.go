package engine

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Machines that die (docs/design.md §11.7). A metal machine that does not
// answer any more can be forgotten (it leaves the record and the tenant
// file, nothing touches it) or replaced by a machine a scan found (the new
// one takes the dead node's place and name, is installed and joins; a dead
// control plane's etcd member is removed first).

const opReplace = "replace"

// deadMachine checks that node of tenant name is a provisioned metal
// machine, and returns its machine and group.
func (e *Engine) deadMachine(name, node string) (*tenantState, *tenant.Machine, string, error) {
	ts, err := e.lookup(name)
	if err != nil {
		return nil, nil, "", err
	}
	if ts.orphaned() {
		return nil, nil, "", fmt.Errorf("tenant %s: its file was removed; restore it first", name)
	}
	nr, ok := ts.recs.get().Nodes[node]
	if !ok {
		return nil, nil, "", fmt.Errorf("tenant %s: node %q is not provisioned, so there is nothing to forget or replace (edit the file)", name, node)
	}
	m := machineOf(ts.shownSpec(), node)
	if m == nil {
		return nil, nil, "", fmt.Errorf("tenant %s: node %s is not a bare-metal machine (a cloud server is recreated by Apply)", name, node)
	}
	return ts, m, nr.Group, nil
}

// answering reads a node now: an error when it answers (a machine that
// answers is not dead: scale it down to remove it with a reset).
func (ts *tenantState) answering(ctx context.Context, node string) error {
	t, ok := ts.target(node)
	if !ok {
		return nil
	}
	tc, _ := ts.talosconfig()
	st, _ := ts.read(ctx, node, t, tc)
	if st.Stage != tenant.StageUnreachable {
		return fmt.Errorf("node %s answers (stage %s): it is not dead; to remove it with a reset, lower its group's count", node, st.Stage)
	}
	return nil
}

// Forget removes a dead metal machine from the record and from the tenant
// file (its group's count lowered by one) without touching it; confirm
// must be true. The machines after it in its group move up one place: their
// nodes take the names before at the next apply. A control plane cannot be
// forgotten: replace it.
func (e *Engine) Forget(ctx context.Context, name, node string, confirm bool) error {
	if !confirm {
		return fmt.Errorf("tenant %s: forgetting node %s not confirmed: confirm must be true", name, node)
	}
	ts, m, group, err := e.deadMachine(name, node)
	if err != nil {
		return err
	}
	if ts.shownSpec().Group(group).Role == tenant.RoleControlPlane {
		return fmt.Errorf("tenant %s: node %s is a control plane, whose count must stay odd: replace it instead (request replace with a machine a scan found)", name, node)
	}
	addr := m.Address
	return e.enqueue(name, operation{name: opForget, activity: tenant.ActivityRepairing, do: func(ctx context.Context, r *run) (string, error) {
		if err := ts.answering(ctx, node); err != nil {
			return "", err
		}
		nt, err := e.opts.Store.ForgetMachine(name, group, addr)
		if err != nil {
			return "", err
		}
		e.mu.Lock()
		ts.setSpec(nt)
		e.mu.Unlock()
		if err := ts.recs.save(func(rec *record) { delete(rec.Nodes, node) }); err != nil {
			return "", err
		}
		e.log.Warn("forgot a machine that does not answer", zap.String("tenant", name), zap.String("node", node), zap.String("address", addr))
		e.updatePollTargets()
		e.publishTenants()
		if err := e.specChanged(ts); err != nil {
			e.log.Warn("queueing after a forgotten machine", zap.String("tenant", name), zap.Error(err))
		}
		return fmt.Sprintf("machine %s (node %s) forgotten: it is out of the record and of the file, untouched; the machines after it in group %s move up one place",
			addr, node, group), nil
	}})
}

// Replace puts the machine a scan found at mac in the place of a dead metal
// node: the tenant file's machine is replaced in place (the node keeps its
// name), a control plane's etcd member is removed, and the tenant is
// applied: the new machine is installed and joins.
func (e *Engine) Replace(ctx context.Context, name, node, mac string) error {
	ts, m, group, err := e.deadMachine(name, node)
	if err != nil {
		return err
	}
	norm := normMAC(mac)
	if norm == "" {
		return fmt.Errorf("tenant %s: replacing node %s: %q is not a MAC address like aa:bb:cc:dd:ee:ff", name, node, mac)
	}
	e.disc.mu.Lock()
	sm, found := e.disc.machines[norm]
	e.disc.mu.Unlock()
	if !found {
		return fmt.Errorf("tenant %s: replacing node %s: no scan found machine %s in maintenance mode (press Scan network, or boot it from the Talos ISO)", name, node, norm)
	}
	disk, err := talos.InstallDisk(sm.m.Disks)
	if err != nil {
		return fmt.Errorf("tenant %s: replacing node %s with %s (%s): %w", name, node, norm, sm.m.Address, err)
	}
	nm := tenant.Machine{Address: sm.m.Address, MAC: norm, InstallDisk: disk.DevPath}
	old := m.Address
	cp := ts.shownSpec().Group(group).Role == tenant.RoleControlPlane
	return e.enqueue(name, operation{name: opReplace, activity: tenant.ActivityRepairing, do: func(ctx context.Context, r *run) (string, error) {
		if err := ts.answering(ctx, node); err != nil {
			return "", err
		}
		nt, err := e.opts.Store.ReplaceMachine(name, group, old, nm)
		if err != nil {
			return "", err
		}
		e.mu.Lock()
		ts.setSpec(nt)
		e.mu.Unlock()
		removed := ""
		if cp {
			if removed, err = ts.removeEtcdMember(ctx, node); err != nil {
				return "", err
			}
		}
		if err := ts.recs.save(func(rec *record) { delete(rec.Nodes, node) }); err != nil {
			return "", err
		}
		e.updatePollTargets()
		e.publishMachines()
		msg, err := ts.planOrApply(ctx, r, true)
		if err != nil {
			return "", fmt.Errorf("node %s on machine %s (%s): %w", node, norm, nm.Address, err)
		}
		return fmt.Sprintf("node %s now runs on machine %s (%s); machine %s forgotten%s; %s", node, norm, nm.Address, old, removed, msg), nil
	}})
}

// removeEtcdMember removes a dead control plane's etcd member through
// another control plane that answers.
func (ts *tenantState) removeEtcdMember(ctx context.Context, node string) (string, error) {
	tc, err := ts.talosconfig()
	if err != nil {
		return "", err
	}
	rec := ts.recs.get()
	var others []string
	for n, nr := range rec.Nodes {
		if n != node && nr.Role == tenant.RoleControlPlane {
			others = append(others, n)
		}
	}
	slices.Sort(others)
	var errs []error
	for _, n := range others {
		t, ok := ts.target(n)
		if !ok {
			continue
		}
		removed, err := ts.e.opts.Nodes.EtcdRemoveMember(ctx, t, tc, node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if removed {
			return "; its etcd member removed", nil
		}
		return "", nil
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("removing the dead control plane's etcd member: %v", errs[0])
	}
	if len(others) > 0 {
		return "", nil
	}
	// the only control plane died with etcd: the new one bootstraps a new
	// etcd, and the cluster's objects come back from a backup (DOCS)
	if err := ts.recs.save(func(rec *record) { rec.Bootstrapped = false }); err != nil {
		return "", err
	}
	return "; it was the only control plane, so etcd starts empty: restore the newest etcd backup to get the cluster's objects back", nil
}
