package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestCheckUpgrade(t *testing.T) {
	talosCases := []struct {
		from, to, kube string
		bad            string // "" = allowed; else a part of the error
	}{
		{"v1.13.0", "v1.13.1", "1.35.0", ""},
		{"v1.12.6", "v1.13.0", "1.35.0", ""},
		{"", "v1.13.1", "", ""},
		{"v1.13.1", "v1.13.0", "1.35.0", ""}, // a patch downgrade inside a minor is allowed
		{"v1.13.0", "v1.12.6", "1.35.0", "downgrade across minor"},
		{"v1.11.5", "v1.13.0", "1.34.0", "more than one minor"},
		{"v1.13.0", "v1.14.0", "1.35.0", "cannot be reached"},
		{"v1.13.0", "1.13.1", "1.35.0", "not a Talos version"},
		{"v1.13.0", "v1.13", "1.35.0", "not a Talos version"},
		{"v1.13.0", "v2.0.0", "1.35.0", "another major"},
		{"v1.12.6", "v1.13.0", "1.30.5", "upgrade Kubernetes first"},
	}
	for _, c := range talosCases {
		err := checkTalosUpgrade(c.from, c.to, c.kube)
		if (err == nil) != (c.bad == "") || (err != nil && !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("talos %s -> %s (k8s %s): %v; want %q", c.from, c.to, c.kube, err, c.bad)
		}
	}
	kubeCases := []struct {
		from, to, talos string
		bad             string
	}{
		{"1.35.0", "1.35.2", "v1.13.0", ""},
		{"1.35.0", "1.36.0", "v1.13.0", ""},
		{"1.35.0", "1.34.1", "v1.13.0", "downgrade across minor"},
		{"1.34.0", "1.36.0", "v1.13.0", "more than one minor"},
		{"1.35.0", "1.36.0", "v1.12.6", "not supported by Talos v1.12.6"},
		{"1.36.0", "1.37.0", "v1.13.0", "not supported by Talos v1.13.0"},
		{"1.35.0", "v1.35.1", "v1.13.0", "no leading v"},
	}
	for _, c := range kubeCases {
		err := checkKubernetesUpgrade(c.from, c.to, c.talos)
		if (err == nil) != (c.bad == "") || (err != nil && !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("kubernetes %s -> %s (talos %s): %v; want %q", c.from, c.to, c.talos, err, c.bad)
		}
	}
}

func TestLowestVersion(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"v1.13.1", "v1.13.0", "v1.13.10"}, "v1.13.0"},
		{[]string{"v1.13.10", "v1.13.9"}, "v1.13.9"},
		{[]string{"", "1.35.1", "junk"}, "1.35.1"},
		{nil, ""},
	} {
		if got := lowestVersion(c.in); got != c.want {
			t.Errorf("lowestVersion(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClusterVersions(t *testing.T) {
	file := &tenant.Tenant{Name: "lab", TalosVersion: "v1.13.1", KubernetesVersion: "1.35.2"}
	for _, c := range []struct {
		name       string
		rec        record
		talos, k8s string
	}{
		{"new cluster follows the file", record{}, "v1.13.1", "1.35.2"},
		{"not bootstrapped follows the file", record{TalosVersion: "v1.13.0"}, "v1.13.1", "1.35.2"},
		{"running cluster keeps its versions", record{Bootstrapped: true, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0"}, "v1.13.0", "1.35.0"},
		{"old record without versions", record{Bootstrapped: true}, "v1.13.1", "1.35.2"},
	} {
		got := clusterVersions(file, c.rec)
		if got.TalosVersion != c.talos || got.KubernetesVersion != c.k8s {
			t.Errorf("%s: %s %s, want %s %s", c.name, got.TalosVersion, got.KubernetesVersion, c.talos, c.k8s)
		}
	}
	if file.TalosVersion != "v1.13.1" {
		t.Fatal("clusterVersions changed the file's tenant")
	}
}

func TestBackupFiles(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		info, err := writeSnapshot(context.Background(), dir, base.Add(time.Duration(i)*time.Hour), func(f *os.File) (int64, error) {
			n, err := f.WriteString(strings.Repeat("x", 100+i))
			return int64(n), err
		})
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(info.File)
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != int64(100+i) {
			t.Fatalf("snapshot file %s: %v %v", info.File, fi, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd-20260301T100000Z.snapshot")); err != nil {
		t.Fatalf("file name: %v", err)
	}
	// a failed stream leaves nothing behind under the final name
	_, err := writeSnapshot(context.Background(), dir, base.Add(9*time.Hour), func(f *os.File) (int64, error) {
		f.WriteString("partial")
		return 7, os.ErrDeadlineExceeded
	})
	if err == nil {
		t.Fatal("a failed stream was accepted")
	}
	if _, err := pruneBackups(dir, 2); err != nil {
		t.Fatal(err)
	}
	list, err := listBackups(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || !list[0].At.Equal(base.Add(4*time.Hour)) || !list[1].At.Equal(base.Add(3*time.Hour)) {
		t.Fatalf("kept %+v; want the newest two", list)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("files left: %v", ents)
	}
}

// nodeLog records each node's stage changes as the engine publishes them.
type nodeLog struct {
	mu     sync.Mutex
	events []nodeEvent
	last   map[string]tenant.NodeStatus
	hook   func(node string, st tenant.NodeStatus)
}

type nodeEvent struct {
	node string
	st   tenant.NodeStatus
	at   time.Time
}

// logged wraps a recorder so that node states are also logged.
type logged struct {
	*recorder
	log *nodeLog
}

func (l logged) SetTenant(v tenant.View) {
	l.log.observe(v)
	l.recorder.SetTenant(v)
}

func (l logged) SetTenants(vs []tenant.View) {
	for _, v := range vs {
		l.log.observe(v)
	}
	l.recorder.SetTenants(vs)
}

// observe logs every node whose state changed.
func (l *nodeLog) observe(v tenant.View) {
	type change struct {
		node string
		st   tenant.NodeStatus
	}
	var changes []change
	l.mu.Lock()
	if l.last == nil {
		l.last = map[string]tenant.NodeStatus{}
	}
	for node, st := range v.Nodes {
		if old, ok := l.last[node]; ok && old == st {
			continue
		}
		l.last[node] = st
		l.events = append(l.events, nodeEvent{node, st, time.Now()})
		changes = append(changes, change{node, st})
	}
	hook := l.hook
	l.mu.Unlock()
	if hook != nil {
		for _, c := range changes {
			hook(c.node, c.st)
		}
	}
}

// spans gives, per node, when it was first upgrading and when it was
// first running, ready and on version after that.
func (l *nodeLog) spans(done func(tenant.NodeStatus) bool) (order []string, start, end map[string]time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	start, end = map[string]time.Time{}, map[string]time.Time{}
	for _, ev := range l.events {
		if _, ok := start[ev.node]; !ok && ev.st.Stage == tenant.StageUpgrading {
			start[ev.node] = ev.at
			order = append(order, ev.node)
		}
		if _, ok := start[ev.node]; ok {
			if _, ok := end[ev.node]; !ok && done(ev.st) {
				end[ev.node] = ev.at
			}
		}
	}
	return order, start, end
}

func (l *nodeLog) reset() {
	l.mu.Lock()
	l.events = nil
	l.mu.Unlock()
}

// newUpgradeFixture is a running cluster of 1 control plane and workers
// workers whose node states are logged.
func newUpgradeFixture(t *testing.T, workers int) (*fixture, *nodeLog) {
	t.Helper()
	nl := &nodeLog{}
	fx := newFixtureTweak(t, 1+workers, workers, false, func(o *Options) {
		o.Publisher = logged{o.Publisher.(*recorder), nl}
		o.NodeTimeout = 20 * time.Second
	})
	if err := fx.eng.Apply(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	fx.rec.wait(t, "phase running", long, phaseIs(tenant.PhaseRunning))
	fx.rec.wait(t, "running versions", 30*time.Second, func(r *recorder) bool {
		st := r.status["lab"]
		return st.TalosVersionRunning == "v1.13.0" && st.KubernetesVersionRunning == "1.35.0"
	})
	return fx, nl
}

func TestUpgradeTalosRollout(t *testing.T) {
	f, nl := newUpgradeFixture(t, 2)
	r := f.rec
	backups := filepath.Join(f.dir, "data", "backups", "lab")
	var snapshotFirst sync.Once
	snapshotOK := make(chan bool, 1)
	nl.mu.Lock()
	nl.hook = func(node string, st tenant.NodeStatus) {
		if st.Stage == tenant.StageUpgrading {
			snapshotFirst.Do(func() {
				list, _ := listBackups(backups)
				snapshotOK <- len(list) == 1
			})
		}
	}
	nl.mu.Unlock()

	// refused before anything changes: a Kubernetes Talos 1.13 does not support
	before, _ := os.ReadFile(f.store.Path("lab"))
	if err := f.eng.Upgrade(context.Background(), "lab", "kubernetes", "1.37.0"); err == nil {
		t.Fatal("Kubernetes 1.37.0 accepted")
	}
	if err := f.eng.Upgrade(context.Background(), "lab", "talos", "v1.11.0"); err == nil || !strings.Contains(err.Error(), "downgrade") {
		t.Fatalf("downgrade: %v", err)
	}
	if after, _ := os.ReadFile(f.store.Path("lab")); string(after) != string(before) {
		t.Fatal("a refused upgrade changed the file")
	}

	if err := f.eng.Upgrade(context.Background(), "lab", "talos", "v1.13.1"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "upgrade succeeded", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("upgrade")
		return ok && ev.Result == tenant.ResultSucceeded && r.status["lab"].TalosVersionRunning == "v1.13.1"
	})
	if ok := <-snapshotOK; !ok {
		t.Fatal("no etcd snapshot before the first node went down")
	}
	data, _ := os.ReadFile(f.store.Path("lab"))
	if !strings.Contains(string(data), `talos_version = "v1.13.1"`) {
		t.Fatalf("file not changed in place:\n%s", data)
	}
	order, start, end := nl.spans(func(s tenant.NodeStatus) bool {
		return s.Stage == tenant.StageRunning && s.Ready && s.TalosVersion == "v1.13.1"
	})
	want := []string{"lab-cp-1", "lab-workers-1", "lab-workers-2"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("upgrade order %v, want %v", order, want)
	}
	for i := 1; i < len(order); i++ {
		prevEnd, ok := end[order[i-1]]
		if !ok || start[order[i]].Before(prevEnd) {
			t.Fatalf("node %s started before %s was done", order[i], order[i-1])
		}
	}
	for _, s := range f.sims {
		if c := s.Calls(); c.Upgrade != 1 || s.TalosVersion() != "v1.13.1" {
			t.Errorf("node %s: %d upgrades, version %s", s.Host(), c.Upgrade, s.TalosVersion())
		}
	}
	r.mu.Lock()
	st := r.status["lab"]
	r.mu.Unlock()
	if st.Phase != tenant.PhaseRunning || st.Rollout != nil || st.Backup == nil || st.Problem {
		t.Fatalf("status after the rollout: %+v", st)
	}

	// a second rollout in which a worker fails stops there
	nl.reset()
	f.sims[1].FailUpgrade(simnode.UpgradePullFails)
	if err := f.eng.Upgrade(context.Background(), "lab", "talos", "v1.13.2"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "upgrade failed", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("upgrade")
		return ok && ev.Result == tenant.ResultFailed && r.status["lab"].Operation == nil
	})
	ev, _ := r.lastEvent("upgrade")
	if !strings.Contains(ev.Message, "lab-workers-1") {
		t.Fatalf("failure does not name the node: %s", ev.Message)
	}
	if v := f.sims[2].TalosVersion(); v != "v1.13.1" {
		t.Fatalf("the node after the failed one moved to %s", v)
	}
	if v := f.sims[0].TalosVersion(); v != "v1.13.2" {
		t.Fatalf("the control plane is on %s", v)
	}
	r.mu.Lock()
	st = r.status["lab"]
	r.mu.Unlock()
	if !st.Problem || st.Phase != tenant.PhaseFailed || st.TalosVersionRunning != "v1.13.1" {
		t.Fatalf("status after the failure: %+v", st)
	}

	// Install after the fault is cleared resumes with the nodes not on target
	f.sims[1].ClearFault()
	if err := f.eng.Upgrade(context.Background(), "lab", "talos", ""); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "resumed upgrade succeeded", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("upgrade")
		return ok && ev.Result == tenant.ResultSucceeded && r.status["lab"].TalosVersionRunning == "v1.13.2"
	})
	if c := f.sims[0].Calls(); c.Upgrade != 2 {
		t.Fatalf("the control plane was upgraded %d times (resume must skip it)", c.Upgrade)
	}
}

func TestUpgradeKubernetes(t *testing.T) {
	f, nl := newUpgradeFixture(t, 1)
	r := f.rec
	if err := f.eng.Upgrade(context.Background(), "lab", "kubernetes", "1.35.2"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "kubernetes upgrade succeeded", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("upgrade")
		return ok && ev.Result == tenant.ResultSucceeded && r.status["lab"].KubernetesVersionRunning == "1.35.2"
	})
	order, _, _ := nl.spans(func(tenant.NodeStatus) bool { return false })
	if len(order) != 2 || order[0] != "lab-cp-1" {
		t.Fatalf("order %v", order)
	}
	for _, s := range f.sims {
		if c := s.Calls(); c.Upgrade != 0 {
			t.Errorf("node %s: a Kubernetes upgrade called Upgrade", s.Host())
		}
	}
	// an apply does not move a running cluster: the file's new version waits
	if err := f.eng.Upgrade(context.Background(), "lab", "kubernetes", "1.37.0"); err == nil {
		t.Fatal("unsupported Kubernetes accepted")
	}
}

func TestUpgradeRefusedWhenNotRunning(t *testing.T) {
	f := newFixture(t, 2, 1, false)
	f.rec.wait(t, "tenant known", 10*time.Second, func(r *recorder) bool { return len(r.tenants) == 1 })
	before, _ := os.ReadFile(f.store.Path("lab"))
	err := f.eng.Upgrade(context.Background(), "lab", "talos", "v1.13.1")
	if err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("upgrade of a tenant that does not exist: %v", err)
	}
	if err := f.eng.Backup(context.Background(), "lab"); err == nil {
		t.Fatal("backup of a tenant that does not exist accepted")
	}
	if err := f.eng.Upgrade(context.Background(), "lab", "etcd", ""); err == nil {
		t.Fatal("unknown component accepted")
	}
	if after, _ := os.ReadFile(f.store.Path("lab")); string(after) != string(before) {
		t.Fatal("a refused upgrade changed the file")
	}
}
