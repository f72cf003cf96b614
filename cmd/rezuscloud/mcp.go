package main

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/mcp"
)

// startMCP starts what lets AI assistants talk to the clusters
// (docs/design.md §11.6): the MCP server when [mcp] enabled, and the
// Assist scripts in Home Assistant when [homeassistant] assist_scripts
// (with the option off it removes the scripts it created before). Both
// run the same tools, whose writes go through command, the bridge's one
// command path. stop ends them and waits.
func startMCP(ctx context.Context, cfg config.Config, log *logging.Logger, command mcp.Command, src mcp.Source,
	ha *wsapi.Client) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var done []chan struct{}
	run := func(f func()) {
		ch := make(chan struct{})
		done = append(done, ch)
		go func() { defer close(ch); f() }()
	}
	stop = func() {
		cancel()
		for _, ch := range done {
			<-ch
		}
	}
	mlog := log.Named("mcp")
	var token string
	if cfg.MCP.Enabled {
		t, created, err := config.MCPToken(cfg.DataDir, cfg.MCP.Token)
		if err != nil {
			mlog.Error("MCP server not started", zap.Error(err))
		} else {
			token = t.Reveal()
			log.Redactor.Add(token)
			if created {
				mlog.Info("generated an MCP token", zap.String("file", filepath.Join(cfg.DataDir, config.MCPTokenFile)))
			}
			if cp, err := config.HandOverMCPToken(cfg, t); err != nil {
				mlog.Warn("the MCP token could not be copied where you can read it: set mcp.token yourself", zap.Error(err))
			} else if cp != "" {
				mlog.Info("the generated MCP token is in the add-on's config folder (Samba share app_configs, the folder ending in _rezuscloud); or set mcp.token yourself",
					zap.String("file", config.MCPTokenCopy))
			}
		}
	}
	srv, err := mcp.New(mcp.Options{Source: src, Command: command, Token: token, Writes: cfg.MCP.Writes,
		Version: version, Log: mlog})
	if err != nil {
		mlog.Error("MCP tools not available", zap.Error(err))
		return stop
	}
	if cfg.MCP.Enabled && token != "" {
		addr := cfg.MCP.ListenAddr(cfg.AddonMode, interfaceAddrs())
		if ln, err := net.Listen("tcp", addr); err != nil {
			mlog.Error("MCP server not started: cannot listen", zap.String("listen", addr), zap.Error(err))
		} else {
			mlog.Info("MCP server listening", zap.String("url", "http://"+ln.Addr().String()+mcp.Path),
				zap.Bool("writes", cfg.MCP.Writes), zap.Strings("tools", srv.Tools()))
			run(func() {
				if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
					mlog.Error("MCP server", zap.Error(err))
				}
			})
		}
	}
	scripts := wsapi.NewScripts(ha, wsapi.ScriptsOptions{Enabled: cfg.HomeAssistant.AssistScripts,
		StateFile: filepath.Join(cfg.DataDir, "assist_scripts.json")}, srv.CallScript, log.Named("assist"))
	run(func() {
		if err := scripts.Run(ctx); err != nil {
			mlog.Error("Assist scripts (assist_scripts)", zap.Error(err))
		}
	})
	if cfg.HomeAssistant.AssistScripts {
		run(func() { keepScripts(ctx, scripts, src, cfg.MCP.Writes) })
	}
	return stop
}

// keepScripts regenerates the Assist scripts whenever the clusters change
// (their cluster field lists them).
func keepScripts(ctx context.Context, scripts *wsapi.Scripts, src mcp.Source, writes bool) {
	changed, _ := src.(interface{ Changed() <-chan struct{} })
	for {
		var ch <-chan struct{}
		if changed != nil {
			ch = changed.Changed()
		}
		scripts.SetScripts(mcp.AssistScripts(src.Views(), writes))
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// interfaceAddrs are the machine's (the container's) IP addresses.
func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}
