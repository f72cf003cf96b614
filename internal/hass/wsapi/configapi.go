package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Home Assistant keeps scripts in scripts.yaml, and writes them only
// through its REST config API (homeassistant/components/config/script.py:
// GET, POST and DELETE /api/config/script/config/<object id>, admin only;
// POST replaces the whole script and reloads scripts; DELETE removes it
// and its entity registry entry). There is no WebSocket command for it.
// The Supervisor's proxy forwards GET, POST and DELETE under
// http://supervisor/core/api/ with the add-on's token, so the REST API is
// reached with the same URL and token as the WebSocket link.

// ErrScriptNotFound: no script with that object id.
var ErrScriptNotFound = errors.New("home assistant: no such script")

// objectIDRE is HA's cv.slug for a script's object id.
var objectIDRE = regexp.MustCompile(`^[a-z0-9]+(?:_[a-z0-9]+)*$`)

// restBase derives the REST API's base URL (ending in /api/) from the
// WebSocket URL: ws://host:8123/api/websocket → http://host:8123/api/,
// ws://supervisor/core/websocket → http://supervisor/core/api/.
func restBase(wsURL string) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("websocket url scheme %q", u.Scheme)
	}
	p := strings.TrimSuffix(u.Path, "websocket")
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	if !strings.HasSuffix(p, "/api/") {
		p += "api/"
	}
	u.Path, u.RawQuery, u.Fragment = p, "", ""
	return u.String(), nil
}

// ScriptAPI reads and writes script configs over HA's REST config API.
type ScriptAPI struct {
	base  string
	token string
	hc    *http.Client
}

// ScriptAPI returns the config API client for this link (same host and
// token); nil when the link is disabled.
func (c *Client) ScriptAPI() *ScriptAPI {
	if c.Disabled() {
		return nil
	}
	base, err := restBase(c.opts.URL)
	if err != nil {
		return nil
	}
	return &ScriptAPI{base: base, token: c.opts.Token, hc: &http.Client{Timeout: callTimeout}}
}

// Get returns a script's config as stored; ErrScriptNotFound when absent.
func (a *ScriptAPI) Get(ctx context.Context, id string) (map[string]any, error) {
	body, err := a.do(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(body, &cfg); err != nil || cfg == nil {
		return nil, fmt.Errorf("reading script %s: unexpected answer", id)
	}
	return cfg, nil
}

// Put creates or replaces a script (HA validates it and reloads scripts).
func (a *ScriptAPI) Put(ctx context.Context, id string, cfg map[string]any) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = a.do(ctx, http.MethodPost, id, b)
	return err
}

// Delete removes a script; ErrScriptNotFound when it was not there.
func (a *ScriptAPI) Delete(ctx context.Context, id string) error {
	_, err := a.do(ctx, http.MethodDelete, id, nil)
	return err
}

func (a *ScriptAPI) do(ctx context.Context, method, id string, body []byte) ([]byte, error) {
	if !objectIDRE.MatchString(id) {
		return nil, fmt.Errorf("script id %q is not a valid object id", id)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+"config/script/config/"+id, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s script %s: %s", method, id, redact(err.Error(), a.token))
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var msg struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(out, &msg)
	switch {
	case resp.StatusCode == http.StatusOK:
		return out, nil
	case resp.StatusCode == http.StatusNotFound && method == http.MethodGet,
		resp.StatusCode == http.StatusBadRequest && method == http.MethodDelete && msg.Message == "Resource not found":
		return nil, ErrScriptNotFound
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s script %s: home assistant refused the token (HTTP 401)", method, id)
	case resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, fmt.Errorf("%s script %s: HTTP 405: this Supervisor does not forward %s to Home Assistant's API "+
			"(update the Supervisor)", method, id, method)
	}
	if msg.Message == "" {
		msg.Message = http.StatusText(resp.StatusCode)
	}
	return nil, fmt.Errorf("%s script %s: HTTP %d: %s (after %s)", method, id, resp.StatusCode, msg.Message,
		time.Since(start).Round(time.Millisecond))
}
