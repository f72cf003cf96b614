package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/command"
	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/engine"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/health"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/power"
	"github.com/rezuscloud/rezuscloud/internal/redfish"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
	"github.com/rezuscloud/rezuscloud/internal/wol"
)

// cmdRun is the long-running add-on.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	cfgPath := fs.String("config", "", "TOML configuration `file` (default: add-on mode, /data/options.json)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var cfg config.Config
	var err error
	if *cfgPath != "" {
		cfg, err = config.LoadFile(*cfgPath)
	} else {
		cfg, err = config.LoadAddon(ctx, config.OptionsPath, config.Supervisor{
			URL: config.SupervisorURL, Token: config.Secret(os.Getenv("SUPERVISOR_TOKEN")),
		})
		if err == nil {
			if p := os.Getenv("REZUSCLOUD_TOFU_CLI_CONFIG"); p != "" && cfg.Tofu.CLIConfig == "" {
				cfg.Tofu.CLIConfig = p
			}
		}
	}
	if err != nil {
		return err
	}
	return serve(ctx, cfg, stderr, serveHooks{})
}

// serveHooks let the demo add to a serve.
type serveHooks struct {
	// started runs once the bridge and engine are up.
	started func(e *engine.Engine)
	// pollInterval overrides the node poll interval.
	pollInterval time.Duration
	// talosPort overrides the Talos API port.
	talosPort int
	// printEvents, when set, gets one line per operation event.
	printEvents io.Writer
}

// serve runs rezuscloud with a configuration until ctx ends, then shuts
// down gracefully: running tofu commands get SIGINT and save their state,
// the bridge says offline.
func serve(ctx context.Context, cfg config.Config, logw io.Writer, hooks serveHooks) error {
	log, err := logging.New(cfg.LogLevel, logw)
	if err != nil {
		return err
	}
	defer log.Sync()
	log.Redactor.Add(cfg.Secrets()...)

	logStartup(log.Logger, cfg)
	for _, d := range []string{cfg.DataDir, cfg.TenantsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	pass, created, err := config.StatePassphrase(cfg.DataDir, cfg.Tofu.StatePassphrase)
	if err != nil {
		return err
	}
	log.Redactor.Add(pass.Reveal())
	if created {
		log.Warn("generated a state passphrase: keep a copy, without it no OpenTofu state can be read",
			zap.String("file", filepath.Join(cfg.DataDir, config.PassphraseFile)))
	}
	var problems []string
	if h, err := config.HandOverPassphrase(cfg, pass); err != nil {
		log.Error("the generated state passphrase could not be handed over", zap.Error(err))
	} else {
		if h.Wrote != "" {
			log.Warn("a copy of the generated state passphrase is in the add-on's config folder: put it into your password manager and the state.passphrase option, then delete the file",
				zap.String("file", h.Wrote))
		}
		if h.Removed != "" {
			log.Info("the state.passphrase option holds the generated passphrase: its copy was removed", zap.String("file", h.Removed))
		}
		if h.Problem != "" {
			problems = append(problems, h.Problem)
		}
	}
	if cfg.ConfigDir != "" { // add-on mode: a first cluster without typing TOML
		store := &tenant.Store{Dir: cfg.TenantsDir}
		if p, err := store.WriteExample(filepath.Join(cfg.DataDir, "example-tenant-written")); err != nil {
			log.Warn("the example tenant file was not written", zap.Error(err))
		} else if p != "" {
			log.Info("wrote an example tenant: edit its addresses and rename it to <name>.toml", zap.String("file", p))
		}
	}

	if cfg.State.URL != "" {
		return serveShared(ctx, cfg, log, pass, problems, hooks) // shared.go
	}
	return lead(ctx, cfg, log, pass, problems, hooks, nil)
}

// lead runs rezuscloud until ctx ends: the engine, the bridge and
// everything around them. With a shared state store (sh) this instance
// leads it, and ctx also ends when the leadership does.
func lead(ctx context.Context, cfg config.Config, log *logging.Logger, pass config.Secret, problems []string, hooks serveHooks, sh *sharedLead) error {
	runner, err := tofu.New(tofu.Config{
		States:        sh.states(),
		Binary:        cfg.Tofu.Binary,
		DataDir:       filepath.Join(cfg.DataDir, "tofu"),
		CLIConfigFile: cfg.Tofu.CLIConfig,
		Passphrase:    pass.Reveal(),
		Logger:        log.Named("tofu"),
		AllowMissing:  true, // come up and show the problem in Home Assistant
		// a stop lets a running apply finish its requests in flight first
		// (config.yaml's timeout of 300 s covers this and the SIGINT grace)
		FinishGrace: 90 * time.Second,
	})
	if err != nil {
		return err
	}
	if err := runner.Problem(); err != nil {
		problems = append([]string{fmt.Sprintf("OpenTofu cannot run, so no cluster can be planned or applied: %v", err)}, problems...)
		log.Error("tofu is missing: rezuscloud runs, but every plan and apply fails until it is installed", zap.Error(err))
	}
	defer runner.Close(context.Background())

	pubs := fanout{print: hooks.printEvents}
	store := &tenant.Store{Dir: cfg.TenantsDir}
	shareDir := ""
	if cfg.AddonMode {
		if fi, err := os.Stat("/share"); err == nil && fi.IsDir() {
			shareDir = "/share/rezuscloud"
		}
	}
	// the optional link to Home Assistant's WebSocket API (run below)
	wsOpts, err := wsapi.ResolveOptions(cfg.HomeAssistant.URL, cfg.HomeAssistant.Token.Reveal(), "")
	if err != nil {
		return err
	}
	var haClient *wsapi.Client
	if wsOpts.Enabled() {
		haClient = wsapi.New(wsOpts, log.Named("websocket"))
	}
	// what the worker pools read of Home Assistant (run below)
	poolInputs := wsapi.NewPoolInputs(haClient, wsapi.PoolInputsOptions{PriceEntity: cfg.Pool.PriceEntity,
		BatteryEntity: cfg.Pool.BatteryEntity}, log.Named("pool"))
	eng, err := engine.New(engine.Options{
		DataDir:          cfg.DataDir,
		Store:            store,
		Runner:           runner,
		Publisher:        &pubs,
		CloudEnv:         cloudEnv(cfg.Credentials),
		ParallelApplies:  cfg.Tofu.ParallelApplies,
		TalosPort:        hooks.talosPort,
		PollInterval:     hooks.pollInterval,
		ShareDir:         shareDir,
		SetLogLevel:      log.SetLevel,
		Wake:             func(ctx context.Context, mac string) error { return wake(ctx, haClient, mac, wol.BroadcastAddr) },
		Power:            powerOptions(cfg, haClient),
		Discovery:        engine.DiscoveryOptions{CIDRs: cfg.Discovery.CIDRs, Interval: cfg.Discovery.Every()},
		PoolInputs:       poolInputs,
		PoolInterval:     cfg.Pool.Every(),
		UnreachableAfter: cfg.Engine.Unreachable(),
		DriftInterval:    cfg.Engine.Drift(),
		Shared:           sh.writer(),
		Log:              log.Named("engine"),
	})
	if err != nil {
		return err
	}
	bridge := hass.New(hass.Options{
		URL:             cfg.MQTT.URL,
		Username:        cfg.MQTT.Username,
		Password:        cfg.MQTT.Password.Reveal(),
		DiscoveryPrefix: cfg.MQTT.DiscoveryPrefix,
		BaseTopic:       cfg.MQTT.BaseTopic,
		Version:         version,
		LogLevel:        cfg.LogLevel,
		// the device page's "Visit": the add-on in Home Assistant, or the docs
		ConfigurationURL: cfg.ConfigurationURL(),
		// after a power cut the broker may come up long after us: keep
		// trying (each failure is logged) until stopped
		ConnectTimeout: 365 * 24 * time.Hour,
		// a refused command also raises a persistent notification
		OnRefused: func(ev tenant.OperationEvent) {
			if pubs.link != nil {
				pubs.link.Operation(ev)
			}
		},
		Instance: sh.instance(), // the Role sensor, with a shared store
	}, eng, log.Named("mqtt"))
	pubs.bridge = bridge
	defer startPXE(ctx, cfg, bridge, bootInventory(eng), log.Named("pxe"))() // network boot, when [pxe] enabled (pxe.go)
	// voice: expose a curated set to Assist (assist_expose), or withdraw it
	pubs.assist = wsapi.NewAssist(haClient, wsapi.AssistOptions{Enabled: cfg.HomeAssistant.AssistExpose,
		StateFile: filepath.Join(cfg.DataDir, "assist.json")}, log.Named("assist"))
	pubs.baseTopic = cfg.MQTT.BaseTopic
	bridge.SetBridgeProblem(strings.Join(problems, " "))
	if haClient != nil { // set before the engine runs: it publishes through it
		pubs.link = wsapi.NewLink(haClient, func(ctx context.Context, data json.RawMessage) command.Response {
			return bridge.HandleEvent(ctx, data)
		}, log.Named("websocket"))
	}

	// the engine reads the tenant files before the bridge takes commands,
	// so that nothing sent right after start-up meets an empty engine
	engCtx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	runErr := make(chan error, 1)
	go func() { runErr <- eng.Run(engCtx, 2*time.Second) }()
	select {
	case <-eng.Ready():
	case err := <-runErr:
		return err
	}
	if err := bridge.Start(ctx); err != nil {
		stopEngine()
		<-runErr
		if ctx.Err() != nil {
			return nil // stopped (or no longer leading) while connecting
		}
		return fmt.Errorf("mqtt: %w", err)
	}
	defer bridge.Close()
	log.Info("connected to MQTT", zap.String("broker", cfg.MQTT.URL), zap.String("base_topic", cfg.MQTT.BaseTopic))
	// the panel and backup_pre's socket; every action through the bridge's command path
	panelCtx, stopPanel := context.WithCancel(ctx)
	waitPanel := startPanel(panelCtx, cfg, engineSource{eng}, bridge.HandleRequest, store, haClient, log.Named("panel"))
	defer func() { stopPanel(); waitPanel() }()
	if cfg.AddonMode {
		// the image's HEALTHCHECK: unhealthy only after the MQTT connection
		// has been down for a long time (a broker restart is not a failure)
		// and no operation has run for as long
		connected := func() error {
			if !bridge.Connected() {
				return errors.New("not connected to the MQTT broker")
			}
			return nil
		}
		if sh != nil { // the endpoint is the process's (shared.go)
			sh.health.lead(connected, eng.Busy)
			defer sh.health.lead(nil, nil)
		} else if ln, err := net.Listen("tcp", health.DefaultAddr); err != nil {
			log.Warn("health check endpoint not served", zap.Error(err))
		} else {
			checker := health.NewChecker(connected, eng.Busy, 10*time.Minute) // a restart would interrupt running operations
			go func() { _ = health.Serve(ctx, ln, checker) }()
		}
	}

	// AI assistants: the MCP server and the Assist scripts (mcp.go)
	defer startMCP(ctx, cfg, log, bridge.HandleRequest, eng, haClient)()

	poolCtx, stopPool := context.WithCancel(ctx)
	poolDone := make(chan struct{})
	go func() { defer close(poolDone); _ = poolInputs.Run(poolCtx) }()
	defer func() { stopPool(); <-poolDone }()

	assistCtx, stopAssist := context.WithCancel(ctx)
	assistDone := make(chan struct{})
	go func() {
		defer close(assistDone)
		if err := pubs.assist.Run(assistCtx); err != nil {
			log.Error("Assist exposure (assist.expose)", zap.Error(err))
		}
	}()
	defer func() { stopAssist(); <-assistDone }()

	// the optional link to Home Assistant's WebSocket API
	var wsDone chan struct{}
	if haClient != nil {
		wsDone = make(chan struct{})
		go func() {
			defer close(wsDone)
			if err := haClient.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("Home Assistant WebSocket API", zap.Error(err))
			}
			pubs.link.Close()
		}()
	} else {
		log.Info("no Home Assistant WebSocket API configured: automations use the MQTT request API")
	}

	// once everything is announced, return the heap start-up used to the
	// system (the anonymous memory a box needs; the executable's clean
	// pages are the kernel's to reclaim under pressure)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = bridge.Sync(sctx)
		debug.FreeOSMemory()
	}()
	if sh != nil {
		go sh.showStandbys(ctx, bridge, log.Named("state"))
	}
	if hooks.started != nil {
		hooks.started(eng)
	}
	err = <-runErr
	log.Info("stopped")
	if wsDone != nil {
		<-wsDone
	}
	return err
}

// logStartup says what start-up learned about the add-on options: the
// one-time move of the flat options of 0.1.0 into sections (option names
// only, never values) and a Supervisor that could not be asked.
func logStartup(log *zap.Logger, cfg config.Config) {
	if m := cfg.Migration; len(m.Moved) > 0 {
		log.Info("add-on options moved from the flat layout of 0.1.0 into their sections", zap.Strings("moved", m.Moved), zap.Bool("saved", m.Saved))
		if m.Err != nil {
			log.Warn("the moved options could not be saved in the Supervisor: they apply to this run; open the Configuration tab and save the form once", zap.Error(m.Err))
		}
	}
	if cfg.AddonMode && cfg.Addon.InfoErr != nil {
		log.Warn("could not ask the Supervisor about this add-on (its slug is taken from the host name, flat options of 0.1.0 kept by the Supervisor are not moved)",
			zap.Error(cfg.Addon.InfoErr), zap.String("slug", cfg.Addon.Slug))
	}
}

// fanout hands the engine's state to the bridge and the WebSocket link.
type fanout struct {
	bridge    *hass.Bridge
	link      *wsapi.Link
	assist    *wsapi.Assist
	baseTopic string
	print     io.Writer
}

func (f *fanout) SetTenants(vs []tenant.View) {
	f.bridge.SetTenants(vs)
	ts := make([]*tenant.Tenant, 0, len(vs))
	for _, v := range vs {
		ts = append(ts, v.Spec)
	}
	f.assist.SetEntities(hass.AssistEntities(f.baseTopic, ts))
}
func (f *fanout) SetTenant(v tenant.View) { f.bridge.SetTenant(v) }
func (f *fanout) SetBridgeStatus(n int)   { f.bridge.SetBridgeStatus(n) }

// PublishPoolDecision fires a pool's decision event (engine.PoolPublisher).
func (f *fanout) PublishPoolDecision(tenantName, group string, st tenant.PoolStatus) {
	f.bridge.PublishPoolDecision(tenantName, group, st)
}

// SetMachines shows the machines found on the LAN (engine.MachinePublisher).
func (f *fanout) SetMachines(ms []talos.Machine) { f.bridge.SetMachines(ms) }

// powerOptions give the engine entity power through the WebSocket client
// (none without it: an entity's power then says the link is missing) and
// the Redfish credentials.
func powerOptions(cfg config.Config, ha *wsapi.Client) engine.PowerOptions {
	o := engine.PowerOptions{Redfish: redfish.Options{Username: cfg.Credentials.Redfish.Username,
		Password: cfg.Credentials.Redfish.Password.Reveal()},
		IPMI: power.IPMICredentials{Username: cfg.Credentials.IPMI.Username, Password: cfg.Credentials.IPMI.Password.Reveal()}}
	if ha != nil {
		o.HA = power.FromWS(ha)
	}
	return o
}
func (f *fanout) PublishOperation(ev tenant.OperationEvent) {
	f.bridge.PublishOperation(ev)
	if f.link != nil {
		f.link.Operation(ev)
	}
	if f.print != nil {
		line := fmt.Sprintf("%s %s: %s", ev.Tenant, ev.Name, ev.Result)
		if ev.Message != "" {
			line += ": " + ev.Message
		}
		fmt.Fprintln(f.print, line)
	}
}

// wake wakes a machine: through Home Assistant's wake_on_lan integration
// when the WebSocket API is connected (Home Assistant runs on the host's
// network, where a broadcast reaches the LAN), else with a broadcast of our
// own to fallback (which leaves an add-on's bridged network only with host
// networking).
func wake(ctx context.Context, ha *wsapi.Client, mac, fallback string) error {
	if ha != nil && ha.Connected() {
		err := ha.CallService(ctx, "wake_on_lan", "send_magic_packet", map[string]string{"mac": mac})
		if err == nil {
			return nil
		}
		// the integration is not set up: fall back to our own packet
	}
	return wol.Send(ctx, mac, fallback)
}

// cloudEnv gives tofu the credentials of each platform in its environment.
func cloudEnv(c config.Credentials) func(tenant.Provider) map[string]string {
	return func(p tenant.Provider) map[string]string {
		env := map[string]string{}
		set := func(k, v string) {
			if v != "" {
				env[k] = v
			}
		}
		switch p {
		case tenant.ProviderOCI:
			o := c.OCI
			set("OCI_TENANCY_OCID", o.TenancyOCID)
			set("OCI_USER_OCID", o.UserOCID)
			set("OCI_FINGERPRINT", o.Fingerprint)
			set("OCI_PRIVATE_KEY", o.PrivateKey.Reveal())
			set("OCI_REGION", o.Region)
		case tenant.ProviderOpenStack:
			o := c.OpenStack
			set("OS_AUTH_URL", o.AuthURL)
			set("OS_USERNAME", o.Username)
			set("OS_PASSWORD", o.Password.Reveal())
			set("OS_PROJECT_NAME", o.ProjectName)
			set("OS_USER_DOMAIN_NAME", o.UserDomainName)
			set("OS_PROJECT_DOMAIN_NAME", o.ProjectDomainName)
			set("OS_REGION_NAME", o.Region)
		}
		return env
	}
}
