package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"os"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// Options are the add-on options a user sets in Home Assistant's UI, as the
// Supervisor writes them to /data/options.json: three top-level keys and
// one section per TOML table (docs/design.md §11.8). The json names are
// the keys of config.yaml's options and schema and of translations/en.yaml
// (configuration.<section>.fields.<field>); a test keeps them in step.
//
// A new section is a field here, a type below, a line in apply, its schema
// and default ({} at least) in config.yaml and its translations.
type Options struct {
	LogLevel        string `json:"log_level"`
	TenantsDir      string `json:"tenants_dir"`
	ParallelApplies int    `json:"parallel_applies"`

	MQTT      MQTTOptions      `json:"mqtt"`
	State     StateOptions     `json:"state"`
	OCI       OCIOptions       `json:"oci"`
	OpenStack OpenStackOptions `json:"openstack"`
	Redfish   LoginOptions     `json:"redfish"`
	Discovery DiscoveryOptions `json:"discovery"`
	Assist    AssistOptions    `json:"assist"`
	IPMI      LoginOptions     `json:"ipmi"`
	Pool      PoolOptions      `json:"pool"`
	PXE       PXEOptions       `json:"pxe"`
	MCP       MCPOptions       `json:"mcp"`
}

// PoolOptions are the entities the worker pools read (TOML [pool]).
type PoolOptions struct {
	PriceEntity   string `json:"price_entity"`
	BatteryEntity string `json:"battery_entity"`
}

// PXEOptions is the network-boot responder (TOML [pxe]).
type PXEOptions struct {
	Enabled   bool     `json:"enabled"`
	Interface string   `json:"interface"`
	HTTPPort  int      `json:"http_port"`
	Window    string   `json:"window"`
	Arch      []string `json:"arch"`
}

// MCPOptions is the MCP server for AI assistants (TOML [mcp]).
type MCPOptions struct {
	Enabled bool   `json:"enabled"`
	Port    int    `json:"port"`
	Token   Secret `json:"token"`
	Writes  bool   `json:"writes"`
}

// MQTTOptions is the broker; an empty URL means the one the Supervisor
// provides (the Mosquitto broker app).
type MQTTOptions struct {
	URL             string `json:"url"`
	Username        string `json:"username"`
	Password        Secret `json:"password"`
	DiscoveryPrefix string `json:"discovery_prefix"`
	BaseTopic       string `json:"base_topic"`
}

// StateOptions is where the state lives and how the OpenTofu state is
// encrypted (TOML [tofu] state_passphrase and [state]).
type StateOptions struct {
	Passphrase Secret `json:"passphrase"`
	URL        string `json:"url"`
	Password   Secret `json:"password"`
	Instance   string `json:"instance"`
}

// OCIOptions is an Oracle Cloud API signing key.
type OCIOptions struct {
	TenancyOCID string `json:"tenancy_ocid"`
	UserOCID    string `json:"user_ocid"`
	Fingerprint string `json:"fingerprint"`
	PrivateKey  Secret `json:"private_key"`
	// PrivateKeyFile is a PEM file under /config or /share, the way to
	// give a multi-line key without the options form flattening it.
	PrivateKeyFile string `json:"private_key_file"`
	Region         string `json:"region"`
}

// OpenStackOptions is a Keystone password login.
type OpenStackOptions struct {
	AuthURL           string `json:"auth_url"`
	Username          string `json:"username"`
	Password          Secret `json:"password"`
	ProjectName       string `json:"project_name"`
	UserDomainName    string `json:"user_domain_name"`
	ProjectDomainName string `json:"project_domain_name"`
	Region            string `json:"region"`
}

// LoginOptions is a user name and password (the BMCs' Redfish login).
type LoginOptions struct {
	Username string `json:"username"`
	Password Secret `json:"password"`
}

// DiscoveryOptions is where and how often to look for Talos machines.
type DiscoveryOptions struct {
	CIDRs    []string `json:"cidrs"`
	Interval string   `json:"interval"`
}

// AssistOptions is what the voice assistant may see.
type AssistOptions struct {
	Expose  bool `json:"expose"`
	Scripts bool `json:"scripts"`
}

// UnmarshalJSON reads a secret from options.json.
func (s *Secret) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Secret(v)
	return nil
}

// Addon paths and the Supervisor's address inside an add-on container.
const (
	OptionsPath   = "/data/options.json"
	SupervisorURL = "http://supervisor"
	// ConfigDir is the add-on's own config folder (map: addon_config),
	// which the user reaches through the Samba share app_configs or a file
	// editor app.
	ConfigDir = "/config"
)

// LoadAddon builds the configuration from the add-on options file. Options
// still in the flat layout of 0.1.0, in the file or in what the Supervisor
// keeps (which it no longer writes to the file once the schema has
// sections), are moved into their sections and saved back through the
// Supervisor (cfg.Migration says what happened). When no MQTT URL is set,
// it asks the Supervisor for the broker it runs.
func LoadAddon(ctx context.Context, optionsPath string, sup Supervisor) (Config, error) {
	cfg := Default()
	cfg.AddonMode = true
	cfg.Panel = AddonPanel
	cfg.ConfigDir = ConfigDir
	data, err := safefile.Read(optionsPath, maxConfigFile)
	if err != nil {
		return cfg, fmt.Errorf("add-on options: %w", err)
	}
	var current map[string]any
	if err := json.Unmarshal(data, &current); err != nil {
		return cfg, fmt.Errorf("add-on options %s: %w", optionsPath, err)
	}
	var stored map[string]any
	if sup.Token != "" {
		info, err := sup.SelfInfo(ctx)
		if err != nil {
			cfg.Addon.InfoErr = err
		} else {
			cfg.Addon.Slug, cfg.Addon.Ingress, stored = info.Slug, info.Ingress, info.Options
		}
	}
	if cfg.Addon.Slug == "" {
		cfg.Addon.Slug = slugFromHostname(os.Getenv("HOSTNAME"))
	}
	migrated, moved, found := MigrateFlat(current, stored)
	cfg.Migration.Moved = moved
	if found[sourceStored] {
		// once saved, the Supervisor keeps the sections and the next start
		// finds nothing to move
		if err := sup.SaveOptions(ctx, migrated); err != nil {
			cfg.Migration.Err = err
		} else {
			cfg.Migration.Saved = true
		}
	}
	o, err := decodeOptions(migrated)
	if err != nil {
		return cfg, fmt.Errorf("add-on options %s: %w", optionsPath, err)
	}
	o.apply(&cfg)
	if o.OCI.PrivateKeyFile != "" {
		if o.OCI.PrivateKey != "" {
			return cfg, errors.New("add-on options: set oci.private_key or oci.private_key_file, not both")
		}
		k, err := readKeyFile(o.OCI.PrivateKeyFile, ociKeyDirs)
		if err != nil {
			return cfg, fmt.Errorf("add-on options: oci.private_key_file: %w", err)
		}
		cfg.Credentials.OCI.PrivateKey = k
	}
	if o.MQTT.URL == "" {
		svc, err := sup.MQTT(ctx)
		if err != nil {
			return cfg, fmt.Errorf("add-on options: no mqtt.url set, and %w", err)
		}
		cfg.MQTT.URL, cfg.MQTT.Username, cfg.MQTT.Password = svc.URL, svc.Username, svc.Password
	}
	cfg.HomeAssistant = HomeAssistant{URL: "ws://supervisor/core/websocket", Token: sup.Token}
	if sup.Token == "" {
		cfg.HomeAssistant = HomeAssistant{}
	}
	cfg.HomeAssistant.AssistExpose = o.Assist.Expose
	if err := cfg.validate(optionName); err != nil {
		return cfg, fmt.Errorf("add-on options: %w", err)
	}
	return cfg, nil
}

// decodeOptions decodes the options strictly: a key the Options do not
// know means config.yaml and this code disagree.
func decodeOptions(m map[string]any) (Options, error) {
	var o Options
	b, err := json.Marshal(m)
	if err != nil {
		return o, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, err
	}
	return o, nil
}

func (o Options) apply(c *Config) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.LogLevel, o.LogLevel)
	set(&c.TenantsDir, o.TenantsDir)
	if o.ParallelApplies != 0 {
		c.Tofu.ParallelApplies = o.ParallelApplies
	}
	m := o.MQTT
	set(&c.MQTT.URL, m.URL)
	set(&c.MQTT.Username, m.Username)
	c.MQTT.Password = m.Password
	set(&c.MQTT.DiscoveryPrefix, m.DiscoveryPrefix)
	set(&c.MQTT.BaseTopic, m.BaseTopic)
	c.Tofu.StatePassphrase = o.State.Passphrase
	c.State = State{URL: strings.TrimSpace(o.State.URL), Password: o.State.Password, Instance: strings.TrimSpace(o.State.Instance)}
	c.Discovery.CIDRs = nonEmpty(o.Discovery.CIDRs)
	set(&c.Discovery.Interval, o.Discovery.Interval)
	c.Credentials.Redfish = RedfishCredentials{Username: o.Redfish.Username, Password: o.Redfish.Password}
	oci := o.OCI
	c.Credentials.OCI = OCICredentials{TenancyOCID: oci.TenancyOCID, UserOCID: oci.UserOCID,
		Fingerprint: oci.Fingerprint, PrivateKey: oci.PrivateKey, Region: oci.Region}
	os, in := &c.Credentials.OpenStack, o.OpenStack
	set(&os.AuthURL, in.AuthURL)
	set(&os.Username, in.Username)
	os.Password = in.Password
	set(&os.ProjectName, in.ProjectName)
	set(&os.UserDomainName, in.UserDomainName)
	set(&os.ProjectDomainName, in.ProjectDomainName)
	set(&os.Region, in.Region)
	c.Credentials.IPMI = IPMICredentials{Username: o.IPMI.Username, Password: o.IPMI.Password}
	c.Pool = Pool{PriceEntity: o.Pool.PriceEntity, BatteryEntity: o.Pool.BatteryEntity}
	c.PXE.Enabled = o.PXE.Enabled
	set(&c.PXE.Interface, o.PXE.Interface)
	if o.PXE.HTTPPort != 0 {
		c.PXE.HTTPPort = o.PXE.HTTPPort
	}
	set(&c.PXE.Window, o.PXE.Window)
	if a := nonEmpty(o.PXE.Arch); len(a) > 0 {
		c.PXE.Arch = a
	}
	c.MCP.Enabled, c.MCP.Writes, c.MCP.Token = o.MCP.Enabled, o.MCP.Writes, o.MCP.Token
	if o.MCP.Port != 0 {
		c.MCP.Port = o.MCP.Port
	}
	c.HomeAssistant.AssistScripts = o.Assist.Scripts
}

// nonEmpty drops empty items (a list field the form left with a blank row).
func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// optionName is the add-on option of a configuration key, so that an error
// names the field of the form the user can change.
func optionName(key string) string {
	if o, ok := optionOfKey[key]; ok {
		return o
	}
	return key
}

var optionOfKey = map[string]string{
	"tofu.parallel_applies":                     "parallel_applies",
	"tofu.state_passphrase":                     "state.passphrase",
	"homeassistant.assist_expose":               "assist.expose",
	"credentials.oci.private_key":               "oci.private_key",
	"credentials.openstack.auth_url":            "openstack.auth_url",
	"credentials.openstack.user_domain_name":    "openstack.user_domain_name",
	"credentials.openstack.project_domain_name": "openstack.project_domain_name",
}

// slugFromHostname derives the add-on's slug from its container's host
// name, which the Supervisor sets to the slug with '-' for '_'
// (a0d7b954_rezuscloud runs as a0d7b954-rezuscloud): the fallback when
// /addons/self/info cannot be read.
func slugFromHostname(h string) string {
	const own = "rezuscloud"
	if repo, ok := strings.CutSuffix(h, "-"+own); ok && repo != "" && !strings.ContainsAny(repo, "-_.") {
		return repo + "_" + own
	}
	return ""
}
