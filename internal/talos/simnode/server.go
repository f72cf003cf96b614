package simnode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync/atomic"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Full gRPC method names the node distinguishes.
const (
	mApply      = "/machine.MachineService/ApplyConfiguration"
	mBootstrap  = "/machine.MachineService/Bootstrap"
	mKubeconfig = "/machine.MachineService/Kubeconfig"
	mReboot     = "/machine.MachineService/Reboot"
	mReset      = "/machine.MachineService/Reset"
	mVersion    = "/machine.MachineService/Version"
	mStateGet   = "/cosi.resource.State/Get"
	mStateList  = "/cosi.resource.State/List"
	mStateWatch = "/cosi.resource.State/Watch"

	mUpgrade          = "/machine.MachineService/Upgrade"
	mEtcdSnapshot     = "/machine.MachineService/EtcdSnapshot"
	mEtcdMemberList   = "/machine.MachineService/EtcdMemberList"
	mEtcdRemoveMember = "/machine.MachineService/EtcdRemoveMemberByID"
	mImagePull        = "/machine.ImageService/Pull"
	mLifecycleUpgrade = "/machine.LifecycleService/Upgrade"
)

// readOnly methods anyone with a valid identity may call (and anyone at all
// in maintenance mode, together with ApplyConfiguration).
var readOnly = map[string]bool{mVersion: true, mStateGet: true, mStateList: true, mStateWatch: true}

// rolesFor lists the roles allowed to call a method that changes something.
var rolesFor = map[string][]role.Role{
	mApply:      {role.Admin},
	mBootstrap:  {role.Admin},
	mKubeconfig: {role.Admin},
	mReset:      {role.Admin},
	mReboot:     {role.Admin, role.Operator},

	mUpgrade:          {role.Admin},
	mImagePull:        {role.Admin},
	mLifecycleUpgrade: {role.Admin},
	mEtcdSnapshot:     {role.Admin, role.Operator},
	mEtcdMemberList:   {role.Admin, role.Operator, role.Reader},
	mEtcdRemoveMember: {role.Admin},
}

func newMaintenanceServer(n *Node) (*server, error) {
	ca, err := x509.NewSelfSignedCertificateAuthority(
		x509.IPAddresses(n.sanIPsLocked()), x509.DNSNames([]string{"localhost"}),
		x509.NotAfter(time.Now().Add(24*time.Hour)))
	if err != nil {
		return nil, fmt.Errorf("simnode: maintenance certificate: %w", err)
	}
	crt, err := tls.X509KeyPair(ca.CrtPEM, ca.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("simnode: maintenance certificate: %w", err)
	}
	return newServer(n, false, &tls.Config{
		Certificates: []tls.Certificate{crt},
		ClientAuth:   tls.NoClientCert,
		MinVersion:   tls.VersionTLS12,
	})
}

func newSecureServer(n *Node) (*server, error) {
	var issuer *x509.PEMEncodedCertificateAndKey
	if n.cluster != nil {
		issuer = n.world.issuer(n.cluster)
	}
	if issuer == nil {
		return nil, fmt.Errorf("simnode: no OS CA key to sign the API certificate with")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuer)
	if err != nil {
		return nil, fmt.Errorf("simnode: OS CA: %w", err)
	}
	// The certificate names all the node's addresses; a public address
	// added later gets a new one (remint).
	certs := &certHolder{mint: func(ips []net.IP) (*tls.Certificate, error) {
		kp, err := x509.NewKeyPair(ca,
			x509.IPAddresses(ips), x509.DNSNames([]string{"localhost"}),
			x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
			x509.NotAfter(time.Now().Add(24*time.Hour)))
		if err != nil {
			return nil, fmt.Errorf("simnode: API certificate: %w", err)
		}
		return kp.Certificate, nil
	}}
	first, err := certs.mint(n.sanIPsLocked())
	if err != nil {
		return nil, err
	}
	certs.cert.Store(first)
	pool := stdx509.NewCertPool()
	pool.AddCert(ca.Crt)
	for _, acc := range n.cfg.Machine().Security().AcceptedCAs() {
		pool.AppendCertsFromPEM(acc.Crt)
	}
	srv, err := newServer(n, true, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return certs.cert.Load(), nil },
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
		MinVersion:     tls.VersionTLS12,
	})
	if err != nil {
		return nil, err
	}
	srv.certs = certs
	return srv, nil
}

// certHolder is a secure server's current certificate.
type certHolder struct {
	cert atomic.Pointer[tls.Certificate]
	mint func(ips []net.IP) (*tls.Certificate, error)
}

// remint gives a secure server a certificate for the node's current
// addresses.
func (s *server) remint(n *Node) {
	if s == nil || s.certs == nil {
		return
	}
	n.mu.Lock()
	ips := n.sanIPsLocked()
	n.mu.Unlock()
	if c, err := s.certs.mint(ips); err == nil {
		s.certs.cert.Store(c)
	}
}

func newServer(n *Node, secure bool, tc *tls.Config) (*server, error) {
	ms := &machineServer{n: n, secure: secure}
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tc)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			to, err := ms.routeTarget(ctx)
			if err != nil {
				return nil, err
			}
			if to != nil {
				if err := ms.check(ctx, info.FullMethod); err != nil {
					return nil, err
				}
				return ms.forwardUnary(ctx, to, info.FullMethod, req)
			}
			if err := ms.authorize(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			to, err := ms.routeTarget(ss.Context())
			if err != nil {
				return err
			}
			if to != nil {
				if err := ms.check(ss.Context(), info.FullMethod); err != nil {
					return err
				}
				return ms.forwardStream(ss, to, info.FullMethod)
			}
			if err := ms.authorize(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	)
	machineapi.RegisterMachineServiceServer(g, ms)
	machineapi.RegisterImageServiceServer(g, &imageServer{n: n})         // upgrade.go
	machineapi.RegisterLifecycleServiceServer(g, &lifecycleServer{n: n}) // upgrade.go
	cosiv1alpha1.RegisterStateServer(g, cosiserver.NewState(n.st))
	return &server{grpc: g, lis: newChanListener(n.lis.Addr())}, nil
}

// machineServer implements the machine API of one server generation.
type machineServer struct {
	machineapi.UnimplementedMachineServiceServer
	n      *Node
	secure bool
}

// authorize records the call and enforces what apid enforces.
func (s *machineServer) authorize(ctx context.Context, method string) error {
	n := s.n
	n.mu.Lock()
	if isRouted(ctx) {
		n.counts.Routed++
	}
	switch method {
	case mApply:
		n.counts.Apply++
	case mBootstrap:
		n.counts.Bootstrap++
	case mKubeconfig:
		n.counts.Kubeconfig++
	case mReboot:
		n.counts.Reboot++
	case mReset:
		n.counts.Reset++
	case mVersion:
		n.counts.Version++
	case mStateGet, mStateList, mStateWatch:
		n.counts.StateReads++
	case mUpgrade, mLifecycleUpgrade:
		n.counts.Upgrade++
	case mImagePull:
		n.counts.ImagePull++
	case mEtcdSnapshot:
		n.counts.EtcdSnapshot++
	}
	n.mu.Unlock()
	return s.check(ctx, method)
}

// check enforces what apid enforces for a method (also before it routes a
// request on).
func (s *machineServer) check(ctx context.Context, method string) error {
	if readOnly[method] {
		return nil
	}
	if !s.secure {
		if method == mApply {
			return nil
		}
		return status.Error(codes.PermissionDenied, "not authorized")
	}
	allowed, ok := rolesFor[method]
	if !ok {
		if len(method) > len("/cosi.") && method[:len("/cosi.")] == "/cosi." {
			return status.Error(codes.PermissionDenied, "not authorized")
		}
		return nil // Unimplemented methods answer for themselves
	}
	roles := peerRoles(ctx)
	for _, r := range allowed {
		if roles.Includes(r) {
			return nil
		}
	}
	return status.Error(codes.PermissionDenied, "not authorized")
}

func peerRoles(ctx context.Context) role.Set {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.MakeSet()
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return role.MakeSet()
	}
	roles, _ := role.Parse(ti.State.VerifiedChains[0][0].Subject.Organization)
	return roles
}

func (s *machineServer) rejectApply(code codes.Code, format string, args ...any) error {
	s.n.mu.Lock()
	s.n.counts.ApplyRejected++
	s.n.mu.Unlock()
	return status.Errorf(code, format, args...)
}

// parseConfig parses and validates a machine config as a node does; the
// error says what is wrong in the words Talos uses.
func parseConfig(data []byte) (config.Provider, []string, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse config: %w", err)
	}
	warnings, err := cfg.Validate(metalMode{})
	if err != nil {
		return nil, nil, fmt.Errorf("configuration validation failed: %w", err)
	}
	if cfg.Machine() == nil || cfg.Machine().Security().IssuingCA() == nil {
		return nil, nil, errors.New("configuration validation failed: machine.ca is missing")
	}
	return cfg, warnings, nil
}

func (s *machineServer) ApplyConfiguration(_ context.Context, req *machineapi.ApplyConfigurationRequest) (*machineapi.ApplyConfigurationResponse, error) {
	cfg, warnings, err := parseConfig(req.GetData())
	if err != nil {
		return nil, s.rejectApply(codes.InvalidArgument, "%v", err)
	}
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !s.secure && n.stage != runtime.MachineStageMaintenance {
		n.counts.ApplyRejected++
		return nil, status.Error(codes.FailedPrecondition, "configuration was already received, the machine is installing")
	}
	if s.secure && n.cfg != nil && n.cfg.Machine().Type() != cfg.Machine().Type() {
		n.counts.ApplyRejected++
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: machine type can't be changed from %s to %s",
			n.cfg.Machine().Type(), cfg.Machine().Type())
	}
	resp := func(mode machineapi.ApplyConfigurationRequest_Mode, details string) *machineapi.ApplyConfigurationResponse {
		return &machineapi.ApplyConfigurationResponse{Messages: []*machineapi.ApplyConfiguration{{
			Mode: mode, ModeDetails: details, Warnings: warnings,
		}}}
	}
	if req.GetDryRun() {
		return resp(req.GetMode(), "Dry run: configuration is valid"), nil
	}
	n.setConfigLocked(cfg, req.GetData())
	if !s.secure && n.failInstall > 0 {
		n.failInstall--
		n.sequenceLocked(n.failedInstallSteps()...)
		return resp(machineapi.ApplyConfigurationRequest_NO_REBOOT, "Applied configuration without a reboot"), nil
	}
	if !s.secure {
		// Maintenance mode: the node installs and reboots itself.
		steps := append([]step{
			{do: func(n *Node) *server { n.setStageLocked(runtime.MachineStageInstalling, true); return nil }},
			{delay: n.opts.InstallDelay, do: func(*Node) *server { return nil }},
		}, n.rebootSteps()...)
		n.sequenceLocked(steps...)
		return resp(machineapi.ApplyConfigurationRequest_NO_REBOOT, "Applied configuration without a reboot"), nil
	}
	if req.GetMode() == machineapi.ApplyConfigurationRequest_REBOOT {
		n.sequenceLocked(n.rebootSteps()...)
		return resp(machineapi.ApplyConfigurationRequest_REBOOT, "Applied configuration with a reboot"), nil
	}
	return resp(machineapi.ApplyConfigurationRequest_NO_REBOOT, "Applied configuration without a reboot"), nil
}

// setConfigLocked stores the applied config and joins its cluster.
func (n *Node) setConfigLocked(cfg config.Provider, data []byte) {
	n.cfg, n.cfgBytes = cfg, append([]byte(nil), data...)
	if n.cluster == nil || n.cluster.key != clusterKey(cfg) {
		if old := n.cluster; old != nil {
			go n.world.leave(old, n)
		}
		n.cluster = n.world.join(cfg, n)
	} else {
		n.world.join(cfg, n) // a control-plane config may bring the CA key
	}
	n.syncK8sLocked() // upgrade.go: component versions follow the config
}

func (s *machineServer) Bootstrap(context.Context, *machineapi.BootstrapRequest) (*machineapi.BootstrapResponse, error) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cfg == nil || !n.cfg.Machine().Type().IsControlPlane() {
		return nil, status.Error(codes.Unimplemented, "bootstrap is not available on worker nodes")
	}
	if n.failBoot > 0 {
		n.failBoot--
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}
	if n.stage != runtime.MachineStageRunning && n.stage != runtime.MachineStageBooting {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}
	if !n.world.bootstrap(n.cluster) {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}
	n.counts.Bootstrapped++
	return &machineapi.BootstrapResponse{Messages: []*machineapi.Bootstrap{{}}}, nil
}

func (s *machineServer) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	n := s.n
	n.mu.Lock()
	cfg := n.cfg
	n.mu.Unlock()
	if cfg == nil || !cfg.Machine().Type().IsControlPlane() {
		return status.Error(codes.Unimplemented, "kubeconfig is only available on control plane nodes")
	}
	n.world.mu.Lock()
	kc := n.world.kubeconfig
	n.world.mu.Unlock()
	if kc == nil {
		var err error
		if kc, err = mintKubeconfig(cfg); err != nil {
			return status.Errorf(codes.Internal, "kubeconfig: %v", err)
		}
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "kubeconfig", Mode: 0o600, Size: int64(len(kc)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return status.Errorf(codes.Internal, "kubeconfig: %v", err)
	}
	if _, err := tw.Write(kc); err != nil {
		return status.Errorf(codes.Internal, "kubeconfig: %v", err)
	}
	if err := tw.Close(); err != nil {
		return status.Errorf(codes.Internal, "kubeconfig: %v", err)
	}
	if err := gz.Close(); err != nil {
		return status.Errorf(codes.Internal, "kubeconfig: %v", err)
	}
	data := buf.Bytes()
	for len(data) > 0 {
		chunk := data[:min(len(data), 4096)]
		data = data[len(chunk):]
		if err := srv.Send(&common.Data{Bytes: chunk}); err != nil {
			return err
		}
	}
	return nil
}

// mintKubeconfig makes an admin kubeconfig (CN admin, O system:masters)
// signed by the config's Kubernetes CA, like Talos does.
func mintKubeconfig(cfg config.Provider) ([]byte, error) {
	k8sCA := cfg.Cluster().IssuingCA()
	if k8sCA == nil || len(k8sCA.Key) == 0 {
		return nil, fmt.Errorf("no Kubernetes CA key in the machine config")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(k8sCA)
	if err != nil {
		return nil, err
	}
	kp, err := x509.NewKeyPair(ca,
		x509.CommonName("admin"), x509.Organization("system:masters"),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
		x509.NotAfter(time.Now().Add(365*24*time.Hour)))
	if err != nil {
		return nil, err
	}
	name := cfg.Cluster().Name()
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: admin@%[1]s
  user:
    client-certificate-data: %[4]s
    client-key-data: %[5]s
contexts:
- name: admin@%[1]s
  context:
    cluster: %[1]s
    namespace: default
    user: admin@%[1]s
current-context: admin@%[1]s
`, name, cfg.Cluster().Endpoint().String(), b64(k8sCA.Crt), b64(kp.CrtPEM), b64(kp.KeyPEM)), nil
}

func (s *machineServer) Reboot(context.Context, *machineapi.RebootRequest) (*machineapi.RebootResponse, error) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sequenceLocked(n.rebootSteps()...)
	return &machineapi.RebootResponse{Messages: []*machineapi.Reboot{{ActorId: "sim-reboot"}}}, nil
}

func (s *machineServer) Reset(_ context.Context, req *machineapi.ResetRequest) (*machineapi.ResetResponse, error) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if req.GetGraceful() {
		n.counts.ResetGraceful++
	}
	if !req.GetReboot() {
		// halt: the machine powers off and stays off until PowerOn
		n.counts.Halt++
		n.resetLocked( // fault.go: resetting first, then these
			step{delay: n.opts.ResetDelay, do: func(n *Node) *server {
				n.cfg, n.cfgBytes = nil, nil
				n.off = true
				n.setStageLocked(runtime.MachineStageShuttingDown, true)
				return n.goDownLocked()
			}},
		)
		return &machineapi.ResetResponse{Messages: []*machineapi.Reset{{ActorId: "sim-reset"}}}, nil
	}
	n.resetLocked(
		step{delay: n.opts.ResetDelay, do: func(n *Node) *server {
			n.cfg, n.cfgBytes = nil, nil
			n.setStageLocked(runtime.MachineStageRebooting, true)
			return n.goDownLocked()
		}},
		step{delay: n.opts.DownDelay, do: func(n *Node) *server {
			if err := n.enterMaintenanceLocked(); err != nil {
				n.down = true
			}
			return nil
		}},
	)
	return &machineapi.ResetResponse{Messages: []*machineapi.Reset{{ActorId: "sim-reset"}}}, nil
}

func (s *machineServer) Version(context.Context, *emptypb.Empty) (*machineapi.VersionResponse, error) {
	goVersion := "go1"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	mode := "metal"
	if !s.secure {
		mode = "metal (maintenance)"
	}
	return &machineapi.VersionResponse{Messages: []*machineapi.Version{{
		Version: &machineapi.VersionInfo{
			Tag: s.n.TalosVersion(), Sha: "simnode", GoVersion: goVersion, Os: "linux", Arch: "amd64",
		},
		Platform: &machineapi.PlatformInfo{Name: "metal", Mode: mode},
	}}}, nil
}

// metalMode is the validation runtime mode of a simulated bare-metal node.
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return true }
func (metalMode) InContainer() bool     { return false }
