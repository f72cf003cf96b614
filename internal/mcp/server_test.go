package mcp_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/mcp/mcptest"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// forbidden are tools that must never exist, whatever the options.
var forbidden = []string{"destroy", "reset", "cancel", "reboot", "bootstrap", "adopt", "forget", "replace",
	"power_controlplane", "destroy_cluster", "scale_controlplane"}

// TestToolsListed: a real MCP client over HTTP sees the read tools only by
// default, the write tools too with writes on, and never a destroy tool;
// every tool and every input field is described for the LLM.
func TestToolsListed(t *testing.T) {
	for _, writes := range []bool{false, true} {
		h := start(t, writes, metalView("lab"))
		c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})
		want := slices.Clone(mcp.ReadTools)
		if writes {
			want = append(want, mcp.WriteTools...)
		}
		slices.Sort(want)
		if got := c.Tools(); !slices.Equal(got, want) {
			t.Errorf("writes %v: tools %v, want %v", writes, got, want)
		}
		for _, name := range forbidden {
			if slices.Contains(c.Tools(), name) {
				t.Errorf("writes %v: tool %s exists", writes, name)
			}
		}
		for _, name := range want {
			tl := c.ToolSpec(name)
			if len(tl.Description) < 40 {
				t.Errorf("%s: description %q is too thin for an LLM", name, tl.Description)
			}
			if tl.Annotations == nil || tl.Annotations.ReadOnlyHint == slices.Contains(mcp.WriteTools, name) {
				t.Errorf("%s: read-only hint wrong: %+v", name, tl.Annotations)
			}
			raw, _ := json.Marshal(tl.InputSchema)
			var sc struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
				AdditionalProperties any `json:"additionalProperties"`
			}
			if err := json.Unmarshal(raw, &sc); err != nil {
				t.Fatal(err)
			}
			for field, p := range sc.Properties {
				if p.Description == "" {
					t.Errorf("%s: input field %s has no description", name, field)
				}
			}
			if sc.AdditionalProperties != false {
				t.Errorf("%s: additional properties allowed: %v", name, sc.AdditionalProperties)
			}
			if name != mcp.ToolListClusters && name != mcp.ToolListMachines {
				if _, ok := sc.Properties["cluster"]; !ok {
					t.Errorf("%s: takes no explicit cluster name", name)
				}
			}
			if tl.OutputSchema == nil {
				t.Errorf("%s: no output schema", name)
			}
		}
	}
}

// TestClusterStatus reads a cluster's status, nodes, last operation,
// groups with limits and the problem with its reasons.
func TestClusterStatus(t *testing.T) {
	v := metalView("lab")
	v.Status.Phase = tenant.PhaseDegraded
	v.Status.Problem = true
	v.Status.Problems = []string{"node lab-workers-2 is unreachable since 10:02"}
	v.Status.Summary = "Lab is degraded: node lab-workers-2 is unreachable."
	n := v.Nodes["lab-workers-2"]
	n.Stage, n.Ready = tenant.StageUnreachable, false
	v.Nodes["lab-workers-2"] = n
	v.Status.NodesReady = 2
	h := start(t, false, v, cloudView("sky"))
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})

	st := c.Status("lab")
	if st.Phase != "degraded" || !st.Problem || st.Summary != v.Status.Summary ||
		!slices.Equal(st.Problems, v.Status.Problems) || st.NodesReady != 2 || st.NodesTotal != 3 {
		t.Errorf("status: %+v", st)
	}
	if st.DisplayName != "Lab" || st.Provider != "metal" || st.LastOperation == nil ||
		st.LastOperation.Result != "succeeded" || st.LastOperation.At != "2026-11-30T12:00:00Z" {
		t.Errorf("status header: %+v %+v", st.ClusterSummary, st.LastOperation)
	}
	wantGroups := []mcp.Group{{Name: "cp", Role: "controlplane", Count: 1, Min: 1, Max: 1},
		{Name: "workers", Role: "worker", Count: 2, Min: 0, Max: 3}}
	if !slices.Equal(st.Groups, wantGroups) {
		t.Errorf("groups %+v, want %+v", st.Groups, wantGroups)
	}
	if len(st.Nodes) != 3 || st.Nodes[2].Name != "lab-workers-2" || st.Nodes[2].Stage != "unreachable" || st.Nodes[2].Ready {
		t.Errorf("nodes: %+v", st.Nodes)
	}
	cl := c.Clusters()
	if len(cl) != 2 || cl[0].Name != "lab" || cl[1].Name != "sky" || cl[1].Summary == "" {
		t.Errorf("clusters: %+v", cl)
	}
	c.Refused(mcp.ToolClusterStatus, map[string]any{"cluster": "nope"}, `no cluster named "nope" (the clusters are: lab, sky)`)
	c.Refused(mcp.ToolClusterStatus, map[string]any{}, "cluster")
	if got := h.cmd.requests(); len(got) != 0 {
		t.Errorf("reads sent requests: %+v", got)
	}
}

// TestWritesOff: with writes off a write tool does not exist for an MCP
// client and is refused on the script path, and nothing is sent.
func TestWritesOff(t *testing.T) {
	h := start(t, false, metalView("lab"))
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})
	c.Refused(mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "count": 3}, "scale_workers")
	if _, err := h.srv.Call(context.Background(), mcp.Caller{Via: "assist script"}, mcp.ToolScaleWorkers,
		json.RawMessage(`{"cluster":"lab","count":3}`)); err == nil || !strings.Contains(err.Error(), "writes for AI assistants are off") {
		t.Errorf("script path with writes off: %v", err)
	}
	if got := h.cmd.requests(); len(got) != 0 {
		t.Errorf("sent %+v", got)
	}
}

// TestScaleWithinLimits sends the right request, logged with who and what.
func TestScaleWithinLimits(t *testing.T) {
	h := start(t, true, metalView("lab"))
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{Name: "claude-desktop"})
	out := c.Scale("lab", "", 3)
	if out.Action != "scale" || out.Queued || out.Cluster != "lab" || !strings.Contains(out.Message, "set to 3 nodes") {
		t.Errorf("answer: %+v", out)
	}
	got := h.cmd.requests()
	if len(got) != 1 || got[0].Action != hass.ActionScale || got[0].Tenant != "lab" || got[0].Group != "workers" ||
		got[0].Count == nil || *got[0].Count != 3 {
		t.Fatalf("requests: %+v", got)
	}
	logs := h.logs.FilterMessage("AI assistant write sent").All()
	if len(logs) != 1 {
		t.Fatalf("write logs: %d", len(logs))
	}
	f := logs[0].ContextMap()
	if f["client"] != "claude-desktop test" || !strings.HasPrefix(f["remote"].(string), "127.0.0.1:") ||
		f["tool"] != "scale_workers" || f["cluster"] != "lab" || f["count"] != int64(3) || f["via"] != "mcp" {
		t.Errorf("log fields: %v", f)
	}
	// scale down to zero is within limits too
	c.Scale("lab", "workers", 0)
}

// TestRefusals: each guard refuses with its reason and sends nothing.
func TestRefusals(t *testing.T) {
	busy := metalView("busy")
	op := "applying"
	busy.Status.Operation = &op
	busy.Status.Activity = "scaling"
	busy.Status.OperationStep = "configuring talos"
	queued := metalView("queued")
	queued.Status.Queued = 1
	orphan := metalView("orphan")
	orphan.Spec = nil
	h := start(t, true, metalView("lab"), cloudView("sky"), busy, queued, orphan)
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"beyond the pool", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "count": 4},
			"count 4 is out of range 0..3 for group workers of cluster lab (its machine pool has 3 machines)"},
		{"beyond the schema", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "count": 101}, "maximum"},
		{"negative", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "count": -1}, "minimum"},
		{"not a number", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "count": "three"}, "count"},
		{"control plane group", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "group": "cp", "count": 3},
			"group cp of cluster lab is a control-plane group"},
		{"no such group", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "group": "gpu", "count": 1},
			`cluster lab has no group "gpu" (its worker groups: workers)`},
		{"same count", mcp.ToolScaleWorkers, map[string]any{"cluster": "lab", "count": 2}, "has 2 nodes already"},
		{"unknown cluster", mcp.ToolApply, map[string]any{"cluster": "nope"}, `no cluster named "nope"`},
		{"bad cluster name", mcp.ToolApply, map[string]any{"cluster": "../etc"}, "cluster"},
		{"extra field", mcp.ToolApply, map[string]any{"cluster": "lab", "confirm": "lab"}, "confirm"},
		{"busy", mcp.ToolApply, map[string]any{"cluster": "busy"}, "cluster busy is busy: scaling (configuring talos) is running"},
		{"queued", mcp.ToolBackupEtcd, map[string]any{"cluster": "queued"}, "has 1 operations queued"},
		{"control plane power", mcp.ToolPowerWorker, map[string]any{"cluster": "lab", "node": "lab-cp-1", "state": "off"},
			"node lab-cp-1 of cluster lab is a control plane"},
		{"cloud power", mcp.ToolPowerWorker, map[string]any{"cluster": "sky", "node": "sky-pool-1", "state": "off"},
			"only bare-metal workers"},
		{"power state", mcp.ToolPowerWorker, map[string]any{"cluster": "lab", "node": "lab-workers-1", "state": "reboot"}, "state"},
		{"unknown node", mcp.ToolPowerWorker, map[string]any{"cluster": "lab", "node": "lab-workers-9", "state": "on"},
			`cluster lab has no node "lab-workers-9"`},
		{"upgrade nothing to do", mcp.ToolUpgrade, map[string]any{"cluster": "lab", "component": "talos"},
			"runs talos v1.13.0 already"},
		{"upgrade component", mcp.ToolUpgrade, map[string]any{"cluster": "lab", "component": "kernel"}, "component"},
		{"orphan", mcp.ToolScaleWorkers, map[string]any{"cluster": "orphan", "count": 1}, "has no file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Refused(tc.tool, tc.args, tc.want)
		})
	}
	if got := h.cmd.requests(); len(got) != 0 {
		t.Errorf("refused writes sent %+v", got)
	}
	if n := len(h.logs.FilterMessage("AI assistant write refused").All()); n < 10 {
		t.Errorf("only %d refusals logged", n)
	}
}

// TestWriteRequests: each write tool sends its one request, and the
// engine's refusal comes back as the tool's error.
func TestWriteRequests(t *testing.T) {
	lab := metalView("lab")
	h := start(t, true, lab, cloudView("sky"))
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})
	mcptest.Decode[mcp.WriteOut](c, mcp.ToolPowerWorker, map[string]any{"cluster": "lab", "node": "lab-workers-2", "state": "off"})
	bumpLast(h, "lab")
	mcptest.Decode[mcp.WriteOut](c, mcp.ToolUpgrade, map[string]any{"cluster": "sky", "component": "talos"})
	bumpLast(h, "sky")
	out := mcptest.Decode[mcp.WriteOut](c, mcp.ToolPlan, map[string]any{"cluster": "sky"})
	if !out.Queued || out.Action != "plan" {
		t.Errorf("plan: %+v", out)
	}
	got := h.cmd.requests()
	want := []hass.Request{
		{Action: hass.ActionPower, Tenant: "lab", Node: "lab-workers-2", State: "off"},
		{Action: hass.ActionUpgrade, Tenant: "sky", Component: "talos"},
		{Action: hass.ActionPlan, Tenant: "sky"},
	}
	if len(got) != len(want) {
		t.Fatalf("requests %+v", got)
	}
	for i := range want {
		if got[i].Action != want[i].Action || got[i].Tenant != want[i].Tenant || got[i].Node != want[i].Node ||
			got[i].State != want[i].State || got[i].Component != want[i].Component || got[i].Version != "" {
			t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	h.cmd.refuse = "tenant lab: too many operations queued"
	c.Refused(mcp.ToolApply, map[string]any{"cluster": "lab"}, "rezuscloud refused apply: tenant lab: too many operations queued")
}

// bumpLast makes a cluster's last operation newer, as when the operation
// the test queued has run.
func bumpLast(h *harness, name string) {
	v, _ := h.src.View(name)
	lo := tenant.OperationResult{Name: "x", Result: tenant.ResultSucceeded, At: time.Now()}
	v.Status.LastOperation = &lo
	h.src.set(v)
}

// TestQueuedNotStarted: an operation queued here counts as busy until the
// view shows it has run.
func TestQueuedNotStarted(t *testing.T) {
	h := start(t, true, metalView("lab"))
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})
	mcptest.Decode[mcp.WriteOut](c, mcp.ToolApply, map[string]any{"cluster": "lab"})
	c.Refused(mcp.ToolApply, map[string]any{"cluster": "lab"}, "the apply queued a moment ago has not started yet")
	bumpLast(h, "lab")
	mcptest.Decode[mcp.WriteOut](c, mcp.ToolApply, map[string]any{"cluster": "lab"})
	if n := len(h.cmd.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestWrongToken: a wrong or missing token is refused with 401, and the
// log says why without the token; the token in the path works (Home
// Assistant's MCP client), a wrong one there does not.
func TestWrongToken(t *testing.T) {
	h := start(t, true, metalView("lab"))
	mcptest.Unauthorized(t, h.base, "wrong-token-0123456789abcdefgh")
	mcptest.Unauthorized(t, h.base, testToken[:len(testToken)-1])
	if _, err := mcptest.Dial(context.Background(), h.base, "wrong-token-in-the-path-012345", mcptest.Options{InPath: true}); err == nil {
		t.Error("a wrong token in the path connected")
	}
	for _, e := range h.logs.FilterMessage("MCP request refused").All() {
		b, _ := json.Marshal(e.ContextMap())
		if strings.Contains(string(b), "wrong-token") || strings.Contains(string(b), testToken[:20]) {
			t.Errorf("a token in the log: %s", b)
		}
	}
	if n := len(h.logs.FilterMessage("MCP request refused").All()); n < 3 {
		t.Errorf("%d refusals logged", n)
	}
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{InPath: true, Name: "home-assistant"})
	if got := c.Clusters(); len(got) != 1 {
		t.Errorf("clusters over the path token: %+v", got)
	}
}

// TestPendingPlanAndMachines: the plan shows resource addresses and
// actions only; machines come with their hardware.
func TestPendingPlanAndMachines(t *testing.T) {
	h := start(t, false, metalView("lab"), metalView("broken"))
	h.src.plans["lab"] = planOf(t, `{"format_version":"1.2","resource_changes":[
	 {"address":"terraform_data.node[\"lab-workers-3\"]","type":"terraform_data","change":{"actions":["create"],"after":{"input":"SECRET-MACHINE-CONFIG"}}},
	 {"address":"terraform_data.node[\"lab-workers-1\"]","type":"terraform_data","change":{"actions":["no-op"]}},
	 {"address":"terraform_data.endpoint","type":"terraform_data","change":{"actions":["delete","create"]}}]}`)
	h.src.machines = []talos.Machine{{Address: "127.0.0.50", MAC: "aa:bb:cc:dd:ee:01", Model: "NUC", Cores: 8,
		MemoryBytes: 16 << 30, Disks: []talos.Disk{{DevPath: "/dev/nvme0n1", Size: 512 << 30, Transport: "nvme"}}}}
	c := mcptest.Connect(t, h.base, testToken, mcptest.Options{})
	p := mcptest.Decode[mcp.PlanOut](c, mcp.ToolPendingPlan, map[string]any{"cluster": "lab"})
	if !p.Pending || p.Add != 2 || p.Destroy != 1 || p.Change != 0 || len(p.Changes) != 2 {
		t.Errorf("plan: %+v", p)
	}
	res := c.Call(mcp.ToolPendingPlan, map[string]any{"cluster": "lab"})
	if strings.Contains(mcptest.Text(res), "SECRET") {
		t.Error("planned values reached the client")
	}
	c.Refused(mcp.ToolPendingPlan, map[string]any{"cluster": "broken"}, "reading the pending plan: state locked")
	ms := mcptest.Decode[mcp.MachineList](c, mcp.ToolListMachines, map[string]any{})
	if len(ms.Machines) != 1 || ms.Machines[0].MAC != "aa:bb:cc:dd:ee:01" || ms.Machines[0].MemoryGB != 16 ||
		ms.Machines[0].Cores != 8 || len(ms.Machines[0].Disks) != 1 || ms.Machines[0].Disks[0].SizeGB != 512 {
		t.Errorf("machines: %+v", ms)
	}
}
