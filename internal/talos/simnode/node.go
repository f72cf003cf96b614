package simnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
)

// DefaultTalosVersion is the version simulated nodes report.
const DefaultTalosVersion = "v1.13.0"

// Options configure a simulated node.
type Options struct {
	// Addr is the listen address, "127.x.y.z:port"; port 0 picks a free one
	// (kept for the node's whole life, across reboots).
	Addr string
	// TalosVersion is what Version reports; default DefaultTalosVersion.
	TalosVersion string
	// Stage delays. Install: installing after a maintenance apply. Reboot:
	// rebooting, still answering. Down: not answering, between rebooting
	// and booting. Boot: booting, before running. Reset: resetting.
	InstallDelay, RebootDelay, DownDelay, BootDelay, ResetDelay time.Duration
	// World is the set of nodes that can form clusters together (shared
	// etcd bootstrap state and the trustd stand-in workers get their
	// certificates from) and route to each other. nil: a World of the
	// node's own, so it forms a cluster with no other node.
	World *World
	// Config, when set, is the machine config the node boots with (a
	// cloud instance's user_data): no maintenance mode; the node boots
	// straight into its configured state (booting, then running) on the
	// secure API. A config that does not parse or validate fails Start.
	Config []byte
	// PublicAddr, when set, is a second listen address, "127.x.y.z:port"
	// (port 0 for a free one): the node's public or floating IP. The node
	// answers on both; see also AddPublicAddr.
	PublicAddr string
	// EtcdSnapshotSize is the database size of an etcd snapshot in bytes
	// (rounded up to 4 KiB pages; the stream adds etcd's 32-byte sha256
	// trailer); default DefaultEtcdSnapshotSize.
	EtcdSnapshotSize int64
}

// Counts is the record of calls a node received (attempts, whether or not
// they succeeded).
type Counts struct {
	Apply         int // ApplyConfiguration calls
	ApplyRejected int // ... of which were refused (bad config, wrong mode)
	Bootstrap     int // Bootstrap calls
	Bootstrapped  int // ... of which bootstrapped etcd
	Kubeconfig    int
	Reboot        int
	Reset         int
	ResetGraceful int // Reset calls with graceful set
	Halt          int // Reset calls that powered the machine off
	Shutdown      int // Shutdown calls (shutdown.go)
	Version       int
	StateReads    int // COSI Get/List/Watch
	Dropped       int // connections dropped while unreachable or down
	// Connections accepted on the node's private address (Addr) and on
	// its public addresses, whether served or dropped.
	DirectPrivate, DirectPublic int
	Routed                      int // requests received through a control plane (node routing)
	Forwarded                   int // requests this control plane forwarded to another node
	Upgrade                     int // upgrade requests: LifecycleService.Upgrade and the legacy Upgrade
	ImagePull                   int // ImageService.Pull calls
	EtcdSnapshot                int // EtcdSnapshot calls
	// EtcdRemoved are the etcd members removed through this node, by
	// hostname (EtcdRemoveMemberByID).
	EtcdRemoved []string
}

// Node is a simulated Talos node.
type Node struct {
	opts  Options
	lis   net.Listener
	addr  string
	ip    net.IP
	world *World
	st    state.State

	mu          sync.Mutex
	stage       runtime.MachineStage
	ready       bool
	unmet       []runtime.UnmetCondition
	cfg         config.Provider
	cfgBytes    []byte
	cluster     *cluster
	srv         *server // nil while down
	secure      bool    // mode of the server to (re)start
	down        bool    // rebooting: not serving
	off         bool    // halted by a reset: down until PowerOn
	unreachable bool    // test knob
	gen         int     // lifecycle generation; sequences stop when it moves on
	failBoot    int
	failInstall int          // maintenance applies whose install fails (back to maintenance)
	resetFault  ResetFault   // fault.go
	resetResume func()       // a hung reset: finishes it (called locked)
	dead        bool         // Die: PowerOn and ClearFault do nothing
	upg         upgradeState // upgrade.go
	counts      Counts
	closed      bool
	public      []*publicListener
	routedLis   *bufconn.Listener // in-process connections from routing control planes
	changed     chan struct{}     // closed at the next change of stage or power (Changed)

	fwdMu sync.Mutex
	fwd   map[fwdKey]*fwdConn // this control plane's connections to routed nodes

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts a node in maintenance mode listening on opts.Addr. It runs
// until Close or until ctx ends.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.TalosVersion == "" {
		opts.TalosVersion = DefaultTalosVersion
	}
	if opts.World == nil {
		opts.World = NewWorld()
	}
	host, _, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("simnode: listen address %q: %w", opts.Addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("simnode: listen address %q: host must be an IP address", opts.Addr)
	}
	lis, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("simnode: %w", err)
	}
	n := &Node{
		opts:  opts,
		lis:   lis,
		addr:  lis.Addr().String(),
		ip:    ip,
		world: opts.World,
		st:    state.WrapCore(namespaced.NewState(inmem.Build)),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	var bootCfg config.Provider
	if opts.Config != nil {
		if bootCfg, _, err = parseConfig(opts.Config); err != nil {
			_ = lis.Close()
			return nil, fmt.Errorf("simnode %s: boot config: %w", n.addr, err)
		}
	}
	if err := n.initState(); err != nil {
		_ = lis.Close()
		return nil, err
	}
	n.routedLis = bufconn.Listen(routedBuffer)
	n.mu.Lock()
	if bootCfg != nil {
		// configured from the first boot: down until its API comes up
		n.setConfigLocked(bootCfg, opts.Config)
		n.down = true
		n.setStageLocked(runtime.MachineStageBooting, false, runtime.UnmetCondition{Name: "services", Reason: "apid is starting"})
		n.sequenceLocked(n.rebootSteps()[2:]...)
	} else {
		err = n.enterMaintenanceLocked()
	}
	n.mu.Unlock()
	if err != nil {
		_ = lis.Close()
		return nil, err
	}
	n.world.register(ip.String(), n)
	n.world.register(n.addr, n)
	n.wg.Add(2)
	go n.acceptLoop(lis, false)
	go n.routedAcceptLoop(n.routedLis)
	if opts.PublicAddr != "" {
		if _, err := n.AddPublicAddr(opts.PublicAddr); err != nil {
			n.Close()
			return nil, err
		}
	}
	if ctx != nil && ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				n.Close()
			case <-n.ctx.Done():
			}
		}()
	}
	return n, nil
}

// Addr is the node's "host:port".
func (n *Node) Addr() string { return n.addr }

// Host is the node's IP address.
func (n *Node) Host() string { return n.ip.String() }

// Stage is the node's current machine stage ("maintenance", "running", ...:
// Talos's own names, runtime.MachineStage.String()).
func (n *Node) Stage() runtime.MachineStage {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stage
}

// Ready is the Ready flag of the node's MachineStatus.
func (n *Node) Ready() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ready
}

// Role is the machine type learnt from the applied config (unknown before).
func (n *Node) Role() machine.Type {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cfg == nil {
		return machine.TypeUnknown
	}
	return n.cfg.Machine().Type()
}

// Config is the applied machine config, nil in maintenance mode.
func (n *Node) Config() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]byte(nil), n.cfgBytes...)
}

// Calls returns a copy of the record of calls.
func (n *Node) Calls() Counts {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.counts
	c.EtcdRemoved = append([]string(nil), c.EtcdRemoved...)
	return c
}

// FailBootstrap makes the next count Bootstrap calls answer
// FailedPrecondition, as a real node does before etcd can be bootstrapped.
func (n *Node) FailBootstrap(count int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failBoot = count
}

// SetUnreachable stops (true) or resumes (false) serving: while unreachable
// every connection is accepted and dropped at once (and counted in
// Counts.Dropped); established connections are cut. The lifecycle goes on
// underneath.
func (n *Node) SetUnreachable(on bool) {
	n.mu.Lock()
	if n.unreachable == on || n.closed {
		n.mu.Unlock()
		return
	}
	n.unreachable = on
	var old *server
	if on {
		old, n.srv = n.srv, nil
	} else if !n.down {
		if err := n.startServerLocked(); err != nil {
			n.down = true // cannot serve; behaves like a node that is down
		}
	}
	n.mu.Unlock()
	old.stop()
}

// PoweredOff reports whether a reset halted the machine or it was shut down.
func (n *Node) PoweredOff() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.off
}

// PowerOn boots a halted machine (what a Wake-on-LAN packet does): after
// the boot delay it serves maintenance mode. It does nothing to a machine
// that is on.
func (n *Node) PowerOn() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		return
	}
	if n.upg.stuck && !n.closed {
		n.unstickLocked() // upgrade.go
		return
	}
	if !n.off || n.closed {
		return
	}
	n.off = false
	n.notifyLocked()
	if n.cfg != nil { // shut down with its config (shutdown.go): boots into its cluster
		n.sequenceLocked(n.rebootSteps()[2:]...)
		return
	}
	n.sequenceLocked(step{delay: n.opts.BootDelay, do: func(n *Node) *server {
		if err := n.enterMaintenanceLocked(); err != nil {
			n.down = true
		}
		return nil
	}})
}

// Changed is closed at the node's next change of stage or power state
// (then read Stage, Ready, PoweredOff); call it again for the one after.
// The kubelet side of a simulated node (package kubesim) follows it.
func (n *Node) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.changed == nil {
		n.changed = make(chan struct{})
	}
	return n.changed
}

func (n *Node) notifyLocked() {
	if n.changed != nil {
		close(n.changed)
		n.changed = nil
	}
}

// Hostname is the node's hostname, the name its kubelet registers: the
// config's HostnameConfig, or talos-<IP with dashes>.
func (n *Node) Hostname() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hostnameLocked()
}

// Close stops the node and waits for its goroutines.
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.notifyLocked()
	n.gen++
	old := n.srv
	n.srv = nil
	c := n.cluster
	n.cluster = nil
	public := n.public
	n.public = nil
	n.mu.Unlock()
	n.cancel()
	_ = n.lis.Close()
	_ = n.routedLis.Close()
	for _, p := range public {
		_ = p.lis.Close()
		n.world.unregister(p.ip.String(), n)
	}
	n.world.unregister(n.ip.String(), n)
	n.world.unregister(n.addr, n)
	old.stop()
	n.closeForwards()
	if c != nil {
		n.world.leave(c, n)
	}
	n.wg.Wait()
}

// WaitStage waits until the node is in stage s (and ready, when ready is
// set) or ctx ends.
func (n *Node) WaitStage(ctx context.Context, s runtime.MachineStage, ready bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		n.mu.Lock()
		ok := n.stage == s && (!ready || n.ready)
		n.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("simnode %s: waiting for stage %s: %w (stage %s)", n.addr, s, ctx.Err(), n.Stage())
		case <-t.C:
		}
	}
}

// acceptLoop hands each connection on lis (the private address, or a
// public one) to the current gRPC server, or drops it while the node is
// down or unreachable.
func (n *Node) acceptLoop(lis net.Listener, public bool) {
	defer n.wg.Done()
	for {
		conn, err := lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		n.mu.Lock()
		if public {
			n.counts.DirectPublic++
		} else {
			n.counts.DirectPrivate++
		}
		srv := n.srv
		if srv == nil {
			n.counts.Dropped++
		}
		n.mu.Unlock()
		if srv == nil || !srv.lis.deliver(conn) {
			_ = conn.Close()
		}
	}
}

// initState creates the resources the node serves through COSI.
func (n *Node) initState() error {
	ctx := context.Background()
	ms := runtime.NewMachineStatus()
	if err := n.st.Create(ctx, ms); err != nil {
		return fmt.Errorf("simnode: %w", err)
	}
	rd, err := meta.NewResourceDefinition(runtime.MachineStatusExtension{}.ResourceDefinition())
	if err != nil {
		return fmt.Errorf("simnode: %w", err)
	}
	if err := n.st.Create(ctx, rd); err != nil {
		return fmt.Errorf("simnode: %w", err)
	}
	n.syncRuntimeLocked()        // upgrade.go: the runtime Version resource
	return n.createHardware(ctx) // hardware.go
}

// setStageLocked records the stage in the node and its MachineStatus
// resource (so that COSI watchers see it).
func (n *Node) setStageLocked(s runtime.MachineStage, ready bool, unmet ...runtime.UnmetCondition) {
	n.stage, n.ready, n.unmet = s, ready, unmet
	n.notifyLocked()
	_ = safe.StateModify(context.Background(), n.st, runtime.NewMachineStatus(), func(ms *runtime.MachineStatus) error {
		ms.TypedSpec().Stage = s
		ms.TypedSpec().Status.Ready = ready
		ms.TypedSpec().Status.UnmetConditions = append([]runtime.UnmetCondition(nil), unmet...)
		return nil
	})
	n.syncK8sLocked() // upgrade.go: a wiped config removes the Kubernetes resources
}

// enterMaintenanceLocked wipes the config and serves maintenance mode.
func (n *Node) enterMaintenanceLocked() error {
	if c := n.cluster; c != nil {
		n.cluster = nil
		go n.world.leave(c, n)
	}
	n.cfg, n.cfgBytes = nil, nil
	n.secure = false
	n.down = false
	// Maintenance mode has no readiness checks: Ready is true.
	n.setStageLocked(runtime.MachineStageMaintenance, true)
	return n.startServerLocked()
}

// startServerLocked starts a gRPC server for the current mode, replacing
// none (the caller stopped the old one). While unreachable it does nothing.
func (n *Node) startServerLocked() error {
	if n.unreachable || n.closed {
		return nil
	}
	var srv *server
	var err error
	if n.secure {
		srv, err = newSecureServer(n)
	} else {
		srv, err = newMaintenanceServer(n)
	}
	if err != nil {
		return err
	}
	n.srv = srv
	go func() { _ = srv.grpc.Serve(srv.lis) }()
	return nil
}

// goDownLocked stops serving (a reboot); it returns the server to stop
// outside the lock.
func (n *Node) goDownLocked() *server {
	n.down = true
	n.notifyLocked()
	old := n.srv
	n.srv = nil
	return old
}

// sequence runs steps in a goroutine as lifecycle generation gen+1; a later
// sequence (or Close) supersedes it.
func (n *Node) sequenceLocked(steps ...step) {
	n.gen++
	gen := n.gen
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for _, s := range steps {
			if s.delay > 0 {
				t := time.NewTimer(s.delay)
				select {
				case <-n.ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			if s.wait != nil && !n.waitFor(gen, s.wait) {
				return
			}
			n.mu.Lock()
			if n.gen != gen || n.closed {
				n.mu.Unlock()
				return
			}
			old := s.do(n)
			n.mu.Unlock()
			if old != nil {
				// Let answers already on their way out (the Reboot or
				// Apply that started this) reach the client first. New
				// connections are dropped meanwhile.
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					t := time.NewTimer(stopGrace)
					defer t.Stop()
					select {
					case <-t.C:
					case <-n.ctx.Done():
					}
					old.stop()
				}()
			}
		}
	}()
}

// stopGrace is how long a server that goes down still finishes the calls
// in flight.
const stopGrace = 50 * time.Millisecond

type step struct {
	delay time.Duration
	wait  func() bool                 // optional: polled (unlocked) until true
	do    func(n *Node) (old *server) // called locked; may return a server to stop
}

func (n *Node) waitFor(gen int, cond func() bool) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-n.ctx.Done():
			return false
		case <-t.C:
		}
		n.mu.Lock()
		stale := n.gen != gen
		n.mu.Unlock()
		if stale {
			return false
		}
	}
	return true
}

// rebootSteps: rebooting (still answering) → down → booting on the secure
// API → running.
func (n *Node) rebootSteps() []step {
	return []step{
		{do: func(n *Node) *server { n.setStageLocked(runtime.MachineStageRebooting, true); return nil }},
		{delay: n.opts.RebootDelay, do: func(n *Node) *server { return n.goDownLocked() }},
		{delay: n.opts.DownDelay, wait: n.haveServerIdentity, do: func(n *Node) *server {
			if !n.bootInstalledLocked() { // upgrade.go: a node that does not come back
				return nil
			}
			n.setStageLocked(runtime.MachineStageBooting, false, runtime.UnmetCondition{Name: "services", Reason: "kubelet is starting"})
			n.down, n.secure = false, true
			if err := n.startServerLocked(); err != nil {
				n.down = true
			}
			if n.upg.stalled { // upgrade.go: booting for good
				n.gen++ // cancels the rest of the boot
			}
			return nil
		}},
		{delay: n.opts.BootDelay, do: func(n *Node) *server { n.runningLocked(); return nil }},
	}
}

// runningLocked enters stage running; control planes are ready only once
// their cluster is bootstrapped.
func (n *Node) runningLocked() {
	if n.cfg != nil && n.cfg.Machine().Type().IsControlPlane() && (n.cluster == nil || !n.world.bootstrapped(n.cluster)) {
		n.setStageLocked(runtime.MachineStageRunning, false, runtime.UnmetCondition{Name: "services", Reason: "etcd is waiting to be bootstrapped"})
		return
	}
	n.setStageLocked(runtime.MachineStageRunning, true)
}

// refreshReady re-evaluates readiness of a running node (the cluster was
// bootstrapped).
func (n *Node) refreshReady() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stage == runtime.MachineStageRunning && !n.closed {
		n.runningLocked()
	}
}

// haveServerIdentity reports whether the node can get a certificate from
// its OS CA: control planes have the key, workers wait for a control plane
// of their cluster (trustd).
func (n *Node) haveServerIdentity() bool {
	n.mu.Lock()
	c := n.cluster
	n.mu.Unlock()
	return c != nil && n.world.issuer(c) != nil
}

// server is one gRPC server generation (maintenance or secure).
type server struct {
	grpc  *grpc.Server
	lis   *chanListener
	certs *certHolder // secure servers: the current certificate
}

func (s *server) stop() {
	if s == nil {
		return
	}
	s.grpc.Stop()
	_ = s.lis.Close()
}

// chanListener is a net.Listener fed by the node's accept loop.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
