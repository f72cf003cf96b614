package openstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// reErrored matches what terraform-provider-openstack v3.4.0 prints for a
// server that Nova put into ERROR. It never includes Nova's fault.
var reErrored = regexp.MustCompile(`Error waiting for instance \(([0-9a-fA-F-]{36})\) to become ready: unexpected state 'ERROR', wanted target 'ACTIVE'(\. last error: %!s\(<nil>\))?`)

// explainTimeout bounds the Keystone and Nova calls of Explain.
const explainTimeout = 15 * time.Second

// Explain returns msg (a failed tofu apply's error) with Nova's fault
// message added for every server the provider reports in ERROR, such as
// "No valid host was found. There are not enough hosts available.": the
// provider says only "unexpected state 'ERROR'". env holds the OS_*
// variables tofu was given (OS_AUTH_URL, OS_USERNAME, OS_PASSWORD,
// OS_PROJECT_NAME, OS_USER_DOMAIN_NAME, OS_PROJECT_DOMAIN_NAME,
// OS_REGION_NAME); the tenant's [openstack] region wins over
// OS_REGION_NAME. When msg names no such server, or Nova cannot be asked,
// msg comes back unchanged (with the reason the fault is unknown); no
// credential ever appears in the result.
func (Renderer) Explain(ctx context.Context, t *tenant.Tenant, env map[string]string, msg string) string {
	matches := reErrored.FindAllStringSubmatch(msg, -1)
	if len(matches) == 0 {
		return msg
	}
	region := env["OS_REGION_NAME"]
	if t != nil && t.OpenStack != nil && t.OpenStack.Region != "" {
		region = t.OpenStack.Region
	}
	ctx, cancel := context.WithTimeout(ctx, explainTimeout)
	defer cancel()
	token, compute, err := novaLogin(ctx, env, region)
	done := map[string]bool{}
	for _, m := range matches {
		if done[m[0]] {
			continue
		}
		done[m[0]] = true
		var fault string
		if err == nil {
			fault, err = serverFault(ctx, compute, token, m[1])
		}
		switch {
		case err != nil:
			msg = strings.ReplaceAll(msg, m[0], fmt.Sprintf("Error waiting for instance (%s) to become ready: it went to ERROR (Nova's fault unknown: %v)", m[1], err))
		case fault == "":
			msg = strings.ReplaceAll(msg, m[0], fmt.Sprintf("Error waiting for instance (%s) to become ready: it went to ERROR (Nova gives no fault)", m[1]))
		default:
			msg = strings.ReplaceAll(msg, m[0], fmt.Sprintf("Error waiting for instance (%s) to become ready: it went to ERROR: %s", m[1], fault))
		}
	}
	return msg
}

// novaLogin gets a Keystone v3 token with a password and the public compute
// endpoint of region (any region when empty) from its catalog.
func novaLogin(ctx context.Context, env map[string]string, region string) (token, compute string, err error) {
	authURL := strings.TrimSuffix(env["OS_AUTH_URL"], "/")
	if authURL == "" || env["OS_USERNAME"] == "" || env["OS_PASSWORD"] == "" {
		return "", "", fmt.Errorf("no OpenStack credentials (OS_AUTH_URL, OS_USERNAME, OS_PASSWORD)")
	}
	if !strings.HasSuffix(authURL, "/v3") {
		authURL += "/v3"
	}
	orDefault := func(k string) string {
		if v := env[k]; v != "" {
			return v
		}
		return "Default"
	}
	body, _ := json.Marshal(map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": map[string]any{
			"name": env["OS_USERNAME"], "password": env["OS_PASSWORD"], "domain": map[string]any{"name": orDefault("OS_USER_DOMAIN_NAME")},
		}}},
		"scope": map[string]any{"project": map[string]any{"name": env["OS_PROJECT_NAME"], "domain": map[string]any{"name": orDefault("OS_PROJECT_DOMAIN_NAME")}}},
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, authURL+"/auth/tokens", bytes.NewReader(body))
	if err != nil {
		return "", "", fmt.Errorf("keystone: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	var out struct {
		Token struct {
			Catalog []struct {
				Type      string `json:"type"`
				Endpoints []struct {
					Interface, Region, URL string
					RegionID               string `json:"region_id"`
				} `json:"endpoints"`
			} `json:"catalog"`
		} `json:"token"`
	}
	header, err := call(req, http.StatusCreated, &out)
	if err != nil {
		return "", "", fmt.Errorf("keystone: %w", err)
	}
	for _, s := range out.Token.Catalog {
		if s.Type != "compute" {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Interface == "public" && (region == "" || e.Region == region || e.RegionID == region) {
				return header.Get("X-Subject-Token"), strings.TrimSuffix(e.URL, "/"), nil
			}
		}
	}
	return "", "", fmt.Errorf("keystone: no public compute endpoint in region %q", region)
}

// serverFault is GET /servers/{id}'s fault message ("" without a fault).
func serverFault(ctx context.Context, compute, token, id string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, compute+"/servers/"+id, nil)
	if err != nil {
		return "", fmt.Errorf("nova: %w", err)
	}
	req.Header.Set("X-Auth-Token", token)
	var out struct {
		Server struct {
			Fault struct {
				Message string `json:"message"`
			} `json:"fault"`
		} `json:"server"`
	}
	if _, err := call(req, http.StatusOK, &out); err != nil {
		return "", fmt.Errorf("nova: server %s: %w", id, err)
	}
	return out.Server.Fault.Message, nil
}

// call does req and decodes a JSON answer with the wanted status; errors
// name the status, never the request body (it may hold the password).
func call(req *http.Request, want int, v any) (http.Header, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil, fmt.Errorf("%s %s: %s", req.Method, req.URL.Redacted(), resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(v); err != nil {
		return nil, fmt.Errorf("%s %s: decoding the answer: %w", req.Method, req.URL.Redacted(), err)
	}
	return resp.Header, nil
}

// unwrapURLError drops *url.Error's method and URL (call adds its own).
func unwrapURLError(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && strings.Contains(err.Error(), "://") {
		if inner := u.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
