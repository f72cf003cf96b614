package main

import (
	"context"
	"net"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/engine"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/pxe"
	"github.com/rezuscloud/rezuscloud/internal/pxe/assets"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
)

// startPXE starts the network-boot responder when [pxe] enabled
// (docs/design.md §11.4) and shows its entities on the bridge; call it
// before the bridge starts. It returns a function that stops it. A
// responder that cannot start (no such interface, ports taken) is logged
// and leaves the rest of rezuscloud running.
func startPXE(ctx context.Context, cfg config.Config, bridge *hass.Bridge, inv pxe.Inventory, log *zap.Logger) (stop func()) {
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

// bootInventory is the responder's view of the machines: the engine's.
func bootInventory(eng *engine.Engine) pxe.Inventory {
	return pxe.InventoryFunc(func(mac net.HardwareAddr) boot.Machine {
		m := eng.BootMachine(mac.String())
		return boot.Machine{Known: m.Known, Tenant: m.Tenant, Node: m.Node, Schematic: m.Schematic,
			TalosVersion: m.TalosVersion, Installed: m.Installed, Resetting: m.Resetting}
	})
}
