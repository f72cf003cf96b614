package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/pxe"
	"github.com/rezuscloud/rezuscloud/internal/pxe/assets"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// startPXE starts the network-boot responder when [pxe] enabled
// (docs/design.md §11.4) and shows its entities on the bridge; call it
// before the bridge starts. It returns a function that stops it. A
// responder that cannot start (no such interface, ports taken) is logged
// and leaves the rest of rezuscloud running.
func startPXE(ctx context.Context, cfg config.Config, bridge *hass.Bridge, inv *bootInventory, log *zap.Logger) (stop func()) {
	if !cfg.PXE.Enabled {
		return func() {}
	}
	r, err := pxe.New(pxe.Options{
		Interface: cfg.PXE.Interface,
		HTTPPort:  cfg.PXE.HTTPPort,
		Window:    cfg.PXE.WindowDuration(),
		Arches:    cfg.PXE.Arch,
		Inventory: inv,
		Cache:     &assets.Cache{Dir: filepath.Join(cfg.DataDir, "pxe", "assets")},
		DataDir:   filepath.Join(cfg.DataDir, "pxe"),
		OnEvent: func(ev pxe.Event) {
			if ev.Boot() {
				bridge.PublishNetworkBoot(hass.NetworkBootEvent{Type: string(ev.Type), MAC: ev.MAC, File: ev.File,
					Reason: ev.Reason, Step: ev.Step, At: ev.At})
			}
		},
		OnWindow: bridge.SetBootWindow,
		OnAssets: func(st pxe.AssetsState) { bridge.SetBootAssets(bootAssets(st.Cached), st.Problem) },
		Log:      log,
	})
	if err != nil {
		log.Error("network boot is not available", zap.Error(err))
		return func() {}
	}
	bridge.SetNetworkBoot(r.SetWindow)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			log.Error("network boot stopped", zap.Error(err))
		}
	}()
	return func() { cancel(); <-done }
}

func bootAssets(es []assets.Entry) []hass.BootAsset {
	out := make([]hass.BootAsset, 0, len(es))
	for _, e := range es {
		sum := "recorded"
		if e.Published {
			sum = "published"
		}
		out = append(out, hass.BootAsset{Version: e.Image.Version, Arch: e.Image.Arch, Schematic: e.Image.Schematic,
			Checksum: sum, Fetched: e.Fetched})
	}
	return out
}

// bootInventory answers the responder's questions about a MAC from what
// the engine publishes: the tenant files' machines, the machines discovery
// found, and the node stages. It stands in for the engine method the
// responder needs (Engine.BootMachine): "installed" is a node last seen
// installing or past it, kept while it is unreachable; it is lost on a
// restart.
type bootInventory struct {
	mu        sync.Mutex
	machines  map[string]boot.Machine // by MAC, from the tenant files
	nodeOf    map[string]string       // MAC -> "<tenant>/<node>"
	found     map[string]bool         // MACs discovery found
	installed map[string]bool         // "<tenant>/<node>" -> installed as last seen
	resetting map[string]bool
}

func newBootInventory() *bootInventory {
	return &bootInventory{machines: map[string]boot.Machine{}, nodeOf: map[string]string{}, found: map[string]bool{},
		installed: map[string]bool{}, resetting: map[string]bool{}}
}

func macKey(s string) string {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return strings.ToLower(s)
	}
	return hw.String()
}

func (b *bootInventory) setTenants(ts []*tenant.Tenant) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.machines, b.nodeOf = map[string]boot.Machine{}, map[string]string{}
	for _, t := range ts {
		if t == nil || t.Provider != tenant.ProviderMetal {
			continue
		}
		for _, g := range t.NodeGroups {
			for _, m := range g.Machines {
				if m.MAC != "" {
					b.machines[macKey(m.MAC)] = boot.Machine{Known: true, Tenant: t.Name, Schematic: t.Schematic, TalosVersion: t.TalosVersion}
				}
			}
		}
		for _, n := range t.Nodes() {
			if n.Machine != nil && n.Machine.MAC != "" {
				k := macKey(n.Machine.MAC)
				m := b.machines[k]
				m.Node = n.Name
				b.machines[k] = m
				b.nodeOf[k] = t.Name + "/" + n.Name
			}
		}
	}
}

func (b *bootInventory) setNodeStatus(tn, node string, st tenant.NodeStatus) {
	key := tn + "/" + node
	b.mu.Lock()
	defer b.mu.Unlock()
	switch st.Stage {
	case tenant.StageInstalling, tenant.StageBooting, tenant.StageRunning, tenant.StageRebooting, tenant.StageUpgrading, tenant.StageShuttingDown:
		b.installed[key], b.resetting[key] = true, false
	case tenant.StageResetting:
		b.resetting[key] = true
	case tenant.StageMaintenance, tenant.StagePending, tenant.StageProvisioning:
		b.installed[key], b.resetting[key] = false, false
	}
}

func (b *bootInventory) setMachines(ms []talos.Machine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.found = map[string]bool{}
	for _, m := range ms {
		b.found[macKey(m.MAC)] = true
	}
}

// BootMachine implements pxe.Inventory.
func (b *bootInventory) BootMachine(mac net.HardwareAddr) boot.Machine {
	k := mac.String()
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.machines[k]
	if !ok {
		return boot.Machine{Known: b.found[k]}
	}
	if node, ok := b.nodeOf[k]; ok {
		m.Installed, m.Resetting = b.installed[node], b.resetting[node]
	}
	return m
}
