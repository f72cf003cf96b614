package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/mcp/mcptest"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestStartMCP: with [mcp] enabled, serve's one call starts the server on
// the configured loopback port behind a token generated once (0600, never
// logged), with the read tools only while writes are off.
func TestStartMCP(t *testing.T) {
	port := freeLoopbackPort(t)
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.MCP.Enabled, cfg.MCP.Port = true, port
	var logs bytes.Buffer
	log, err := logging.New("debug", &logs)
	if err != nil {
		t.Fatal(err)
	}
	command := func(_ context.Context, req hass.Request) hass.Response {
		t.Errorf("a command was sent: %+v", req)
		return hass.Response{Status: "error"}
	}
	stop := startMCP(context.Background(), cfg, log, command, emptySource{}, nil)
	defer stop()

	tok, err := os.ReadFile(filepath.Join(cfg.DataDir, config.MCPTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(cfg.DataDir, config.MCPTokenFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", fi.Mode())
	}
	token := strings.TrimSpace(string(tok))
	base := "http://" + cfg.MCP.ListenAddr(false, nil)
	c := mcptest.Connect(t, base, token, mcptest.Options{})
	want := slices.Sorted(slices.Values(mcp.ReadTools))
	if got := c.Tools(); !slices.Equal(got, want) {
		t.Errorf("tools %v, want %v", got, want)
	}
	if len(c.Clusters()) != 0 {
		t.Error("clusters from an engine without a read API")
	}
	mcptest.Unauthorized(t, base, "not-the-token-0123456789abcdef")
	stop()
	if strings.Contains(logs.String(), token) {
		t.Error("the token reached the log")
	}
	if !strings.Contains(logs.String(), "MCP server listening") {
		t.Errorf("no start line in the log:\n%s", logs.String())
	}
}

// emptySource is a read source without clusters.
type emptySource struct{}

func (emptySource) Views() []tenant.View                                      { return nil }
func (emptySource) View(string) (tenant.View, bool)                           { return tenant.View{}, false }
func (emptySource) Machines() []talos.Machine                                 { return nil }
func (emptySource) Changed() <-chan struct{}                                  { return nil }
func (emptySource) PendingPlan(context.Context, string) (*tfjson.Plan, error) { return nil, nil }
