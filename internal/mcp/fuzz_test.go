package mcp_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/mcp/mcptest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// allowed are the only request actions a tool may send.
var allowed = []string{hass.ActionPlan, hass.ActionApply, hass.ActionScale, hass.ActionPower, hass.ActionBackup,
	hass.ActionUpgrade}

// FuzzToolArguments calls tools with arbitrary names and arguments, on the
// Assist-script path (Call) and through a real MCP client over HTTP: no
// panic, and every request sent is one of the allowed actions, on a known
// cluster, a worker group within its limits, a bare-metal worker's power,
// the file's version.
func FuzzToolArguments(f *testing.F) {
	f.Add(mcp.ToolScaleWorkers, []byte(`{"cluster":"lab","count":3}`))
	f.Add(mcp.ToolPowerWorker, []byte(`{"cluster":"lab","node":"lab-cp-1","state":"off"}`))
	var (
		once sync.Once
		srv  *mcp.Server
		cmd  *recorder
		src  *fakeSource
		cs   *sdk.ClientSession
	)
	setup := func(t *testing.T) {
		src = newFakeSource(metalView("lab"), cloudView("sky"))
		cmd = &recorder{}
		var tick atomic.Int64
		var err error
		srv, err = mcp.New(mcp.Options{Source: src, Command: cmd.Command, Token: testToken, Writes: true, Log: zap.NewNop(),
			// every call three minutes later: a queued write never blocks the next input
			Now: func() time.Time { return time.Unix(tick.Add(180), 0) }})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler()) // no cleanup: it lives as long as the fuzz process
		s, err := mcptest.Dial(context.Background(), hs.URL, testToken, mcptest.Options{Name: "fuzz"})
		if err != nil {
			t.Fatal(err)
		}
		cs = s
	}
	f.Fuzz(func(t *testing.T, name string, args []byte) {
		once.Do(func() { setup(t) })
		before := len(cmd.requests())
		_, _ = srv.Call(context.Background(), mcp.Caller{Via: "fuzz"}, name, args)
		var m map[string]any
		if json.Unmarshal(args, &m) == nil && m != nil && len(name) < 64 {
			_, _ = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: m})
		}
		for _, r := range cmd.requests()[before:] {
			check(t, r)
		}
	})
}

// check fails for a request no tool may send.
func check(t *testing.T, r hass.Request) {
	t.Helper()
	if !slices.Contains(allowed, r.Action) {
		t.Fatalf("request %q sent: %+v", r.Action, r)
	}
	if r.Confirm != "" || r.Version != "" || r.MAC != "" || r.Enabled != nil || r.Level != "" {
		t.Fatalf("request with a field no tool sets: %+v", r)
	}
	var v mcp.View
	switch r.Tenant {
	case "lab":
		v = metalView("lab")
	case "sky":
		v = cloudView("sky")
	default:
		t.Fatalf("request for an unknown tenant: %+v", r)
	}
	switch r.Action {
	case hass.ActionScale:
		g := v.Spec.Group(r.Group)
		if g == nil || g.Role != tenant.RoleWorker || r.Count == nil || *r.Count < 0 ||
			(v.Spec.Provider == tenant.ProviderMetal && *r.Count > len(g.Machines)) || *r.Count > 100 {
			t.Fatalf("scale outside a worker group's limits: %+v", r)
		}
	case hass.ActionPower:
		n, ok := v.Spec.Node(r.Node)
		if !ok || n.Role != tenant.RoleWorker || v.Spec.Provider != tenant.ProviderMetal || (r.State != "on" && r.State != "off") {
			t.Fatalf("power of a node that is not a bare-metal worker: %+v", r)
		}
	case hass.ActionUpgrade:
		if r.Component != "talos" && r.Component != "kubernetes" {
			t.Fatalf("upgrade of %q", r.Component)
		}
	}
}
