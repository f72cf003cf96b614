package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// fakeEngine stands in for the engine on both sides of the panel: its read
// API (Source) and the Commander behind the real command path
// (hass.Bridge.HandleRequest). Its tenants are the files of a real tenant
// store; a command is recorded, and the few the flows need act like the
// engine's (plan makes the fixture plan pending, apply starts an
// operation, adopt edits the file through the store).
type fakeEngine struct {
	store *tenant.Store

	mu       sync.Mutex
	views    map[string]View
	changed  chan struct{}
	plan     *tfjson.Plan // what plan makes pending
	plans    map[string]*tfjson.Plan
	machines []talos.Machine
	backups  map[string][]tenant.BackupInfo
	secrets  map[string][]byte // "<tenant>/<kind>"
	logs     map[string][]LogLine
	subs     map[string][]chan LogLine
	calls    []string
}

func newFakeEngine(t testing.TB, store *tenant.Store) *fakeEngine {
	t.Helper()
	f := &fakeEngine{store: store, views: map[string]View{}, changed: make(chan struct{}), plans: map[string]*tfjson.Plan{},
		backups: map[string][]tenant.BackupInfo{}, secrets: map[string][]byte{}, logs: map[string][]LogLine{},
		subs: map[string][]chan LogLine{}}
	data, err := os.ReadFile("testdata/plan-metal.json")
	if err != nil {
		t.Fatal(err)
	}
	f.plan = &tfjson.Plan{}
	if err := json.Unmarshal(data, f.plan); err != nil {
		t.Fatal(err)
	}
	if err := f.load(); err != nil {
		t.Fatal(err)
	}
	return f
}

// load reads the store as the engine's watcher does.
func (f *fakeEngine) load() error {
	snap, err := f.store.Load()
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range snap.Tenants {
		v, ok := f.views[t.Name]
		if !ok {
			v = View{Name: t.Name, Status: tenant.Status{Phase: tenant.PhaseAbsent}, Nodes: map[string]tenant.NodeStatus{}}
		}
		v.Spec = t
		v.Status.NodesTotal = len(t.Nodes())
		v.Status.TalosVersion, v.Status.KubernetesVersion = t.TalosVersion, t.KubernetesVersion
		for _, n := range t.Nodes() {
			if _, ok := v.Nodes[n.Name]; !ok {
				v.Nodes[n.Name] = tenant.NodeStatus{Stage: tenant.StagePending, Role: n.Role, Group: n.Group}
			}
		}
		f.views[t.Name] = v
	}
	f.changeLocked()
	return nil
}

func (f *fakeEngine) changeLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// update changes a view.
func (f *fakeEngine) update(name string, fn func(*View)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.views[name]
	fn(&v)
	f.views[name] = v
	f.changeLocked()
}

// emit adds a log line and sends it to every follower.
func (f *fakeEngine) emit(l LogLine) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[l.Tenant] = append(f.logs[l.Tenant], l)
	for _, ch := range f.subs[l.Tenant] {
		select {
		case ch <- l:
		default:
		}
	}
}

func (f *fakeEngine) record(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// Calls are the commands the engine got, as "<action> <args>".
func (f *fakeEngine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeEngine) called(prefix string) bool {
	return slices.ContainsFunc(f.Calls(), func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// Source.

func (f *fakeEngine) Views() []View {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []View
	for _, v := range f.views {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b View) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fakeEngine) View(name string) (View, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.views[name]
	return v, ok
}

func (f *fakeEngine) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeEngine) PendingPlan(_ context.Context, name string) (*tfjson.Plan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plans[name], nil
}

func (f *fakeEngine) Machines() []talos.Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.machines)
}

func (f *fakeEngine) Backups(name string) ([]tenant.BackupInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.backups[name]), nil
}

func (f *fakeEngine) OpenBackup(name, file string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.backups[name] {
		if b.File == file {
			return io.NopCloser(bytes.NewReader(bytes.Repeat([]byte{0xe7}, int(b.Size)))), nil
		}
	}
	return nil, fmt.Errorf("no backup %s", file)
}

func (f *fakeEngine) Secret(name, kind string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.secrets[name+"/"+kind]
	if !ok {
		return nil, errors.New("not written yet")
	}
	return b, nil
}

func (f *fakeEngine) Log(name string) []LogLine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.logs[name])
}

func (f *fakeEngine) Follow(ctx context.Context, name string) <-chan LogLine {
	ch := make(chan LogLine, 256)
	f.mu.Lock()
	f.subs[name] = append(f.subs[name], ch)
	f.mu.Unlock()
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		f.subs[name] = slices.DeleteFunc(f.subs[name], func(c chan LogLine) bool { return c == ch })
		f.mu.Unlock()
	}()
	return ch
}

// hass.Commander.

func (f *fakeEngine) get(name string) error {
	if _, ok := f.View(name); !ok {
		return fmt.Errorf("no tenant %q", name)
	}
	return nil
}

func (f *fakeEngine) Apply(_ context.Context, name string) error {
	f.record("apply %s", name)
	if err := f.get(name); err != nil {
		return err
	}
	op := "apply"
	f.update(name, func(v *View) {
		v.Status.Operation, v.Status.Phase, v.Status.Progress = &op, tenant.PhaseProvisioning, 0
	})
	return nil
}

func (f *fakeEngine) Plan(_ context.Context, name string) error {
	f.record("plan %s", name)
	if err := f.get(name); err != nil {
		return err
	}
	pv := newPlanView(f.plan)
	f.mu.Lock()
	f.plans[name] = f.plan
	f.mu.Unlock()
	f.update(name, func(v *View) {
		v.Status.Pending = tenant.Changes{Add: pv.Counts.Add, Change: pv.Counts.Change, Destroy: pv.Counts.Destroy}
		v.Status.Phase = tenant.PhasePlanned
		v.Status.LastOperation = &tenant.OperationResult{Name: "plan", Result: tenant.ResultSucceeded, At: time.Now(),
			Message: "2 to add, 1 to change, 2 to destroy"}
	})
	return nil
}

func (f *fakeEngine) Cancel(_ context.Context, name string) error {
	f.record("cancel %s", name)
	return f.get(name)
}

func (f *fakeEngine) Destroy(_ context.Context, name, confirm string) error {
	f.record("destroy %s %s", name, confirm)
	if confirm != name {
		return fmt.Errorf("destroy of %s: confirm %q is not the tenant's name", name, confirm)
	}
	return f.get(name)
}

func (f *fakeEngine) Scale(_ context.Context, name, group string, count int) error {
	f.record("scale %s %s %d", name, group, count)
	return f.get(name)
}

func (f *fakeEngine) Bootstrap(_ context.Context, name string) error {
	f.record("bootstrap %s", name)
	return f.get(name)
}

func (f *fakeEngine) Reboot(_ context.Context, name, node string) error {
	f.record("reboot %s %s", name, node)
	return f.get(name)
}

func (f *fakeEngine) SetAutoApply(_ context.Context, name string, on bool) error {
	f.record("auto_apply %s %v", name, on)
	if _, err := f.store.SetAutoApply(name, on); err != nil {
		return err
	}
	return f.load()
}

func (f *fakeEngine) Reload(context.Context) error {
	f.record("reload")
	return f.load()
}

func (f *fakeEngine) SetLogLevel(level string) error {
	f.record("log_level %s", level)
	return nil
}

func (f *fakeEngine) Upgrade(_ context.Context, name, component, version string) error {
	f.record("upgrade %s %s %s", name, component, version)
	return f.get(name)
}

func (f *fakeEngine) Backup(_ context.Context, name string) error {
	f.record("backup %s", name)
	return f.get(name)
}

func (f *fakeEngine) Discover(context.Context) ([]talos.Machine, error) {
	f.record("discover")
	return f.Machines(), nil
}

// Adopt does what the engine's does: the machine found goes into the
// file through the store.
func (f *fakeEngine) Adopt(_ context.Context, mac, name, group, disk string) (tenant.Machine, error) {
	f.record("adopt %s %s %s %s", mac, name, group, disk)
	f.mu.Lock()
	i := slices.IndexFunc(f.machines, func(m talos.Machine) bool { return strings.EqualFold(m.MAC, mac) })
	var found talos.Machine
	if i >= 0 {
		found = f.machines[i]
	}
	f.mu.Unlock()
	if i < 0 {
		return tenant.Machine{}, fmt.Errorf("machine %s is no longer found", mac)
	}
	var disks []string
	for _, d := range found.Disks {
		disks = append(disks, d.DevPath)
	}
	m := tenant.Machine{Address: found.Address, MAC: found.MAC, InstallDisk: disk}
	if _, err := f.store.Adopt(name, group, m, disks); err != nil {
		return tenant.Machine{}, err
	}
	f.mu.Lock()
	f.machines = slices.DeleteFunc(f.machines, func(x talos.Machine) bool { return x.MAC == found.MAC })
	f.mu.Unlock()
	return m, f.load()
}

func (f *fakeEngine) Forget(context.Context, string, string, bool) error    { return nil }
func (f *fakeEngine) Replace(context.Context, string, string, string) error { return nil }
func (f *fakeEngine) Pool(_ context.Context, name, group string, _ *string, _, _ *int) error {
	f.record("pool %s %s", name, group)
	return f.get(name)
}
func (f *fakeEngine) Power(_ context.Context, name, node, state string) error {
	f.record("power %s %s %s", name, node, state)
	return f.get(name)
}

var _ hass.Commander = (*fakeEngine)(nil)
var _ Source = (*fakeEngine)(nil)
