package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/cloudsim"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

const e2eCloudPassword = "e2e-cloud-Pa55word-not-on-mqtt"

// cloudEnv is an installation whose tenant lab is an OpenStack tenant on a
// stand-in cloud (its servers boot simulated nodes from their user_data).
func newCloudEnv(t *testing.T, hooks simcloud.Hooks) (*env, *cloudsim.Cloud) {
	t.Helper()
	e := newEnv(t, envOptions{tenant: "lab", machines: 1, workers: 0, delays: quickDelays})
	cloud, err := cloudsim.Start(context.Background(), cloudsim.Options{
		Cloud: simcloud.Options{Password: e2eCloudPassword, Hooks: hooks}, Node: quickDelays, TalosPort: talosPort})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Close)
	tenant := cloudsim.TenantFile("Lab", simnode.DefaultTalosVersion, 1, 2, true)
	if err := os.WriteFile(e.tenantFile, []byte(tenant), 0o600); err != nil {
		t.Fatal(err)
	}
	o := cloud.Options()
	e.appendConfig(fmt.Sprintf(`[credentials.openstack]
auth_url            = %q
username            = %q
password            = %q
project_name        = %q
user_domain_name    = "Default"
project_domain_name = "Default"
region              = %q
`, cloud.AuthURL(), o.Username, e2eCloudPassword, o.Project, o.Region))
	return e, cloud
}

// TestE2ECloudOpenStack: an OpenStack tenant through the built binary,
// real tofu and the real OpenStack provider against the stand-in cloud:
// Plan creates nothing, Apply builds the network, then instances that boot
// from their user_data; one bootstrap; every call to a worker goes through
// the control plane; scale 2 → 3 → 1; destroy leaves the cloud empty.
func TestE2ECloudOpenStack(t *testing.T) {
	e, cloud := newCloudEnv(t, simcloud.Hooks{})
	e.start()

	if r := e.request("plan", map[string]any{"tenant": "lab"}); r.Status != "ok" {
		t.Fatalf("plan: %s", r.Error)
	}
	mark := e.cap.mark()
	_ = mark
	ev := e.waitOp(0, "plan")
	if ev.EventType != "succeeded" || !strings.Contains(ev.Message, "network part") {
		t.Fatalf("plan: %s: %s", ev.EventType, ev.Message)
	}
	if inv := cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Fatalf("a plan created something: %+v", inv)
	}

	mark = e.cap.mark()
	if r := e.request("apply", map[string]any{"tenant": "lab"}); r.Status != "ok" {
		t.Fatalf("apply: %s", r.Error)
	}
	e.mustSucceed(mark, "apply")
	e.waitTenant("running with 3 nodes ready", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	cp := cloud.Node("lab-cp-1")
	fip := strings.Split(cp.PublicAddr(), ":")[0]
	w := e.waitNode("lab-workers-1", "running", runningAndReady)
	if w.Address == nil || *w.Address != fip {
		t.Fatalf("worker address %v, want the endpoint host %s", w.Address, fip)
	}
	m, _ := e.cap.lastMsg(e.nodeStateTopic("lab-workers-1"))
	if !strings.Contains(string(m.Payload), `"private_address":"`+cloud.Node("lab-workers-1").Host()+`"`) {
		t.Fatalf("worker state without its private address: %s", m.Payload)
	}
	if c := cloud.Calls(); c.Bootstrapped != 1 || c.Apply != 0 || c.DirectPrivate != 0 {
		t.Fatalf("calls after apply: %+v", c)
	}
	kc := filepath.Join(e.dataDir, "tenants", "lab", "kubeconfig")
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v %v", fi, err)
	}

	for _, n := range []int{3, 1} {
		mark = e.cap.mark()
		e.publish(base+"/lab/workers/count/set", fmt.Sprint(n))
		e.mustSucceed(mark, "apply")
		e.waitTenant(fmt.Sprintf("running with %d nodes", 1+n), func(d tenantDoc) bool {
			return d.Phase == "running" && d.NodesReady == 1+n && d.NodesTotal == 1+n
		})
		if inv := cloud.Inventory(); inv.Servers != 1+n {
			t.Fatalf("servers after scaling to %d: %+v", n, inv)
		}
	}
	if c := cloud.Calls(); c.ResetGraceful != 2 || c.DirectPrivate != 0 {
		t.Fatalf("calls after scaling: %+v", c)
	}

	mark = e.cap.mark()
	if r := e.request("destroy", map[string]any{"tenant": "lab", "confirm": "lab"}); r.Status != "ok" {
		t.Fatalf("destroy: %s", r.Error)
	}
	e.mustSucceed(mark, "destroy")
	if inv := cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Fatalf("the cloud is not empty after destroy: %+v", inv)
	}
	if c := cloud.Calls(); c.DirectPrivate != 0 {
		t.Fatalf("%d connections reached a private address directly", c.DirectPrivate)
	}
	for _, msg := range e.cap.all() {
		if strings.Contains(string(msg.Payload), e2eCloudPassword) {
			t.Fatalf("the cloud password is on MQTT (%s)", msg.Topic)
		}
	}
	e.stop()
}

// applyBlockedInCreate starts an installation, presses Apply and returns
// once tofu is creating the last worker, whose create the stand-in holds
// until release is closed.
func applyBlockedInCreate(t *testing.T) (*env, *cloudsim.Cloud, chan struct{}) {
	t.Helper()
	var once sync.Once
	creating := make(chan struct{})
	release := make(chan struct{})
	e, cloud := newCloudEnv(t, simcloud.Hooks{ServerActive: func(s simcloud.Server) error {
		if s.Name == "lab-workers-2" {
			once.Do(func() { close(creating) })
			<-release
		}
		return nil
	}})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e.start()
	e.publish(base+"/lab/apply", "PRESS")
	select {
	case <-creating:
	case <-time.After(phaseTimeout):
		t.Fatal("the instances were never created")
	}
	return e, cloud, release
}

// TestE2ECloudInterrupted: SIGTERM while tofu creates the instances; the
// state is saved, the operation shows as interrupted after the restart,
// and the next Apply converges without duplicates.
func TestE2ECloudInterrupted(t *testing.T) {
	e, cloud, release := applyBlockedInCreate(t)
	mark := e.cap.mark()
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, took := e.proc.terminate(stopTimeout)
		if code != 0 {
			t.Errorf("exit code %d after SIGTERM (took %v)", code, took)
		}
	}()
	// tofu got SIGINT and waits for the create in flight: let it finish
	close(release)
	<-done
	_ = mark

	e.start()
	d := e.waitTenant("failed: interrupted", func(d tenantDoc) bool {
		return d.Phase == "failed" && d.LastOperation != nil && strings.Contains(d.LastOperation.Message, "interrupted")
	})
	_ = d
	mark = e.cap.mark()
	e.publish(base+"/lab/apply", "PRESS")
	e.mustSucceed(mark, "apply")
	e.waitTenant("running", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	if inv := cloud.Inventory(); inv.Servers != 3 || inv.FloatingIPs != 1 {
		t.Fatalf("after converging: %+v", inv)
	}
	if c := cloud.Calls(); c.Bootstrapped != 1 || c.DirectPrivate != 0 {
		t.Fatalf("calls: %+v", c)
	}
	e.stop()
}

// waitLog waits until the process's log (stderr) contains s.
func (p *proc) waitLog(d time.Duration, s string) {
	p.tb.Helper()
	deadline := time.After(d)
	for {
		text, changed := p.stderr.snapshot()
		if strings.Contains(text, s) {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			p.tb.Fatalf("%s exited before its log said %q", p.name, s)
		case <-deadline:
			p.tb.Fatalf("%s: its log did not say %q within %v", p.name, s, d)
		}
	}
}

// TestE2ECloudKilled: the add-on is killed (SIGKILL) while its tofu creates
// the instances; tofu runs on in its own process group. Restarted at once,
// the add-on must not trust the live tofu's lock: it stops that tofu, waits
// for it, keeps the newest state, and the next Apply converges without a
// duplicate instance (fault matrix item 1).
func TestE2ECloudKilled(t *testing.T) {
	e, cloud, release := applyBlockedInCreate(t)
	tofus := childrenNamed(e.proc.pid(), "tofu")
	if len(tofus) == 0 {
		t.Fatal("no tofu runs under rezuscloud while it creates instances")
	}
	_ = e.proc.cmd.Process.Kill()
	<-e.proc.done
	for _, pid := range tofus {
		if !alive(pid) {
			t.Fatalf("tofu (pid %d) died with the add-on: this test needs it to outlive its parent", pid)
		}
	}

	// restart at once: the new add-on stops the orphan before it touches
	// the state, and meanwhile it is online and shows the wait (it used to
	// stay offline for as long as the orphan ran); the orphan finishes its
	// create when the hook lets it
	mark := e.cap.mark()
	e.proc = startProc(t, "rezuscloud run", nil, "run", "--config", e.cfgPath)
	e.proc.waitLog(startTimeout, "waiting for a tofu left running by the previous add-on to finish")
	waiting := func(d tenantDoc) bool {
		return strings.Contains(strings.Join(d.Problems, " "), "left behind to finish")
	}
	e.cap.wait(e.proc, startTimeout, "online, showing the wait for the orphaned tofu", func() bool {
		var on, shown bool
		for _, m := range e.cap.since(mark) {
			switch m.Topic {
			case base + "/bridge/availability":
				on = string(m.Payload) == "online"
			case e.tenantStateTopic():
				var d tenantDoc
				shown = on && json.Unmarshal(m.Payload, &d) == nil && waiting(d) && d.Problem
			}
		}
		return on && shown
	})
	for _, pid := range tofus {
		if !alive(pid) {
			t.Fatalf("the orphaned tofu (pid %d) ended before it was released: the wait was not shown while it ran", pid)
		}
	}
	close(release)
	e.waitTenant("the wait over", func(d tenantDoc) bool { return !waiting(d) })
	for _, pid := range tofus {
		if alive(pid) {
			t.Fatalf("the orphaned tofu (pid %d) still runs after the recovery", pid)
		}
	}
	mark = e.cap.mark()
	e.publish(base+"/lab/apply", "PRESS")
	e.mustSucceed(mark, "apply")
	e.waitTenant("running", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	if inv := cloud.Inventory(); inv.Servers != 3 || inv.Volumes != 3 || inv.FloatingIPs != 1 {
		t.Fatalf("after converging (a duplicate or a leak): %+v", inv)
	}
	e.stop()
}
