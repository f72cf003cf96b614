package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// fakeSource is the engine's read API over views the test sets.
type fakeSource struct {
	mu       sync.Mutex
	views    map[string]mcp.View
	plans    map[string]*tfjson.Plan
	machines []talos.Machine
}

func newFakeSource(vs ...mcp.View) *fakeSource {
	f := &fakeSource{views: map[string]mcp.View{}, plans: map[string]*tfjson.Plan{}}
	for _, v := range vs {
		f.views[v.Name] = v
	}
	return f
}

func (f *fakeSource) Views() []mcp.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]mcp.View, 0, len(f.views))
	for _, v := range f.views {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b mcp.View) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

func (f *fakeSource) View(name string) (mcp.View, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.views[name]
	return v, ok
}

func (f *fakeSource) PendingPlan(_ context.Context, name string) (*tfjson.Plan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == "broken" {
		return nil, errors.New("state locked")
	}
	return f.plans[name], nil
}

func (f *fakeSource) Machines() []talos.Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.machines)
}

func (f *fakeSource) set(v mcp.View) {
	f.mu.Lock()
	f.views[v.Name] = v
	f.mu.Unlock()
}

// recorder is the command path: it records every request and answers as
// the bridge's action table does ({"done":true} for scale, {"queued":true}
// for the rest), or with refuse when set.
type recorder struct {
	mu     sync.Mutex
	reqs   []hass.Request
	refuse string
}

func (r *recorder) Command(_ context.Context, req hass.Request) hass.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	if r.refuse != "" {
		return hass.ErrorResponse(req, errors.New(r.refuse))
	}
	if req.Action == hass.ActionScale {
		return hass.Response{Status: "ok", Data: map[string]any{"done": true}}
	}
	return hass.Response{Status: "ok", Data: map[string]any{"queued": true}}
}

func (r *recorder) requests() []hass.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

const testToken = "test-token-0123456789abcdefghij"

// metalView is a running metal cluster: control plane cp (1 of 1), worker
// group workers (2 of a pool of 3), all nodes ready.
func metalView(name string) mcp.View {
	t := &tenant.Tenant{Name: name, DisplayName: "Lab", Provider: tenant.ProviderMetal, TalosVersion: "v1.13.0",
		KubernetesVersion: "1.35.0", NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: "127.0.0.10"}}},
			{Name: "workers", Role: tenant.RoleWorker, Count: 2, Machines: []tenant.Machine{
				{Address: "127.0.0.11"}, {Address: "127.0.0.12"}, {Address: "127.0.0.13"}}},
		}}
	nodes := map[string]tenant.NodeStatus{}
	for _, n := range t.Nodes() {
		nodes[n.Name] = tenant.NodeStatus{Stage: tenant.StageRunning, Ready: true, Address: n.Machine.Address,
			Role: n.Role, Group: n.Group, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0"}
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return mcp.View{Name: name, Spec: t, Nodes: nodes, Status: tenant.Status{Phase: tenant.PhaseRunning,
		NodesReady: 3, NodesTotal: 3, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		TalosVersionRunning: "v1.13.0", KubernetesVersionRunning: "1.35.0",
		LastOperation: &tenant.OperationResult{Name: "apply", Result: tenant.ResultSucceeded, At: at, Message: "3 nodes running"},
		Summary:       "Lab is running, 3 of 3 nodes ready."}}
}

// cloudView is a running OpenStack cluster with one worker group.
func cloudView(name string) mcp.View {
	t := &tenant.Tenant{Name: name, Provider: tenant.ProviderOpenStack, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{{Name: "cp", Role: tenant.RoleControlPlane, Count: 1},
			{Name: "pool", Role: tenant.RoleWorker, Count: 1}}}
	return mcp.View{Name: name, Spec: t, Nodes: map[string]tenant.NodeStatus{},
		Status: tenant.Status{Phase: tenant.PhaseRunning, NodesReady: 2, NodesTotal: 2,
			TalosVersionRunning: "v1.12.0", KubernetesVersionRunning: "1.35.0"}}
}

// harness is a server on loopback with a fake source and a recorder.
type harness struct {
	src  *fakeSource
	cmd  *recorder
	srv  *mcp.Server
	base string
	logs *observer.ObservedLogs
}

func start(t testing.TB, writes bool, vs ...mcp.View) *harness {
	t.Helper()
	h := &harness{src: newFakeSource(vs...), cmd: &recorder{}}
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	srv, err := mcp.New(mcp.Options{Source: h.src, Command: h.cmd.Command, Token: testToken, Writes: writes,
		Version: "test", Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	h.base = "http://" + ln.Addr().String()
	return h
}

func planOf(t testing.TB, js string) *tfjson.Plan {
	t.Helper()
	var p tfjson.Plan
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}
