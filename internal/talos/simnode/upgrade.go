package simnode

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Upgrades, Kubernetes component versions and etcd, as far as rezuscloud
// drives them:
//
//   - ImageService.Pull and LifecycleService.Upgrade (Talos ≥ 1.13): Pull
//     records the image; Upgrade installs a pulled installer image (stage
//     upgrading for InstallDelay, progress messages, then an exit code) and
//     does not reboot; the next Reboot boots the new version (reported by
//     Version, the runtime Version resource and, for Image Factory
//     installers, the "schematic" ExtensionStatus). Nodes running a Talos
//     before 1.13 answer those services Unimplemented, as 1.12 does.
//   - The legacy MachineService.Upgrade: pulls, installs and reboots itself.
//   - Kubernetes component versions follow the machine config: control
//     planes serve k8s APIServerConfig, ControllerManagerConfig,
//     SchedulerConfig (namespace controlplane) and StaticPodStatus
//     (namespace k8s) with the images of cluster.apiServer.image etc.; every
//     configured node serves KubeletSpec with machine.kubelet.image. An
//     ApplyConfiguration updates them without a reboot.
//   - EtcdSnapshot (control planes of a bootstrapped cluster): deterministic
//     pages of Options.EtcdSnapshotSize bytes (rounded up to 4 KiB) and the
//     sha256 trailer etcd appends. EtcdMemberList: the configured control
//     planes of the cluster that are up (not down, halted, stuck or
//     SetUnreachable).

// UpgradeFault says how a node's upgrades fail (FailUpgrade).
type UpgradeFault int

const (
	// UpgradeWorks: upgrades succeed.
	UpgradeWorks UpgradeFault = iota
	// UpgradePullFails: the image cannot be pulled. ImageService.Pull and
	// the legacy Upgrade fail with NotFound; the node stays on its version.
	UpgradePullFails
	// UpgradeInstallFails: the installer fails. LifecycleService.Upgrade
	// ends with exit code 1 (nothing installed); the legacy Upgrade goes
	// back to running on the old version without a reboot.
	UpgradeInstallFails
	// UpgradeNeverBack: the install works, but the node does not come back
	// from the reboot into the new version: it stays down until ClearFault
	// or PowerOn, then boots the version it ran before (A/B fallback).
	UpgradeNeverBack
	// UpgradeStuckBooting: the install works and the node boots the new
	// version, answers on its secure API, but stays in stage booting (not
	// ready, "kubelet is starting") at every boot until ClearFault; then it
	// goes on to running.
	UpgradeStuckBooting
	// UpgradeHangs: the installer never ends. LifecycleService.Upgrade
	// sends its first progress message and nothing more; the legacy
	// Upgrade is accepted. The node answers, in stage upgrading, and
	// refuses another upgrade as in progress, also after the client gave
	// up on the stream; ClearFault lets the install finish (as a working
	// one: the legacy Upgrade then reboots into it).
	UpgradeHangs
)

func (f UpgradeFault) String() string {
	switch f {
	case UpgradeWorks:
		return "works"
	case UpgradePullFails:
		return "pull fails"
	case UpgradeInstallFails:
		return "install fails"
	case UpgradeNeverBack:
		return "never comes back"
	case UpgradeStuckBooting:
		return "stuck booting"
	case UpgradeHangs:
		return "installer hangs"
	}
	return "UpgradeFault(" + strconv.Itoa(int(f)) + ")"
}

// DefaultEtcdSnapshotSize is the database size of a snapshot when
// Options.EtcdSnapshotSize is 0.
const DefaultEtcdSnapshotSize = 1 << 20

// snapshotChunk is the size of the common.Data messages of a snapshot.
const snapshotChunk = 64 << 10

// upgradeState is a node's upgrade and Kubernetes bookkeeping (guarded by
// Node.mu).
type upgradeState struct {
	version    string // Talos version running; "" means Options.TalosVersion
	schematic  string // Image Factory schematic running; "" for none
	pulled     map[string]bool
	images     []string // every image an upgrade used, in order
	installing bool
	pending    *installed // installed, booted at the next reboot
	fault      UpgradeFault
	stuck      bool   // down for good after a failed boot (UpgradeNeverBack)
	stalled    bool   // booting for good (UpgradeStuckBooting)
	resume     func() // a hung install (UpgradeHangs): finishes it; called locked
	truncate   int64  // >0: the next snapshot stream ends cleanly after that many bytes
	k8s        k8sImages
}

type installed struct{ version, schematic string }

type k8sImages struct{ apiServer, controllerManager, scheduler, kubelet, host string }

// FailUpgrade sets how this node's upgrades fail from now on, until
// ClearFault.
func (n *Node) FailUpgrade(f UpgradeFault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.upg.fault = f
}

// ClearFault makes upgrades work again. A node that did not come back from
// an upgrade (UpgradeNeverBack) boots now (after BootDelay) on the version
// it ran before; one still on its way down into it comes back on that
// version too.
// A node stuck booting (UpgradeStuckBooting) goes on to running; a hung
// install (UpgradeHangs) finishes. A hanging reset (FailReset) completes.
func (n *Node) ClearFault() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		return
	}
	old := n.upg.fault
	n.upg.fault = UpgradeWorks
	switch {
	case n.upg.stuck:
		n.unstickLocked()
	case old == UpgradeNeverBack && n.upg.pending != nil && (n.down || n.stage == runtime.MachineStageRebooting):
		n.upg.pending = nil
	}
	if n.upg.stalled {
		n.upg.stalled = false
		if n.stage == runtime.MachineStageBooting && !n.down {
			n.sequenceLocked(step{delay: n.opts.BootDelay, do: func(n *Node) *server { n.runningLocked(); return nil }})
		}
	}
	if r := n.upg.resume; r != nil {
		n.upg.resume = nil
		r()
	}
	n.clearResetFaultLocked() // fault.go
}

// Stuck reports a node that did not come back from an upgrade: down after
// its reboot (UpgradeNeverBack), booting for good (UpgradeStuckBooting) or
// with its installer hanging (UpgradeHangs), until ClearFault (or PowerOn,
// for a node that is down).
func (n *Node) Stuck() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.upg.stuck || n.upg.stalled || n.upg.resume != nil
}

// unstickLocked boots a node stuck after a failed upgrade boot, on its old
// version.
func (n *Node) unstickLocked() {
	n.upg.stuck = false
	n.upg.pending = nil
	n.sequenceLocked(n.rebootSteps()[2:]...)
}

// UpgradeImages lists the image of every upgrade the node was asked for
// (lifecycle and legacy), in order.
func (n *Node) UpgradeImages() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.upg.images)
}

// TalosVersion is the version the node runs (and Version reports).
func (n *Node) TalosVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.talosVersionLocked()
}

func (n *Node) talosVersionLocked() string {
	if n.upg.version != "" {
		return n.upg.version
	}
	return n.opts.TalosVersion
}

// TruncateEtcdSnapshot makes the next snapshot stream end cleanly after at
// bytes, as a stream cut by a deadline looks to machinery's client.
func (n *Node) TruncateEtcdSnapshot(at int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.upg.truncate = at
}

// bootInstalledLocked is called when the node boots after a reboot: it
// switches to an installed upgrade. It returns false when the node does not
// come back (UpgradeNeverBack): it stays down and the boot sequence is
// cancelled.
func (n *Node) bootInstalledLocked() bool {
	p := n.upg.pending
	if p == nil {
		return true
	}
	if n.upg.fault == UpgradeNeverBack {
		n.upg.stuck = true
		n.gen++ // cancels the rest of the boot
		return false
	}
	n.upg.pending = nil
	n.upg.version, n.upg.schematic = p.version, p.schematic
	n.upg.stalled = n.upg.fault == UpgradeStuckBooting
	n.syncRuntimeLocked()
	return true
}

// legacyOnlyLocked reports a node before Talos 1.13 (no Image and
// Lifecycle services).
func (n *Node) legacyOnlyLocked() bool {
	maj, minor, ok := parseMinor(n.talosVersionLocked())
	return ok && (maj < 1 || (maj == 1 && minor < 13))
}

func parseMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// installerImage reads the Talos version (tag) and the Image Factory
// schematic (if any) of an installer image reference.
func installerImage(ref string) (installed, error) {
	name, _, _ := strings.Cut(ref, "@")
	slash := strings.LastIndex(name, "/")
	colon := strings.LastIndex(name, ":")
	if colon <= slash || colon == len(name)-1 {
		return installed{}, fmt.Errorf("installer image %q has no version tag", ref)
	}
	in := installed{version: name[colon+1:]}
	if _, _, ok := parseMinor(in.version); !ok {
		return installed{}, fmt.Errorf("installer image %q: tag %q is not a Talos version", ref, in.version)
	}
	repo := name[:colon]
	if strings.HasPrefix(repo, "factory.talos.dev/") && slash > 0 {
		in.schematic = name[slash+1 : colon]
	}
	return in, nil
}

// imageServer is the ImageService of one server generation.
type imageServer struct {
	machineapi.UnimplementedImageServiceServer
	n *Node
}

func (s *imageServer) Pull(req *machineapi.ImageServicePullRequest, srv grpc.ServerStreamingServer[machineapi.ImageServicePullResponse]) error {
	n := s.n
	ref := req.GetImageRef()
	n.mu.Lock()
	switch {
	case n.legacyOnlyLocked():
		n.mu.Unlock()
		return status.Error(codes.Unimplemented, "unknown service machine.ImageService")
	case ref == "":
		n.mu.Unlock()
		return status.Error(codes.InvalidArgument, "image reference is required")
	case n.upg.fault == UpgradePullFails:
		n.mu.Unlock()
		return status.Errorf(codes.NotFound, "failed to pull image %q: %s: not found", ref, ref)
	}
	if n.upg.pulled == nil {
		n.upg.pulled = map[string]bool{}
	}
	n.upg.pulled[ref] = true
	n.mu.Unlock()
	if err := srv.Send(&machineapi.ImageServicePullResponse{Response: &machineapi.ImageServicePullResponse_PullProgress{
		PullProgress: &machineapi.ImageServicePullProgress{LayerId: "sha256:simnode", Progress: &machineapi.ImageServicePullLayerProgress{
			Status: machineapi.ImageServicePullLayerProgress_EXTRACT_COMPLETE,
		}},
	}}); err != nil {
		return err
	}
	return srv.Send(&machineapi.ImageServicePullResponse{Response: &machineapi.ImageServicePullResponse_Name{Name: ref}})
}

// lifecycleServer is the LifecycleService of one server generation.
type lifecycleServer struct {
	machineapi.UnimplementedLifecycleServiceServer
	n *Node
}

func (s *lifecycleServer) Upgrade(req *machineapi.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machineapi.LifecycleServiceUpgradeResponse]) error {
	n := s.n
	image := req.GetSource().GetImageName()
	n.mu.Lock()
	switch {
	case n.legacyOnlyLocked():
		n.mu.Unlock()
		return status.Error(codes.Unimplemented, "unknown service machine.LifecycleService")
	case n.cfg == nil:
		n.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "Talos is not installed")
	case n.upg.installing:
		n.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "another install or upgrade is in progress")
	case !n.upg.pulled[image]:
		n.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "installer image %q not found in containerd store", image)
	}
	n.upg.images = append(n.upg.images, image)
	n.upg.installing = true
	n.setStageLocked(runtime.MachineStageUpgrading, true)
	fault := n.upg.fault
	gen := n.gen
	delay := n.opts.InstallDelay
	n.mu.Unlock()

	send := func(msg string) error {
		return srv.Send(&machineapi.LifecycleServiceUpgradeResponse{Progress: &machineapi.LifecycleServiceInstallProgress{
			Response: &machineapi.LifecycleServiceInstallProgress_Message{Message: msg},
		}})
	}
	exit := func(code int32) error {
		return srv.Send(&machineapi.LifecycleServiceUpgradeResponse{Progress: &machineapi.LifecycleServiceInstallProgress{
			Response: &machineapi.LifecycleServiceInstallProgress_ExitCode{ExitCode: code},
		}})
	}
	in, perr := installerImage(image)
	err := send("running installer " + image)
	if err == nil && fault == UpgradeHangs {
		if err = n.hangInstall(srv.Context(), in, perr); err != nil {
			return err // the node goes on hanging: the client gave up
		}
		fault = UpgradeWorks
	}
	if err == nil && delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-srv.Context().Done():
			err = srv.Context().Err()
		case <-n.ctx.Done():
			err = status.Error(codes.Unavailable, "node is shutting down")
		}
		t.Stop()
	}

	n.mu.Lock()
	n.upg.installing = false
	ok := err == nil && perr == nil && fault != UpgradeInstallFails
	if ok {
		n.upg.pending = &in
	}
	if n.gen == gen && n.stage == runtime.MachineStageUpgrading {
		n.runningLocked()
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	switch {
	case perr != nil:
		_ = send("error: " + perr.Error())
		return exit(1)
	case !ok:
		_ = send("error: failed to install bootloader: write /dev/nvme0n1: input/output error")
		return exit(1)
	}
	if err := send("upgrade to " + in.version + " installed, reboot to activate"); err != nil {
		return err
	}
	return exit(0)
}

// hangInstall holds a lifecycle install whose installer hangs
// (UpgradeHangs) until ClearFault (nil: the install goes on as a working
// one) or until the client gives up or the node closes (the error). A node
// whose client gave up keeps hanging in stage upgrading, refusing other
// upgrades; ClearFault then finishes the install by itself.
func (n *Node) hangInstall(ctx context.Context, in installed, perr error) error {
	release := make(chan struct{})
	n.mu.Lock()
	n.upg.resume = func() { close(release) }
	n.mu.Unlock()
	var err error
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-n.ctx.Done():
		return status.Error(codes.Unavailable, "node is shutting down")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-release: // cleared meanwhile
		return nil
	default:
	}
	if n.off || n.closed { // the power went: nothing hangs any more
		n.upg.installing = false
		n.upg.resume = nil
		return err
	}
	gen := n.gen
	n.upg.resume = func() {
		n.upg.installing = false
		if perr == nil {
			n.upg.pending = &in
		}
		if n.gen == gen && n.stage == runtime.MachineStageUpgrading {
			n.runningLocked()
		}
	}
	return err
}

// Upgrade is the legacy MachineService.Upgrade: pull, install, reboot, all
// on the node's side.
func (s *machineServer) Upgrade(_ context.Context, req *machineapi.UpgradeRequest) (*machineapi.UpgradeResponse, error) {
	n := s.n
	image := req.GetImage()
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.cfg == nil:
		return nil, status.Error(codes.FailedPrecondition, "Talos is not installed")
	case n.upg.installing || n.stage == runtime.MachineStageUpgrading:
		return nil, status.Error(codes.FailedPrecondition, "another upgrade is in progress")
	case image == "":
		return nil, status.Error(codes.InvalidArgument, "image is required")
	case n.upg.fault == UpgradePullFails:
		return nil, status.Errorf(codes.NotFound, "error validating installer image %q: failed to pull image: %s: not found", image, image)
	}
	in, err := installerImage(image)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "error validating installer image: %v", err)
	}
	n.upg.images = append(n.upg.images, image)
	fault := n.upg.fault
	steps := []step{
		{do: func(n *Node) *server { n.setStageLocked(runtime.MachineStageUpgrading, true); return nil }},
	}
	switch fault {
	case UpgradeInstallFails:
		steps = append(steps, step{delay: n.opts.InstallDelay, do: func(n *Node) *server { n.runningLocked(); return nil }})
	case UpgradeHangs:
		steps = append(steps, step{do: func(n *Node) *server {
			n.upg.resume = func() {
				n.sequenceLocked(append([]step{{delay: n.opts.InstallDelay, do: func(n *Node) *server {
					n.upg.pending = &in
					return nil
				}}}, n.rebootSteps()...)...)
			}
			return nil
		}})
	default:
		steps = append(steps, step{delay: n.opts.InstallDelay, do: func(n *Node) *server { n.upg.pending = &in; return nil }})
		steps = append(steps, n.rebootSteps()...)
	}
	n.sequenceLocked(steps...)
	return &machineapi.UpgradeResponse{Messages: []*machineapi.Upgrade{{Ack: "Upgrade request received", ActorId: "sim-upgrade"}}}, nil
}

// checkControlPlaneLocked is what Talos answers etcd calls on other nodes.
func (n *Node) checkEtcdLocked(api string) error {
	if n.cfg == nil || !n.cfg.Machine().Type().IsControlPlane() {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}
	if n.cluster == nil || !n.world.bootstrapped(n.cluster) {
		return status.Error(codes.FailedPrecondition, "etcd is not running: the cluster is not bootstrapped")
	}
	return nil
}

func (s *machineServer) EtcdSnapshot(_ *machineapi.EtcdSnapshotRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	n := s.n
	n.mu.Lock()
	if err := n.checkEtcdLocked("etcd snapshot"); err != nil {
		n.mu.Unlock()
		return err
	}
	size := n.opts.EtcdSnapshotSize
	if size <= 0 {
		size = DefaultEtcdSnapshotSize
	}
	pages := (size + 4095) / 4096
	cut := n.upg.truncate
	n.upg.truncate = 0
	seed := sha256.Sum256([]byte("simnode-etcd:" + n.cluster.key))
	n.mu.Unlock()

	page := make([]byte, 4096)
	for i := 0; i < len(page); i += sha256.Size {
		b := sha256.Sum256(append(seed[:], byte(i>>8), byte(i)))
		copy(page[i:], b[:])
	}
	h := sha256.New()
	buf := make([]byte, 0, snapshotChunk)
	var sent int64
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		out := buf
		if cut > 0 && sent+int64(len(out)) > cut {
			out = out[:cut-sent]
		}
		if err := srv.Send(&common.Data{Bytes: out}); err != nil {
			return err
		}
		sent += int64(len(out))
		buf = buf[:0]
		return nil
	}
	for p := range pages {
		binary.BigEndian.PutUint64(page[:8], uint64(p))
		h.Write(page)
		buf = append(buf, page...)
		if len(buf) == cap(buf) {
			if err := flush(); err != nil {
				return err
			}
			if cut > 0 && sent >= cut {
				return nil
			}
		}
	}
	buf = h.Sum(buf)
	if err := flush(); err != nil {
		return err
	}
	return nil
}

func (s *machineServer) EtcdMemberList(context.Context, *machineapi.EtcdMemberListRequest) (*machineapi.EtcdMemberListResponse, error) {
	n := s.n
	n.mu.Lock()
	if err := n.checkEtcdLocked("etcd member list"); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	c := n.cluster
	n.mu.Unlock()
	var members []*machineapi.EtcdMember
	for _, m := range n.world.membersOf(c) {
		m.mu.Lock()
		up := m.cfg != nil && m.cfg.Machine().Type().IsControlPlane() && m.cluster == c &&
			!m.down && !m.off && !m.closed && !m.unreachable && !m.upg.stuck
		host := m.hostnameLocked()
		m.mu.Unlock()
		if !up {
			continue
		}
		sum := sha256.Sum256([]byte(m.ip.String()))
		ip := m.ip.String()
		members = append(members, &machineapi.EtcdMember{
			Id:         binary.BigEndian.Uint64(sum[:8]),
			Hostname:   host,
			PeerUrls:   []string{"https://" + net.JoinHostPort(ip, "2380")},
			ClientUrls: []string{"https://" + net.JoinHostPort(ip, "2379")},
		})
	}
	slices.SortFunc(members, func(a, b *machineapi.EtcdMember) int { return strings.Compare(a.Hostname, b.Hostname) })
	return &machineapi.EtcdMemberListResponse{Messages: []*machineapi.EtcdMembers{{Members: members}}}, nil
}

// membersOf lists a cluster's nodes.
func (w *World) membersOf(c *cluster) []*Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*Node, 0, len(c.members))
	for m := range c.members {
		out = append(out, m)
	}
	return out
}

// hostnameLocked is the node's hostname: the config's HostnameConfig, or
// talos-<ip with dashes>.
func (n *Node) hostnameLocked() string {
	if n.cfg != nil {
		if hc := n.cfg.NetworkHostnameConfig(); hc != nil && hc.Hostname() != "" {
			return hc.Hostname()
		}
	}
	return "talos-" + strings.NewReplacer(".", "-", ":", "-").Replace(n.ip.String())
}

// syncRuntimeLocked publishes the running Talos version and schematic.
func (n *Node) syncRuntimeLocked() {
	ctx := context.Background()
	v := n.talosVersionLocked()
	_ = safe.StateModify(ctx, n.st, runtime.NewVersion(), func(r *runtime.Version) error {
		r.TypedSpec().Name, r.TypedSpec().Version = "Talos", v
		return nil
	})
	id := runtime.NewExtensionStatus(runtime.NamespaceName, "0").Metadata()
	if n.upg.schematic == "" {
		_ = n.st.Destroy(ctx, id)
		return
	}
	_ = safe.StateModify(ctx, n.st, runtime.NewExtensionStatus(runtime.NamespaceName, "0"), func(r *runtime.ExtensionStatus) error {
		*r.TypedSpec() = extensions.Layer{Image: "0.sqsh", Metadata: extensions.Metadata{
			Name: "schematic", Version: n.upg.schematic, Description: "Image Factory schematic",
		}}
		return nil
	})
}

// syncK8sLocked publishes the Kubernetes component versions the config
// asks for (nothing without a config); it writes only what changed.
func (n *Node) syncK8sLocked() {
	var want k8sImages
	if n.cfg != nil && n.cfg.Machine() != nil {
		want.kubelet = n.cfg.Machine().Kubelet().Image()
		want.host = n.hostnameLocked()
		if n.cfg.Machine().Type().IsControlPlane() && n.cfg.Cluster() != nil {
			cl := n.cfg.Cluster()
			want.apiServer = cl.APIServer().Image()
			want.controllerManager = cl.ControllerManager().Image()
			want.scheduler = cl.Scheduler().Image()
		}
	}
	have := n.upg.k8s
	if want == have {
		return
	}
	ctx := context.Background()
	if want.kubelet != have.kubelet {
		putOrDestroy(ctx, n.st, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID), want.kubelet != "",
			func(r *k8s.KubeletSpec) { r.TypedSpec().Image = want.kubelet })
	}
	putOrDestroy(ctx, n.st, k8s.NewAPIServerConfig(), want.apiServer != "",
		func(r *k8s.APIServerConfig) { r.TypedSpec().Image = want.apiServer })
	putOrDestroy(ctx, n.st, k8s.NewControllerManagerConfig(), want.controllerManager != "",
		func(r *k8s.ControllerManagerConfig) { r.TypedSpec().Image = want.controllerManager })
	putOrDestroy(ctx, n.st, k8s.NewSchedulerConfig(), want.scheduler != "",
		func(r *k8s.SchedulerConfig) { r.TypedSpec().Image = want.scheduler })
	for _, p := range []struct{ name, old, img string }{
		{k8s.APIServerID, have.apiServer, want.apiServer},
		{k8s.ControllerManagerID, have.controllerManager, want.controllerManager},
		{k8s.SchedulerID, have.scheduler, want.scheduler},
	} {
		if have.host != want.host && have.host != "" {
			_ = n.st.Destroy(ctx, k8s.NewStaticPodStatus(k8s.NamespaceName, "kube-system/"+p.name+"-"+have.host).Metadata())
		}
		if want.host == "" {
			continue
		}
		putOrDestroy(ctx, n.st, k8s.NewStaticPodStatus(k8s.NamespaceName, "kube-system/"+p.name+"-"+want.host), p.img != "",
			func(r *k8s.StaticPodStatus) { r.TypedSpec().PodStatus = podStatus(p.name, p.img) })
	}
	n.upg.k8s = want
}

// podStatus is a kubelet pod status of a running static pod.
func podStatus(container, image string) map[string]any {
	return map[string]any{
		"phase": "Running",
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True"},
		},
		"containerStatuses": []any{
			map[string]any{"name": container, "image": image, "ready": true, "started": true},
		},
	}
}

// putOrDestroy creates or updates r with set (present) or destroys it.
func putOrDestroy[T resource.Resource](ctx context.Context, st state.State, r T, present bool, set func(T)) {
	if !present {
		_ = st.Destroy(ctx, r.Metadata())
		return
	}
	_ = safe.StateModify(ctx, st, r, func(r T) error { set(r); return nil })
}
