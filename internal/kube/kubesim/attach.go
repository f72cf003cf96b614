package kubesim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// Control-plane role label and taint, as Talos sets them.
const (
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	TaintControlPlane = "node-role.kubernetes.io/control-plane"
)

// Machine is the kubelet side of a simulated Talos node: it follows the
// node's stage and power (simnode.Node.Changed). The first time the node
// runs with a config it registers a Kubelet named after the node's
// hostname (which Talos takes from the machine config; Options.Name
// overrides it); a running node is Ready, one that reboots, boots, upgrades
// into a new boot or sits in maintenance is NotReady, and one that is
// powered off (shut down or halted) is Off, its pods deleted. A control
// plane gets the control-plane label and NoSchedule taint, as on Talos.
type Machine struct {
	cs   kubernetes.Interface
	node *simnode.Node
	opts Options

	mu      sync.Mutex
	kubelet *Kubelet
	state   State // the Kubelet's state once fully applied
	lastErr error

	changed chan struct{} // closed and replaced when the Kubelet's state changes

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Attach makes node drive a Kubelet through cs, until Close or until ctx
// ends. opts are the Kubelet's options (Name and Address default to the
// node's hostname and IP).
func Attach(ctx context.Context, cs kubernetes.Interface, node *simnode.Node, opts Options) *Machine {
	m := &Machine{cs: cs, node: node, opts: opts, state: NotReady, changed: make(chan struct{}), done: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if ctx != nil && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, m.cancel)
		go func() { <-m.done; stop() }()
	}
	go m.follow()
	return m
}

// Kubelet is the node's Kubelet, nil until the node first ran.
func (m *Machine) Kubelet() *Kubelet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kubelet
}

// Name is the registered Node's name, "" until the node first ran.
func (m *Machine) Name() string {
	if k := m.Kubelet(); k != nil {
		return k.Name()
	}
	return ""
}

// State is the state the Node was last fully brought to (for Off: NotReady
// and its pods deleted); NotReady before the node first ran.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Changed is closed when the Kubelet's state or the Node it registered
// changes (then read State, Name); call it again for the next change.
func (m *Machine) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Err is the last error following the node met (an API the Node could not
// be written to); it is retried with backoff and nil once that succeeded.
func (m *Machine) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastErr
}

// Close stops following the node and stops its Kubelet (the Node object
// stays as it is).
func (m *Machine) Close() {
	m.cancel()
	<-m.done
}

// stateOf maps the simulated machine to its kubelet's state.
func stateOf(n *simnode.Node) State {
	if n.PoweredOff() {
		return Off
	}
	switch n.Stage() {
	case runtime.MachineStageRunning, runtime.MachineStageUpgrading:
		return Ready
	}
	return NotReady
}

func (m *Machine) follow() {
	defer close(m.done)
	defer func() {
		if k := m.Kubelet(); k != nil {
			k.Close()
		}
	}()
	retry := backoff.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}
	attempt := 0
	for {
		ch := m.node.Changed()
		err := m.sync()
		m.mu.Lock()
		m.lastErr = err
		m.mu.Unlock()
		var again <-chan time.Time
		var t *time.Timer
		if err != nil {
			t = time.NewTimer(retry.Next(attempt))
			again = t.C
			attempt++
		} else {
			attempt = 0
		}
		select {
		case <-m.ctx.Done():
		case <-ch:
		case <-again:
		}
		if t != nil {
			t.Stop()
		}
		if m.ctx.Err() != nil {
			return
		}
	}
}

// sync brings the Kubelet to the node's state.
func (m *Machine) sync() error {
	want := stateOf(m.node)
	k := m.Kubelet()
	if want == Ready {
		name := m.opts.Name
		if name == "" {
			name = m.node.Hostname()
		}
		if k == nil || k.Name() != name {
			// first boot, or the machine joined under a new name:
			// the old Node stays NotReady, a new kubelet registers
			if k != nil {
				if err := k.SetState(m.ctx, NotReady); err != nil {
					return err
				}
				k.Close()
			}
			nk, err := Start(m.ctx, m.cs, m.kubeletOptions(name))
			if err != nil {
				return err
			}
			m.mu.Lock()
			m.kubelet, m.state = nk, Ready
			m.notifyLocked()
			m.mu.Unlock()
			return nil
		}
	}
	if k == nil || m.State() == want {
		return nil
	}
	if err := k.SetState(m.ctx, want); err != nil {
		return err
	}
	m.mu.Lock()
	m.state = want
	m.notifyLocked()
	m.mu.Unlock()
	return nil
}

func (m *Machine) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Machine) kubeletOptions(name string) Options {
	o := m.opts
	o.Name = name
	if o.Address == "" {
		o.Address = m.node.Host()
	}
	o.Labels = maps.Clone(o.Labels)
	o.Taints = slices.Clone(o.Taints)
	if m.node.Role().IsControlPlane() {
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[LabelControlPlane] = ""
		if !slices.ContainsFunc(o.Taints, func(t corev1.Taint) bool { return t.Key == TaintControlPlane }) {
			o.Taints = append(o.Taints, corev1.Taint{Key: TaintControlPlane, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return o
}

func (m *Machine) String() string {
	return fmt.Sprintf("kubesim machine %s (%s)", m.node.Addr(), m.Name())
}
