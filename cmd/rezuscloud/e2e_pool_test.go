package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/kube"
	"github.com/rezuscloud/rezuscloud/internal/kube/kubesim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

const poolHAToken = "pool-ha-token-for-tests-0123456789"

// poolEnv is a metal tenant with a worker pool on 3 workers, each powered
// by a Home Assistant switch; a real API server and scheduler, the
// machines' kubelets (kubesim), and the Home Assistant stand-in with
// Energy preferences naming a grid power sensor.
type poolEnv struct {
	*env
	ha   *fakeha.Server
	kube *testenv.Kube
	cs   kubernetes.Interface

	mu       sync.Mutex
	offWhile []string // switches turned off while their node still answered
}

func newPoolEnv(t *testing.T) *poolEnv {
	t.Helper()
	e := newEnv(t, envOptions{machines: 4, workers: 3})
	pe := &poolEnv{env: e, ha: fakeha.New(poolHAToken), kube: testenv.StartKube(t)}
	t.Cleanup(pe.ha.Close)
	kc, err := kube.New(pe.kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if pe.cs, err = kubernetes.NewForConfig(kc.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	// the control plane hands out the real API server's kubeconfig
	e.world.SetKubeconfig(pe.kube.Kubeconfig)
	for _, m := range e.machines {
		km := kubesim.Attach(context.Background(), pe.cs, m.node, kubesim.Options{})
		t.Cleanup(km.Close)
	}

	pe.ha.SetEnergyPrefs(json.RawMessage(`{"energy_sources":[
	 {"type":"grid","stat_energy_from":"sensor.import_kwh","stat_energy_to":"sensor.export_kwh","stat_rate":"sensor.grid_power"},
	 {"type":"solar","stat_energy_from":"sensor.pv_kwh","stat_rate":"sensor.pv_power"}],
	 "device_consumption":[],"device_consumption_water":[]}`))
	pe.setGrid("-500") // exporting: the sun shines
	pe.ha.SetStateAttrs("sensor.pv_power", "900", map[string]any{"unit_of_measurement": "W", "device_class": "power"})
	for i := 1; i <= 3; i++ {
		pe.ha.SetState(fmt.Sprintf("switch.worker_%d", i), "on")
	}
	pe.ha.OnService(func(c fakeha.ServiceCall) {
		if c.Domain != "switch" {
			return
		}
		for i := 1; i <= 3; i++ {
			if !strings.Contains(string(c.ServiceData), fmt.Sprintf(`"switch.worker_%d"`, i)) {
				continue
			}
			m := e.machines[i]
			switch c.Service {
			case "turn_on":
				m.node.PowerOn()
			case "turn_off":
				if !m.node.PoweredOff() {
					pe.mu.Lock()
					pe.offWhile = append(pe.offWhile, m.addr)
					pe.mu.Unlock()
				}
			}
		}
	})

	// short delays: the test's clock is the real one
	doc := e.tenantTOMLWith(func(i int) string { return fmt.Sprintf("  power        = \"switch.worker_%d\"\n", i+1) }, `  [node_groups.pool]
  mode          = "on"
  min           = 0
  watts         = 60
  surplus_delay = "2s"
  pending_delay = "1s"
  min_on        = "0s"
  min_off       = "0s"
  cooldown      = "1s"
`)
	if err := os.WriteFile(e.tenantFile, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	e.appendConfig(fmt.Sprintf("[homeassistant]\nurl   = %q\ntoken = %q\n[pool]\ninterval = \"1s\"\n", pe.ha.URL, poolHAToken))
	return pe
}

func (pe *poolEnv) setGrid(w string) {
	pe.ha.SetStateAttrs("sensor.grid_power", w, map[string]any{"unit_of_measurement": "W", "device_class": "power"})
}

// pool is the workers' pool in the tenant state document.
func (pe *poolEnv) pool() poolDoc {
	d, _ := pe.tenantState()
	return d.Pools["workers"]
}

// waitPool waits until the pool's document satisfies cond.
func (pe *poolEnv) waitPool(what string, cond func(poolDoc) bool) poolDoc {
	pe.tb.Helper()
	var p poolDoc
	pe.cap.wait(pe.proc, phaseTimeout, "pool: "+what, func() bool {
		d, ok := pe.tenantState()
		p = d.Pools["workers"]
		return ok && cond(p)
	}, func() string { b, _ := json.Marshal(pe.pool()); return "pool: " + string(b) })
	return p
}

// poolEvents are the decision events of the workers' pool after mark.
func (pe *poolEnv) poolEvents(mark int) []map[string]any {
	var out []map[string]any
	for _, m := range pe.cap.since(mark) {
		if m.Topic != base+"/lab/workers/pool/event" {
			continue
		}
		var d map[string]any
		if json.Unmarshal(m.Payload, &d) == nil {
			out = append(out, d)
		}
	}
	return out
}

func (pe *poolEnv) waitPoolEvent(mark int, what string, match func(map[string]any) bool) map[string]any {
	pe.tb.Helper()
	var ev map[string]any
	pe.cap.wait(pe.proc, phaseTimeout, "pool event: "+what, func() bool {
		for _, d := range pe.poolEvents(mark) {
			if match(d) {
				ev = d
				return true
			}
		}
		return false
	}, func() string {
		b, _ := json.Marshal(pe.poolEvents(mark))
		p, _ := json.Marshal(pe.pool())
		return "pool events: " + string(b) + "; pool now: " + string(p)
	})
	return ev
}

// knode reads a Node from the API server.
func (pe *poolEnv) knode(name string) *corev1.Node {
	n, err := pe.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		pe.tb.Fatalf("node %s: %v", name, err)
	}
	return n
}

func knodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pod creates a pod owned by a ReplicaSet (a controller: it may be
// evicted), bound to node ("" leaves it to the scheduler, which places it
// only on selected).
func (pe *poolEnv) pod(name, node string, labels, selector map[string]string, owned bool) {
	pe.tb.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, NodeSelector: selector,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	if owned {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs",
			UID: types.UID("00000000-0000-0000-0000-00000000000" + name[len(name)-1:]), Controller: &yes}}
	}
	if _, err := pe.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		pe.tb.Fatalf("pod %s: %v", name, err)
	}
}

func (pe *poolEnv) podNode(name string) (string, corev1.PodPhase) {
	p, err := pe.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", "gone"
	}
	return p.Spec.NodeName, p.Status.Phase
}

// TestPool is issue 21's "done when", through the built binary: a metal
// tenant with a pool on 3 workers powered by Home Assistant switches, the
// HA stand-in's grid sensor going from export to import and back, a real
// API server and scheduler. The surplus ending drains the empty worker
// and powers it off gracefully (the switch only after Talos shut down);
// the next worker's drain is refused by a PodDisruptionBudget, which is
// reported and the node stays on and schedulable; a pod pending for a
// powered-off worker powers it on and it becomes Ready and runs the pod;
// observe mode decides without acting; an unavailable grid sensor holds
// the pool; the decision sensor, the event entity and the energy sensors
// say what happened.
func TestPool(t *testing.T) {
	pe := newPoolEnv(t)
	e := pe.env
	ctx := context.Background()
	w1, w2, w3 := e.node("workers", 1), e.node("workers", 2), e.node("workers", 3)
	e.start()
	mark := e.cap.mark()
	e.mustOK("apply", map[string]any{"tenant": "lab"})
	e.mustSucceed(mark, "apply")
	e.waitTenant("running with 3 workers", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 4 })
	// the cluster as Kubernetes sees it
	e.cap.wait(e.proc, phaseTimeout, "every node Ready in Kubernetes", func() bool {
		for _, n := range []string{e.node("cp", 1), w1, w2, w3} {
			if kn, err := pe.cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil || !knodeReady(kn) {
				return false
			}
		}
		return true
	})
	disc := e.discovery(e.tenantID())
	cmps, _ := disc["cmps"].(map[string]any)
	if cmps == nil {
		cmps, _ = disc["components"].(map[string]any)
	}
	for _, key := range []string{"workers_pool", "workers_pool_decision", "workers_pool_event", "workers_pool_energy", "workers_pool_power", "workers_pool_solar_share"} {
		if _, ok := cmps[key]; !ok {
			t.Errorf("the tenant device has no %s entity (keys %v)", key, slices.Collect(maps.Keys(cmps)))
		}
	}
	// with the sun shining and every worker on, the pool holds
	p := pe.waitPool("a hold with 3 workers on", func(p poolDoc) bool {
		return p.Decision == "hold" && strings.Contains(p.Reason, "3 of 3 workers on")
	})
	if p.Inputs["spare_w"] != 500.0 || p.Inputs["solar_w"] != 900.0 {
		t.Errorf("inputs %v: want spare 500 W, solar 900 W", p.Inputs)
	}

	// w1 runs a database its PodDisruptionBudget keeps; w2 a pod no
	// controller owns (it may not be evicted); w3 nothing
	pe.pod("db-1", w1, map[string]string{"app": "db"}, nil, true)
	pe.pod("pinned-2", w2, nil, nil, false)
	one := intstr.FromInt32(1)
	pdb, err := pe.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// no controller-manager runs: the test is the disruption controller
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if _, err := pe.cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.cap.wait(e.proc, phaseTimeout, "the pods running", func() bool {
		_, a := pe.podNode("db-1")
		_, b := pe.podNode("pinned-2")
		return a == corev1.PodRunning && b == corev1.PodRunning
	})

	// the surplus ends: the pool drains the empty worker and powers it off
	mark = e.cap.mark()
	pe.setGrid("300")
	ev := pe.waitPoolEvent(mark, "remove "+w3, func(d map[string]any) bool { return d["event_type"] == "remove" && d["node"] == w3 })
	if ev["observe"] != false || !strings.Contains(fmt.Sprint(ev["reason"]), "from the grid") {
		t.Errorf("remove event %v", ev)
	}
	e.waitNode(w3, "off", func(d nodeDoc) bool { return d.Stage == "unreachable" })
	if !e.machines[3].node.PoweredOff() || e.machines[3].node.Calls().Shutdown != 1 {
		t.Fatalf("%s: off %v, %+v: want one graceful Talos shutdown", w3, e.machines[3].node.PoweredOff(), e.machines[3].node.Calls())
	}
	e.cap.wait(e.proc, phaseTimeout, "switch.worker_3 off", func() bool {
		st, _ := pe.ha.State("switch.worker_3")
		return st == "off"
	})
	if !pe.knode(w3).Spec.Unschedulable {
		t.Errorf("%s was not cordoned before it went off", w3)
	}

	// next: w1's drain is refused by the budget; w1 stays on and schedulable
	ev = pe.waitPoolEvent(mark, "blocked by the PodDisruptionBudget", func(d map[string]any) bool {
		return d["event_type"] == "blocked" && strings.Contains(fmt.Sprint(d["reason"]), "PodDisruptionBudget default/db")
	})
	pe.waitPool("blocked after the refused drain", func(p poolDoc) bool {
		return p.Decision == "blocked" && p.Node != nil && *p.Node == w1
	})
	if n := pe.knode(w1); n.Spec.Unschedulable || !knodeReady(n) {
		t.Errorf("%s after the refused drain: unschedulable %v, ready %v", w1, n.Spec.Unschedulable, knodeReady(n))
	}
	if node, phase := pe.podNode("db-1"); node != w1 || phase != corev1.PodRunning {
		t.Errorf("db-1 after the refused drain: %s %s", node, phase)
	}
	for _, i := range []int{1, 2} {
		if m := e.machines[i].node; m.PoweredOff() || m.Calls().Shutdown != 0 {
			t.Errorf("worker %d was shut down: %+v", i, m.Calls())
		}
	}
	// and then the pool holds that no worker can go, naming both
	p = pe.waitPool("no worker can go", func(p poolDoc) bool {
		return p.Decision == "blocked" && strings.Contains(p.Reason, "no worker can go")
	})
	if !strings.Contains(p.Reason, w1+" ") || !strings.Contains(p.Reason, w2+" runs pods that cannot be evicted") {
		t.Errorf("blocked reason %q", p.Reason)
	}

	// a pod that only w3 can run waits: the pool powers w3 on (neither
	// surplus nor grid draw now), it becomes Ready, the pod runs there
	pe.setGrid("-30")
	mark = e.cap.mark()
	pe.pod("batch-3", "", nil, map[string]string{"kubernetes.io/hostname": w3}, true)
	ev = pe.waitPoolEvent(mark, "add "+w3, func(d map[string]any) bool { return d["event_type"] == "add" && d["node"] == w3 })
	if !strings.Contains(fmt.Sprint(ev["reason"]), "pods pending") {
		t.Errorf("add event %v", ev)
	}
	e.waitNode(w3, "running again", func(d nodeDoc) bool { return d.Stage == "running" && d.Ready })
	e.cap.wait(e.proc, phaseTimeout, "batch-3 running on "+w3, func() bool {
		node, phase := pe.podNode("batch-3")
		return node == w3 && phase == corev1.PodRunning
	})
	if n := pe.knode(w3); n.Spec.Unschedulable || !knodeReady(n) {
		t.Errorf("%s after the power-on: unschedulable %v, ready %v", w3, n.Spec.Unschedulable, knodeReady(n))
	}
	if st, _ := pe.ha.State("switch.worker_3"); st != "on" {
		t.Errorf("switch.worker_3 is %s", st)
	}
	e.mustSucceed(mark, "pool")

	// observe mode: with the grid drawing again the pool decides to
	// remove, says it only observes, and nothing is done
	e.publish(base+"/lab/workers/pool/set", "observe")
	pe.waitPool("mode observe", func(p poolDoc) bool { return p.Mode == "observe" })
	mark = e.cap.mark()
	shutdowns := e.machines[3].node.Calls().Shutdown
	pe.setGrid("400")
	ev = pe.waitPoolEvent(mark, "an observed remove", func(d map[string]any) bool { return d["event_type"] == "remove" && d["observe"] == true })
	seen := pe.waitPool("observed decisions go on", func(p poolDoc) bool {
		return p.Observe && p.At != nil && *p.At > fmt.Sprint(ev["at"])
	})
	if seen.Decision != "remove" {
		t.Errorf("observed decision %s: %s", seen.Decision, seen.Reason)
	}
	for _, d := range e.events(mark) {
		if d.Operation == "pool" {
			t.Errorf("observe mode ran an operation: %+v", d)
		}
	}
	for i, m := range e.machines[1:] {
		if m.node.PoweredOff() {
			t.Errorf("worker %d went off in observe mode", i+1)
		}
	}
	if e.machines[3].node.Calls().Shutdown != shutdowns || pe.knode(w3).Spec.Unschedulable {
		t.Errorf("observe mode touched %s", w3)
	}

	// an unavailable grid sensor holds the pool, in mode on too
	pe.setGrid("unavailable")
	pe.waitPool("hold on the unavailable sensor", func(p poolDoc) bool {
		return p.Decision == "hold" && strings.Contains(p.Reason, "sensor.grid_power is unavailable")
	})
	mark = e.cap.mark()
	e.publish(base+"/lab/workers/pool/set", "on")
	p = pe.waitPool("mode on, still holding", func(p poolDoc) bool {
		return p.Mode == "on" && !p.Observe && p.Decision == "hold" && strings.Contains(p.Reason, "unavailable")
	})
	for _, d := range e.events(mark) {
		if d.Operation == "pool" {
			t.Errorf("the pool acted on an unavailable sensor: %+v", d)
		}
	}

	// the energy sensors: 3 workers of 60 W on now, energy counted
	if p.PowerW == nil || *p.PowerW != 180 {
		t.Errorf("pool power %v, want 180 W", p.PowerW)
	}
	if p.EnergyKWh == nil || *p.EnergyKWh <= 0 {
		t.Errorf("pool energy %v, want more than 0 kWh", p.EnergyKWh)
	}
	if p.SolarShare == nil || *p.SolarShare < 0 || *p.SolarShare > 100 {
		t.Errorf("solar share %v", p.SolarShare)
	}
	pe.mu.Lock()
	if len(pe.offWhile) > 0 {
		t.Errorf("switches turned off while the node still answered: %v", pe.offWhile)
	}
	pe.mu.Unlock()
	if v := pe.ha.Violations(); len(v) > 0 {
		t.Errorf("Home Assistant protocol violations: %v", v)
	}
}
