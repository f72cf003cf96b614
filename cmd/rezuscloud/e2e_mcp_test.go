package main

// Issue 25's tests through the built binary: the MCP server of `rezuscloud
// run` ([mcp] enabled) with a real MCP client (the official SDK's, through
// mcptest), the real broker, the real tofu and simulated nodes.

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/mcp/mcptest"
)

// e2eMCPToken is the configured bearer token (32 URL-safe characters).
const e2eMCPToken = "e2eMCPtok-4f9a1c7b2d8e6f03a5b9c1"

// mcpForbidden are tools that must never exist, whatever the options.
var mcpForbidden = []string{"destroy", "destroy_cluster", "reset", "reset_node", "cancel", "reboot", "bootstrap",
	"adopt", "forget", "replace", "power_controlplane", "scale_controlplane", "delete"}

// TestE2EMCP is issue 25's test against the built binary. With [mcp]
// enabled and writes off it proves that a real MCP client, with the
// configured token, sees the read tools only and no destroy-like tool;
// cluster_status agrees with the tenant's state on MQTT (phase, nodes
// ready and total, worker count); a write tool is refused because it does
// not exist; a wrong or missing token gets 401. Restarted with writes on,
// scale_workers within the group's limits is accepted, written into the
// file, shown by the workers count entity's state on MQTT and applied (an
// apply event); a count beyond the limits is refused with its reason and
// changes nothing; there is still no destroy tool. The token never reaches
// MQTT or the log.
func TestE2EMCP(t *testing.T) {
	e := newEnv(t, envOptions{tenant: "lab", machines: 4, workers: 1, delays: quickDelays})
	port := freeLoopbackPort(t)
	e.appendConfig(fmt.Sprintf("[mcp]\nenabled = true\nport    = %d\ntoken   = %q\nwrites  = false\n", port, e2eMCPToken))
	baseURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	var logs []string // every run's log
	keepLog := func() { logs = append(logs, e.proc.stderr.String()+e.proc.stdout.String()) }

	// ---- writes off
	e.start()
	e.proc.waitLog(startTimeout, "MCP server listening")
	mark := e.cap.mark()
	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.mustSucceed(mark, "apply")
	d := e.waitTenant("running, 2 of 2 ready, idle", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 2 && d.NodesTotal == 2 && d.Operation == nil
	})

	c := mcptest.Connect(t, baseURL, e2eMCPToken, mcptest.Options{Name: "e2e-readonly"})
	tools := c.Tools()
	if want := slices.Sorted(slices.Values(mcp.ReadTools)); !slices.Equal(tools, want) {
		t.Errorf("writes off: tools %v, want the read tools %v", tools, want)
	}
	for _, w := range append(slices.Clone(mcp.WriteTools), mcpForbidden...) {
		if slices.Contains(tools, w) {
			t.Errorf("writes off: tool %s is offered", w)
		}
	}
	st := c.Status("lab")
	if st.Phase != d.Phase || st.NodesReady != d.NodesReady || st.NodesTotal != d.NodesTotal || st.Problem != d.Problem {
		t.Errorf("cluster_status %s %d/%d problem %v; MQTT says %s %d/%d problem %v",
			st.Phase, st.NodesReady, st.NodesTotal, st.Problem, d.Phase, d.NodesReady, d.NodesTotal, d.Problem)
	}
	if st.Phase != "running" || st.NodesReady != 2 || st.Provider != "metal" || st.DisplayName != "Lab" {
		t.Errorf("cluster_status: %+v", st.ClusterSummary)
	}
	var workers *mcp.Group
	for i := range st.Groups {
		if st.Groups[i].Name == "workers" {
			workers = &st.Groups[i]
		}
	}
	if workers == nil || workers.Count != d.Counts["workers"] || workers.Count != 1 || workers.Min != 0 || workers.Max != 3 {
		t.Errorf("cluster_status groups %+v; MQTT counts %v; want workers 1 of 0..3 (a pool of three machines)", st.Groups, d.Counts)
	}
	ready := 0
	for _, n := range st.Nodes {
		if n.Ready && n.Stage == "running" {
			ready++
		}
	}
	if len(st.Nodes) != 2 || ready != 2 {
		t.Errorf("cluster_status nodes %+v, want 2 running and ready", st.Nodes)
	}
	if cl := c.Clusters(); len(cl) != 1 || cl[0].Name != "lab" || cl[0].Phase != d.Phase || cl[0].NodesReady != d.NodesReady {
		t.Errorf("list_clusters: %+v", cl)
	}
	before, _ := os.ReadFile(e.tenantFile)
	mark = e.cap.mark()
	t.Logf("scale_workers with writes off: %s", c.Refused(mcp.ToolScaleWorkers,
		map[string]any{"cluster": "lab", "group": "workers", "count": 2}, `unknown tool "scale_workers"`))
	t.Logf("destroy: %s", c.Refused("destroy", map[string]any{"cluster": "lab"}, `unknown tool "destroy"`))
	// the token in the URL, as Home Assistant's MCP client integration sends it
	if got := mcptest.Connect(t, baseURL, e2eMCPToken, mcptest.Options{Name: "e2e-inpath", InPath: true}).Tools(); !slices.Equal(got, tools) {
		t.Errorf("with the token in the path: tools %v, want %v", got, tools)
	}
	mcptest.Unauthorized(t, baseURL, "wrong-token-0123456789abcdefghij")
	mcptest.Unauthorized(t, baseURL, e2eMCPToken[:len(e2eMCPToken)-1])
	if after, _ := os.ReadFile(e.tenantFile); string(after) != string(before) {
		t.Errorf("a refused write changed the file:\n%s", after)
	}
	e.mustFail("plan", map[string]any{"tenant": "nosuch"}, "nosuch") // a round trip through the bridge after the refusals
	if evs := e.events(mark); len(evs) != 0 {
		t.Errorf("refused writes fired events: %+v", evs)
	}
	_ = c.Session.Close()
	e.stop()
	keepLog()

	// ---- writes on
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	on := strings.Replace(string(cfg), "writes  = false", "writes  = true", 1)
	if on == string(cfg) {
		t.Fatal("could not turn writes on in the config")
	}
	if err := os.WriteFile(e.cfgPath, []byte(on), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.proc.waitLog(startTimeout, "MCP server listening")
	e.waitTenant("running again, 2 of 2 ready, idle", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 2 && d.Operation == nil
	})
	c = mcptest.Connect(t, baseURL, e2eMCPToken, mcptest.Options{Name: "e2e-writer"})
	tools = c.Tools()
	want := slices.Sorted(slices.Values(append(slices.Clone(mcp.ReadTools), mcp.WriteTools...)))
	if !slices.Equal(tools, want) {
		t.Errorf("writes on: tools %v, want %v", tools, want)
	}
	for _, f := range mcpForbidden {
		if slices.Contains(tools, f) {
			t.Errorf("writes on: tool %s is offered", f)
		}
	}
	c.Refused("destroy", map[string]any{"cluster": "lab", "confirm": "lab"}, `unknown tool "destroy"`)

	// beyond the group's limits: refused with the reason, nothing changed
	before, _ = os.ReadFile(e.tenantFile)
	mark = e.cap.mark()
	t.Logf("scale_workers beyond the limits: %s", c.Refused(mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "group": "workers", "count": 4},
		"count 4 is out of range 0..3 for group workers of cluster lab (its machine pool has 3 machines)"))
	c.Refused(mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "group": "cp", "count": 3}, "control-plane group")
	if after, _ := os.ReadFile(e.tenantFile); string(after) != string(before) {
		t.Fatalf("a refused scale changed the file:\n%s", after)
	}
	e.mustFail("plan", map[string]any{"tenant": "nosuch"}, "nosuch")
	if evs := e.events(mark); len(evs) != 0 {
		t.Errorf("refused scales fired events: %+v", evs)
	}
	if d, _ := e.tenantState(); d.Counts["workers"] != 1 {
		t.Errorf("after refused scales the workers count is %d, want 1", d.Counts["workers"])
	}

	// within the limits: written, shown on MQTT, applied
	if got := commandTopic(t, e.discovery(e.tenantID()), "workers_count"); got != base+"/lab/workers/count/set" {
		t.Errorf("the workers count entity's command topic is %q", got)
	}
	mark = e.cap.mark()
	out := c.Scale("lab", "workers", 2)
	if out.Cluster != "lab" || out.Action != "scale" || !strings.Contains(out.Message, "set to 2 nodes in the file (was 1)") ||
		!strings.Contains(out.Message, "applies the change now") {
		t.Errorf("scale_workers answered %+v", out)
	}
	e.waitTenant("the workers count entity at 2", func(d tenantDoc) bool { return d.Counts["workers"] == 2 })
	e.mustSucceed(mark, "apply")
	e.waitTenant("running, 3 of 3 ready", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 3 && d.NodesTotal == 3 && d.Operation == nil
	})
	started := false
	for _, ev := range e.events(mark) {
		if ev.Operation == "apply" && ev.EventType == "started" {
			started = true
		}
	}
	if !started {
		t.Errorf("no apply started event after the scale: %+v", e.events(mark))
	}
	file, _ := os.ReadFile(e.tenantFile)
	if !regexp.MustCompile(`count = 2\s+# set from Home Assistant`).Match(file) {
		t.Errorf("the file does not have the workers at 2 (comment kept):\n%s", file)
	}
	if st := c.Status("lab"); st.NodesReady != 3 || st.Phase != "running" {
		t.Errorf("cluster_status after the scale: %+v", st.ClusterSummary)
	}
	_ = c.Session.Close()
	log := e.proc.stderr.String()
	for _, w := range []string{"AI assistant write refused", "AI assistant write sent", "e2e-writer"} {
		if !strings.Contains(log, w) {
			t.Errorf("the log does not say %q", w)
		}
	}
	e.stop()
	keepLog()

	// the token: nowhere on MQTT, nowhere in either run's log
	checkNoSecrets(t, e.cap.all(), []string{e2eMCPToken, e.passphrase})
	for i, l := range logs {
		checkLogNoSecrets(t, l, []string{e2eMCPToken, e.passphrase})
		if !strings.Contains(l, "MCP server listening") {
			t.Errorf("run %d: no MCP start line in the log", i+1)
		}
	}
	t.Logf("MCP at %s, %d tools with writes on: %v", baseURL, len(tools), tools)
}
