// Package kubesim is the kubelet side of simulated nodes, against a real
// Kubernetes API server: a Kubelet registers a Node with capacity, keeps it
// Ready, runs the pods bound to it (by the real scheduler, or by nodeName)
// and honours their deletion and eviction; when its machine stops or powers
// off, the Node goes NotReady, and a powered-off machine's pods are deleted.
// Attach makes a simulated Talos node (package simnode) drive it, so that
// powering the machine off and on, halting and rebooting it show in
// Kubernetes as they do on a real cluster.
//
// # What it simulates
//
//   - Registration as a kubelet does it (Node with labels kubernetes.io/
//     hostname, os, arch, an InternalIP, capacity and allocatable cpu,
//     memory and pods, node info with the kubelet version), then Ready:
//     the conditions Ready=True and no pressure, and the taint
//     node.kubernetes.io/not-ready, which the API server's
//     TaintNodesByCondition admission adds at creation, removed (no
//     node-lifecycle controller runs in the tests' control plane).
//   - Pods bound to the node go Running (Ready, containers running) at once.
//     A pod whose restart policy is not Always and that carries the
//     annotation RunForAnnotation (a Go duration) Succeeds that long after
//     it started, on the Kubelet's clock (injectable: a fake clock runs
//     hours of jobs in a test's seconds). A bad duration fails the pod with
//     reason BadRunFor.
//   - A pod being deleted (kubectl delete, or an eviction through the
//     Eviction API) stops after Options.StopDelay, then the Kubelet deletes
//     it for good (grace period 0), as a kubelet does once the containers
//     are gone.
//   - SetState(NotReady): the kubelet stopped (the machine is rebooting or
//     booting): Ready=Unknown and the unreachable taints, as the node
//     lifecycle controller would set after missed heartbeats; pods stay.
//     SetState(Off): the same, and the node's pods are deleted (grace 0),
//     what pod garbage collection does for a machine that is gone.
//     SetState(Ready) brings the Node back.
//
// # What it does not simulate
//
// Containers, images, volumes, probes, resource admission on the node
// (the scheduler's fit is all), pod IPs, node leases and heartbeats
// (nothing watches them without a controller-manager), restarts, and
// mirror pods of static pods.
package kubesim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// RunForAnnotation on a pod whose restart policy is Never or OnFailure is
// how long it runs before it Succeeds (a Go duration, e.g. "20m").
const RunForAnnotation = "kubesim.rezuscloud.io/run-for"

// KubeletVersion is the version simulated kubelets report.
const KubeletVersion = "v1.37.2"

// Taint keys the node lifecycle controller and admission use.
const (
	TaintNotReady    = "node.kubernetes.io/not-ready"
	TaintUnreachable = "node.kubernetes.io/unreachable"
)

// State is what the machine under a Kubelet is doing.
type State int

const (
	// Ready: the machine runs and so does its kubelet.
	Ready State = iota
	// NotReady: the kubelet is not running (reboot, boot, maintenance);
	// the Node goes NotReady and keeps its pods.
	NotReady
	// Off: the machine is powered off; the Node goes NotReady and its
	// pods are deleted.
	Off
)

func (s State) String() string {
	switch s {
	case Ready:
		return "ready"
	case NotReady:
		return "not-ready"
	case Off:
		return "off"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Options describe a simulated node's kubelet.
type Options struct {
	// Name is the Node's name (Attach: the simnode's hostname when empty).
	Name string
	// Address is the Node's InternalIP (Attach: the simnode's IP).
	Address string
	// CPU and Memory are the capacity ("4", "8Gi": resource quantities;
	// defaults 4 and 8Gi), Pods the pod capacity (default 110).
	CPU, Memory string
	Pods        int
	// Labels are added to kubernetes.io/hostname, os and arch; Taints are
	// the Node's own (e.g. a control plane's NoSchedule).
	Labels map[string]string
	Taints []corev1.Taint
	// StopDelay is how long a deleted or evicted pod's containers take to
	// stop (default 0: at once).
	StopDelay time.Duration
	// Clock times pods' run times and StopDelay; default the real clock.
	Clock clock.WithDelayedExecution
}

// workers is how many pods a Kubelet syncs at once (a real kubelet has a
// worker per pod).
const workers = 4

// Kubelet is the kubelet of one simulated node.
type Kubelet struct {
	cs   kubernetes.Interface
	opts Options
	clk  clock.WithDelayedExecution
	caps corev1.ResourceList

	queue   workqueue.TypedRateLimitingInterface[string]
	pods    corelisters.PodLister
	factory informers.SharedInformerFactory

	mu      sync.Mutex
	state   State
	started map[types.UID]time.Time // when this kubelet started the pod
	stopAt  map[types.UID]time.Time // when a deleted pod's containers are gone
	timers  map[types.UID]clock.Timer
	lastErr error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start registers the Node, makes it Ready and runs its pods until Close
// or until ctx ends. A bad option (a capacity that is not a quantity, no
// name) is an error and registers nothing.
func Start(ctx context.Context, cs kubernetes.Interface, opts Options) (*Kubelet, error) {
	k, err := newKubelet(cs, opts)
	if err != nil {
		return nil, err
	}
	if err := k.register(ctx); err != nil {
		return nil, err
	}
	if err := k.run(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

func newKubelet(cs kubernetes.Interface, opts Options) (*Kubelet, error) {
	if opts.Name == "" {
		return nil, errors.New("kubesim: node name is empty")
	}
	if opts.CPU == "" {
		opts.CPU = "4"
	}
	if opts.Memory == "" {
		opts.Memory = "8Gi"
	}
	if opts.Pods == 0 {
		opts.Pods = 110
	}
	caps := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: opts.CPU, corev1.ResourceMemory: opts.Memory} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("kubesim: node %s: %s capacity %q: %w", opts.Name, name, v, err)
		}
		caps[name] = q
	}
	if opts.Pods < 0 {
		return nil, fmt.Errorf("kubesim: node %s: pod capacity %d is negative", opts.Name, opts.Pods)
	}
	caps[corev1.ResourcePods] = *resource.NewQuantity(int64(opts.Pods), resource.DecimalSI)
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Kubelet{
		cs: cs, opts: opts, clk: clk, caps: caps,
		started: map[types.UID]time.Time{}, stopAt: map[types.UID]time.Time{}, timers: map[types.UID]clock.Timer{},
	}, nil
}

// Name is the Node's name.
func (k *Kubelet) Name() string { return k.opts.Name }

// State is the state last set (Ready after Start).
func (k *Kubelet) State() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state
}

// Err is the last error the Kubelet met updating the API (nil when the
// last update went through); Attach retries after errors.
func (k *Kubelet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// run starts the pod informer (pods bound to this node) and the worker.
func (k *Kubelet) run(ctx context.Context) error {
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	k.factory = informers.NewSharedInformerFactoryWithOptions(k.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.opts.Name).String()
	}))
	inf := k.factory.Core().V1().Pods()
	k.pods = inf.Lister()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.enqueue,
		UpdateFunc: func(_, obj any) { k.enqueue(obj) },
		DeleteFunc: k.enqueue,
	}); err != nil {
		k.cancel()
		return fmt.Errorf("kubesim: node %s: %w", k.opts.Name, err)
	}
	k.factory.Start(k.ctx.Done())
	for typ, ok := range k.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			k.Close()
			return fmt.Errorf("kubesim: node %s: %v informer did not sync: %w", k.opts.Name, typ, context.Cause(ctx))
		}
	}
	for range workers {
		k.wg.Add(1)
		go k.worker()
	}
	if ctx.Done() != nil {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			select {
			case <-ctx.Done():
				k.shutdown()
			case <-k.ctx.Done():
			}
		}()
	}
	return nil
}

// Close stops the Kubelet (it leaves the Node and the pods as they are,
// as a kubelet that is killed does) and waits for its goroutines.
func (k *Kubelet) Close() {
	k.shutdown()
	k.wg.Wait()
}

func (k *Kubelet) shutdown() {
	if k.cancel == nil {
		return
	}
	k.cancel()
	k.queue.ShutDown()
	k.factory.Shutdown()
	k.mu.Lock()
	for uid, t := range k.timers {
		t.Stop()
		delete(k.timers, uid)
	}
	k.mu.Unlock()
}

func (k *Kubelet) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		k.queue.Add(key)
	}
}

func (k *Kubelet) worker() {
	defer k.wg.Done()
	for {
		key, quit := k.queue.Get()
		if quit {
			return
		}
		err := k.syncPod(k.ctx, key)
		k.setErr(err)
		if err != nil && k.ctx.Err() == nil {
			k.queue.AddRateLimited(key)
		} else {
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

func (k *Kubelet) setErr(err error) {
	k.mu.Lock()
	k.lastErr = err
	k.mu.Unlock()
}

// syncPod brings one pod to where a kubelet would have it.
func (k *Kubelet) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		k.forget()
		return nil
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	state := k.state
	k.mu.Unlock()
	if state != Ready {
		return nil // no kubelet runs; SetState(Off) deletes the pods
	}
	now := k.clk.Now()
	if pod.DeletionTimestamp != nil {
		k.mu.Lock()
		at, ok := k.stopAt[pod.UID]
		if !ok {
			at = now.Add(k.opts.StopDelay)
			k.stopAt[pod.UID] = at
		}
		k.mu.Unlock()
		if now.Before(at) {
			k.after(pod.UID, at.Sub(now), key)
			return nil
		}
		return k.deletePod(ctx, pod)
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return nil
	}
	runFor, runErr := runFor(pod)
	if runErr != nil {
		return k.finish(ctx, pod, corev1.PodFailed, "BadRunFor", runErr.Error())
	}
	k.mu.Lock()
	start, ok := k.started[pod.UID]
	if !ok {
		start = now
		k.started[pod.UID] = start
	}
	k.mu.Unlock()
	if runFor > 0 {
		end := start.Add(runFor)
		if !now.Before(end) {
			return k.finish(ctx, pod, corev1.PodSucceeded, "Completed", "")
		}
		k.after(pod.UID, end.Sub(now), key)
	}
	if pod.Status.Phase == corev1.PodRunning {
		return nil
	}
	return k.setRunning(ctx, pod, start)
}

// runFor is the pod's run time: 0 for pods that run until deleted.
func runFor(pod *corev1.Pod) (time.Duration, error) {
	v, ok := pod.Annotations[RunForAnnotation]
	if !ok || pod.Spec.RestartPolicy == corev1.RestartPolicyAlways || pod.Spec.RestartPolicy == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("annotation %s=%q is not a positive Go duration", RunForAnnotation, v)
	}
	return d, nil
}

// after re-queues key after d on the Kubelet's clock (once per pod).
func (k *Kubelet) after(uid types.UID, d time.Duration, key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.timers[uid]; ok {
		return
	}
	k.timers[uid] = k.clk.AfterFunc(d, func() {
		k.mu.Lock()
		delete(k.timers, uid)
		k.mu.Unlock()
		k.queue.Add(key)
	})
}

// forget drops what the Kubelet kept about pods that are gone.
func (k *Kubelet) forget() {
	live := map[types.UID]bool{}
	if pods, err := k.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			live[p.UID] = true
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range []map[types.UID]time.Time{k.started, k.stopAt} {
		maps.DeleteFunc(m, func(uid types.UID, _ time.Time) bool { return !live[uid] })
	}
	for uid, t := range k.timers {
		if !live[uid] {
			t.Stop()
			delete(k.timers, uid)
		}
	}
}

func (k *Kubelet) setRunning(ctx context.Context, pod *corev1.Pod, start time.Time) error {
	p := pod.DeepCopy()
	at := metav1.NewTime(start)
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = k.opts.Address
	if k.opts.Address != "" {
		p.Status.HostIPs = []corev1.HostIP{{IP: k.opts.Address}}
	}
	p.Status.StartTime = &at
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		setPodCondition(p, c, corev1.ConditionTrue, "", at)
	}
	p.Status.ContainerStatuses = containerStatuses(p, func(c corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}
	}, true)
	_, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return ignoreGone(err)
}

// finish puts a pod into a terminal phase.
func (k *Kubelet) finish(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase, reason, msg string) error {
	p := pod.DeepCopy()
	now := metav1.NewTime(k.clk.Now())
	start := now
	if p.Status.StartTime != nil {
		start = *p.Status.StartTime
	} else {
		p.Status.StartTime = &now
	}
	p.Status.Phase, p.Status.Reason, p.Status.Message = phase, reason, msg
	exit := int32(0)
	if phase == corev1.PodFailed {
		exit = 1
	}
	for _, c := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(p, c, corev1.ConditionFalse, "PodCompleted", now)
	}
	p.Status.ContainerStatuses = containerStatuses(p, func(c corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, Message: msg, StartedAt: start, FinishedAt: now}}
	}, false)
	_, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return ignoreGone(err)
}

// deletePod removes a pod for good (its containers are gone).
func (k *Kubelet) deletePod(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	err := k.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	return ignoreGone(err)
}

// ignoreGone treats a pod that is gone or was replaced (UID precondition)
// as done.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) && isUIDMismatch(err) {
		return nil
	}
	return err
}

func isUIDMismatch(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Details != nil && st.Status().Reason == metav1.StatusReasonConflict && st.Status().Details.UID != ""
}

func setPodCondition(p *corev1.Pod, typ corev1.PodConditionType, status corev1.ConditionStatus, reason string, at metav1.Time) {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == typ {
			if c.Status != status {
				c.LastTransitionTime = at
			}
			c.Status, c.Reason = status, reason
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: at})
}

func containerStatuses(p *corev1.Pod, state func(corev1.Container) corev1.ContainerState, ready bool) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(p.Spec.Containers))
	for _, c := range p.Spec.Containers {
		started := ready
		out = append(out, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "kubesim://" + c.Image, ContainerID: "kubesim://" + string(p.UID) + "/" + c.Name,
			State: state(c), Ready: ready, Started: &started,
		})
	}
	return out
}

// register creates (or re-registers) the Node and makes it Ready.
func (k *Kubelet) register(ctx context.Context) error {
	nodeLabels := map[string]string{
		"kubernetes.io/hostname": k.opts.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"beta.kubernetes.io/os":  "linux",
	}
	maps.Copy(nodeLabels, k.opts.Labels)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.opts.Name, Labels: nodeLabels},
		Spec:       corev1.NodeSpec{Taints: slices.Clone(k.opts.Taints)},
	}
	_, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubesim: register node %s: %w", k.opts.Name, err)
	}
	if err := k.apply(ctx, Ready); err != nil {
		return err
	}
	k.mu.Lock()
	k.state = Ready
	k.mu.Unlock()
	return nil
}

// SetState moves the Node to s (see State). Off deletes the node's pods.
func (k *Kubelet) SetState(ctx context.Context, s State) error {
	k.mu.Lock()
	k.state = s
	k.mu.Unlock()
	if err := k.apply(ctx, s); err != nil {
		k.setErr(err)
		return err
	}
	if s == Off {
		if err := k.deleteAllPods(ctx); err != nil {
			k.setErr(err)
			return err
		}
	}
	if s == Ready && k.pods != nil {
		pods, err := k.pods.List(labels.Everything())
		if err == nil {
			for _, p := range pods {
				k.enqueue(p)
			}
		}
	}
	k.setErr(nil)
	return nil
}

// apply writes the Node's spec taints and status for state s.
func (k *Kubelet) apply(ctx context.Context, s State) error {
	name := k.opts.Name
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool {
			return t.Key == TaintNotReady || t.Key == TaintUnreachable
		})
		if s != Ready {
			now := metav1.NewTime(k.clk.Now())
			taints = append(taints,
				corev1.Taint{Key: TaintUnreachable, Effect: corev1.TaintEffectNoSchedule},
				corev1.Taint{Key: TaintUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		}
		if !slices.EqualFunc(taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) {
			n.Spec.Taints = taints
			if n, err = k.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		k.nodeStatus(n, s)
		_, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("kubesim: node %s: set %s: %w", name, s, err)
	}
	return nil
}

// nodeStatus fills in what a kubelet (Ready) or the node lifecycle
// controller (no kubelet) reports.
func (k *Kubelet) nodeStatus(n *corev1.Node, s State) {
	now := metav1.NewTime(k.clk.Now())
	n.Status.Capacity = k.caps.DeepCopy()
	n.Status.Allocatable = k.caps.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: k.opts.Name}}
	if k.opts.Address != "" {
		n.Status.Addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.opts.Address}}, n.Status.Addresses...)
	}
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion: KubeletVersion, OperatingSystem: "linux", Architecture: "amd64",
		OSImage: "Talos (simulated)", ContainerRuntimeVersion: "kubesim://" + KubeletVersion,
		MachineID: k.opts.Name, SystemUUID: k.opts.Name, BootID: k.opts.Name,
	}
	status, reason, msg := corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
	pressure, preason := corev1.ConditionFalse, "KubeletHasSufficientResources"
	if s != Ready {
		status, reason, msg = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
		pressure, preason = corev1.ConditionUnknown, "NodeStatusUnknown"
	}
	set := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) {
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == typ {
				if c.Status != st {
					c.LastTransitionTime = now
				}
				c.Status, c.Reason, c.Message, c.LastHeartbeatTime = st, reason, msg, now
				return
			}
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: typ, Status: st, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now,
		})
	}
	set(corev1.NodeReady, status, reason, msg)
	for _, typ := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		set(typ, pressure, preason, "")
	}
}

// deleteAllPods deletes every pod bound to the node at once (grace 0).
func (k *Kubelet) deleteAllPods(ctx context.Context) error {
	list, err := k.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.opts.Name).String(),
	})
	if err != nil {
		return fmt.Errorf("kubesim: node %s: list pods: %w", k.opts.Name, err)
	}
	for i := range list.Items {
		if err := k.deletePod(ctx, &list.Items[i]); err != nil {
			return fmt.Errorf("kubesim: node %s: delete pod %s/%s: %w", k.opts.Name, list.Items[i].Namespace, list.Items[i].Name, err)
		}
	}
	return nil
}
