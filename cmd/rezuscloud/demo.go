package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/broker"
	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/engine"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// demoTenant is the tenant the demo declares over its simulated nodes.
const demoTenant = "demo"

// demoDelays make the simulated nodes' install and reboots visible without
// making the demo slow.
var demoDelays = simnode.Options{InstallDelay: 500 * time.Millisecond, RebootDelay: 300 * time.Millisecond,
	DownDelay: 500 * time.Millisecond, BootDelay: 500 * time.Millisecond, ResetDelay: 300 * time.Millisecond}

// cmdDemo runs rezuscloud on embedded defaults: an embedded MQTT broker
// (unless --mqtt names one), N simulated Talos nodes on loopback and a
// metal tenant over them, provisioned for real with tofu and the Talos API.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stderr)
	nodes := fs.Int("nodes", 3, "simulated Talos `nodes`: one control plane, the rest workers")
	mqttURL := fs.String("mqtt", "", "MQTT broker `URL` (default: an embedded broker)")
	applyNow := fs.Bool("apply", false, "provision the demo cluster at once instead of waiting for Apply")
	dataDir := fs.String("data", "", "data `dir` (default: a new temporary one, removed at exit)")
	nodeNet := fs.String("node-net", "", "loopback /24 for the simulated nodes, e.g. 127.0.0 (default: 127.0.0, or a random one when taken)")
	logLevel := fs.String("log-level", "info", "log level")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > 100 {
		return fmt.Errorf("%w: --nodes %d is out of range 1..100", errUsage, *nodes)
	}
	tofuBin, err := findTofu()
	if err != nil {
		return err
	}

	dir := *dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "rezuscloud-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	dir, _ = filepath.Abs(dir)

	brokerURL := *mqttURL
	if brokerURL == "" {
		b, err := broker.Start()
		if err != nil {
			return err
		}
		defer b.Close()
		brokerURL = b.URL()
		fmt.Fprintf(stdout, "embedded MQTT broker: %s\n", brokerURL)
	}

	// simulated nodes on loopback, all on the Talos API port of one /24
	const port = 50000
	network := *nodeNet
	if network == "" {
		network = "127.0.0"
	}
	sims, err := simnode.StartOnLoopback(ctx, *nodes, network, port, demoDelays)
	if err != nil && *nodeNet == "" { // 127.0.0.10.. taken: any free loopback /24
		sims, err = simnode.StartOnLoopback(ctx, *nodes, "", port, demoDelays)
	}
	if err != nil {
		return fmt.Errorf("starting simulated nodes: %w", err)
	}
	defer sims.Close()
	var addrs []string
	for _, s := range sims.Nodes {
		addrs = append(addrs, s.Host())
	}

	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.TenantsDir = filepath.Join(dir, "tenants")
	cfg.LogLevel = *logLevel
	cfg.MQTT.URL = brokerURL
	cfg.Tofu.Binary = tofuBin
	if err := os.MkdirAll(cfg.TenantsDir, 0o700); err != nil {
		return err
	}
	tenantFile := filepath.Join(cfg.TenantsDir, demoTenant+".toml")
	if _, err := os.Stat(tenantFile); os.IsNotExist(err) {
		if err := os.WriteFile(tenantFile, []byte(demoTenantFile(addrs)), 0o644); err != nil {
			return err
		}
	}

	u, _ := url.Parse(brokerURL)
	base := cfg.MQTT.BaseTopic
	fmt.Fprintf(stdout, `rezuscloud demo: %d simulated Talos nodes (%s), tenant file %s
watch:      mosquitto_sub -h %s -p %s -v -t '%s/#' -t 'homeassistant/device/#'
provision:  mosquitto_pub -h %s -p %s -t %s/%s/apply -m PRESS
scale:      mosquitto_pub -h %s -p %s -t %s/%s/workers/count/set -m %d
destroy:    mosquitto_pub -h %s -p %s -t %s/bridge/request/destroy -m '{"tenant":"%s","confirm":"%s"}'
stop:       Ctrl-C
`, *nodes, strings.Join(addrs, ", "), tenantFile,
		u.Hostname(), u.Port(), base,
		u.Hostname(), u.Port(), base, demoTenant,
		u.Hostname(), u.Port(), base, demoTenant, max(*nodes-2, 0),
		u.Hostname(), u.Port(), base, demoTenant, demoTenant)

	return serve(ctx, cfg, stderr, serveHooks{
		talosPort:    port,
		pollInterval: 2 * time.Second,
		printEvents:  stdout,
		started: func(e *engine.Engine) {
			if *applyNow {
				if _, err := e.Apply(ctx, demoTenant); err != nil {
					fmt.Fprintln(stderr, "demo: apply:", err)
				}
			}
		},
	})
}

// demoTenantFile declares a metal tenant: the first node is the control
// plane, the others form the workers' pool, all of them in use.
func demoTenantFile(addrs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `display_name       = "Demo"
provider           = "metal"
talos_version      = "%s"
kubernetes_version = "1.35.0"
auto_apply         = true

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = "%s"
  install_disk = "/dev/sda"

[[node_groups]]
name  = "workers"
role  = "worker"
count = %d
`, simnode.DefaultTalosVersion, addrs[0], len(addrs)-1)
	for _, a := range addrs[1:] {
		fmt.Fprintf(&b, "  [[node_groups.machines]]\n  address      = \"%s\"\n  install_disk = \"/dev/sda\"\n", a)
	}
	return b.String()
}

// findTofu looks for tofu: $REZUSCLOUD_TOFU, the tools folder of a source
// checkout (make tools), then PATH.
func findTofu() (string, error) {
	if p := os.Getenv("REZUSCLOUD_TOFU"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	for _, p := range []string{".tools/bin/tofu"} {
		if abs, err := filepath.Abs(p); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs, nil
			}
		}
	}
	if p, err := exec.LookPath("tofu"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("tofu not found: run `make tools` (builds .tools/bin/tofu) or put tofu on PATH")
}
