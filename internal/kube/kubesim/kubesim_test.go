package kubesim_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/rezuscloud/rezuscloud/internal/kube/kubesim"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func clientset(t *testing.T, env *testenv.Kube) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

type fixture struct {
	cs  kubernetes.Interface
	ctx context.Context
}

func (f fixture) pod(t *testing.T, ns, name, node string, restart corev1.RestartPolicy, ann map[string]string) {
	t.Helper()
	_, err := f.cs.CoreV1().Pods(ns).Create(f.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: restart,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (f fixture) get(ns, name string) *corev1.Pod {
	p, err := f.cs.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

func (f fixture) phase(ns, name string) corev1.PodPhase {
	if p := f.get(ns, name); p != nil {
		return p.Status.Phase
	}
	return "gone"
}

func (f fixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ready(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func TestKubelet(t *testing.T) {
	env := testenv.StartKube(t)
	f := fixture{cs: clientset(t, env), ctx: context.Background()}
	ctx := f.ctx

	if _, err := kubesim.Start(ctx, f.cs, kubesim.Options{Name: "bad", Memory: "lots"}); err == nil || !strings.Contains(err.Error(), `memory capacity "lots"`) {
		t.Errorf("bad memory: %v", err)
	}
	if _, err := f.cs.CoreV1().Nodes().Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a bad option registered the node: %v", err)
	}

	clk := testingclock.NewFakeClock(time.Now())
	k, err := kubesim.Start(ctx, f.cs, kubesim.Options{Name: "w1", Address: "127.0.0.1", CPU: "3", Memory: "6Gi", Pods: 20, StopDelay: 30 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	t.Run("Registers", func(t *testing.T) {
		n := f.node(t, "w1")
		if ready(n) != corev1.ConditionTrue || hasTaint(n, kubesim.TaintNotReady) || n.Status.NodeInfo.KubeletVersion != kubesim.KubeletVersion ||
			n.Status.Capacity.Cpu().String() != "3" || n.Status.Allocatable.Memory().String() != "6Gi" || n.Status.Capacity.Pods().Value() != 20 ||
			n.Labels["kubernetes.io/hostname"] != "w1" {
			t.Errorf("node %+v", n)
		}
	})

	t.Run("ScheduledPodRuns", func(t *testing.T) {
		f.pod(t, "default", "web", "", corev1.RestartPolicyAlways, nil)
		testenv.WaitFor(t, 30*time.Second, "web running", func() bool { return f.phase("default", "web") == corev1.PodRunning })
		p := f.get("default", "web")
		if p.Spec.NodeName != "w1" || p.Status.HostIP != "127.0.0.1" || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			t.Errorf("pod %+v", p.Status)
		}
	})

	t.Run("JobSucceedsAfterRunTime", func(t *testing.T) {
		f.pod(t, "default", "batch", "w1", corev1.RestartPolicyNever, map[string]string{kubesim.RunForAnnotation: "20m"})
		testenv.WaitFor(t, 30*time.Second, "batch running", func() bool { return f.phase("default", "batch") == corev1.PodRunning })
		clk.Step(19 * time.Minute)
		if ph := f.phase("default", "batch"); ph != corev1.PodRunning {
			t.Errorf("after 19 of 20 minutes: %s", ph)
		}
		clk.Step(time.Minute)
		testenv.WaitFor(t, 30*time.Second, "batch succeeded", func() bool { return f.phase("default", "batch") == corev1.PodSucceeded })

		f.pod(t, "default", "typo", "w1", corev1.RestartPolicyNever, map[string]string{kubesim.RunForAnnotation: "twenty minutes"})
		testenv.WaitFor(t, 30*time.Second, "typo failed", func() bool { return f.phase("default", "typo") == corev1.PodFailed })
		if p := f.get("default", "typo"); p.Status.Reason != "BadRunFor" || !strings.Contains(p.Status.Message, `"twenty minutes" is not a positive Go duration`) {
			t.Errorf("bad run-for: %s: %s", p.Status.Reason, p.Status.Message)
		}
	})

	t.Run("DeletionAfterStopDelay", func(t *testing.T) {
		f.pod(t, "default", "stopping", "w1", corev1.RestartPolicyAlways, nil)
		testenv.WaitFor(t, 30*time.Second, "stopping running", func() bool { return f.phase("default", "stopping") == corev1.PodRunning })
		if err := f.cs.CoreV1().Pods("default").Delete(ctx, "stopping", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 30*time.Second, "stop timer set", clk.HasWaiters)
		if p := f.get("default", "stopping"); p == nil || p.DeletionTimestamp == nil {
			t.Fatalf("pod gone before its containers stopped: %v", p)
		}
		clk.Step(30 * time.Second)
		testenv.WaitFor(t, 30*time.Second, "stopping gone", func() bool { return f.phase("default", "stopping") == "gone" })
	})

	t.Run("NotReadyKeepsPodsOffDeletesThem", func(t *testing.T) {
		if err := k.SetState(ctx, kubesim.NotReady); err != nil {
			t.Fatal(err)
		}
		n := f.node(t, "w1")
		if ready(n) != corev1.ConditionUnknown || !hasTaint(n, kubesim.TaintUnreachable) || f.phase("default", "web") != corev1.PodRunning {
			t.Errorf("not ready: %s %v, web %s", ready(n), n.Spec.Taints, f.phase("default", "web"))
		}
		if err := k.SetState(ctx, kubesim.Off); err != nil {
			t.Fatal(err)
		}
		if ph := f.phase("default", "web"); ph != "gone" {
			t.Errorf("pod of a powered-off node: %s", ph)
		}
		if err := k.SetState(ctx, kubesim.Ready); err != nil {
			t.Fatal(err)
		}
		if n := f.node(t, "w1"); ready(n) != corev1.ConditionTrue || hasTaint(n, kubesim.TaintUnreachable) || k.State() != kubesim.Ready {
			t.Errorf("back on: %s %v", ready(n), n.Spec.Taints)
		}
	})
}

func host(i int) string { return fmt.Sprintf("127.%d.9.%d", os.Getpid()%200+20, i) }

// TestAttach drives kubelets from simulated Talos nodes: nodes booted from
// their machine config register under their hostnames, a control plane
// with its role and taint; a worker's Talos shutdown takes it Off (its pods
// deleted) and a power-on brings it back Ready.
func TestAttach(t *testing.T) {
	env := testenv.StartKube(t)
	f := fixture{cs: clientset(t, env), ctx: context.Background()}
	ctx := f.ctx

	tn := &tenant.Tenant{Name: "sim", Provider: tenant.ProviderMetal, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: host(1)}}},
			{Name: "w", Role: tenant.RoleWorker, Count: 1, Machines: []tenant.Machine{{Address: host(2)}}},
		}}
	b, err := talos.NewSecrets("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := talos.GenerateConfigs(tn, b, "")
	if err != nil {
		t.Fatal(err)
	}
	w := simnode.NewWorld()
	delays := simnode.Options{DownDelay: 20 * time.Millisecond, BootDelay: 20 * time.Millisecond, ResetDelay: 20 * time.Millisecond}
	wo, co := delays, delays
	wo.Addr, wo.Config = host(2)+":0", cfgs.Nodes["sim-w-1"]
	co.Addr, co.Config = host(1)+":0", cfgs.Nodes["sim-cp-1"]
	wk, err := w.Start(ctx, wo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wk.Close)
	cp, err := w.Start(ctx, co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	mw := kubesim.Attach(ctx, f.cs, wk, kubesim.Options{})
	t.Cleanup(mw.Close)
	mc := kubesim.Attach(ctx, f.cs, cp, kubesim.Options{})
	t.Cleanup(mc.Close)

	for _, m := range []*kubesim.Machine{mw, mc} {
		testenv.WaitFor(t, 30*time.Second, m.String()+" ready", func() bool { return m.State() == kubesim.Ready })
	}
	if mw.Name() != "sim-w-1" || mc.Name() != "sim-cp-1" {
		t.Fatalf("names %q %q", mw.Name(), mc.Name())
	}
	if n := f.node(t, "sim-cp-1"); !hasTaint(n, kubesim.TaintControlPlane) || n.Labels[kubesim.LabelControlPlane] != "" || ready(n) != corev1.ConditionTrue {
		t.Errorf("control plane node %+v", n.Spec)
	}
	if n := f.node(t, "sim-w-1"); hasTaint(n, kubesim.TaintControlPlane) || n.Status.Addresses[0].Address != host(2) {
		t.Errorf("worker node %+v %+v", n.Spec, n.Status.Addresses)
	}
	// the scheduler places a pod on the worker only (the control plane is tainted)
	f.pod(t, "default", "app", "", corev1.RestartPolicyAlways, nil)
	testenv.WaitFor(t, 30*time.Second, "app running", func() bool { return f.phase("default", "app") == corev1.PodRunning })
	if p := f.get("default", "app"); p.Spec.NodeName != "sim-w-1" {
		t.Errorf("app on %s", p.Spec.NodeName)
	}

	if err := talos.Shutdown(ctx, talos.Direct(wk.Addr()), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "worker off", func() bool { return mw.State() == kubesim.Off })
	if n := f.node(t, "sim-w-1"); ready(n) != corev1.ConditionUnknown {
		t.Errorf("powered-off node Ready=%s", ready(n))
	}
	if ph := f.phase("default", "app"); ph != "gone" {
		t.Errorf("pod of the powered-off worker: %s", ph)
	}
	wk.PowerOn()
	if err := wk.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "worker ready again", func() bool {
		return mw.State() == kubesim.Ready && ready(f.node(t, "sim-w-1")) == corev1.ConditionTrue
	})
	if mw.Err() != nil {
		t.Errorf("machine error: %v", mw.Err())
	}
}
