// Package mcptest holds the client side of rezuscloud's MCP tests: a real
// MCP client (the official Go SDK's) connected over Streamable HTTP, and
// the steps the tests take with it, so that a test through the built
// binary is a few lines.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rezuscloud/rezuscloud/internal/mcp"
)

// Client is a connected MCP client session.
type Client struct {
	t       testing.TB
	Session *sdk.ClientSession
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Options name the client; zero values are fine.
type Options struct {
	Name string // the client's name (shown in rezuscloud's log); default "mcptest"
	// InPath sends the token in the URL (base/mcp/<token>), as Home
	// Assistant's MCP client integration does, instead of the header.
	InPath bool
}

// Connect connects to the server at base (http://127.0.0.1:port) with
// token, failing the test when it cannot; the session closes at cleanup.
func Connect(t testing.TB, base, token string, o Options) *Client {
	t.Helper()
	s, err := Dial(context.Background(), base, token, o)
	if err != nil {
		t.Fatalf("mcp connect %s: %v", base, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &Client{t: t, Session: s}
}

// Dial connects without a test (benchmarks, and the refusal checks).
func Dial(ctx context.Context, base, token string, o Options) (*sdk.ClientSession, error) {
	name := o.Name
	if name == "" {
		name = "mcptest"
	}
	endpoint := strings.TrimSuffix(base, "/") + mcp.Path
	hc := &http.Client{Timeout: 30 * time.Second}
	if o.InPath {
		endpoint += "/" + token
	} else {
		hc.Transport = bearer{token: token, next: http.DefaultTransport}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: name, Version: "test"}, nil)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1,
		DisableStandaloneSSE: true}, nil)
}

// Tools lists the tool names the server offers, sorted.
func (c *Client) Tools() []string {
	c.t.Helper()
	res, err := c.Session.ListTools(context.Background(), nil)
	if err != nil {
		c.t.Fatalf("list tools: %v", err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}

// ToolSpec returns one tool's description as listed.
func (c *Client) ToolSpec(name string) *sdk.Tool {
	c.t.Helper()
	res, err := c.Session.ListTools(context.Background(), nil)
	if err != nil {
		c.t.Fatalf("list tools: %v", err)
	}
	for _, tl := range res.Tools {
		if tl.Name == name {
			return tl
		}
	}
	c.t.Fatalf("no tool %s", name)
	return nil
}

// Call calls a tool and returns its result (an IsError result is not a
// failure here: see Refused).
func (c *Client) Call(name string, args map[string]any) *sdk.CallToolResult {
	c.t.Helper()
	res, err := c.Session.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		c.t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// Decode calls a tool that must succeed and decodes its structured output.
func Decode[T any](c *Client, name string, args map[string]any) T {
	c.t.Helper()
	res := c.Call(name, args)
	if res.IsError {
		c.t.Fatalf("call %s %v: error: %s", name, args, Text(res))
	}
	var out T
	raw, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil {
		c.t.Fatalf("call %s: structured output: %v", name, err)
	}
	return out
}

// Status is cluster_status.
func (c *Client) Status(cluster string) mcp.ClusterStatus {
	c.t.Helper()
	return Decode[mcp.ClusterStatus](c, mcp.ToolClusterStatus, map[string]any{"cluster": cluster})
}

// Clusters is list_clusters.
func (c *Client) Clusters() []mcp.ClusterSummary {
	c.t.Helper()
	return Decode[mcp.ClusterList](c, mcp.ToolListClusters, map[string]any{}).Clusters
}

// Scale is scale_workers, which must succeed.
func (c *Client) Scale(cluster, group string, count int) mcp.WriteOut {
	c.t.Helper()
	args := map[string]any{"cluster": cluster, "count": count}
	if group != "" {
		args["group"] = group
	}
	return Decode[mcp.WriteOut](c, mcp.ToolScaleWorkers, args)
}

// Refused calls a tool that must answer with an error holding want, and
// returns the error text.
func (c *Client) Refused(name string, args map[string]any, want string) string {
	c.t.Helper()
	res, err := c.Session.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	var msg string
	switch {
	case err != nil:
		msg = err.Error()
	case res.IsError:
		msg = Text(res)
	default:
		c.t.Fatalf("call %s %v: succeeded, want a refusal with %q", name, args, want)
	}
	if !strings.Contains(msg, want) {
		c.t.Fatalf("call %s %v: %q, want it to say %q", name, args, msg, want)
	}
	return msg
}

// Text is a result's text content.
func Text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Unauthorized checks that connecting with token fails with 401, and that
// a plain POST without a token gets 401 too.
func Unauthorized(t testing.TB, base, token string) {
	t.Helper()
	if s, err := Dial(context.Background(), base, token, Options{}); err == nil {
		_ = s.Close()
		t.Fatalf("connected to %s with a wrong token", base)
	} else if !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Fatalf("wrong token: %v, want 401 Unauthorized", err)
	}
	resp, err := http.Post(strings.TrimSuffix(base, "/")+mcp.Path, "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without a token: HTTP %d, want 401", resp.StatusCode)
	}
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("WWW-Authenticate = %q", got)
	}
}

// String makes a Client print as its session id in failures.
func (c *Client) String() string { return fmt.Sprintf("mcp session %s", c.Session.ID()) }
