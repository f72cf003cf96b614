package config

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Supervisor is how add-on mode reaches Home Assistant's Supervisor. Every
// call it makes is one the Supervisor lets any add-on make with its own
// token, without hassio_api (api/middleware/security.py: /services*,
// /addons/self/*).
type Supervisor struct {
	URL    string // http://supervisor
	Token  Secret // SUPERVISOR_TOKEN
	Client *http.Client
}

// AddonInfo is what the add-on learned about itself from the Supervisor.
type AddonInfo struct {
	// Slug is the add-on's slug (<repository hash>_rezuscloud), from
	// /addons/self/info or else the container's host name; "" when unknown.
	Slug string
	// Ingress: the add-on has a panel (config.yaml ingress: true).
	Ingress bool
	// InfoErr is why /addons/self/info could not be read (nil when it was).
	InfoErr error
}

// ConfigurationURL is where a device's "Visit" link leads: the add-on's
// panel when it has one (homeassistant://app/<slug>, the path Home
// Assistant opens apps at since 2026.2), else its page in Settings → Apps;
// outside add-on mode the documentation.
func (c *Config) ConfigurationURL() string {
	switch {
	case !c.AddonMode || c.Addon.Slug == "":
		return DocsURL
	case c.Addon.Ingress:
		return "homeassistant://app/" + c.Addon.Slug
	default:
		return "homeassistant://config/app/" + c.Addon.Slug + "/info"
	}
}

// DocsURL is the user documentation (the add-on's Documentation tab).
const DocsURL = "https://github.com/rezuscloud/rezuscloud/blob/main/DOCS.md"

// SelfInfo is the part of GET /addons/self/info that rezuscloud reads.
type SelfInfo struct {
	Slug    string `json:"slug"`
	Ingress bool   `json:"ingress"`
	// Options are the options as the Supervisor keeps them: the user's,
	// merged over config.yaml's defaults, and still holding keys the
	// schema no longer has (which it leaves out of /data/options.json).
	Options map[string]any `json:"options"`
}

// SelfInfo asks the Supervisor about this add-on (GET /addons/self/info).
func (s Supervisor) SelfInfo(ctx context.Context) (SelfInfo, error) {
	var info SelfInfo
	err := s.call(ctx, http.MethodGet, "/addons/self/info", nil, &info)
	return info, err
}

// SaveOptions replaces the add-on's options as the Supervisor keeps them
// (POST /addons/self/options, {"options": …}). The Supervisor validates
// them against the schema first and keeps the old ones when they do not
// fit. The running add-on's /data/options.json is not rewritten: that
// happens at its next start.
func (s Supervisor) SaveOptions(ctx context.Context, options map[string]any) error {
	return s.call(ctx, http.MethodPost, "/addons/self/options", map[string]any{"options": options}, nil)
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
	var data struct {
		Host     string          `json:"host"`
		Port     json.RawMessage `json:"port"`
		SSL      bool            `json:"ssl"`
		Username string          `json:"username"`
		Password Secret          `json:"password"`
	}
	if err := s.call(ctx, http.MethodGet, "/services/mqtt", nil, &data); err != nil {
		return MQTTService{}, fmt.Errorf("%w; is the Mosquitto broker app installed?", err)
	}
	port, err := parsePort(data.Port)
	if err != nil || data.Host == "" {
		return MQTTService{}, fmt.Errorf("supervisor: /services/mqtt: incomplete answer (host %q, port %s)", data.Host, data.Port)
	}
	scheme := "tcp"
	if data.SSL {
		scheme = "ssl"
	}
	return MQTTService{
		URL:      scheme + "://" + net.JoinHostPort(data.Host, strconv.Itoa(port)),
		Username: data.Username,
		Password: data.Password,
	}, nil
}

// call makes one Supervisor API call and decodes the data of its
// {"result":"ok","data":…} answer into out (when out is not nil). Errors
// name the path and the Supervisor's message, never a request body.
func (s Supervisor) call(ctx context.Context, method, path string, body, out any) error {
	if s.Token == "" {
		return fmt.Errorf("supervisor: %s: SUPERVISOR_TOKEN is not set (is this running as an add-on?)", path)
	}
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("supervisor: %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		return fmt.Errorf("supervisor: %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token.Reveal())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("supervisor: %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("supervisor: %s: %w", path, err)
	}
	var ans struct {
		Result  string          `json:"result"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("supervisor: %s: HTTP %d, unreadable answer", path, resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK || ans.Result != "ok" {
		msg := ans.Message
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return fmt.Errorf("supervisor: %s: %s (HTTP %d)", path, msg, resp.StatusCode)
	}
	if out != nil && len(ans.Data) > 0 {
		if err := json.Unmarshal(ans.Data, out); err != nil {
			return fmt.Errorf("supervisor: %s: unreadable data: %w", path, err)
		}
	}
	return nil
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
