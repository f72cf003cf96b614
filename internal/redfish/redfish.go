// Package redfish is a small Redfish client for the power of one machine:
// it reads a ComputerSystem's PowerState and posts ComputerSystem.Reset
// (On, GracefulShutdown, ForceOff) to the target the system advertises,
// with basic auth over HTTPS. The certificate is verified unless the
// machine is configured as insecure (BMCs often have self-signed ones).
// Errors name the host, never the password.
package redfish

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/machine"
)

// Reset types this package sends (Redfish ResetType values).
const (
	ResetOn               = "On"
	ResetGracefulShutdown = "GracefulShutdown"
	ResetForceOff         = "ForceOff"
)

// Power states a ComputerSystem reports.
const (
	PowerOn          = "On"
	PowerOff         = "Off"
	PowerPoweringOn  = "PoweringOn"
	PowerPoweringOff = "PoweringOff"
)

// DefaultTimeout bounds each request.
const DefaultTimeout = 10 * time.Second

// Options configure a Client.
type Options struct {
	Username, Password string
	// Insecure skips verifying the BMC's certificate.
	Insecure bool
	// RootCAs verifies the certificate; nil: the system's roots.
	RootCAs *x509.CertPool
	// Timeout bounds each request; default DefaultTimeout.
	Timeout time.Duration
}

// String hides the password (Options may end up in a log line).
func (o Options) String() string {
	pw := ""
	if o.Password != "" {
		pw = "***"
	}
	return fmt.Sprintf("{Username:%s Password:%s Insecure:%v Timeout:%s}", o.Username, pw, o.Insecure, o.Timeout)
}

// Client talks to one ComputerSystem.
type Client struct {
	system *url.URL
	opts   Options
	http   *http.Client
}

// New returns a client for the ComputerSystem at systemURL
// ("https://bmc.lan/redfish/v1/Systems/1").
func New(systemURL string, opts Options) (*Client, error) {
	u, err := ParseSystemURL(systemURL)
	if err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("redfish %s: timeout must be positive", u.Host)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a BMC is on the LAN
	tr.TLSClientConfig = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		RootCAs:            opts.RootCAs,
		InsecureSkipVerify: opts.Insecure, //nolint:gosec // only when the machine says redfish_insecure = true
	}
	return &Client{system: u, opts: opts, http: &http.Client{
		Transport: tr,
		Timeout:   opts.Timeout,
		// Basic auth must not follow a redirect to another host.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Host != u.Host || req.URL.Scheme != u.Scheme {
				return fmt.Errorf("redirect to another host %s refused", req.URL.Host)
			}
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}}, nil
}

// ParseSystemURL checks a ComputerSystem URL (machine.RedfishSystemURL).
func ParseSystemURL(s string) (*url.URL, error) { return machine.RedfishSystemURL(s) }

// Host is the BMC's host[:port], what errors name.
func (c *Client) Host() string { return c.system.Host }

// System is the ComputerSystem URL.
func (c *Client) System() string { return c.system.String() }

// computerSystem is the part of a ComputerSystem this package reads.
type computerSystem struct {
	PowerState string `json:"PowerState"`
	Actions    map[string]struct {
		Target    string   `json:"target"`
		Allowable []string `json:"ResetType@Redfish.AllowableValues"`
	} `json:"Actions"`
}

// PowerState reads the system's PowerState (On, Off, PoweringOn, ...).
func (c *Client) PowerState(ctx context.Context) (string, error) {
	cs, err := c.get(ctx)
	if err != nil {
		return "", err
	}
	if cs.PowerState == "" {
		return "", fmt.Errorf("redfish %s: %s has no PowerState", c.Host(), c.system.Path)
	}
	return cs.PowerState, nil
}

// On powers the system on.
func (c *Client) On(ctx context.Context) error { return c.Reset(ctx, ResetOn) }

// GracefulShutdown asks the OS to shut down (an ACPI power-button press).
func (c *Client) GracefulShutdown(ctx context.Context) error {
	return c.Reset(ctx, ResetGracefulShutdown)
}

// ForceOff cuts the power.
func (c *Client) ForceOff(ctx context.Context) error { return c.Reset(ctx, ResetForceOff) }

// Reset posts ComputerSystem.Reset with resetType to the target the system
// advertises (Actions."#ComputerSystem.Reset".target), after checking the
// type is among its allowable values when it lists them.
func (c *Client) Reset(ctx context.Context, resetType string) error {
	cs, err := c.get(ctx)
	if err != nil {
		return err
	}
	act, ok := cs.Actions["#ComputerSystem.Reset"]
	if !ok || act.Target == "" {
		return fmt.Errorf("redfish %s: %s offers no #ComputerSystem.Reset action", c.Host(), c.system.Path)
	}
	if len(act.Allowable) > 0 && !slices.Contains(act.Allowable, resetType) {
		return fmt.Errorf("redfish %s: reset type %s not supported (allowed: %s)", c.Host(), resetType, strings.Join(act.Allowable, ", "))
	}
	target, err := c.system.Parse(act.Target)
	if err != nil {
		return fmt.Errorf("redfish %s: reset target %q: %w", c.Host(), act.Target, err)
	}
	if target.Host != c.system.Host || target.Scheme != c.system.Scheme {
		return fmt.Errorf("redfish %s: reset target %s is on another host; refused", c.Host(), target.Host)
	}
	body, _ := json.Marshal(map[string]string{"ResetType": resetType})
	if _, err := c.do(ctx, http.MethodPost, target, body); err != nil {
		return fmt.Errorf("%w (reset %s)", err, resetType)
	}
	return nil
}

func (c *Client) get(ctx context.Context) (*computerSystem, error) {
	b, err := c.do(ctx, http.MethodGet, c.system, nil)
	if err != nil {
		return nil, err
	}
	var cs computerSystem
	if err := json.Unmarshal(b, &cs); err != nil {
		return nil, fmt.Errorf("redfish %s: GET %s: not a ComputerSystem: %w", c.Host(), c.system.Path, err)
	}
	return &cs, nil
}

// do sends one request with basic auth and returns the body of a 2xx answer.
func (c *Client) do(ctx context.Context, method string, u *url.URL, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("redfish %s: %w", c.Host(), err)
	}
	req.SetBasicAuth(c.opts.Username, c.opts.Password)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("redfish %s: %s %s: reading the answer: %w", c.Host(), method, u.Path, err)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return b, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("redfish %s: %s %s: %s: the BMC refused the credentials of user %q", c.Host(), method, u.Path, resp.Status, c.opts.Username)
	default:
		return nil, fmt.Errorf("redfish %s: %s %s: %s%s", c.Host(), method, u.Path, resp.Status, redfishMessage(b))
	}
}

// transportError words a failure to talk to the BMC, certificates first.
func (c *Client) transportError(method string, u *url.URL, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is ours and carries no credentials, but says nothing new
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify) {
		return fmt.Errorf("redfish %s: %s %s: the BMC's TLS certificate is not trusted (set redfish_insecure = true for this machine to skip verification): %w", c.Host(), method, u.Path, err)
	}
	return fmt.Errorf("redfish %s: %s %s: %w", c.Host(), method, u.Path, err)
}

// redfishMessage extracts the message of a Redfish error body.
func redfishMessage(b []byte) string {
	var e struct {
		Error struct {
			Message  string `json:"message"`
			Extended []struct {
				Message string `json:"Message"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return ""
	}
	msg := e.Error.Message
	for _, x := range e.Error.Extended {
		if x.Message != "" {
			msg = x.Message
			break
		}
	}
	if msg == "" {
		return ""
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return ": " + msg
}
