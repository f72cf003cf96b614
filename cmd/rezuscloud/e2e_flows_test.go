package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// quick stage delays: every transition happens, none takes long
var quickDelays = simnode.Options{
	InstallDelay: 200 * time.Millisecond, RebootDelay: 100 * time.Millisecond,
	DownDelay: 200 * time.Millisecond, BootDelay: 200 * time.Millisecond, ResetDelay: 100 * time.Millisecond,
}

func runningAndReady(d nodeDoc) bool { return d.Stage == "running" && d.Ready }

// waitMaintenance waits until a simulated machine is back in maintenance.
func waitMaintenance(tb testing.TB, m machine) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), phaseTimeout)
	defer cancel()
	if err := m.node.WaitStage(ctx, runtime.MachineStageMaintenance, false); err != nil {
		tb.Fatalf("machine %s: %v", m.addr, err)
	}
}

// TestE2ELifecycle is issue 7's main scenario on a metal tenant of one
// control plane and two workers (a pool of four worker machines), with
// auto_apply: Apply → running; scale to 3 → four nodes running, the file
// updated in place; scale to 1 → the removed machines reset and their
// devices gone; destroy refused without the right confirm; destroy →
// absent, every machine back in maintenance. Then everything published
// during the run is checked for conformance and secrets.
func TestE2ELifecycle(t *testing.T) {
	e := newEnv(t, envOptions{tenant: "lab", machines: 5, workers: 2, delays: quickDelays})
	e.start()

	cp, w1, w2, w3 := e.node("cp", 1), e.node("workers", 1), e.node("workers", 2), e.node("workers", 3)
	mCP, mW1, mW2, mW3, mW4 := e.machines[0], e.machines[1], e.machines[2], e.machines[3], e.machines[4]

	// before anything: absent, the declared nodes pending
	e.waitTenant("phase absent with 3 nodes declared", func(d tenantDoc) bool { return d.Phase == "absent" && d.NodesTotal == 3 })
	for _, n := range []string{cp, w1, w2} {
		e.waitNode(n, "pending", func(d nodeDoc) bool { return d.Stage == "pending" && !d.Ready })
	}

	// the command topics, from the retained discovery
	disc := e.discovery(e.tenantID())
	applyTopic := commandTopic(t, disc, "apply")
	countTopic := commandTopic(t, disc, "workers_count")
	if applyTopic != "rezuscloud/lab/apply" || countTopic != "rezuscloud/lab/workers/count/set" {
		t.Errorf("command topics %q, %q; docs/design.md §4 says rezuscloud/lab/apply, rezuscloud/lab/workers/count/set", applyTopic, countTopic)
	}

	t.Run("apply", func(t *testing.T) {
		mark := e.cap.mark()
		e.publish(applyTopic, "PRESS")
		e.mustSucceed(mark, "apply")
		d := e.waitTenant("running, 3 of 3 ready, idle", func(d tenantDoc) bool {
			return d.Phase == "running" && d.NodesReady == 3 && d.NodesTotal == 3 && d.Operation == nil
		})
		if d.Problem || d.LastOperation == nil || d.LastOperation.Name != "apply" || d.LastOperation.Result != "succeeded" {
			t.Errorf("after apply: %v", d)
		}
		for _, n := range []string{cp, w1, w2} {
			e.waitNode(n, "running and ready", runningAndReady)
		}
		// the machines: each used one configured once, one bootstrap
		for i, m := range []machine{mCP, mW1, mW2} {
			if c := m.node.Calls(); c.Apply != 1 || c.ApplyRejected != 0 {
				t.Errorf("machine %d: %d config applies (%d rejected), want exactly 1", i, c.Apply, c.ApplyRejected)
			}
		}
		if c := mCP.node.Calls(); c.Bootstrapped != 1 {
			t.Errorf("control plane bootstrapped %d times, want 1", c.Bootstrapped)
		}
		for _, m := range []machine{mW3, mW4} {
			if c := m.node.Calls(); c.Apply != 0 || m.node.Stage() != runtime.MachineStageMaintenance {
				t.Errorf("unused machine %s: %d applies, stage %s", m.addr, c.Apply, m.node.Stage())
			}
		}
		kc := filepath.Join(e.dataDir, "tenants", "lab", "kubeconfig")
		fi, err := os.Stat(kc)
		if err != nil {
			t.Fatalf("kubeconfig: %v", err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("kubeconfig mode %v, want 0600", fi.Mode().Perm())
		}
		data, _ := os.ReadFile(kc)
		if want := "https://" + net.JoinHostPort(mCP.addr, "6443"); !bytes.Contains(data, []byte(want)) {
			t.Errorf("kubeconfig does not name the endpoint %s:\n%.300s", want, data)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("scale to 3", func(t *testing.T) {
		before, err := os.ReadFile(e.tenantFile)
		if err != nil {
			t.Fatal(err)
		}
		mark := e.cap.mark()
		e.publish(countTopic, "3")
		e.mustSucceed(mark, "apply")
		d := e.waitTenant("running, 4 of 4 ready, workers count 3", func(d tenantDoc) bool {
			return d.Phase == "running" && d.NodesReady == 4 && d.NodesTotal == 4 && d.Counts["workers"] == 3 && d.Operation == nil
		})
		if d.Problem {
			t.Errorf("problem after scale: %v", d)
		}
		for _, n := range []string{cp, w1, w2, w3} {
			e.waitNode(n, "running and ready", runningAndReady)
		}
		if m, ok := e.cap.lastMsg(e.discTopic(e.nodeID(w3))); !ok || len(m.Payload) == 0 || !m.Retained {
			t.Errorf("no retained discovery for the new node %s", w3)
		}
		if c := mW3.node.Calls(); c.Apply != 1 {
			t.Errorf("new worker machine: %d applies, want 1", c.Apply)
		}
		if c := mCP.node.Calls(); c.Apply != 1 || c.Bootstrapped != 1 {
			t.Errorf("control plane after scale: %+v (configured or bootstrapped again?)", c)
		}
		after, err := os.ReadFile(e.tenantFile)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Replace(before, []byte("count = 2   # set from Home Assistant"), []byte("count = 3   # set from Home Assistant"), 1)
		if bytes.Equal(want, before) {
			t.Fatalf("test bug: the count line is not in the tenant file")
		}
		if !bytes.Equal(after, want) {
			t.Errorf("tenant file not updated in place:\n--- got\n%s\n--- want\n%s", after, want)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("scale to 1", func(t *testing.T) {
		mark := e.cap.mark()
		e.publish(countTopic, "1")
		e.mustSucceed(mark, "apply")
		d := e.waitTenant("running, 2 of 2 ready, workers count 1", func(d tenantDoc) bool {
			return d.Phase == "running" && d.NodesReady == 2 && d.NodesTotal == 2 && d.Counts["workers"] == 1 && d.Operation == nil
		})
		if d.Problem {
			t.Errorf("problem after scale down: %v", d)
		}
		for _, x := range []struct {
			node string
			m    machine
		}{{w2, mW2}, {w3, mW3}} {
			waitMaintenance(t, x.m)
			if c := x.m.node.Calls(); c.Reset < 1 || c.ResetGraceful < 1 {
				t.Errorf("removed node %s: %d resets (%d graceful), want a graceful reset", x.node, c.Reset, c.ResetGraceful)
			}
			for _, topic := range []string{e.discTopic(e.nodeID(x.node)), e.nodeStateTopic(x.node)} {
				if m, ok := e.cap.lastMsg(topic); !ok || len(m.Payload) != 0 || !m.Retained {
					t.Errorf("removed node %s: %s not cleared (last: retained=%v %q)", x.node, topic, m.Retained, m.Payload)
				}
			}
		}
		for _, x := range []struct {
			node string
			m    machine
		}{{cp, mCP}, {w1, mW1}} {
			if c := x.m.node.Calls(); c.Reset != 0 {
				t.Errorf("kept node %s was reset", x.node)
			}
			if m, ok := e.cap.lastMsg(e.discTopic(e.nodeID(x.node))); !ok || len(m.Payload) == 0 {
				t.Errorf("kept node %s lost its discovery", x.node)
			}
			e.waitNode(x.node, "running and ready", runningAndReady)
		}
		if data, _ := os.ReadFile(e.tenantFile); !bytes.Contains(data, []byte("count = 1   # set from Home Assistant")) {
			t.Errorf("tenant file after scale to 1:\n%s", data)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("destroy refused", func(t *testing.T) {
		mark := e.cap.mark()
		for _, body := range []map[string]any{
			{"tenant": "lab", "confirm": "not-lab"},
			{"tenant": "lab", "confirm": "LAB"},
			{"tenant": "lab"},
		} {
			r := e.request("destroy", body)
			if r.Status != "error" || r.Error == "" {
				t.Errorf("destroy %v: response %+v, want an error", body, r)
			}
		}
		// a plan through the same queue: had a destroy been queued, it
		// would have run before the plan's end
		r := e.request("plan", map[string]any{"tenant": "lab"})
		if r.Status != "ok" {
			t.Fatalf("plan: %+v", r)
		}
		e.mustSucceed(mark, "plan")
		for _, ev := range e.events(mark) {
			if ev.Operation == "destroy" {
				t.Errorf("a destroy ran: %+v", ev)
			}
		}
		d, _ := e.tenantState()
		if d.Phase != "running" || d.NodesReady != 2 || d.Pending != (pendingDoc{}) {
			t.Errorf("after the refused destroys: %v, want running with nothing pending", d)
		}
		for _, m := range []machine{mCP, mW1} {
			if c := m.node.Calls(); c.Reset != 0 || m.node.Stage() != runtime.MachineStageRunning {
				t.Errorf("machine %s after refused destroys: %d resets, stage %s", m.addr, c.Reset, m.node.Stage())
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("restart", func(t *testing.T) {
		e.stop()
		restart := e.start()
		e.checkNoDeviceCleared(restart, cp, w1)
		for _, n := range []string{w2, w3} {
			if m, ok := e.cap.lastMsg(e.discTopic(e.nodeID(n))); ok && len(m.Payload) > 0 {
				t.Errorf("the removed node %s is back in Home Assistant after the restart", n)
			}
		}
		e.waitTenant("running, 2 of 2 ready", func(d tenantDoc) bool {
			return d.Phase == "running" && d.NodesReady == 2 && d.NodesTotal == 2 && d.Operation == nil
		})
		// a plan through the tenant's queue: whatever the restart queued
		// has run by its end
		mark := e.cap.mark()
		if r := e.request("plan", map[string]any{"tenant": "lab"}); r.Status != "ok" {
			t.Fatalf("plan: %+v", r)
		}
		e.mustSucceed(mark, "plan")
		for _, op := range e.opsBetween(restart, mark) {
			t.Errorf("the restart of a running tenant with an unchanged file ran %s by itself", op)
		}
		for _, op := range e.opsBetween(mark, -1) {
			if op != "plan" {
				t.Errorf("the restart of a running tenant with an unchanged file queued %s", op)
			}
		}
		var phases []string
		for _, m := range e.cap.since(restart) {
			var d tenantDoc
			if m.Topic == e.tenantStateTopic() && json.Unmarshal(m.Payload, &d) == nil {
				if len(phases) == 0 || phases[len(phases)-1] != d.Phase {
					phases = append(phases, d.Phase)
				}
			}
		}
		t.Logf("tenant phases after the restart: %v", phases)
		for _, p := range phases {
			if p != "running" {
				t.Errorf("the running tenant showed phase %q after the restart (phases: %v)", p, phases)
				break
			}
		}
	})
	// (the destroy below needs only a running tenant: go on after a
	// failed restart check)

	// read the secrets before the destroy (the bundle stays anyway)
	secretsPath := talos.SecretsPath(filepath.Join(e.dataDir, "tenants", "lab"))
	known := append(tenantSecrets(t, secretsPath), e.passphrase)

	t.Run("destroy", func(t *testing.T) {
		mark := e.cap.mark()
		r := e.request("destroy", map[string]any{"tenant": "lab", "confirm": "lab"})
		if r.Status != "ok" {
			t.Fatalf("destroy: %+v", r)
		}
		e.mustSucceed(mark, "destroy")
		d := e.waitTenant("absent and idle", func(d tenantDoc) bool { return d.Phase == "absent" && d.Operation == nil })
		if d.NodesReady != 0 || d.NodesTotal != 2 {
			t.Errorf("after destroy: %v", d)
		}
		for _, n := range []string{cp, w1} {
			e.waitNode(n, "pending", func(d nodeDoc) bool { return d.Stage == "pending" && !d.Ready })
			if m, ok := e.cap.lastMsg(e.discTopic(e.nodeID(n))); !ok || len(m.Payload) == 0 {
				t.Errorf("declared node %s left Home Assistant at destroy", n)
			}
		}
		for i, m := range e.machines {
			waitMaintenance(t, m)
			if i <= 1 && m.node.Calls().Reset < 1 {
				t.Errorf("machine %s was not reset", m.addr)
			}
		}
		for _, f := range []string{"kubeconfig", "talosconfig"} {
			if _, err := os.Stat(filepath.Join(e.dataDir, "tenants", "lab", f)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s still there after destroy (%v)", f, err)
			}
		}
		if _, err := os.Stat(secretsPath); err != nil {
			t.Errorf("the secrets bundle must stay while the tenant file exists: %v", err)
		}
	})

	e.stop()

	t.Run("discovery conforms", func(t *testing.T) {
		n := checkDiscovery(t, e.cap.all())
		t.Logf("%d discovery messages checked", n)
	})
	t.Run("no secrets", func(t *testing.T) {
		msgs := e.cap.all()
		checkNoSecrets(t, msgs, known)
		checkLogNoSecrets(t, e.proc.stderr.String()+e.proc.stdout.String(), known)
		t.Logf("%d messages and %d bytes of log checked against %d secret values", len(msgs), len(e.proc.stderr.String()), len(known))
	})
}

// TestE2EInterrupted stops the binary with SIGTERM in the middle of an
// apply, once while the nodes install (Talos phase) and once while tofu
// runs: the process exits 0 in time and says offline; after a restart on
// the same data dir the tenant shows the interrupted apply as failed, the
// state is intact, and the next Apply reaches running.
func TestE2EInterrupted(t *testing.T) {
	cases := []struct {
		name    string
		delays  simnode.Options
		trigger func(t *testing.T, e *env) (tofuPid int)
	}{
		{
			name: "while nodes install",
			// long enough that the apply is still in its Talos phase when
			// the process has stopped
			delays: simnode.Options{InstallDelay: 15 * time.Second, RebootDelay: 100 * time.Millisecond,
				DownDelay: 200 * time.Millisecond, BootDelay: 200 * time.Millisecond},
			trigger: func(t *testing.T, e *env) int {
				e.waitNode(e.node("cp", 1), "installing", func(d nodeDoc) bool { return d.Stage == "installing" })
				if s := e.machines[0].node.Stage(); s != runtime.MachineStageInstalling {
					t.Fatalf("control plane machine in stage %s, want installing", s)
				}
				return 0
			},
		},
		{
			name:   "while tofu applies",
			delays: quickDelays,
			trigger: func(t *testing.T, e *env) int {
				// no event announces a child process: look for `tofu apply`
				// (after the plan: the tenant has infrastructure from now on)
				deadline := time.After(phaseTimeout)
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					for _, pid := range childrenNamed(e.proc.pid(), "tofu") {
						args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
						if strings.HasPrefix(string(args[bytes.IndexByte(args, 0)+1:]), "apply\x00") {
							return pid
						}
					}
					select {
					case <-tick.C:
					case <-e.proc.done:
						t.Fatalf("rezuscloud exited (code %d) before tofu ran", e.proc.code)
					case <-deadline:
						t.Fatalf("tofu apply never ran as a child of rezuscloud")
					}
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{tenant: "lab", machines: 3, workers: 2, delays: tc.delays})
			e.start()
			applyTopic := commandTopic(t, e.discovery(e.tenantID()), "apply")
			tenantDir := filepath.Join(e.dataDir, "tenants", "lab")

			mark := e.cap.mark()
			e.publish(applyTopic, "PRESS")
			tofuPid := tc.trigger(t, e)
			code, took := e.proc.terminate(stopTimeout)
			if code != 0 {
				t.Fatalf("exit code %d after SIGTERM (took %v)", code, took)
			}
			t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
			e.cap.wait(nil, 30*time.Second, "availability offline", func() bool {
				m, ok := e.cap.lastMsg(base + "/bridge/availability")
				return ok && m.Retained && string(m.Payload) == "offline"
			})
			if tofuPid != 0 && alive(tofuPid) {
				t.Errorf("tofu (pid %d) outlived rezuscloud", tofuPid)
			}
			if left := childrenNamed(1, "tofu"); len(left) > 0 {
				for _, p := range left {
					if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); bytes.Contains(cmdline, []byte(e.dataDir)) {
						t.Errorf("a tofu of ours (pid %d) was left running", p)
					}
				}
			}
			for _, ev := range e.events(mark) {
				if ev.Operation == "apply" && ev.EventType == "succeeded" {
					t.Fatalf("the apply finished before SIGTERM: the test did not interrupt it")
				}
			}
			bundle, err := os.ReadFile(talos.SecretsPath(tenantDir))
			if err != nil {
				t.Fatalf("secrets bundle after the stop: %v", err)
			}

			// restart on the same data dir
			restart := e.start()
			// the first state published after the restart
			var d tenantDoc
			for _, m := range e.cap.since(restart) {
				if m.Topic == e.tenantStateTopic() && len(m.Payload) > 0 {
					if err := json.Unmarshal(m.Payload, &d); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			if d.Phase != "failed" || !d.Problem || d.LastOperation == nil || d.LastOperation.Name != "apply" ||
				(d.LastOperation.Result != "failed" && d.LastOperation.Result != "cancelled") {
				t.Errorf("after the restart: %v; want phase failed, problem, last operation apply failed/cancelled", d)
			}
			if d.LastOperation != nil && !strings.Contains(strings.ToLower(d.LastOperation.Message), "interrupted") {
				t.Errorf("last operation message %q does not say the apply was interrupted (by the stop)", d.LastOperation.Message)
			}
			e.checkNoDeviceCleared(restart, e.node("cp", 1), e.node("workers", 1), e.node("workers", 2))

			mark = e.cap.mark()
			for _, op := range e.opsBetween(restart, mark) {
				t.Errorf("the restart started %s by itself, before any press (so the interrupted apply is not what the tenant shows)", op)
			}
			e.publish(applyTopic, "PRESS")
			e.mustSucceed(mark, "apply")
			d = e.waitTenant("running, 3 of 3 ready", func(d tenantDoc) bool {
				return d.Phase == "running" && d.NodesReady == 3 && d.Operation == nil
			})
			if d.Problem {
				t.Errorf("problem after the converging apply: %v", d)
			}
			after, _ := os.ReadFile(talos.SecretsPath(tenantDir))
			if !bytes.Equal(after, bundle) {
				t.Errorf("the secrets bundle changed across the interruption")
			}
			for _, m := range e.machines {
				if c := m.node.Calls(); c.Apply != 1 || c.ApplyRejected != 0 || c.Reset != 0 {
					t.Errorf("machine %s: %+v; want exactly one config apply and no reset", m.addr, c)
				}
			}
			// the state matches the infrastructure: nothing to do
			mark = e.cap.mark()
			if r := e.request("plan", map[string]any{"tenant": "lab"}); r.Status != "ok" {
				t.Fatalf("plan: %+v", r)
			}
			e.mustSucceed(mark, "plan")
			if d, _ := e.tenantState(); d.Pending != (pendingDoc{}) || d.Phase != "running" {
				t.Errorf("plan after the converging apply: %v; want running with nothing pending", d)
			}
			e.stop()

			checkDiscovery(t, e.cap.all())
			known := append(tenantSecrets(t, talos.SecretsPath(tenantDir)), e.passphrase)
			checkNoSecrets(t, e.cap.all(), known)
		})
	}
}

var brokerLine = regexp.MustCompile(`embedded MQTT broker: (\S+)`)

// TestE2EDemo runs `rezuscloud demo --apply --nodes 3` with its embedded
// broker: it reaches running on its own, and SIGTERM stops it cleanly.
func TestE2EDemo(t *testing.T) {
	bin, _ := testenv.Tofu(t)
	rezuscloudBinary(t)
	dir := t.TempDir()
	var p *proc
	var brokerURL string
	for attempt := 0; ; attempt++ {
		nw := freeNodeNet(t, 3)
		p = startProc(t, "rezuscloud demo", []string{"REZUSCLOUD_TOFU=" + bin},
			"demo", "--apply", "--nodes", "3", "--data", dir, "--node-net", nw)
		brokerURL = p.waitStdout(startTimeout, "the broker URL", func(s string) (string, bool) {
			if m := brokerLine.FindStringSubmatch(s); m != nil {
				return m[1], true
			}
			return "", false
		})
		// the nodes start after the broker: wait for the next line
		p.waitStdout(startTimeout, "the demo banner", func(s string) (string, bool) {
			return "", strings.Contains(s, "rezuscloud demo:") || p.exited()
		})
		if !p.exited() {
			break
		}
		if attempt < 3 && strings.Contains(p.stderr.String(), "starting simulated nodes") {
			continue // the /24 was taken meanwhile
		}
		t.Fatalf("demo exited with code %d", p.code)
	}
	c := startCapture(t, brokerURL)
	e := &env{tb: t, opts: envOptions{tenant: "demo"}, cap: c, proc: p}
	d := e.waitTenant("running, 3 of 3 ready, the apply over", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 3 && d.NodesTotal == 3 && d.Operation == nil
	})
	if d.Problem || d.LastOperation == nil || d.LastOperation.Result != "succeeded" {
		t.Errorf("demo tenant: %v", d)
	}
	for _, n := range []string{"demo-cp-1", "demo-workers-1", "demo-workers-2"} {
		e.waitNode(n, "running and ready", runningAndReady)
	}
	p.waitStdout(phaseTimeout, `"demo apply: succeeded"`, func(s string) (string, bool) {
		return "", strings.Contains(s, "demo apply: succeeded")
	})
	kc := filepath.Join(dir, "data", "tenants", "demo", "kubeconfig")
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig %s: %v %v", kc, fi, err)
	}
	code, took := p.terminate(time.Minute)
	if code != 0 {
		t.Errorf("demo exited with code %d after SIGTERM", code)
	}
	t.Logf("demo stopped %v after SIGTERM", took.Round(time.Millisecond))
	if strings.Contains(p.stderr.String(), "panic:") {
		t.Errorf("the demo panicked")
	}
	checkDiscovery(t, c.all())
	known := append(tenantSecrets(t, talos.SecretsPath(filepath.Join(dir, "data", "tenants", "demo"))), readPassphrase(t, filepath.Join(dir, "data")))
	checkNoSecrets(t, c.all(), known)
	checkLogNoSecrets(t, p.stderr.String()+p.stdout.String(), known)
}

// freeNodeNet finds a loopback /24 whose first n addresses are free at the
// Talos port.
func freeNodeNet(t *testing.T, n int) string {
	t.Helper()
	for range 50 {
		nw := fmt.Sprintf("127.%d.%d", 1+rand.IntN(254), rand.IntN(256))
		ok := true
		for i := range n {
			l, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("%s.%d", nw, 10+i), strconv.Itoa(talosPort)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return nw
		}
	}
	t.Fatal("no free loopback /24 for the simulated nodes")
	return ""
}

// readPassphrase reads the state passphrase the demo generated.
func readPassphrase(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, config.PassphraseFile))
	if err != nil || len(bytes.TrimSpace(b)) < 16 {
		t.Errorf("generated state passphrase: %v (%d bytes)", err, len(b))
	}
	return strings.TrimSpace(string(b))
}

// recTB records the errors a check reports instead of failing the test.
type recTB struct {
	testing.TB
	errs []string
}

func (r *recTB) Helper() {}
func (r *recTB) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

// TestE2ESecretChecksCatch shows that the secret checks of the end-to-end
// tests can fail: a payload or log line carrying a value of a real secrets
// bundle, a key, or the passphrase is caught; clean ones are not.
func TestE2ESecretChecksCatch(t *testing.T) {
	b, err := talos.NewSecrets(simnode.DefaultTalosVersion)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), talos.SecretsFile)
	if err := talos.SaveSecrets(path, b); err != nil {
		t.Fatal(err)
	}
	const pass = "e2e-pass-0123456789abcdef"
	known := append(tenantSecrets(t, path), pass)
	keyLine := strings.Split(string(b.Certs.OS.Key), "\n")[1]
	leaks := map[string]string{
		"bootstrap token":   `{"message":"token ` + b.Secrets.BootstrapToken + `"}`,
		"trustd token":      `{"note":"` + b.TrustdInfo.Token + `"}`,
		"cluster secret":    `{"x":"` + b.Cluster.Secret + `"}`,
		"a line of the key": `{"x":"` + keyLine + `"}`,
		"the passphrase":    `{"message":"using ` + pass + `"}`,
		"a PEM block":       `{"x":"-----BEGIN PRIVATE KEY-----"}`,
	}
	for name, payload := range leaks {
		r := &recTB{TB: t}
		checkNoSecrets(r, []mqttMsg{{Topic: "rezuscloud/lab/state", Payload: []byte(payload), Retained: true}}, known)
		if len(r.errs) == 0 {
			t.Errorf("MQTT check missed %s", name)
		}
		r = &recTB{TB: t}
		checkLogNoSecrets(r, "2026-11-30T03:00:00Z INFO something "+payload+"\n", known)
		if len(r.errs) == 0 {
			t.Errorf("log check missed %s", name)
		}
	}
	r := &recTB{TB: t}
	clean := `{"phase":"running","nodes_ready":3,"nodes_total":3,"progress":100,"pending":{"add":0,"change":0,"destroy":0}}`
	checkNoSecrets(r, []mqttMsg{{Topic: "rezuscloud/lab/state", Payload: []byte(clean), Retained: true}}, known)
	checkLogNoSecrets(r, "INFO operation succeeded\n", known)
	if len(r.errs) > 0 {
		t.Errorf("clean payload flagged: %v", r.errs)
	}
}
