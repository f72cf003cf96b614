package engine

import "github.com/rezuscloud/rezuscloud/internal/tenant"

// BootMachine is what the network-boot responder needs to know of a
// machine that asks to boot (docs/design.md §11.4).
type BootMachine struct {
	// Known: a tenant file declares its MAC, or the last scans found it.
	Known bool
	// Tenant and Node name the tenant that declares it and the node it
	// is ("" for a spare machine of a pool, or one discovery found).
	Tenant, Node string
	// Schematic and TalosVersion are what it boots: the tenant's
	// schematic, its node's Talos version (or the cluster's).
	Schematic, TalosVersion string
	// Installed: Talos was installed on its disk (the node was given its
	// config) and the node was not reset since: it boots from its disk.
	Installed bool
	// Resetting: an operation resets it now: it boots maintenance again.
	Resetting bool
}

// BootMachine answers the responder's question about a MAC from the facts:
// the tenant files, the records, the running operations and the machines
// the scans found.
func (e *Engine) BootMachine(mac string) BootMachine {
	mac = normMAC(mac)
	if mac == "" {
		return BootMachine{}
	}
	for _, ts := range e.states() {
		t := ts.shownSpec()
		if t == nil || t.Provider != tenant.ProviderMetal {
			continue
		}
		for gi := range t.NodeGroups {
			g := &t.NodeGroups[gi]
			for i, m := range g.Machines {
				if normMAC(m.MAC) != mac {
					continue
				}
				bm := BootMachine{Known: true, Tenant: t.Name, Schematic: t.Schematic, TalosVersion: t.TalosVersion}
				if i >= g.Count {
					return bm // a spare machine of the pool
				}
				bm.Node = tenant.NodeName(t.Name, g.Name, i+1)
				rec := ts.recs.get()
				if nr, ok := rec.Nodes[bm.Node]; ok {
					bm.Installed = nr.ConfigHash != "" && nr.Address == m.Address
					bm.TalosVersion = firstOf(rec.versionsOf(bm.Node).Talos, t.TalosVersion)
				}
				ts.mu.Lock()
				if r := ts.run; r != nil {
					bm.Resetting = r.intents[bm.Node].stage == tenant.StageResetting
				}
				ts.mu.Unlock()
				if bm.Resetting {
					bm.Installed = false
				}
				return bm
			}
		}
	}
	e.disc.mu.Lock()
	_, found := e.disc.machines[mac]
	e.disc.mu.Unlock()
	return BootMachine{Known: found}
}
