package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// upgradeDoc is the part of the tenant state the upgrade test reads.
type upgradeDoc struct {
	Phase            string         `json:"phase"`
	Problem          bool           `json:"problem"`
	Operation        *string        `json:"operation"`
	TalosRunning     *string        `json:"talos_version_running"`
	KubeRunning      *string        `json:"kubernetes_version_running"`
	TalosUpdate      map[string]any `json:"talos_update"`
	KubernetesUpdate map[string]any `json:"kubernetes_update"`
	LastBackup       *struct {
		File string `json:"file"`
		Size int64  `json:"size"`
	} `json:"last_backup"`
}

func (e *env) upgradeState() upgradeDoc {
	var d upgradeDoc
	if m, ok := e.cap.lastMsg(e.tenantStateTopic()); ok {
		json.Unmarshal(m.Payload, &d) //nolint:errcheck
	}
	return d
}

func (e *env) waitUpgradeState(what string, cond func(upgradeDoc) bool) upgradeDoc {
	e.tb.Helper()
	var d upgradeDoc
	e.cap.wait(e.proc, phaseTimeout, "tenant state: "+what, func() bool {
		d = e.upgradeState()
		return cond(d)
	}, e.describeTenant)
	return d
}

// upgradeSpans reads the node state documents after mark: the order in
// which nodes entered stage upgrading, and the message index at which each
// was running, ready and done by done(node) afterwards.
func (e *env) upgradeSpans(mark int, done func(n string) bool) (order []string, start, end map[string]int) {
	start, end = map[string]int{}, map[string]int{}
	prefix := base + "/" + e.opts.tenant + "/"
	for i, m := range e.cap.since(mark) {
		n, ok := strings.CutPrefix(m.Topic, prefix)
		if !ok || !strings.HasSuffix(n, "/state") || len(m.Payload) == 0 {
			continue
		}
		n = strings.TrimSuffix(n, "/state")
		var d struct {
			Stage string `json:"stage"`
			Ready bool   `json:"ready"`
		}
		if json.Unmarshal(m.Payload, &d) != nil {
			continue
		}
		if _, seen := start[n]; !seen && d.Stage == "upgrading" {
			start[n] = i
			order = append(order, n)
			continue
		}
		if _, seen := start[n]; seen && d.Stage == "running" && d.Ready {
			if _, ok := end[n]; !ok && done(n) {
				end[n] = i
			}
		}
	}
	return order, start, end
}

// TestE2EUpgrade: a running v1.13.0 cluster is upgraded through the
// request API to v1.13.1 (an etcd snapshot first, then one node at a
// time, the control plane first); a second rollout stops at a worker whose
// image cannot be pulled and Install finishes it once the fault is gone;
// then Kubernetes moves the same way to a patch Talos 1.13 supports.
func TestE2EUpgrade(t *testing.T) {
	e := newEnv(t, envOptions{machines: 3, workers: 2, delays: simnode.Options{
		InstallDelay: 50 * time.Millisecond, RebootDelay: 50 * time.Millisecond, DownDelay: 100 * time.Millisecond,
		BootDelay: 50 * time.Millisecond}})
	mark := e.start()
	if r := e.request("apply", map[string]any{"tenant": "lab"}); r.Status != "ok" {
		t.Fatalf("apply: %s", r.Error)
	}
	e.mustSucceed(mark, "apply")
	e.waitUpgradeState("running on v1.13.0", func(d upgradeDoc) bool {
		return d.Phase == "running" && d.TalosRunning != nil && *d.TalosRunning == "v1.13.0" &&
			d.KubeRunning != nil && *d.KubeRunning == "1.35.0"
	})
	cp, w1, w2 := e.node("cp", 1), e.node("workers", 1), e.node("workers", 2)
	backups := filepath.Join(e.dataDir, "backups", "lab")

	// a bad version is refused and changes nothing
	before, _ := os.ReadFile(e.tenantFile)
	if r := e.request("upgrade", map[string]any{"tenant": "lab", "component": "kubernetes", "version": "1.37.0"}); r.Status != "error" {
		t.Fatalf("Kubernetes 1.37.0 on Talos 1.13 accepted: %+v", r)
	}
	if after, _ := os.ReadFile(e.tenantFile); string(after) != string(before) {
		t.Fatal("a refused upgrade changed the tenant file")
	}

	// Talos v1.13.1
	mark = e.cap.mark()
	if r := e.request("upgrade", map[string]any{"tenant": "lab", "component": "talos", "version": "v1.13.1"}); r.Status != "ok" {
		t.Fatalf("upgrade: %s", r.Error)
	}
	// the first node going down: a snapshot file exists by then
	e.waitNode(cp, "upgrading", func(d nodeDoc) bool { return d.Stage == "upgrading" })
	if files, _ := filepath.Glob(filepath.Join(backups, "etcd-*.snapshot")); len(files) != 1 {
		t.Fatalf("no etcd snapshot before the first node went down: %v", files)
	}
	e.mustSucceed(mark, "upgrade")
	d := e.waitUpgradeState("Talos update installed", func(d upgradeDoc) bool {
		return d.TalosUpdate["installed_version"] == "v1.13.1" && d.TalosUpdate["in_progress"] == false
	})
	if d.TalosUpdate["latest_version"] != "v1.13.1" || d.LastBackup == nil || d.LastBackup.Size == 0 {
		t.Fatalf("state after the rollout: %+v", d)
	}
	if fi, err := os.Stat(d.LastBackup.File); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file %s: %v %v", d.LastBackup.File, fi, err)
	}
	if data, _ := os.ReadFile(e.tenantFile); !strings.Contains(string(data), `talos_version      = "v1.13.1"`) ||
		!strings.Contains(string(data), "# written by the end-to-end test") {
		t.Fatalf("tenant file not changed in place:\n%s", data)
	}
	on := func(v string) func(string) bool {
		return func(n string) bool {
			for _, m := range e.machines {
				if e.nodeName(m) == n {
					return m.node.TalosVersion() == v
				}
			}
			return false
		}
	}
	order, start, end := e.upgradeSpans(mark, on("v1.13.1"))
	if want := []string{cp, w1, w2}; !slices.Equal(order, want) {
		t.Fatalf("upgrade order %v, want %v", order, want)
	}
	for i := 1; i < len(order); i++ {
		if prev, ok := end[order[i-1]]; !ok || start[order[i]] < prev {
			t.Fatalf("node %s went down before %s was back", order[i], order[i-1])
		}
	}
	for _, m := range e.machines {
		if c := m.node.Calls(); c.Upgrade != 1 {
			t.Fatalf("node %s upgraded %d times", m.addr, c.Upgrade)
		}
	}

	// a second rollout stops at the first worker, whose image cannot be pulled
	e.machines[1].node.FailUpgrade(simnode.UpgradePullFails)
	mark = e.cap.mark()
	if r := e.request("upgrade", map[string]any{"tenant": "lab", "component": "talos", "version": "v1.13.2"}); r.Status != "ok" {
		t.Fatalf("upgrade: %s", r.Error)
	}
	if ev := e.waitOp(mark, "upgrade"); ev.EventType != "failed" || !strings.Contains(ev.Message, w1) {
		t.Fatalf("second rollout: %s %s", ev.EventType, ev.Message)
	}
	d = e.waitUpgradeState("problem after the failed rollout", func(d upgradeDoc) bool { return d.Problem && d.Operation == nil })
	if d.TalosUpdate["installed_version"] != "v1.13.1" || d.TalosUpdate["latest_version"] != "v1.13.2" {
		t.Fatalf("update entity after the failure: %+v", d.TalosUpdate)
	}
	if v := e.machines[2].node.TalosVersion(); v != "v1.13.1" {
		t.Fatalf("the node after the failed one moved to %s", v)
	}
	// Install (the update entity's command) resumes once the fault is cleared
	e.machines[1].node.ClearFault()
	mark = e.cap.mark()
	e.publish(base+"/lab/talos_update/install", "INSTALL")
	e.mustSucceed(mark, "upgrade")
	e.waitUpgradeState("Talos v1.13.2 everywhere", func(d upgradeDoc) bool {
		return d.TalosUpdate["installed_version"] == "v1.13.2" && d.TalosUpdate["in_progress"] == false && !d.Problem
	})
	if c := e.machines[0].node.Calls(); c.Upgrade != 2 {
		t.Fatalf("the control plane was upgraded %d times; the resume must skip it", c.Upgrade)
	}

	// Kubernetes 1.35.0 -> 1.35.2, no node reboots
	mark = e.cap.mark()
	if r := e.request("upgrade", map[string]any{"tenant": "lab", "component": "kubernetes", "version": "1.35.2"}); r.Status != "ok" {
		t.Fatalf("kubernetes upgrade: %s", r.Error)
	}
	e.mustSucceed(mark, "upgrade")
	e.waitUpgradeState("Kubernetes update installed", func(d upgradeDoc) bool {
		return d.KubernetesUpdate["installed_version"] == "1.35.2" && d.KubernetesUpdate["in_progress"] == false
	})
	order, _, _ = e.upgradeSpans(mark, func(string) bool { return false })
	if len(order) != 3 || order[0] != cp {
		t.Fatalf("Kubernetes upgrade order %v", order)
	}
	for _, m := range e.machines {
		if c := m.node.Calls(); c.Upgrade != 2 {
			t.Fatalf("a Kubernetes upgrade upgraded Talos on %s", m.addr)
		}
	}
	// a Kubernetes rollout in which a worker fails stops there
	e.machines[2].node.SetUnreachable(true)
	mark = e.cap.mark()
	if r := e.request("upgrade", map[string]any{"tenant": "lab", "component": "kubernetes", "version": "1.35.3"}); r.Status != "ok" {
		t.Fatalf("kubernetes upgrade: %s", r.Error)
	}
	if ev := e.waitOp(mark, "upgrade"); ev.EventType != "failed" || !strings.Contains(ev.Message, w2) {
		t.Fatalf("Kubernetes rollout with an unreachable worker: %s %s", ev.EventType, ev.Message)
	}
	e.machines[2].node.SetUnreachable(false)
	mark = e.cap.mark()
	e.publish(base+"/lab/kubernetes_update/install", "INSTALL")
	e.mustSucceed(mark, "upgrade")
	e.waitUpgradeState("Kubernetes 1.35.3 everywhere", func(d upgradeDoc) bool {
		return d.KubernetesUpdate["installed_version"] == "1.35.3" && !d.Problem
	})
}

// nodeName is the node a machine runs as (workers in pool order).
func (e *env) nodeName(m machine) string {
	for i, mm := range e.machines {
		if mm.addr == m.addr {
			if i == 0 {
				return e.node("cp", 1)
			}
			return e.node("workers", i)
		}
	}
	return ""
}
