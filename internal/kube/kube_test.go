package kube_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/internal/kube"
	"github.com/rezuscloud/rezuscloud/internal/kube/kubesim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// cluster is a real control plane (etcd, kube-apiserver, kube-scheduler)
// shared by the subtests of one test, each in its own namespace and with
// its own simulated nodes.
type cluster struct {
	env      *testenv.Kube
	c        *kube.Client
	cs       kubernetes.Interface
	kubelets kubernetes.Interface // the simulated kubelets' own client, as real ones have
}

func startCluster(t testing.TB) *cluster {
	env := testenv.StartKube(t)
	c, err := kube.New(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	kubelets, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{env: env, c: c, cs: cs, kubelets: kubelets}
}

// node starts a simulated kubelet.
func (cl *cluster) node(t testing.TB, name string, opts ...kubesim.Options) *kubesim.Kubelet {
	t.Helper()
	var o kubesim.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Name = name
	o.Address = "127.0.0.1"
	k, err := kubesim.Start(context.Background(), cl.kubelets, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

func (cl *cluster) namespace(t testing.TB, name string) string {
	t.Helper()
	if _, err := cl.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// owner creates a ReplicaSet or DaemonSet object to own pods (no
// controller-manager runs: it creates no pods itself).
func (cl *cluster) owner(t testing.TB, ns, kind, name string) metav1.OwnerReference {
	t.Helper()
	ctx := context.Background()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	var uid string
	switch kind {
	case "ReplicaSet":
		rs, err := cl.cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uid = string(rs.UID)
	case "DaemonSet":
		ds, err := cl.cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uid = string(ds.UID)
	}
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: &yes}
}

type podSpec struct {
	name, node string // node "": left to the scheduler
	owner      *metav1.OwnerReference
	cpu        string
	gated      bool
	annotation map[string]string
}

func (cl *cluster) pod(t testing.TB, ns string, s podSpec) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Annotations: s.annotation},
		Spec: corev1.PodSpec{
			NodeName:                      s.node,
			TerminationGracePeriodSeconds: new(int64(30)),
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	if s.owner != nil {
		p.Labels = map[string]string{"app": s.owner.Name}
		p.OwnerReferences = []metav1.OwnerReference{*s.owner}
	}
	if s.cpu != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(s.cpu)}
	}
	if s.gated {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	}
	out, err := cl.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (cl *cluster) phase(ns, name string) (corev1.PodPhase, string) {
	p, err := cl.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "gone"
	}
	if err != nil {
		return "", err.Error()
	}
	return p.Status.Phase, p.Spec.NodeName
}

func (cl *cluster) waitRunning(t testing.TB, ns string, names ...string) {
	t.Helper()
	for _, n := range names {
		testenv.WaitFor(t, 30*time.Second, "pod "+ns+"/"+n+" running", func() bool {
			ph, _ := cl.phase(ns, n)
			return ph == corev1.PodRunning
		})
	}
}

func (cl *cluster) pdb(t testing.TB, ns, app string, minAvailable int, allowed int32) {
	t.Helper()
	ctx := context.Background()
	min := intstr.FromInt32(int32(minAvailable))
	b, err := cl.cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if allowed < 0 {
		return // status as without a disruption controller: never computed
	}
	// The test plays the disruption controller (none runs): the status it
	// would compute.
	b.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: b.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: int32(minAvailable) + allowed, DesiredHealthy: int32(minAvailable), ExpectedPods: int32(minAvailable) + allowed,
	}
	if _, err := cl.cs.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (cl *cluster) unschedulable(t testing.TB, node string) bool {
	t.Helper()
	n, err := cl.cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

// TestCluster runs the package's API against a real API server and
// scheduler, with kubesim kubelets as the nodes.
func TestCluster(t *testing.T) {
	cl := startCluster(t)
	ctx := context.Background()

	t.Run("PendingAfterDelay", func(t *testing.T) {
		ns := cl.namespace(t, "pending")
		cl.node(t, "pending-w1", kubesim.Options{CPU: "2", Labels: map[string]string{"pool": "pending"}})
		cl.pod(t, ns, podSpec{name: "fits", cpu: "500m"})
		cl.pod(t, ns, podSpec{name: "huge", cpu: "64"})
		cl.pod(t, ns, podSpec{name: "gated", cpu: "64", gated: true})
		cl.waitRunning(t, ns, "fits")
		var got []kube.PendingPod
		testenv.WaitFor(t, 30*time.Second, "huge unschedulable", func() bool {
			all, err := cl.c.Pending(ctx, time.Now(), 0)
			if err != nil {
				t.Fatal(err)
			}
			got = slices.DeleteFunc(all, func(p kube.PendingPod) bool { return p.Namespace != ns })
			return len(got) > 0
		})
		if len(got) != 1 || got[0].Name != "huge" || got[0].MilliCPU != 64000 || !strings.Contains(got[0].Message, "Insufficient cpu") {
			t.Fatalf("pending = %+v", got)
		}
		since := got[0].Since
		// not yet pending for a minute; then, a minute on, it is
		if late, _ := cl.c.Pending(ctx, since.Add(59*time.Second), time.Minute); slices.ContainsFunc(late, func(p kube.PendingPod) bool { return p.Namespace == ns }) {
			t.Errorf("pending before the delay: %+v", late)
		}
		later, err := cl.c.Pending(ctx, since.Add(90*time.Second), time.Minute)
		if err != nil || !slices.ContainsFunc(later, func(p kube.PendingPod) bool { return p.Name == "huge" && p.For == 90*time.Second }) {
			t.Errorf("pending after the delay: %+v %v", later, err)
		}
	})

	t.Run("PodRunsOnNode", func(t *testing.T) {
		ns := cl.namespace(t, "runs")
		cl.node(t, "runs-w1")
		rs := cl.owner(t, ns, "ReplicaSet", "web")
		cl.pod(t, ns, podSpec{name: "web-1", owner: &rs, cpu: "100m"})
		cl.waitRunning(t, ns, "web-1")
		p, _ := cl.cs.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
		n, err := cl.c.Node(ctx, p.Spec.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		if !n.Ready || n.Empty() || !slices.Contains(n.Pods, kube.PodRef{Namespace: ns, Name: "web-1"}) {
			t.Errorf("node %+v", n)
		}
	})

	t.Run("DrainDaemonSetOnly", func(t *testing.T) {
		ns := cl.namespace(t, "dsonly")
		cl.node(t, "dsonly-w1")
		ds := cl.owner(t, ns, "DaemonSet", "agent")
		cl.pod(t, ns, podSpec{name: "agent-x", node: "dsonly-w1", owner: &ds})
		cl.pod(t, ns, podSpec{name: "static-x", node: "dsonly-w1", annotation: map[string]string{kube.MirrorPodAnnotation: "x"}})
		cl.waitRunning(t, ns, "agent-x", "static-x")
		n, err := cl.c.Node(ctx, "dsonly-w1")
		if err != nil || !n.Empty() || n.DaemonSetPods != 1 {
			t.Fatalf("node %+v %v", n, err)
		}
		evicted, err := cl.c.Drain(ctx, "dsonly-w1", 10*time.Second)
		if err != nil || len(evicted) != 0 {
			t.Fatalf("drain: %v %v", evicted, err)
		}
		if !cl.unschedulable(t, "dsonly-w1") {
			t.Error("drained node is not cordoned")
		}
		if ph, _ := cl.phase(ns, "agent-x"); ph != corev1.PodRunning {
			t.Errorf("DaemonSet pod %s", ph)
		}
		if err := cl.c.Uncordon(ctx, "dsonly-w1"); err != nil || cl.unschedulable(t, "dsonly-w1") {
			t.Errorf("uncordon: %v", err)
		}
	})

	t.Run("DrainEvicts", func(t *testing.T) {
		ns := cl.namespace(t, "evicts")
		cl.node(t, "evicts-w1", kubesim.Options{StopDelay: 200 * time.Millisecond})
		rs := cl.owner(t, ns, "ReplicaSet", "api")
		ds := cl.owner(t, ns, "DaemonSet", "agent")
		var names []string
		for i := range 3 {
			names = append(names, "api-"+strconv.Itoa(i))
			cl.pod(t, ns, podSpec{name: names[i], node: "evicts-w1", owner: &rs})
		}
		cl.pod(t, ns, podSpec{name: "agent-x", node: "evicts-w1", owner: &ds})
		cl.pdb(t, ns, "api", 0, 3) // a budget that allows the drain
		cl.waitRunning(t, ns, append(names, "agent-x")...)
		evicted, err := cl.c.Drain(ctx, "evicts-w1", 20*time.Second)
		if err != nil || len(evicted) != 3 {
			t.Fatalf("drain: %v %v", evicted, err)
		}
		for _, n := range names {
			if _, where := cl.phase(ns, n); where != "gone" {
				t.Errorf("pod %s after drain: %s", n, where)
			}
		}
		if n, _ := cl.c.Node(ctx, "evicts-w1"); !n.Empty() || !n.Unschedulable || n.DaemonSetPods != 1 {
			t.Errorf("node after drain %+v", n)
		}
	})

	t.Run("DrainBlockedByPDB", func(t *testing.T) {
		ns := cl.namespace(t, "blocked")
		cl.node(t, "blocked-w1")
		rs := cl.owner(t, ns, "ReplicaSet", "db")
		cl.pod(t, ns, podSpec{name: "db-0", node: "blocked-w1", owner: &rs})
		cl.pdb(t, ns, "db", 1, -1)
		cl.waitRunning(t, ns, "db-0")
		// the Eviction API itself refuses (429), naming the budget
		err := cl.c.Evict(ctx, ns, "db-0")
		var blocked *kube.BlockedError
		if !errors.As(err, &blocked) || blocked.PDB != "db-pdb" || blocked.Pod.Name != "db-0" {
			t.Fatalf("evict: %v", err)
		}
		_, err = cl.c.Drain(ctx, "blocked-w1", 10*time.Second)
		if !errors.As(err, &blocked) || blocked.PDB != "db-pdb" || blocked.Node != "blocked-w1" ||
			!strings.Contains(err.Error(), "drain node blocked-w1: eviction of pod blocked/db-0 blocked by PodDisruptionBudget blocked/db-pdb") {
			t.Fatalf("drain: %v", err)
		}
		if cl.unschedulable(t, "blocked-w1") {
			t.Error("node stays cordoned after a blocked drain")
		}
		if ph, _ := cl.phase(ns, "db-0"); ph != corev1.PodRunning {
			t.Errorf("pod after blocked drain: %s", ph)
		}
	})

	t.Run("DrainBlockedPartway", func(t *testing.T) {
		// A budget that allows one disruption: one eviction goes
		// through, the API refuses the other until the deadline.
		ns := cl.namespace(t, "partway")
		cl.node(t, "partway-w1")
		rs := cl.owner(t, ns, "ReplicaSet", "kv")
		cl.pod(t, ns, podSpec{name: "kv-0", node: "partway-w1", owner: &rs})
		cl.pod(t, ns, podSpec{name: "kv-1", node: "partway-w1", owner: &rs})
		cl.pdb(t, ns, "kv", 1, 1)
		cl.waitRunning(t, ns, "kv-0", "kv-1")
		evicted, err := cl.c.Drain(ctx, "partway-w1", 2*time.Second)
		var blocked *kube.BlockedError
		// evictions run in parallel: either one goes, the other is refused
		if !errors.As(err, &blocked) || blocked.PDB != "kv-pdb" || len(evicted) != 1 ||
			!slices.Contains([]string{"kv-0", "kv-1"}, blocked.Pod.Name) || evicted[0].Name == blocked.Pod.Name {
			t.Fatalf("drain: %v %v", evicted, err)
		}
		if cl.unschedulable(t, "partway-w1") {
			t.Error("node stays cordoned")
		}
	})

	t.Run("DrainRefusesBarePod", func(t *testing.T) {
		ns := cl.namespace(t, "bare")
		cl.node(t, "bare-w1")
		cl.pod(t, ns, podSpec{name: "lonely", node: "bare-w1"})
		cl.waitRunning(t, ns, "lonely")
		_, err := cl.c.Drain(ctx, "bare-w1", 10*time.Second)
		var blocked *kube.BlockedError
		if !errors.As(err, &blocked) || blocked.PDB != "" || !strings.Contains(err.Error(), "no controller owns the pod") {
			t.Fatalf("drain: %v", err)
		}
		if ph, _ := cl.phase(ns, "lonely"); ph != corev1.PodRunning || cl.unschedulable(t, "bare-w1") {
			t.Errorf("pod %s, cordoned %v", ph, cl.unschedulable(t, "bare-w1"))
		}
	})

	t.Run("DrainTimeout", func(t *testing.T) {
		ns := cl.namespace(t, "slow")
		cl.node(t, "slow-w1", kubesim.Options{StopDelay: time.Hour})
		rs := cl.owner(t, ns, "ReplicaSet", "slow")
		cl.pod(t, ns, podSpec{name: "slow-0", node: "slow-w1", owner: &rs})
		cl.waitRunning(t, ns, "slow-0")
		_, err := cl.c.Drain(ctx, "slow-w1", time.Second)
		if !errors.Is(err, kube.ErrDrainTimeout) || !strings.Contains(err.Error(), "pods still terminating: slow/slow-0") {
			t.Fatalf("drain: %v", err)
		}
		if cl.unschedulable(t, "slow-w1") {
			t.Error("node stays cordoned after a timed-out drain")
		}
	})

	t.Run("EvictionHonoured", func(t *testing.T) {
		ns := cl.namespace(t, "evict")
		cl.node(t, "evict-w1")
		cl.pod(t, ns, podSpec{name: "victim", node: "evict-w1"})
		cl.waitRunning(t, ns, "victim")
		if err := cl.c.Evict(ctx, ns, "victim"); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 30*time.Second, "evicted pod gone", func() bool {
			_, where := cl.phase(ns, "victim")
			return where == "gone"
		})
		if err := cl.c.Evict(ctx, ns, "victim"); err != nil {
			t.Errorf("evicting a pod that is gone: %v", err)
		}
	})

	t.Run("PowerOffGoesNotReady", func(t *testing.T) {
		ns := cl.namespace(t, "power")
		k := cl.node(t, "power-w1")
		rs := cl.owner(t, ns, "ReplicaSet", "job")
		cl.pod(t, ns, podSpec{name: "job-0", node: "power-w1", owner: &rs})
		cl.waitRunning(t, ns, "job-0")
		if err := cl.c.WaitReady(ctx, "power-w1", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := k.SetState(ctx, kubesim.Off); err != nil {
			t.Fatal(err)
		}
		n, err := cl.c.Node(ctx, "power-w1")
		if err != nil || n.Ready || !n.Empty() {
			t.Errorf("powered-off node %+v %v", n, err)
		}
		err = cl.c.WaitReady(ctx, "power-w1", 300*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not Ready (Ready=Unknown NodeStatusUnknown") {
			t.Errorf("wait ready while off: %v", err)
		}
		go func() { _ = k.SetState(context.Background(), kubesim.Ready) }()
		if err := cl.c.WaitReady(ctx, "power-w1", 10*time.Second); err != nil {
			t.Errorf("after power on: %v", err)
		}
		if err := cl.c.WaitReady(ctx, "nonesuch", 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "node nonesuch is not registered") {
			t.Errorf("wait for a node never registered: %v", err)
		}
	})

	t.Run("ControlPlaneFlag", func(t *testing.T) {
		cl.node(t, "cp-1", kubesim.Options{Labels: map[string]string{kube.LabelControlPlane: ""}})
		nodes, err := cl.c.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(nodes, func(n kube.Node) bool { return n.Name == "cp-1" })
		if i < 0 || !nodes[i].ControlPlane || !nodes[i].Ready {
			t.Errorf("nodes %+v", nodes)
		}
		if !slices.IsSortedFunc(nodes, func(a, b kube.Node) int { return strings.Compare(a.Name, b.Name) }) {
			t.Error("nodes not sorted")
		}
	})
}

// Unreachable API servers give an error that says so, for every call.
func TestUnreachable(t *testing.T) {
	port := freePort(t)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, port)
	c, err := kube.New([]byte(kc))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, errPending := c.Pending(ctx, time.Now(), 0)
	_, errNodes := c.Nodes(ctx)
	_, errNode := c.Node(ctx, "w")
	_, errDrain := c.Drain(ctx, "w", time.Second)
	for name, err := range map[string]error{
		"pending": errPending, "nodes": errNodes, "node": errNode, "drain": errDrain,
		"cordon": c.Cordon(ctx, "w"), "evict": c.Evict(ctx, "ns", "p"),
	} {
		if !kube.IsUnreachable(err) || !strings.Contains(err.Error(), "cluster API unreachable (https://127.0.0.1:"+strconv.Itoa(port)+")") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := c.WaitReady(ctx, "w", 200*time.Millisecond); !kube.IsUnreachable(err) {
		t.Errorf("wait ready: %v", err)
	}
}

func TestNewBadKubeconfig(t *testing.T) {
	for _, kc := range []string{"", "  \n", "clusters: [", "apiVersion: v1\nkind: Config\n"} {
		if _, err := kube.New([]byte(kc)); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
			t.Errorf("%q: %v", kc, err)
		}
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
