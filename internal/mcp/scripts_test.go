package mcp_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

const haToken = "ha-long-lived-token-0123456789"

// TestAssistScriptsThroughHA: the scripts rezuscloud generates pass Home
// Assistant's script validation (the stand-in's), get exposed, and a tool
// call as a script fires it runs through the same guard and command path
// as an MCP client's, answered on rezuscloud_tool_result.
func TestAssistScriptsThroughHA(t *testing.T) {
	fake := fakeha.New(haToken)
	defer fake.Close()
	h := start(t, true, metalView("lab"), cloudView("sky"))
	client := wsapi.New(wsapi.Options{URL: fake.URL, Token: haToken}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = client.Run(ctx) }()
	keeper := wsapi.NewScripts(client, wsapi.ScriptsOptions{Enabled: true, StateFile: filepath.Join(t.TempDir(), "s.json")},
		h.srv.CallScript, nil)
	scripts := mcp.AssistScripts(h.src.Views(), true)
	keeper.SetScripts(scripts)
	done := make(chan error, 1)
	go func() { done <- keeper.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var ids []string
	for _, sc := range scripts {
		ids = append(ids, sc.ID)
	}
	want := []string{mcp.ScriptBackupEtcd, mcp.ScriptClusterStatus, mcp.ScriptPendingPlan, mcp.ScriptPowerWorker, mcp.ScriptScaleWorkers}
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Fatalf("scripts %v", ids)
	}
	if n := len(mcp.AssistScripts(nil, false)); n != 2 {
		t.Errorf("read-only scripts: %d, want 2", n)
	}
	for _, id := range want {
		testenv.WaitFor(t, 10*time.Second, id+" exposed", func() bool { return fake.Exposed("script."+id, wsapi.AssistAssistant) })
	}
	for _, r := range fake.ScriptRequests() {
		if r.Status != 200 && !(r.Method == "GET" && r.Status == 404) {
			t.Errorf("HA refused %s %s: %d", r.Method, r.Key, r.Status)
		}
	}
	cfg, _ := fake.Script(mcp.ScriptScaleWorkers)
	fields := cfg["fields"].(map[string]any)
	for name, f := range fields {
		d, _ := f.(map[string]any)["description"].(string)
		if d == "" || len(d) > 128 {
			t.Errorf("field %s: description %q (HA's LLM tools want 1..128 characters)", name, d)
		}
	}
	opts := fields["cluster"].(map[string]any)["selector"].(map[string]any)["select"].(map[string]any)["options"].([]any)
	if len(opts) != 2 || opts[0].(map[string]any)["value"] != "lab" || opts[0].(map[string]any)["label"] != "Lab" {
		t.Errorf("cluster options: %v", opts)
	}

	// calls as the scripts' templates render them: an unset group is "",
	// a number 3.0
	results, stop := fake.Listen(wsapi.EventToolResult, 8)
	defer stop()
	call := func(tx, tool string, args map[string]any) map[string]any {
		t.Helper()
		if err := fake.FireAs("user-7", wsapi.EventToolCall, map[string]any{"tool": tool, "arguments": args, "transaction": tx}); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case ev := <-results:
				var d map[string]any
				_ = json.Unmarshal(ev.Data, &d)
				if d["transaction"] == tx {
					return d
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no result for %s", tx)
			}
		}
	}
	if d := call("t1", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "group": "", "count": 3.0}); d["status"] != "ok" {
		t.Fatalf("scale: %v", d)
	}
	got := h.cmd.requests()
	if len(got) != 1 || got[0].Action != hass.ActionScale || got[0].Group != "workers" || *got[0].Count != 3 {
		t.Errorf("requests %+v", got)
	}
	if d := call("t2", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "group": "cp", "count": 3}); d["status"] != "error" ||
		!strings.Contains(d["error"].(string), "control-plane group") {
		t.Errorf("cp scale: %v", d)
	}
	if d := call("t3", mcp.ToolListClusters, map[string]any{"cluster": ""}); d["status"] != "ok" ||
		len(d["data"].(map[string]any)["clusters"].([]any)) != 2 {
		t.Errorf("status of every cluster: %v", d)
	}
	if d := call("t4", "destroy", map[string]any{"cluster": "lab"}); d["status"] != "error" {
		t.Errorf("destroy: %v", d)
	}
	if len(h.cmd.requests()) != 1 {
		t.Errorf("refused calls sent requests: %+v", h.cmd.requests())
	}
	logs := h.logs.FilterMessage("AI assistant write sent").All()
	if len(logs) != 1 || logs[0].ContextMap()["ha_user"] != "user-7" || logs[0].ContextMap()["via"] != "assist script" {
		t.Errorf("write log: %+v", logs)
	}
}
