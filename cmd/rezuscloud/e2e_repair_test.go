package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
)

// TestMetalDeadMachines is issue 19's machines that die, through the built
// binary (docs/design.md §11.7): a worker whose machine dies is a problem
// naming it once it has been silent past unreachable_after, and a machine
// a scan found replaces it (installed and joined under the dead node's
// name; the dead machine is never touched); another dead worker is
// forgotten with its node button (out of the file and Home Assistant,
// untouched) and Apply converges on what is left; a destroy whose worker
// is dead finishes.
func TestMetalDeadMachines(t *testing.T) {
	me := newMetalEnv(t, 4)
	e := me.env
	found := e.machines[1:]
	e.appendConfig("[engine]\nunreachable_after = \"3s\"\n")
	e.start()
	e.cap.wait(e.proc, phaseTimeout, "three machine devices after the first scan", func() bool {
		for _, m := range found {
			if !e.deviceShown(machineDevID(m.node.Hardware().MAC)) {
				return false
			}
		}
		return true
	})
	for _, m := range found[:2] {
		e.mustOK("adopt", map[string]any{"mac": m.node.Hardware().MAC, "tenant": "lab", "group": "workers"})
	}
	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.waitTenant("running with three nodes", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	w1, w2 := e.node("workers", 1), e.node("workers", 2)
	if d, _ := e.nodeState(w2); d.Forgettable {
		t.Fatalf("a running node is forgettable: %+v", d)
	}
	m := e.cap.mark()
	e.mustOK("forget", map[string]any{"tenant": "lab", "node": w2, "confirm": true})
	if ev := e.waitOp(m, "forget"); ev.EventType != "failed" || !strings.Contains(ev.Message, "answers") {
		t.Fatalf("forget of a node that answers: %s %q", ev.EventType, ev.Message)
	}

	// w2's machine dies: a problem naming it, then Forget becomes possible
	found[1].node.Die()
	e.waitNode(w2, "forgettable", func(d nodeDoc) bool { return d.Stage == "unreachable" && d.Forgettable })
	d := e.waitTenant("a problem naming the dead node", func(d tenantDoc) bool {
		return d.Problem && strings.Contains(strings.Join(d.Problems, " "), w2)
	})
	if d.Phase != "degraded" && d.Phase != "running" {
		t.Errorf("a cluster with a dead worker is %s", d.Phase)
	}

	// replaced by the machine the scan found and nobody adopted
	spare := found[2]
	m = e.cap.mark()
	e.mustOK("replace", map[string]any{"tenant": "lab", "node": w2, "mac": spare.node.Hardware().MAC})
	e.mustSucceed(m, "replace")
	e.waitNode(w2, "running on the spare machine", func(d nodeDoc) bool {
		return d.Stage == "running" && d.Ready && d.Address != nil && *d.Address == spare.addr && !d.Forgettable
	})
	e.waitTenant("three nodes ready again, no problem", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 3 && !d.Problem
	})
	file, _ := os.ReadFile(e.tenantFile)
	if !strings.Contains(string(file), fmt.Sprintf("%q", spare.addr)) || strings.Contains(string(file), fmt.Sprintf("%q", found[1].addr)) {
		t.Errorf("the file after the replace:\n%s", file)
	}
	if c := found[1].node.Calls(); c.Reset != 0 {
		t.Errorf("the dead machine was touched: %+v", c)
	}
	e.cap.wait(e.proc, phaseTimeout, "the spare's machine device gone", func() bool {
		return !e.deviceShown(machineDevID(spare.node.Hardware().MAC))
	})

	// w1's machine dies: forgotten with its button
	found[0].node.Die()
	e.waitNode(w1, "forgettable", func(d nodeDoc) bool { return d.Forgettable })
	m = e.cap.mark()
	e.publish(commandTopic(t, e.discovery(e.nodeID(w1)), "forget"), "PRESS")
	e.mustSucceed(m, "forget")
	file, _ = os.ReadFile(e.tenantFile)
	if strings.Contains(string(file), fmt.Sprintf("%q", found[0].addr)) || !strings.Contains(string(file), "count = 1") {
		t.Errorf("the file after the forget:\n%s", file)
	}
	if c := found[0].node.Calls(); c.Reset != 0 {
		t.Errorf("the forgotten machine was touched: %+v", c)
	}
	m = e.cap.mark()
	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.mustSucceed(m, "apply")
	e.waitTenant("two nodes running", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 2 && d.NodesTotal == 2 && !d.Problem
	})

	// a destroy with a dead worker finishes
	spare.node.Die()
	m = e.cap.mark()
	e.mustOK("destroy", map[string]any{"tenant": "lab", "confirm": "lab"})
	e.mustSucceed(m, "destroy")
	e.waitTenant("absent and idle", func(d tenantDoc) bool { return d.Phase == "absent" && d.Operation == nil })
	checkDiscovery(t, e.cap.all())
	e.stop()
}

// TestE2ECloudDrift is issue 19's drift through the built binary, real
// tofu and the real OpenStack provider: a worker's server deleted behind
// tofu's back shows, after the next refresh between operations, as
// pending changes and a problem saying drift; Apply recreates it once and
// the problem goes.
func TestE2ECloudDrift(t *testing.T) {
	e, cloud := newCloudEnv(t, simcloud.Hooks{})
	e.appendConfig("[engine]\ndrift_interval = \"2s\"\n")
	e.start()
	m := e.cap.mark()
	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.mustSucceed(m, "apply")
	e.waitTenant("running with 3 nodes ready", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	if err := cloud.DeleteServerOutside("lab-workers-1"); err != nil {
		t.Fatal(err)
	}
	d := e.waitTenant("drift shown", func(d tenantDoc) bool {
		return d.Problem && strings.Contains(strings.Join(d.Problems, " "), "drift") && d.Pending.Add > 0
	})
	if inv := cloud.Inventory(); inv.Servers != 2 {
		t.Fatalf("the drift check changed the cloud: %+v (tenant %v)", inv, d)
	}
	m = e.cap.mark()
	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.mustSucceed(m, "apply")
	if inv := cloud.Inventory(); inv.Servers != 3 {
		t.Fatalf("after the apply: %+v, want the server back", inv)
	}
	e.waitTenant("running, no drift", func(d tenantDoc) bool {
		return d.Phase == "running" && d.NodesReady == 3 && !strings.Contains(strings.Join(d.Problems, " "), "drift") && d.Pending == (pendingDoc{})
	})
	m = e.cap.mark()
	e.mustOK("destroy", map[string]any{"tenant": "lab", "confirm": "lab"})
	e.mustSucceed(m, "destroy")
	if inv := cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Fatalf("the cloud is not empty after destroy: %+v", inv)
	}
	e.stop()
}
