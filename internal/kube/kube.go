// Package kube is a tenant cluster's Kubernetes API as the worker pool needs
// it, through the tenant's kubeconfig (client-go): pods the scheduler could
// not place, what each node runs, cordon and uncordon, evictions through the
// Eviction API (PodDisruptionBudgets respected), a drain, and a wait for a
// node to be Ready.
//
// Every method answers an *UnreachableError ("cluster API unreachable: ...")
// when no answer came from the API server (refused, timed out, TLS), so a
// caller can hold and say why instead of acting blind; an eviction a PDB
// refuses is a *BlockedError naming the pod and the PDB.
package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultTimeout bounds each request to the API server.
const DefaultTimeout = 15 * time.Second

// Well-known names.
const (
	// MirrorPodAnnotation marks the API's copy of a static pod.
	MirrorPodAnnotation = "kubernetes.io/config.mirror"
	// LabelControlPlane marks control-plane nodes (Talos sets it).
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
)

// evictParallel bounds a drain's eviction requests in flight.
const evictParallel = 8

// pollInterval is how often the waits (WaitReady, Drain) look again.
const pollInterval = 50 * time.Millisecond

// Client is one cluster's API: only the core and policy groups (rest.go).
type Client struct {
	core   coreAPI
	policy policyAPI
	cfg    *rest.Config
	host   string
}

// New connects through a kubeconfig (its current context). Nothing is sent
// until a method is called. A kubeconfig that does not parse is an error
// that says so.
func New(kubeconfig []byte) (*Client, error) {
	if len(strings.TrimSpace(string(kubeconfig))) == 0 {
		return nil, errors.New("kubeconfig is empty")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return NewForConfig(cfg)
}

// NewForConfig connects with a client-go config. A zero Timeout becomes
// DefaultTimeout. A zero QPS means no client-side rate limit: the pools'
// few requests are paced by their own waits, and client-go's limiter,
// once its burst is spent, fails a request that would wait past the
// context's deadline with its own error instead of letting the deadline
// speak (a drain's timeout then read as a failed pod list).
func NewForConfig(cfg *rest.Config) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1 // rest.RESTClientFor makes no limiter for QPS < 0
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "rezuscloud"
	}
	s, err := newScheme()
	if err != nil {
		return nil, fmt.Errorf("kubernetes types: %w", err)
	}
	pc := runtime.NewParameterCodec(s)
	core, err := restFor(cfg, s, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	policy, err := restFor(cfg, s, policyv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &Client{core: coreAPI{core, pc}, policy: policyAPI{policy, pc}, cfg: cfg, host: cfg.Host}, nil
}

// RESTConfig is the client-go config the client was made with (a copy),
// for a caller that needs other API groups.
func (c *Client) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Host is the API server's URL.
func (c *Client) Host() string { return c.host }

// UnreachableError is a request that got no answer from the API server.
type UnreachableError struct {
	Host string // the API server's URL
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cluster API unreachable (%s): %v", e.Host, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err is (or wraps) an *UnreachableError.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	return errors.As(err, &u)
}

// wrap adds what was done to err, and makes an error that is not an answer
// of the API server (nor the caller's ctx ending) an *UnreachableError.
func (c *Client) wrap(ctx context.Context, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf(format+": %w", append(args, err)...)
	// no answer: the transport failed (refused, timed out, TLS), and not
	// because the caller's ctx ended
	var ue *url.Error
	if !errors.As(err, &ue) || ctx.Err() != nil {
		return err
	}
	return &UnreachableError{Host: c.host, Err: err}
}

// PodRef names a pod.
type PodRef struct {
	Namespace, Name string
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

func refOf(p *corev1.Pod) PodRef { return PodRef{Namespace: p.Namespace, Name: p.Name} }

// PendingPod is a pod the scheduler could not place.
type PendingPod struct {
	PodRef
	// Since is when the scheduler first found no node for it (the
	// PodScheduled condition's last transition), For how long ago that is.
	Since time.Time
	For   time.Duration
	// Message is the scheduler's reason ("0/3 nodes are available: 3
	// Insufficient cpu. ...").
	Message string
	// MilliCPU and MemoryBytes are what it requests (the larger of its
	// containers' sum and its largest init container).
	MilliCPU, MemoryBytes int64
}

// Pending lists the pods, in every namespace, that have been unschedulable
// (PodScheduled=False, reason Unschedulable) for at least delay at now,
// longest waiting first. Pods held by scheduling gates are not pending.
func (c *Client) Pending(ctx context.Context, now time.Time, delay time.Duration) ([]PendingPod, error) {
	list, err := c.core.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("spec.nodeName", ""),
			fields.OneTermEqualSelector("status.phase", string(corev1.PodPending)),
		).String(),
	})
	if err != nil {
		return nil, c.wrap(ctx, err, "list pending pods")
	}
	var out []PendingPod
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		cond := podCondition(p, corev1.PodScheduled)
		if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable {
			continue
		}
		since := cond.LastTransitionTime.Time
		if now.Sub(since) < delay {
			continue
		}
		cpu, mem := requests(p)
		out = append(out, PendingPod{
			PodRef: refOf(p), Since: since, For: now.Sub(since), Message: cond.Message,
			MilliCPU: cpu, MemoryBytes: mem,
		})
	}
	slices.SortFunc(out, func(a, b PendingPod) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	return out, nil
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// requests is the pod's effective cpu and memory request.
func requests(p *corev1.Pod) (milliCPU, memory int64) {
	for _, c := range p.Spec.Containers {
		milliCPU += c.Resources.Requests.Cpu().MilliValue()
		memory += c.Resources.Requests.Memory().Value()
	}
	for _, c := range p.Spec.InitContainers {
		milliCPU = max(milliCPU, c.Resources.Requests.Cpu().MilliValue())
		memory = max(memory, c.Resources.Requests.Memory().Value())
	}
	return milliCPU, memory
}

// Node is a node and what it runs.
type Node struct {
	Name string
	// Ready is the Ready condition being True.
	Ready bool
	// Unschedulable: cordoned.
	Unschedulable bool
	// ControlPlane: the node carries the control-plane role label.
	ControlPlane bool
	// Pods are the workload pods bound to it that have not finished: not
	// DaemonSet pods, not mirror pods of static pods. A node whose Pods is
	// empty runs only DaemonSets.
	Pods []PodRef
	// DaemonSetPods counts the DaemonSet pods bound to it.
	DaemonSetPods int
	// Unowned counts the Pods no controller owns: evicted, they would not
	// come back elsewhere.
	Unowned int
	// Allocatable is what the node offers pods; Requested what every pod
	// bound to it requests (DaemonSets too); Moving what its Pods request
	// (what a drain moves elsewhere).
	Allocatable, Requested, Moving Resources
}

// Resources are amounts of cpu and memory.
type Resources struct {
	MilliCPU, MemoryBytes int64
}

// Add is r plus o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.MilliCPU + o.MilliCPU, r.MemoryBytes + o.MemoryBytes}
}

// Free is what is left of the node's allocatable (never negative).
func (n Node) Free() Resources {
	return Resources{max(0, n.Allocatable.MilliCPU-n.Requested.MilliCPU), max(0, n.Allocatable.MemoryBytes-n.Requested.MemoryBytes)}
}

// Fits reports whether r fits into free (in sum: the scheduler may still
// find no single node for a pod, which then shows as pending).
func (r Resources) Fits(free Resources) bool {
	return r.MilliCPU <= free.MilliCPU && r.MemoryBytes <= free.MemoryBytes
}

// Drainable reports whether a drain would move everything the node runs
// elsewhere: every pod has a controller (PodDisruptionBudgets are asked
// at the drain itself).
func (n Node) Drainable() bool { return n.Unowned == 0 }

// Empty reports whether the node runs nothing but DaemonSets and static
// pods.
func (n Node) Empty() bool { return len(n.Pods) == 0 }

// Nodes lists every node with what it runs, by name.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, c.wrap(ctx, err, "list nodes")
	}
	pods, err := c.core.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermNotEqualSelector("spec.nodeName", "").String(),
	})
	if err != nil {
		return nil, c.wrap(ctx, err, "list pods")
	}
	byNode := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	out := make([]Node, 0, len(nodes.Items))
	for i := range nodes.Items {
		out = append(out, nodeOf(&nodes.Items[i], byNode[nodes.Items[i].Name]))
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Node is one node with what it runs; a node that does not exist is an
// error for which apierrors.IsNotFound holds.
func (c *Client) Node(ctx context.Context, name string) (Node, error) {
	n, err := c.core.Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Node{}, c.wrap(ctx, err, "node %s", name)
	}
	pods, err := c.podsOn(ctx, name)
	if err != nil {
		return Node{}, err
	}
	return nodeOf(n, pods), nil
}

func (c *Client) podsOn(ctx context.Context, node string) ([]*corev1.Pod, error) {
	list, err := c.core.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, c.wrap(ctx, err, "node %s: list pods", node)
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func nodeOf(n *corev1.Node, pods []*corev1.Pod) Node {
	_, cp := n.Labels[LabelControlPlane]
	out := Node{Name: n.Name, Ready: nodeReady(n), Unschedulable: n.Spec.Unschedulable, ControlPlane: cp,
		Allocatable: Resources{n.Status.Allocatable.Cpu().MilliValue(), n.Status.Allocatable.Memory().Value()}}
	for _, p := range pods {
		if finished(p) {
			continue
		}
		cpu, mem := requests(p)
		out.Requested = out.Requested.Add(Resources{cpu, mem})
		switch {
		case isMirror(p):
		case isDaemonSet(p):
			out.DaemonSetPods++
		default:
			out.Pods = append(out.Pods, refOf(p))
			out.Moving = out.Moving.Add(Resources{cpu, mem})
			if metav1.GetControllerOf(p) == nil {
				out.Unowned++
			}
		}
	}
	slices.SortFunc(out.Pods, func(a, b PodRef) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func isMirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[MirrorPodAnnotation]
	return ok
}

func isDaemonSet(p *corev1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "DaemonSet"
}

// Cordon marks the node unschedulable.
func (c *Client) Cordon(ctx context.Context, node string) error {
	return c.setUnschedulable(ctx, node, true)
}

// Uncordon marks the node schedulable again.
func (c *Client) Uncordon(ctx context.Context, node string) error {
	return c.setUnschedulable(ctx, node, false)
}

func (c *Client) setUnschedulable(ctx context.Context, node string, on bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	_, err := c.core.Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	what := "uncordon"
	if on {
		what = "cordon"
	}
	return c.wrap(ctx, err, "%s node %s", what, node)
}

// WaitReady waits until the node exists and is Ready, for at most timeout.
// The error after the deadline says what was seen last (not registered,
// the Ready condition's reason, or the cluster API unreachable).
func (c *Client) WaitReady(ctx context.Context, node string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		n, err := c.core.Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err == nil && nodeReady(n):
			return nil
		case err == nil:
			last = fmt.Errorf("node %s is not Ready (%s)", node, readyReason(n))
		case apierrors.IsNotFound(err):
			last = fmt.Errorf("node %s is not registered", node)
		case ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded):
			if err := c.wrap(ctx, err, "node %s", node); IsUnreachable(err) || apierrors.ReasonForError(err) != metav1.StatusReasonUnknown {
				last = err // not our own deadline coming (client-go's rate limiter refuses early)
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("wait for node %s to be Ready: %w after %v: %w", node, context.DeadlineExceeded, timeout, last)
		case <-tick.C:
		}
	}
}

func readyReason(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Message != "" {
				return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
			return fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
		}
	}
	return "no Ready condition"
}

// BlockedError is an eviction that was refused, or a drain that stopped
// because a pod may not be evicted.
type BlockedError struct {
	Node string // the node being drained; "" from Evict
	Pod  PodRef
	// PDB is the PodDisruptionBudget (in the pod's namespace) that refused
	// it, "" when the pod is not evictable for another reason.
	PDB string
	// Reason is the API server's message, or why the pod may not be
	// evicted.
	Reason string
}

func (e *BlockedError) Error() string {
	var sb strings.Builder
	if e.Node != "" {
		fmt.Fprintf(&sb, "drain node %s: ", e.Node)
	}
	fmt.Fprintf(&sb, "eviction of pod %s blocked", e.Pod)
	if e.PDB != "" {
		fmt.Fprintf(&sb, " by PodDisruptionBudget %s/%s", e.Pod.Namespace, e.PDB)
	}
	if e.Reason != "" {
		sb.WriteString(": " + e.Reason)
	}
	return sb.String()
}

// Evict asks the Eviction API (policy/v1) to evict the pod. A pod that is
// already gone is not an error. A refusal for a PodDisruptionBudget (HTTP
// 429) is a *BlockedError naming the PDB; client-go's own retries on 429
// are off, so a refusal comes back at once.
func (c *Client) Evict(ctx context.Context, namespace, name string) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	// what PolicyV1().Evictions().Evict sends, without its retries
	err := c.policy.RESTClient().Post().AbsPath("/api/v1").
		Namespace(namespace).Resource("pods").Name(name).SubResource("eviction").
		MaxRetries(0).Body(ev).Do(ctx).Error()
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		if msg, ok := budgetCause(err); ok {
			return &BlockedError{Pod: PodRef{namespace, name}, PDB: c.blockingPDB(ctx, namespace, name, msg), Reason: msg}
		}
	}
	return c.wrap(ctx, err, "evict pod %s/%s", namespace, name)
}

// budgetCause is the message of a PodDisruptionBudget refusal.
func budgetCause(err error) (string, bool) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return "", false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == policyv1.DisruptionBudgetCause {
			return c.Message, true
		}
	}
	return "", false
}

// blockingPDB names the PDB a refusal came from: the one its message names
// ("The disruption budget NAME ..."), else the first PDB selecting the pod.
func (c *Client) blockingPDB(ctx context.Context, namespace, pod, msg string) string {
	const prefix = "The disruption budget "
	if rest, ok := strings.CutPrefix(msg, prefix); ok {
		if name, _, ok := strings.Cut(rest, " "); ok && name != "" {
			return name
		}
	}
	p, err := c.core.Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	pdbs, err := c.policy.PodDisruptionBudgets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, b := range matchingPDBs(pdbs.Items, p) {
		return b.Name
	}
	return ""
}

func matchingPDBs(pdbs []policyv1.PodDisruptionBudget, p *corev1.Pod) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for i := range pdbs {
		b := &pdbs[i]
		if b.Namespace != p.Namespace {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// ErrDrainTimeout is wrapped by the error of a drain whose evicted pods were
// not all gone by the deadline.
var ErrDrainTimeout = errors.New("drain timed out")

// Drain empties a node for power-off: cordon, then evict through the
// Eviction API (up to 8 requests at once, as kubectl drain evicts in
// parallel) every pod that is not a DaemonSet pod, a mirror pod or
// finished, and wait until they are gone, all within timeout. It returns
// the pods it evicted.
//
// It stops, uncordons the node and answers a *BlockedError (Node set) when
// a pod may not be evicted: a pod no controller owns (its eviction would
// delete it for good, as `kubectl drain` refuses without --force), or a
// PodDisruptionBudget that allows no disruption (checked before anything is
// evicted; a PDB that refuses later is retried until the deadline). Pods
// the API let go stay evicted. A drain that times out
// waiting also uncordons the node (the pods still run there) and wraps
// ErrDrainTimeout.
func (c *Client) Drain(ctx context.Context, node string, timeout time.Duration) ([]PodRef, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Cordon(ctx, node); err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	evicted, err := c.drain(ctx, node, timeout)
	if err != nil {
		var blocked *BlockedError
		if errors.As(err, &blocked) {
			blocked.Node = node
		}
		// uncordon even when ctx ended: the node stays in service
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultTimeout)
		defer ucancel()
		if uerr := c.Uncordon(uctx, node); uerr != nil {
			return evicted, fmt.Errorf("%w (and the node stays cordoned: %v)", err, uerr)
		}
		return evicted, err
	}
	return evicted, nil
}

func (c *Client) drain(ctx context.Context, node string, timeout time.Duration) ([]PodRef, error) {
	pods, err := c.podsOn(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	var victims []*corev1.Pod
	for _, p := range pods {
		if finished(p) || isMirror(p) || isDaemonSet(p) {
			continue
		}
		if metav1.GetControllerOf(p) == nil {
			return nil, &BlockedError{Pod: refOf(p), Reason: "no controller owns the pod, so evicting it would delete it for good"}
		}
		victims = append(victims, p)
	}
	if len(victims) == 0 {
		return nil, nil
	}
	if err := c.checkBudgets(ctx, victims); err != nil {
		return nil, err
	}
	// evict all at once (as kubectl drain does), at most evictParallel
	// requests in flight
	errs := make([]error, len(victims))
	var wg sync.WaitGroup
	sem := make(chan struct{}, evictParallel)
	for i, p := range victims {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = c.evictUntil(ctx, p)
		})
	}
	wg.Wait()
	var evicted []PodRef
	uids := map[types.UID]PodRef{}
	var first error
	for i, p := range victims {
		if errs[i] != nil {
			first = cmp.Or(first, errs[i])
			continue
		}
		evicted = append(evicted, refOf(p))
		uids[p.UID] = refOf(p)
	}
	if first != nil {
		return evicted, first
	}
	// wait for them to be gone
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		pods, err := c.podsOn(ctx, node)
		if err == nil {
			left := map[types.UID]PodRef{}
			for _, p := range pods {
				if ref, ok := uids[p.UID]; ok {
					left[p.UID] = ref
				}
			}
			if len(left) == 0 {
				return evicted, nil
			}
			uids = left
		} else if ctx.Err() == nil && !IsUnreachable(err) {
			return evicted, err
		}
		select {
		case <-ctx.Done():
			names := make([]string, 0, len(uids))
			for _, ref := range uids {
				names = append(names, ref.String())
			}
			slices.Sort(names)
			return evicted, fmt.Errorf("drain node %s: %w after %v: pods still terminating: %s", node, ErrDrainTimeout, timeout, strings.Join(names, ", "))
		case <-tick.C:
		}
	}
}

// checkBudgets refuses a drain that a PodDisruptionBudget would block at
// once: one covering a victim that allows no disruption now (or whose
// status the disruption controller has not computed yet, which the
// Eviction API refuses too).
func (c *Client) checkBudgets(ctx context.Context, victims []*corev1.Pod) error {
	byNS := map[string][]policyv1.PodDisruptionBudget{}
	for _, p := range victims {
		if _, ok := byNS[p.Namespace]; ok {
			continue
		}
		list, err := c.policy.PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c.wrap(ctx, err, "drain: list PodDisruptionBudgets in %s", p.Namespace)
		}
		byNS[p.Namespace] = list.Items
	}
	for _, p := range victims {
		for _, b := range matchingPDBs(byNS[p.Namespace], p) {
			switch {
			case b.Status.ObservedGeneration < b.Generation:
				return &BlockedError{Pod: refOf(p), PDB: b.Name, Reason: "its status is not computed yet (is the disruption controller running?)"}
			case b.Status.DisruptionsAllowed <= 0:
				return &BlockedError{Pod: refOf(p), PDB: b.Name, Reason: fmt.Sprintf("it allows no disruption now (%d healthy, %d needed)", b.Status.CurrentHealthy, b.Status.DesiredHealthy)}
			}
		}
	}
	return nil
}

// evictUntil evicts p, retrying PDB refusals (another pod of the budget may
// become healthy elsewhere) until ctx ends; then the last refusal is the
// answer.
func (c *Client) evictUntil(ctx context.Context, p *corev1.Pod) error {
	wait := 100 * time.Millisecond
	for {
		err := c.Evict(ctx, p.Namespace, p.Name)
		var blocked *BlockedError
		if !errors.As(err, &blocked) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return blocked
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}
