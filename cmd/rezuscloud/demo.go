//go:build demo

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/broker"
	"github.com/rezuscloud/rezuscloud/internal/cloudsim"
	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/engine"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
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
	platform := fs.String("provider", "metal", "`platform` of the demo tenant: metal (simulated machines) or openstack (a stand-in OpenStack cloud whose servers boot simulated Talos nodes)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *platform != "metal" && *platform != "openstack" {
		return fmt.Errorf("%w: --provider %q: want metal or openstack", errUsage, *platform)
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

	const port = 50000
	cfg := config.Default()
	var tenantTOML, where string
	if *platform == "openstack" {
		rc, err := findTofurc(tofuBin)
		if err != nil {
			return err
		}
		cfg.Tofu.CLIConfig = rc
		cloud, err := cloudsim.Start(ctx, cloudsim.Options{Cloud: simcloud.Options{Password: demoCloudPassword}, Node: demoDelays, TalosPort: port})
		if err != nil {
			return fmt.Errorf("starting the stand-in OpenStack cloud: %w", err)
		}
		defer cloud.Close()
		o := cloud.Options()
		cfg.Credentials.OpenStack = config.OpenStackCredentials{AuthURL: cloud.AuthURL(), Username: o.Username,
			Password: config.Secret(demoCloudPassword), ProjectName: o.Project, UserDomainName: "Default",
			ProjectDomainName: "Default", Region: o.Region}
		tenantTOML = cloudsim.TenantFile("Demo cloud", simnode.DefaultTalosVersion, 1, max(*nodes-1, 0), true)
		where = fmt.Sprintf("a stand-in OpenStack cloud at %s (servers on %s, floating IPs on %s)", cloud.AuthURL(), o.FixedCIDR, o.FloatingCIDR)
	} else {
		// simulated nodes on loopback, all on the Talos API port of one /24
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
		tenantTOML = demoTenantFile(addrs, simnode.DefaultTalosVersion)
		where = fmt.Sprintf("%d simulated Talos nodes (%s)", *nodes, strings.Join(addrs, ", "))
	}

	cfg.DataDir = filepath.Join(dir, "data")
	cfg.TenantsDir = filepath.Join(dir, "tenants")
	cfg.LogLevel = *logLevel
	cfg.MQTT.URL = brokerURL
	cfg.Tofu.Binary = tofuBin
	// the panel on loopback (port 8099, or a free one when taken), for the
	// operator's own browser
	panelAddr := "127.0.0.1:8099"
	if ln, err := net.Listen("tcp", panelAddr); err == nil {
		ln.Close()
	} else if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		panelAddr = ln.Addr().String()
		ln.Close()
	}
	cfg.Panel = config.Panel{Listen: panelAddr, Trusted: []string{"127.0.0.1"}}
	if err := os.MkdirAll(cfg.TenantsDir, 0o700); err != nil {
		return err
	}
	tenantFile := filepath.Join(cfg.TenantsDir, demoTenant+".toml")
	if _, err := os.Stat(tenantFile); os.IsNotExist(err) {
		if err := os.WriteFile(tenantFile, []byte(tenantTOML), 0o644); err != nil {
			return err
		}
	}

	u, _ := url.Parse(brokerURL)
	base := cfg.MQTT.BaseTopic
	fmt.Fprintf(stdout, `rezuscloud demo: %s, tenant file %s
panel:      http://%s/
watch:      mosquitto_sub -h %s -p %s -v -t '%s/#' -t 'homeassistant/device/#'
provision:  mosquitto_pub -h %s -p %s -t %s/%s/apply -m PRESS
scale:      mosquitto_pub -h %s -p %s -t %s/%s/workers/count/set -m %d
destroy:    mosquitto_pub -h %s -p %s -t %s/bridge/request/destroy -m '{"tenant":"%s","confirm":"%s"}'
stop:       Ctrl-C
`, where, tenantFile, panelAddr,
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
				if err := e.Apply(ctx, demoTenant); err != nil {
					fmt.Fprintln(stderr, "demo: apply:", err)
				}
			}
		},
	})
}

// demoCloudPassword is the stand-in cloud's password (it guards nothing).
const demoCloudPassword = "demo-cloud-password"

// findTofurc finds the CLI config of the provider mirror `make tools`
// builds: $REZUSCLOUD_TOFURC, or tofurc next to tofu's bin directory.
func findTofurc(tofuBin string) (string, error) {
	if p := os.Getenv("REZUSCLOUD_TOFURC"); p != "" {
		return p, nil
	}
	p := filepath.Join(filepath.Dir(filepath.Dir(tofuBin)), "tofurc")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the OpenStack provider mirror is missing (%s): run `make tools`", p)
	}
	return p, nil
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
