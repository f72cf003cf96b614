// Package config reads rezuscloud's configuration: the standalone TOML file
// of docs/design.md §2, or, in add-on mode, the options Home Assistant's
// Supervisor writes to /data/options.json plus the MQTT credentials the
// Supervisor hands out. Secrets are of type Secret, which never prints.
package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rezuscloud/rezuscloud/internal/discovery"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/topic"
)

// Secret is a string that must never be printed, logged or published.
// fmt, zap and encoding/json all see "[redacted]"; Reveal gives the value.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret itself, for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// String hides the secret from fmt's %s and %v.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString hides the secret from fmt's %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON hides the secret from encoding/json (and zap.Any).
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// MarshalText hides the secret from text encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a secret from TOML.
func (s *Secret) UnmarshalText(b []byte) error { *s = Secret(b); return nil }

// Config is the whole configuration (docs/design.md §2, contract).
type Config struct {
	DataDir       string        `toml:"data_dir"`
	TenantsDir    string        `toml:"tenants_dir"`
	LogLevel      string        `toml:"log_level"`
	MQTT          MQTT          `toml:"mqtt"`
	Tofu          Tofu          `toml:"tofu"`
	State         State         `toml:"state"`
	HomeAssistant HomeAssistant `toml:"homeassistant"`
	Discovery     Discovery     `toml:"discovery"`
	Pool          Pool          `toml:"pool"`
	Engine        Engine        `toml:"engine"`
	PXE           PXE           `toml:"pxe"`
	Panel         Panel         `toml:"panel"`
	MCP           MCP           `toml:"mcp"`
	Credentials   Credentials   `toml:"credentials"`

	// AddonMode is true when the configuration came from the Supervisor.
	AddonMode bool `toml:"-"`
	// ConfigDir is the folder the user can open (the add-on's config
	// folder in add-on mode); "" when there is none besides DataDir.
	ConfigDir string `toml:"-"`
	// Addon is what the Supervisor said about this add-on.
	Addon AddonInfo `toml:"-"`
	// Migration is what LoadAddon moved out of the flat options of 0.1.0.
	Migration Migration `toml:"-"`
}

// MQTT is the broker connection.
type MQTT struct {
	URL             string `toml:"url"`
	Username        string `toml:"username"`
	Password        Secret `toml:"password"`
	DiscoveryPrefix string `toml:"discovery_prefix"`
	BaseTopic       string `toml:"base_topic"`
}

// Tofu configures the OpenTofu runs.
type Tofu struct {
	Binary          string `toml:"binary"`
	CLIConfig       string `toml:"cli_config"`
	ParallelApplies int    `toml:"parallel_applies"`
	StatePassphrase Secret `toml:"state_passphrase"`
}

// State is where rezuscloud keeps its state (docs/design.md §11.5): the
// data folder when URL is empty, else the PostgreSQL database at URL,
// shared by the instances that name it.
type State struct {
	// URL is postgres://role@host:5432/database; TLS is verified unless
	// it says sslmode=require (encrypted, not verified) or disable.
	URL string `toml:"url"`
	// Password is the role's password (never in the URL, which is logged).
	Password Secret `toml:"password"`
	// Instance is this instance's name among those sharing the database;
	// "" means the host name (InstanceName).
	Instance string `toml:"instance"`
}

// InstanceName is Instance, or the host name when it is empty.
func (s State) InstanceName() string {
	if s.Instance != "" {
		return s.Instance
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "rezuscloud"
}

var instanceRxp = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// checkStateURL checks a [state] url without ever echoing a password in it.
func checkStateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("is not a URL; it looks like postgres://user@host:5432/database")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("scheme %q: must be postgres:// or postgresql://, such as postgres://user@host:5432/database", u.Scheme)
	}
	if _, ok := u.User.Password(); ok {
		return errors.New("holds a password: put it in the state password instead (the URL is shown in messages)")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("has no host; it looks like postgres://user@host:5432/database")
	}
	if u.User.Username() == "" {
		return errors.New("has no user (role); it looks like postgres://user@host:5432/database")
	}
	if db := strings.TrimPrefix(u.Path, "/"); db == "" || strings.Contains(db, "/") {
		return errors.New("has no database; it looks like postgres://user@host:5432/database")
	}
	switch m := u.Query().Get("sslmode"); m {
	case "", "verify-full", "verify-ca", "require", "disable":
	default:
		return fmt.Errorf("sslmode=%s is not offered: leave it out to verify the server's certificate, or say verify-ca, require (encrypted, not verified) or disable", m)
	}
	return nil
}

// HomeAssistant is the optional WebSocket API link.
type HomeAssistant struct {
	URL   string `toml:"url"`
	Token Secret `toml:"token"`
	// AssistExpose: expose a curated, never destructive set of each
	// cluster's entities to Assist and give them speakable aliases
	// (opt-in: exposure is the user's privacy choice).
	AssistExpose bool `toml:"assist_expose"`
	// AssistScripts: create and expose to Assist a handful of scripts
	// (cluster status, pending plan and, with [mcp] writes, scale
	// workers, power a worker, back up etcd) whose described fields Home
	// Assistant turns into LLM tools; off again removes exactly those.
	AssistScripts bool `toml:"assist_scripts"`
}

// MCP is the Model Context Protocol server for AI assistants
// (docs/design.md §11.6): Streamable HTTP at /mcp behind a bearer token.
type MCP struct {
	Enabled bool `toml:"enabled"`
	// Port is the TCP port it listens on.
	Port int `toml:"port"`
	// Token is the bearer token clients send; "" = generate one once into
	// the data folder (MCPTokenFile, 0600).
	Token Secret `toml:"token"`
	// Writes offers the tools that change clusters (plan, apply, scale
	// workers, power a worker, back up etcd, upgrade) to AI assistants,
	// through MCP and through the Assist scripts.
	Writes bool `toml:"writes"`
	// Listen is the IP address to listen on; "" = the default of the mode
	// (ListenAddr): loopback standalone, the Supervisor's internal network
	// in add-on mode. "0.0.0.0" or a LAN address opts into the LAN.
	Listen string `toml:"listen"`
}

// DefaultMCPPort is the MCP server's port (the add-on runs on the host
// network, so it is the host's port).
const DefaultMCPPort = 8097

// SupervisorNetwork is the Supervisor's internal Docker network
// ("hassio"): Home Assistant and the add-ons reach each other on it, the
// LAN does not.
var SupervisorNetwork = netip.MustParsePrefix("172.30.32.0/23")

// ListenAddr is the host:port the MCP server listens on, given the
// machine's interface addresses. Standalone the default is loopback: the
// LAN is an explicit choice (listen = "0.0.0.0"). In add-on mode it is the
// add-on's address on the Supervisor's network (its container's, or the
// hassio bridge's with host networking): Home Assistant reaches it there,
// the LAN only once the user maps the port in the add-on's Network section.
// Without such an address it is loopback.
func (m MCP) ListenAddr(addonMode bool, ifaces []netip.Addr) string {
	host := m.Listen
	if host == "" {
		host = "127.0.0.1"
		if addonMode {
			for _, a := range ifaces {
				if a = a.Unmap(); a.Is4() && SupervisorNetwork.Contains(a) {
					host = a.String()
					break
				}
			}
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(m.Port))
}

// Discovery finds Talos machines in maintenance mode on the LAN
// (docs/design.md §10.4); off while CIDRs is empty.
type Discovery struct {
	// CIDRs are the ranges scanned: private, link-local or loopback, each
	// at most a /22 (discovery.ParseCIDR).
	CIDRs []string `toml:"cidrs"`
	// Interval between scans, a Go duration ("5m"); at least 10 s.
	Interval string `toml:"interval"`
}

// Every is the scan interval (Validate checked it).
func (d Discovery) Every() time.Duration {
	v, err := time.ParseDuration(d.Interval)
	if err != nil || v <= 0 {
		return 5 * time.Minute
	}
	return v
}

// Pool names the Home Assistant entities the worker pools read besides
// the Energy preferences (docs/design.md §11.2). Both are optional.
type Pool struct {
	// PriceEntity is the electricity price now, with a forecast in its
	// attributes where the integration gives one (sensor.nordpool_…).
	PriceEntity string `toml:"price_entity"`
	// BatteryEntity is the home battery's state of charge (%).
	BatteryEntity string `toml:"battery_entity"`
	// Interval is how often the pools decide, a Go duration ("30s", the
	// default; at least 1 s). TOML only: the add-on keeps the default.
	Interval string `toml:"interval"`
}

// Every is the pools' decision interval (Validate checked it).
func (p Pool) Every() time.Duration {
	v, err := time.ParseDuration(p.Interval)
	if err != nil || v <= 0 {
		return 30 * time.Second
	}
	return v
}

// Engine tunes how the engine judges machines and clouds between
// operations (docs/design.md §11.7). TOML only: the add-on keeps the
// defaults.
type Engine struct {
	// UnreachableAfter is how long a provisioned node may stay silent
	// before it is a problem and may be forgotten or replaced ("10m").
	UnreachableAfter string `toml:"unreachable_after"`
	// DriftInterval is how often an idle cloud tenant is refreshed to
	// find changes made outside ("1h"; "0" turns it off).
	DriftInterval string `toml:"drift_interval"`
}

// Unreachable is the unreachable bound (0: the engine's default).
func (e Engine) Unreachable() time.Duration {
	v, _ := time.ParseDuration(e.UnreachableAfter)
	return v
}

// Drift is the drift interval: 0 the engine's default, negative off.
func (e Engine) Drift() time.Duration {
	if e.DriftInterval == "0" {
		return -1
	}
	v, _ := time.ParseDuration(e.DriftInterval)
	return v
}

// entityIDRxp is a Home Assistant entity id: domain.object_id.
var entityIDRxp = regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*\.[a-z0-9]+(_[a-z0-9]+)*$`)

// Panel is the web panel in Home Assistant's sidebar (docs/design.md §11.3).
// In the add-on it listens on the ingress port for the Supervisor's ingress
// gateway only (AddonPanel); outside the Supervisor it is off until
// [panel] listen is set, and then trusts loopback.
type Panel struct {
	// Listen is the panel's host:port; "" turns the panel off.
	Listen string `toml:"listen"`
	// Trusted are the peers allowed to connect (addresses or CIDR
	// prefixes): the Supervisor's ingress gateway, or whatever sits in
	// front of the panel outside the Supervisor. Every other peer is
	// refused.
	Trusted []string `toml:"trusted"`
}

// IngressGateway is the address the Supervisor's ingress proxy connects
// from (172.30.32.2, the Supervisor in the hassio network 172.30.32.0/23).
const IngressGateway = "172.30.32.2"

// AddonPanel is the add-on's panel: the ingress port (config.yaml's
// ingress_port), for the ingress gateway only.
var AddonPanel = Panel{Listen: ":8099", Trusted: []string{IngressGateway}}

// TrustedPrefixes parses Trusted (Validate checked it).
func (p Panel) TrustedPrefixes() []netip.Prefix {
	out, _ := parseTrusted(p.Trusted)
	return out
}

// parseTrusted reads addresses and CIDR prefixes.
func parseTrusted(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Credentials are the cloud credentials; they reach tofu in its
// environment only. Redfish's and IPMI's power the metal machines with a
// BMC.
type Credentials struct {
	OCI       OCICredentials       `toml:"oci"`
	OpenStack OpenStackCredentials `toml:"openstack"`
	Redfish   RedfishCredentials   `toml:"redfish"`
	IPMI      IPMICredentials      `toml:"ipmi"`
}

// IPMICredentials log in to the BMCs of power = "ipmi://…" machines
// (IPMI v2.0 RMCP+).
type IPMICredentials struct {
	Username string `toml:"username"`
	Password Secret `toml:"password"`
}

// RedfishCredentials log in to the BMCs of power = "redfish+https://…"
// machines (basic auth).
type RedfishCredentials struct {
	Username string `toml:"username"`
	Password Secret `toml:"password"`
}

// OCICredentials are an Oracle Cloud API signing key.
type OCICredentials struct {
	TenancyOCID string `toml:"tenancy_ocid"`
	UserOCID    string `toml:"user_ocid"`
	Fingerprint string `toml:"fingerprint"`
	PrivateKey  Secret `toml:"private_key"`
	Region      string `toml:"region"`
}

// OpenStackCredentials are a Keystone password login.
type OpenStackCredentials struct {
	AuthURL           string `toml:"auth_url"`
	Username          string `toml:"username"`
	Password          Secret `toml:"password"`
	ProjectName       string `toml:"project_name"`
	UserDomainName    string `toml:"user_domain_name"`
	ProjectDomainName string `toml:"project_domain_name"`
	Region            string `toml:"region"`
}

// Default is the configuration with every default of docs/design.md §2.
func Default() Config {
	return Config{
		DataDir:    "/data",
		TenantsDir: "/config/tenants",
		LogLevel:   "info",
		MQTT: MQTT{
			URL:             "tcp://127.0.0.1:1883",
			DiscoveryPrefix: "homeassistant",
			BaseTopic:       "rezuscloud",
		},
		Tofu:      Tofu{Binary: "tofu", ParallelApplies: 2},
		Discovery: Discovery{Interval: "5m"},
		PXE:       PXE{HTTPPort: DefaultPXEHTTPPort, Window: "30m", Arch: []string{"amd64"}},
		Panel:     Panel{Trusted: []string{"127.0.0.1", "::1"}},
		MCP:       MCP{Port: DefaultMCPPort},
		Credentials: Credentials{OpenStack: OpenStackCredentials{
			UserDomainName: "Default", ProjectDomainName: "Default",
		}},
	}
}

// LoadFile reads a standalone TOML configuration over the defaults.
// Unknown keys are errors, located by line and column.
func LoadFile(path string) (Config, error) {
	cfg := Default()
	data, err := safefile.Read(path, maxConfigFile)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		var strict *toml.StrictMissingError
		var derr *toml.DecodeError
		switch {
		case errors.As(err, &strict):
			var lines []string
			for _, e := range strict.Errors {
				line, col := e.Position()
				lines = append(lines, fmt.Sprintf("%s:%d:%d: %s: unknown key", path, line, col, strings.Join(e.Key(), ".")))
			}
			return cfg, fmt.Errorf("config: %s", strings.Join(lines, "\n"))
		case errors.As(err, &derr):
			line, col := derr.Position()
			return cfg, fmt.Errorf("config: %s:%d:%d: %s", path, line, col, derr.Error())
		}
		return cfg, fmt.Errorf("config: %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config: %s: %w", path, err)
	}
	return cfg, nil
}

// Validate checks every key; all problems are reported at once.
func (c *Config) Validate() error { return c.validate(func(k string) string { return k }) }

// validate is Validate with the keys named by name (add-on mode names the
// options of the form instead of the TOML keys).
func (c *Config) validate(name func(string) string) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name(key), fmt.Sprintf(format, args...)))
	}
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		bad("data_dir", "%q must be an absolute path", c.DataDir)
	}
	if c.TenantsDir == "" || !filepath.IsAbs(c.TenantsDir) {
		bad("tenants_dir", "%q must be an absolute path", c.TenantsDir)
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		bad("log_level", "%v", err)
	}
	if u, err := url.Parse(c.MQTT.URL); err != nil || (u.Scheme != "tcp" && u.Scheme != "ssl" && u.Scheme != "mqtt" && u.Scheme != "mqtts") || u.Host == "" {
		bad("mqtt.url", "%q must look like tcp://host:1883 or ssl://host:8883", c.MQTT.URL)
	}
	if err := topic.CheckPrefix(c.MQTT.DiscoveryPrefix); err != nil {
		bad("mqtt.discovery_prefix", "%v", err)
	}
	if err := topic.CheckBase(c.MQTT.BaseTopic); err != nil {
		bad("mqtt.base_topic", "%v", err)
	}
	if c.Tofu.Binary == "" {
		bad("tofu.binary", "must not be empty")
	}
	if c.Tofu.ParallelApplies < 1 || c.Tofu.ParallelApplies > 16 {
		bad("tofu.parallel_applies", "%d is out of range 1..16", c.Tofu.ParallelApplies)
	}
	if p := c.Tofu.StatePassphrase; p != "" && len(p) < 16 {
		bad("tofu.state_passphrase", "is shorter than 16 characters (OpenTofu's minimum); leave it empty to have one generated")
	}
	if c.State.URL != "" {
		if err := checkStateURL(c.State.URL); err != nil {
			bad("state.url", "%v", err)
		}
	}
	if c.State.Instance != "" && !instanceRxp.MatchString(c.State.Instance) {
		bad("state.instance", "%q: up to 63 letters, digits, '.', '_' and '-', starting with a letter or digit", c.State.Instance)
	}
	if c.HomeAssistant.URL != "" {
		if u, err := url.Parse(c.HomeAssistant.URL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("homeassistant.url", "%q must look like ws://homeassistant.local:8123/api/websocket", c.HomeAssistant.URL)
		} else if c.HomeAssistant.Token == "" {
			bad("homeassistant.token", "is required with homeassistant.url (a long-lived access token)")
		}
	}
	if _, err := discovery.ParseCIDRs(c.Discovery.CIDRs); err != nil {
		bad("discovery.cidrs", "%v", err)
	}
	for key, v := range map[string]string{"pool.price_entity": c.Pool.PriceEntity, "pool.battery_entity": c.Pool.BatteryEntity} {
		if v != "" && !entityIDRxp.MatchString(v) {
			bad(key, "%q is not a Home Assistant entity id like sensor.nordpool_kwh_se3_eur", v)
		}
	}
	if v, err := time.ParseDuration(c.Engine.UnreachableAfter); c.Engine.UnreachableAfter != "" && (err != nil || v < time.Second || v > 7*24*time.Hour) {
		bad("engine.unreachable_after", "%q must be a duration between 1s and 168h, such as \"10m\"", c.Engine.UnreachableAfter)
	}
	if v, err := time.ParseDuration(c.Engine.DriftInterval); c.Engine.DriftInterval != "" && c.Engine.DriftInterval != "0" && (err != nil || v < time.Second || v > 7*24*time.Hour) {
		bad("engine.drift_interval", "%q must be \"0\" (off) or a duration between 1s and 168h, such as \"1h\"", c.Engine.DriftInterval)
	}
	if v, err := time.ParseDuration(c.Pool.Interval); c.Pool.Interval != "" && (err != nil || v < time.Second || v > time.Hour) {
		bad("pool.interval", "%q must be a duration between 1s and 1h, such as \"30s\"", c.Pool.Interval)
	}
	if v, err := time.ParseDuration(c.Discovery.Interval); err != nil || v < 10*time.Second {
		bad("discovery.interval", "%q must be a duration of at least 10s, such as \"5m\"", c.Discovery.Interval)
	}
	for _, e := range c.PXE.check() {
		errs = append(errs, fmt.Errorf("pxe.%w", e))
	}
	if n := len(c.Credentials.IPMI.Username); n > 16 {
		bad("credentials.ipmi.username", "is %d characters, IPMI allows at most 16", n)
	}
	if n := len(c.Credentials.IPMI.Password); n > 20 {
		bad("credentials.ipmi.password", "is %d characters, IPMI v2.0 allows at most 20", n)
	}
	if c.Panel.Listen != "" {
		host, port, err := net.SplitHostPort(c.Panel.Listen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			bad("panel.listen", "%q must be host:port such as \"127.0.0.1:8099\" or \":8099\" (\"\" turns the panel off)", c.Panel.Listen)
		} else if _, aerr := netip.ParseAddr(host); host != "" && host != "localhost" && aerr != nil {
			bad("panel.listen", "host %q must be an IP address, localhost or empty (every interface)", host)
		}
		if len(c.Panel.Trusted) == 0 {
			bad("panel.trusted", "must name at least one peer, e.g. [\"127.0.0.1\"] (or set panel.listen = \"\" to turn the panel off)")
		}
	}
	if _, err := parseTrusted(c.Panel.Trusted); err != nil {
		bad("panel.trusted", "%v", err)
	}
	if p := c.MCP.Port; p < 1 || p > 65535 {
		bad("mcp.port", "%d is out of range 1..65535", p)
	}
	if err := CheckMCPToken(c.MCP.Token.Reveal()); c.MCP.Token != "" && err != nil {
		bad("mcp.token", "%v", err)
	}
	if l := c.MCP.Listen; l != "" {
		if _, err := netip.ParseAddr(l); err != nil {
			bad("mcp.listen", "%q must be an IP address such as 127.0.0.1 or 0.0.0.0 (the port is mcp.port)", l)
		}
	}
	// A flattened PEM (the options form strips newlines) is re-wrapped in
	// place; a key that does not parse is refused without being printed.
	if k := c.Credentials.OCI.PrivateKey; k != "" {
		if nk, err := normalizePrivateKey(k); err != nil {
			bad("credentials.oci.private_key", "%v", err)
		} else {
			c.Credentials.OCI.PrivateKey = nk
		}
	}
	if u := c.Credentials.OpenStack.AuthURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad("credentials.openstack.auth_url", "%q must be the Keystone URL, e.g. https://keystone.example:5000/v3", u)
		}
	}
	return errors.Join(errs...)
}

// Secrets lists every secret value set, for log redaction.
func (c *Config) Secrets() []string {
	var out []string
	for _, s := range []Secret{c.MQTT.Password, c.Tofu.StatePassphrase, c.State.Password, c.HomeAssistant.Token, c.MCP.Token,
		c.Credentials.OCI.PrivateKey, c.Credentials.OpenStack.Password, c.Credentials.Redfish.Password,
		c.Credentials.IPMI.Password} {
		if s != "" {
			out = append(out, s.Reveal())
		}
	}
	return out
}

// PassphraseFile is where a generated state passphrase is kept.
const PassphraseFile = "state-passphrase"

// maxConfigFile caps the configuration and options files; maxPassphraseFile
// the passphrase file (one line of 43 characters when generated).
const (
	maxConfigFile     = 1 << 20
	maxPassphraseFile = 4 << 10
)

// StatePassphrase returns the configured state passphrase, or the one
// generated earlier under dataDir, or generates one now (0600) and reports
// created so the caller can tell the user to back it up.
func StatePassphrase(dataDir string, configured Secret) (p Secret, created bool, err error) {
	p, created, err = generated(dataDir, PassphraseFile, configured, func(s string) error {
		if len(s) < 16 {
			return errors.New("is shorter than 16 characters: restore it from your backup")
		}
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("state passphrase %w", err)
	}
	return p, created, nil
}

// MCPTokenFile is where a generated MCP token is kept.
const MCPTokenFile = "mcp-token"

// MCPToken returns the configured MCP bearer token, or the one generated
// earlier under dataDir, or generates one now (0600, 43 URL-safe
// characters) and reports created.
func MCPToken(dataDir string, configured Secret) (t Secret, created bool, err error) {
	t, created, err = generated(dataDir, MCPTokenFile, configured, CheckMCPToken)
	if err != nil {
		return "", false, fmt.Errorf("mcp token %w", err)
	}
	return t, created, nil
}

// CheckMCPToken checks a bearer token: at least 24 characters, all of them
// URL-safe (A-Z a-z 0-9 - . _ ~), since a client that cannot send a
// header puts it in the URL.
func CheckMCPToken(s string) error {
	if len(s) < 24 {
		return errors.New("is shorter than 24 characters; leave it empty to have one generated")
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
			return errors.New("may only hold letters, digits and - . _ ~ (it can be part of a URL)")
		}
	}
	return nil
}

// generated is a secret kept in dataDir/file: the configured one when set,
// else the file's (checked), else 32 random bytes made once (0600).
func generated(dataDir, file string, configured Secret, check func(string) error) (Secret, bool, error) {
	if configured != "" {
		return configured, false, nil
	}
	path := filepath.Join(dataDir, file)
	if b, err := safefile.Read(path, maxPassphraseFile); err == nil {
		s := strings.TrimSpace(string(b))
		if err := check(s); err != nil {
			return "", false, fmt.Errorf("%s %w", path, err)
		}
		return Secret(s), false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", false, err
	}
	s := base64.RawURLEncoding.EncodeToString(buf)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, err
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return "", false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", false, err
	}
	if err := f.Close(); err != nil {
		return "", false, err
	}
	return Secret(s), true, nil
}
