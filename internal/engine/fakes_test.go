package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// fakeInfra is an Infra whose workspaces "create" one machine per node
// of the metal tenant file at the addresses the test gives.
type fakeInfra struct {
	dir      string
	addrs    map[string]string // node name → address reported as output
	applyErr error
	// block, when set, makes Apply wait until its context ends (after it
	// closes inApply, when set), as a long tofu apply does when cancelled
	block   bool
	inApply chan struct{}
	mu      sync.Mutex
	applies int
	applied bool
}

func (fi *fakeInfra) Workspace(name string, _ tofu.WorkspaceOptions) (Workspace, error) {
	d := filepath.Join(fi.dir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, err
	}
	return &fakeWorkspace{fi: fi, dir: d}, nil
}

func (fi *fakeInfra) Recover(context.Context, string) error { return nil }

type fakeWorkspace struct {
	fi  *fakeInfra
	dir string
}

func (w *fakeWorkspace) Dir() string { return w.dir }
func (w *fakeWorkspace) WriteConfig(doc []byte) error {
	return os.WriteFile(filepath.Join(w.dir, tofu.ConfigFile), doc, 0o600)
}
func (w *fakeWorkspace) Plan(context.Context, tofu.RunOptions) (*tofu.Plan, error) {
	w.fi.mu.Lock()
	defer w.fi.mu.Unlock()
	if w.fi.applied {
		return &tofu.Plan{}, nil
	}
	return &tofu.Plan{Summary: tofu.ChangeSummary{Add: len(w.fi.addrs)}}, nil
}
func (w *fakeWorkspace) Apply(ctx context.Context, _ *tofu.Plan, _ tofu.RunOptions) (*tofu.Result, error) {
	if w.fi.block {
		if w.fi.inApply != nil {
			close(w.fi.inApply)
		}
		<-ctx.Done()
		return nil, fmt.Errorf("fake tofu apply: %w", context.Cause(ctx))
	}
	w.fi.mu.Lock()
	defer w.fi.mu.Unlock()
	w.fi.applies++
	if w.fi.applyErr != nil {
		return nil, w.fi.applyErr
	}
	w.fi.applied = true
	return &tofu.Result{}, nil
}
func (w *fakeWorkspace) Destroy(context.Context, tofu.RunOptions) (*tofu.Result, error) {
	w.fi.mu.Lock()
	defer w.fi.mu.Unlock()
	w.fi.applied = false
	return &tofu.Result{}, nil
}
func (w *fakeWorkspace) Drift(context.Context, tofu.RunOptions) (*tofu.Drift, error) {
	return &tofu.Drift{}, nil
}
func (w *fakeWorkspace) Output(context.Context) (map[string]*tfjson.StateOutput, error) {
	w.fi.mu.Lock()
	defer w.fi.mu.Unlock()
	if !w.fi.applied {
		return map[string]*tfjson.StateOutput{}, nil
	}
	nodes := map[string]any{}
	for n, a := range w.fi.addrs {
		nodes[n] = provider.NodeOutputValue(a, "", "id-"+n)
	}
	return map[string]*tfjson.StateOutput{provider.OutputNodes: {Value: nodes}}, nil
}

// fakeNodes is Nodes over machines that start in maintenance mode and run
// once given a config. check, when set, runs at every ApplyMaintenance
// (before the machine takes the config) and can fail the test.
type fakeNodes struct {
	mu         sync.Mutex
	configured map[string]bool // endpoint → given a config
	calls      []string
	check      func(ep string)
	// fallbacks counts, by endpoint, how often a node given its config
	// falls back to maintenance mode instead of answering the secure API
	// (its install failed); negative: always
	fallbacks map[string]int
}

func (fn *fakeNodes) note(c string) { fn.mu.Lock(); fn.calls = append(fn.calls, c); fn.mu.Unlock() }

func (fn *fakeNodes) Status(_ context.Context, t talos.Target, _ []byte) (talos.NodeState, error) {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.configured[t.Endpoints[0]] {
		return talos.NodeState{Stage: tenant.StageRunning, Ready: true, TalosVersion: "v1"}, nil
	}
	return talos.NodeState{Stage: tenant.StageMaintenance}, nil
}
func (fn *fakeNodes) ApplyMaintenance(_ context.Context, ep string, _ []byte) error {
	if fn.check != nil {
		fn.check(ep)
	}
	fn.note("apply-maintenance " + ep)
	fn.mu.Lock()
	fn.configured[ep] = true
	fn.mu.Unlock()
	return nil
}
func (fn *fakeNodes) ApplyConfig(_ context.Context, t talos.Target, _, _ []byte) error {
	fn.note("apply-config " + t.String())
	return nil
}
func (fn *fakeNodes) WaitSecure(ctx context.Context, t talos.Target, _ []byte) (string, error) {
	ep := t.Endpoints[0]
	fn.mu.Lock()
	left := fn.fallbacks[ep]
	if left != 0 {
		fn.fallbacks[ep] = left - 1
		fn.configured[ep] = false
	}
	fn.mu.Unlock()
	if left != 0 {
		fn.note("fell-back " + ep)
		<-ctx.Done() // never answers: the engine's try times out
		return "", ctx.Err()
	}
	return "v1", nil
}
func (fn *fakeNodes) Bootstrap(_ context.Context, t talos.Target, _ []byte) error {
	fn.note("bootstrap " + t.String())
	return nil
}
func (fn *fakeNodes) Kubeconfig(context.Context, talos.Target, []byte) ([]byte, error) {
	return []byte("kubeconfig"), nil
}
func (fn *fakeNodes) Reboot(context.Context, talos.Target, []byte) error { return nil }
func (fn *fakeNodes) Reset(_ context.Context, t talos.Target, _ []byte, _ talos.ResetOptions) error {
	fn.mu.Lock()
	delete(fn.configured, t.Endpoints[0])
	fn.mu.Unlock()
	return nil
}
func (fn *fakeNodes) Upgrade(context.Context, talos.Target, []byte, string) error { return nil }
func (fn *fakeNodes) EtcdSnapshot(context.Context, talos.Target, []byte, io.Writer) (int64, error) {
	return 0, fmt.Errorf("fake: no etcd")
}
func (fn *fakeNodes) EtcdMembers(context.Context, talos.Target, []byte) ([]string, error) {
	return nil, nil
}
func (fn *fakeNodes) EtcdRemoveMember(context.Context, talos.Target, []byte, string) (bool, error) {
	return false, nil
}
func (fn *fakeNodes) ControlPlaneVersions(context.Context, talos.Target, []byte) (map[string]string, error) {
	return nil, nil
}
func (fn *fakeNodes) Shutdown(context.Context, talos.Target, []byte) error { return nil }
func (fn *fakeNodes) WaitGone(context.Context, talos.Target, []byte, time.Duration) error {
	return nil
}
func (fn *fakeNodes) WaitAnswering(context.Context, talos.Target, []byte, time.Duration) error {
	return nil
}

// unitFixture is an engine over fakes: no tofu, no simulated nodes. Its
// poller reads the fake nodes too (through Options.Nodes), every hour or
// when triggered.
type unitFixture struct {
	dir   string
	rec   *recorder
	infra *fakeInfra
	nodes *fakeNodes
	eng   *Engine
}

var (
	unitSecretsOnce sync.Once
	unitSecretsData []byte
	unitSecretsErr  error
)

// unitSecrets is one encoded secrets bundle shared by the unit tests.
func unitSecrets(t *testing.T) []byte {
	unitSecretsOnce.Do(func() {
		b, err := talos.NewSecrets("v1.13.0")
		if err == nil {
			unitSecretsData, err = talos.EncodeSecrets(b)
		}
		unitSecretsErr = err
	})
	if unitSecretsErr != nil {
		t.Fatal(unitSecretsErr)
	}
	return unitSecretsData
}

func newUnitFixture(t *testing.T, tweak func(*unitFixture)) *unitFixture {
	t.Helper()
	dir := t.TempDir()
	addrs := []string{"127.0.0.1", "127.0.0.2"}
	f := &unitFixture{dir: dir, rec: newRecorder(),
		infra: &fakeInfra{dir: filepath.Join(dir, "tofu"), addrs: map[string]string{"lab-cp-1": addrs[0], "lab-workers-1": addrs[1]}},
		nodes: &fakeNodes{configured: map[string]bool{}}}
	if tweak != nil {
		tweak(f)
	}
	tenants := filepath.Join(dir, "tenants")
	if err := os.MkdirAll(tenants, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tenants, "lab.toml"), []byte(tenantFile(addrs, 1, false)), 0o644); err != nil {
		t.Fatal(err)
	}
	// a secrets bundle made once for every unit test: making one takes
	// seconds of RSA key generation
	if err := os.MkdirAll(filepath.Join(dir, "data", "tenants", "lab"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(talos.SecretsPath(filepath.Join(dir, "data", "tenants", "lab")), unitSecrets(t), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{DataDir: filepath.Join(dir, "data"), Store: &tenant.Store{Dir: tenants}, Infra: f.infra,
		Nodes: f.nodes, Publisher: f.rec, TalosPort: 1, PollInterval: time.Hour, NodeTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.secureTry = 50 * time.Millisecond
	f.eng = e
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, time.Hour) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("engine did not stop")
		}
	})
	select {
	case <-e.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("engine not ready")
	}
	return f
}

func (f *unitFixture) record(t *testing.T) record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.dir, "data", "tenants", "lab", "engine.json"))
	if err != nil {
		return record{}
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("record: %v", err)
	}
	return r
}

// status is the tenant's status as last published.
func (f *unitFixture) status() tenant.Status {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	return f.rec.status["lab"]
}

func (f *unitFixture) apply(t *testing.T) tenant.OperationEvent {
	t.Helper()
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatalf("apply: %v", err)
	}
	var ev tenant.OperationEvent
	f.rec.wait(t, "the apply to end", 20*time.Second, func(r *recorder) bool {
		var ok bool
		ev, ok = r.lastEvent("apply")
		return ok
	})
	return ev
}

// applied applies and fails the test unless the apply succeeded.
func (f *unitFixture) applied(t *testing.T) {
	t.Helper()
	if ev := f.apply(t); ev.Result != tenant.ResultSucceeded {
		t.Fatalf("apply: %s: %s", ev.Result, ev.Message)
	}
}
