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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rezuscloud/rezuscloud/internal/discovery"
	"github.com/rezuscloud/rezuscloud/internal/logging"
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
	HomeAssistant HomeAssistant `toml:"homeassistant"`
	Discovery     Discovery     `toml:"discovery"`
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

// HomeAssistant is the optional WebSocket API link.
type HomeAssistant struct {
	URL   string `toml:"url"`
	Token Secret `toml:"token"`
	// AssistExpose: expose a curated, never destructive set of each
	// cluster's entities to Assist and give them speakable aliases
	// (opt-in: exposure is the user's privacy choice).
	AssistExpose bool `toml:"assist_expose"`
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

// Credentials are the cloud credentials; they reach tofu in its
// environment only. Redfish's power the metal machines with a BMC.
type Credentials struct {
	OCI       OCICredentials       `toml:"oci"`
	OpenStack OpenStackCredentials `toml:"openstack"`
	Redfish   RedfishCredentials   `toml:"redfish"`
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
		Credentials: Credentials{OpenStack: OpenStackCredentials{
			UserDomainName: "Default", ProjectDomainName: "Default",
		}},
	}
}

// LoadFile reads a standalone TOML configuration over the defaults.
// Unknown keys are errors, located by line and column.
func LoadFile(path string) (Config, error) {
	cfg := Default()
	data, err := os.ReadFile(path)
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
	if v, err := time.ParseDuration(c.Discovery.Interval); err != nil || v < 10*time.Second {
		bad("discovery.interval", "%q must be a duration of at least 10s, such as \"5m\"", c.Discovery.Interval)
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
	for _, s := range []Secret{c.MQTT.Password, c.Tofu.StatePassphrase, c.HomeAssistant.Token,
		c.Credentials.OCI.PrivateKey, c.Credentials.OpenStack.Password, c.Credentials.Redfish.Password} {
		if s != "" {
			out = append(out, s.Reveal())
		}
	}
	return out
}

// PassphraseFile is where a generated state passphrase is kept.
const PassphraseFile = "state-passphrase"

// StatePassphrase returns the configured state passphrase, or the one
// generated earlier under dataDir, or generates one now (0600) and reports
// created so the caller can tell the user to back it up.
func StatePassphrase(dataDir string, configured Secret) (p Secret, created bool, err error) {
	if configured != "" {
		return configured, false, nil
	}
	path := filepath.Join(dataDir, PassphraseFile)
	if b, err := os.ReadFile(path); err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < 16 {
			return "", false, fmt.Errorf("state passphrase %s is shorter than 16 characters: restore it from your backup", path)
		}
		return Secret(s), false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("state passphrase: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", false, err
	}
	s := base64.RawURLEncoding.EncodeToString(buf)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, fmt.Errorf("state passphrase: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("state passphrase: %w", err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("state passphrase: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", false, fmt.Errorf("state passphrase: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("state passphrase: %w", err)
	}
	return Secret(s), true, nil
}
