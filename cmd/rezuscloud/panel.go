package main

import (
	"context"
	"io"
	"net"

	tfjson "github.com/hashicorp/terraform-json"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/control"
	"github.com/rezuscloud/rezuscloud/internal/engine"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web"
)

// startPanel serves the panel (internal/web, when cfg.Panel.Listen is set)
// and the control socket of backup_pre (internal/control) until ctx ends.
// Neither is needed for the clusters to run, so a port or socket that
// cannot be had is logged, not fatal. Every action of the panel goes
// through cmd, the bridge's command path. wait waits for both to stop.
func startPanel(ctx context.Context, cfg config.Config, src web.Source, cmd web.Command, store *tenant.Store,
	ha *wsapi.Client, log *zap.Logger) (wait func()) {
	var stopped []chan struct{}
	run := func(what string, serve func() error) {
		done := make(chan struct{})
		stopped = append(stopped, done)
		go func() {
			defer close(done)
			if err := serve(); err != nil {
				log.Error(what+" stopped", zap.Error(err))
			}
		}()
	}
	if cfg.Panel.Listen != "" {
		// Home Assistant's users tell administrators under the Supervisor;
		// outside it whoever reaches the panel from a trusted address is
		// the operator; under the Supervisor without the WebSocket API
		// nobody is, and the panel is read-only
		var admins web.Admins = web.Operator{}
		if cfg.AddonMode {
			admins = nil
			if ha != nil {
				admins = web.NewHAUsers(ha.Call)
			}
		}
		srv, err := web.New(web.Options{Source: src, Command: cmd, Files: store, Admins: admins,
			Trusted: cfg.Panel.TrustedPrefixes(), Version: version, Log: log})
		if err != nil {
			log.Error("panel not served", zap.Error(err))
		} else if ln, err := net.Listen("tcp", cfg.Panel.Listen); err != nil {
			log.Error("panel not served", zap.String("listen", cfg.Panel.Listen), zap.Error(err))
		} else {
			log.Info("panel", zap.String("listen", ln.Addr().String()), zap.Strings("trusted", cfg.Panel.Trusted))
			run("panel", func() error { return web.Serve(ctx, ln, srv) })
		}
	}
	path := control.SocketPath(cfg.DataDir, cfg.AddonMode)
	if ln, err := control.Listen(path); err != nil {
		log.Error("backup_pre will not take snapshots: no control socket", zap.Error(err))
	} else {
		run("control socket", func() error {
			return (&control.Server{Views: src, Command: cmd, Log: log.Named("control")}).Serve(ctx, ln)
		})
	}
	return func() {
		for _, d := range stopped {
			<-d
		}
	}
}

// engineSource is the engine's read API as the panel reads it.
type engineSource struct{ e *engine.Engine }

var _ web.Source = engineSource{}

func (s engineSource) Views() []web.View                 { return s.e.Views() }
func (s engineSource) View(name string) (web.View, bool) { return s.e.View(name) }
func (s engineSource) Changed() <-chan struct{}          { return s.e.Changed() }
func (s engineSource) PendingPlan(ctx context.Context, name string) (*tfjson.Plan, error) {
	return s.e.PendingPlan(ctx, name)
}
func (s engineSource) Machines() []talos.Machine                        { return s.e.Machines() }
func (s engineSource) Backups(name string) ([]tenant.BackupInfo, error) { return s.e.Backups(name) }
func (s engineSource) OpenBackup(name, file string) (io.ReadCloser, error) {
	return s.e.OpenBackup(name, file)
}
func (s engineSource) Secret(name, kind string) ([]byte, error) { return s.e.Secret(name, kind) }
func (s engineSource) Log(name string) []web.LogLine {
	lines := s.e.Log(name)
	out := make([]web.LogLine, len(lines))
	for i, l := range lines {
		out[i] = web.LogLine(l)
	}
	return out
}
func (s engineSource) Follow(ctx context.Context, name string) <-chan web.LogLine {
	in := s.e.Follow(ctx, name)
	out := make(chan web.LogLine, cap(in))
	go func() {
		defer close(out)
		for l := range in {
			select {
			case out <- web.LogLine(l):
			case <-ctx.Done():
			}
		}
	}()
	return out
}
