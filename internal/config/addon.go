package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// Options are the add-on options a user sets in Home Assistant's UI, as the
// Supervisor writes them to /data/options.json. The json names are the keys
// of config.yaml's options and schema and of translations/en.yaml; a test
// keeps the four in step.
type Options struct {
	LogLevel        string `json:"log_level"`
	TenantsDir      string `json:"tenants_dir"`
	MQTTURL         string `json:"mqtt_url"`
	MQTTUsername    string `json:"mqtt_username"`
	MQTTPassword    Secret `json:"mqtt_password"`
	DiscoveryPrefix string `json:"discovery_prefix"`
	BaseTopic       string `json:"base_topic"`
	ParallelApplies int    `json:"parallel_applies"`
	StatePassphrase Secret `json:"state_passphrase"`
	AssistExpose    bool   `json:"assist_expose"`

	DiscoveryCIDRs    []string `json:"discovery_cidrs"`
	DiscoveryInterval string   `json:"discovery_interval"`
	RedfishUsername   string   `json:"redfish_username"`
	RedfishPassword   Secret   `json:"redfish_password"`

	OCITenancyOCID string `json:"oci_tenancy_ocid"`
	OCIUserOCID    string `json:"oci_user_ocid"`
	OCIFingerprint string `json:"oci_fingerprint"`
	OCIPrivateKey  Secret `json:"oci_private_key"`
	OCIRegion      string `json:"oci_region"`

	// OCIPrivateKeyFile is a PEM file under /config or /share, the way to
	// give a multi-line key without the options form flattening it.
	OCIPrivateKeyFile string `json:"oci_private_key_file"`

	OpenStackAuthURL           string `json:"openstack_auth_url"`
	OpenStackUsername          string `json:"openstack_username"`
	OpenStackPassword          Secret `json:"openstack_password"`
	OpenStackProjectName       string `json:"openstack_project_name"`
	OpenStackUserDomainName    string `json:"openstack_user_domain_name"`
	OpenStackProjectDomainName string `json:"openstack_project_domain_name"`
	OpenStackRegion            string `json:"openstack_region"`
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

// Supervisor is how add-on mode reaches Home Assistant's Supervisor.
type Supervisor struct {
	URL    string // http://supervisor
	Token  Secret // SUPERVISOR_TOKEN
	Client *http.Client
}

// Addon paths and the Supervisor's address inside an add-on container.
const (
	OptionsPath   = "/data/options.json"
	SupervisorURL = "http://supervisor"
)

// LoadAddon builds the configuration from the add-on options file. When no
// MQTT URL is set there, it asks the Supervisor for the broker it runs.
func LoadAddon(ctx context.Context, optionsPath string, sup Supervisor) (Config, error) {
	cfg := Default()
	cfg.AddonMode = true
	cfg.Panel = AddonPanel
	data, err := safefile.Read(optionsPath, maxConfigFile)
	if err != nil {
		return cfg, fmt.Errorf("add-on options: %w", err)
	}
	var o Options
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return cfg, fmt.Errorf("add-on options %s: %w", optionsPath, err)
	}
	o.apply(&cfg)
	if o.OCIPrivateKeyFile != "" {
		if o.OCIPrivateKey != "" {
			return cfg, errors.New("add-on options: set oci_private_key or oci_private_key_file, not both")
		}
		k, err := readKeyFile(o.OCIPrivateKeyFile, ociKeyDirs)
		if err != nil {
			return cfg, fmt.Errorf("add-on options: oci_private_key_file: %w", err)
		}
		cfg.Credentials.OCI.PrivateKey = k
	}
	if o.MQTTURL == "" {
		svc, err := sup.MQTT(ctx)
		if err != nil {
			return cfg, fmt.Errorf("add-on options: no mqtt_url set, and %w", err)
		}
		cfg.MQTT.URL, cfg.MQTT.Username, cfg.MQTT.Password = svc.URL, svc.Username, svc.Password
	}
	cfg.HomeAssistant = HomeAssistant{URL: "ws://supervisor/core/websocket", Token: sup.Token}
	if sup.Token == "" {
		cfg.HomeAssistant = HomeAssistant{}
	}
	cfg.HomeAssistant.AssistExpose = o.AssistExpose
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("add-on options: %w", err)
	}
	return cfg, nil
}

func (o Options) apply(c *Config) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.LogLevel, o.LogLevel)
	set(&c.TenantsDir, o.TenantsDir)
	set(&c.MQTT.URL, o.MQTTURL)
	set(&c.MQTT.Username, o.MQTTUsername)
	c.MQTT.Password = o.MQTTPassword
	set(&c.MQTT.DiscoveryPrefix, o.DiscoveryPrefix)
	set(&c.MQTT.BaseTopic, o.BaseTopic)
	if o.ParallelApplies != 0 {
		c.Tofu.ParallelApplies = o.ParallelApplies
	}
	c.Tofu.StatePassphrase = o.StatePassphrase
	c.Discovery.CIDRs = o.DiscoveryCIDRs
	set(&c.Discovery.Interval, o.DiscoveryInterval)
	c.Credentials.Redfish = RedfishCredentials{Username: o.RedfishUsername, Password: o.RedfishPassword}
	c.Credentials.OCI = OCICredentials{TenancyOCID: o.OCITenancyOCID, UserOCID: o.OCIUserOCID,
		Fingerprint: o.OCIFingerprint, PrivateKey: o.OCIPrivateKey, Region: o.OCIRegion}
	os := &c.Credentials.OpenStack
	set(&os.AuthURL, o.OpenStackAuthURL)
	set(&os.Username, o.OpenStackUsername)
	os.Password = o.OpenStackPassword
	set(&os.ProjectName, o.OpenStackProjectName)
	set(&os.UserDomainName, o.OpenStackUserDomainName)
	set(&os.ProjectDomainName, o.OpenStackProjectDomainName)
	set(&os.Region, o.OpenStackRegion)
}

// MQTTService is the broker the Supervisor's MQTT service describes.
type MQTTService struct {
	URL      string
	Username string
	Password Secret
}

// MQTT asks the Supervisor for the MQTT service
// (GET /services/mqtt, documented answer
// {"result":"ok","data":{"host","port","ssl","username","password"}}; port
// may be a string or a number).
func (s Supervisor) MQTT(ctx context.Context) (MQTTService, error) {
	if s.Token == "" {
		return MQTTService{}, fmt.Errorf("SUPERVISOR_TOKEN is not set (is this running as an add-on with services: mqtt:need?)")
	}
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/services/mqtt", nil)
	if err != nil {
		return MQTTService{}, fmt.Errorf("supervisor: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token.Reveal())
	resp, err := client.Do(req)
	if err != nil {
		return MQTTService{}, fmt.Errorf("supervisor: MQTT service: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return MQTTService{}, fmt.Errorf("supervisor: MQTT service: %w", err)
	}
	var ans struct {
		Result  string `json:"result"`
		Message string `json:"message"`
		Data    struct {
			Host     string          `json:"host"`
			Port     json.RawMessage `json:"port"`
			SSL      bool            `json:"ssl"`
			Username string          `json:"username"`
			Password Secret          `json:"password"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return MQTTService{}, fmt.Errorf("supervisor: MQTT service: HTTP %d, unreadable answer", resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK || ans.Result != "ok" {
		msg := ans.Message
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return MQTTService{}, fmt.Errorf("supervisor: MQTT service: %s (HTTP %d); is the Mosquitto broker add-on installed?", msg, resp.StatusCode)
	}
	port, err := parsePort(ans.Data.Port)
	if err != nil || ans.Data.Host == "" {
		return MQTTService{}, fmt.Errorf("supervisor: MQTT service: incomplete answer (host %q, port %s)", ans.Data.Host, ans.Data.Port)
	}
	scheme := "tcp"
	if ans.Data.SSL {
		scheme = "ssl"
	}
	return MQTTService{
		URL:      scheme + "://" + net.JoinHostPort(ans.Data.Host, strconv.Itoa(port)),
		Username: ans.Data.Username,
		Password: ans.Data.Password,
	}, nil
}

func parsePort(raw json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, checkPort(n)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("port %s", raw)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("port %q", s)
	}
	return n, checkPort(n)
}

func checkPort(n int) error {
	if n < 1 || n > 65535 {
		return fmt.Errorf("port %d out of range", n)
	}
	return nil
}
