package simnode

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// apid node routing, as far as rezuscloud uses it: a configured control
// plane that receives a request whose metadata "node" names another node of
// its World forwards it to that node, one to one, and relays the answer
// (unary and streaming calls alike, the machine API and COSI). The
// forwarded request reaches the node over an in-process connection (no
// socket on its addresses, counted in its Counts.Routed), with mutual TLS:
// the node verifies a client certificate the control plane signs with its
// OS CA for the caller's roles, so the node's own authorization and
// behaviour apply. Workers and nodes in maintenance mode do not route (real
// apid on a worker does, but rezuscloud routes through control planes
// only); "nodes" (one to many) is not simulated.

// routedBuffer is the size of each direction of an in-process connection.
const routedBuffer = 256 << 10

// routedAddr is the peer address of a connection a control plane made.
type routedAddr struct{}

func (routedAddr) Network() string { return "simnode-routed" }
func (routedAddr) String() string  { return "routed" }

type routedConn struct{ net.Conn }

func (routedConn) RemoteAddr() net.Addr { return routedAddr{} }

// isRouted reports whether the call came through a control plane.
func isRouted(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	_, ok = p.Addr.(routedAddr)
	return ok
}

// routedAcceptLoop hands connections from control planes to the current
// gRPC server.
func (n *Node) routedAcceptLoop(lis *bufconn.Listener) {
	defer n.wg.Done()
	for {
		conn, err := lis.Accept()
		if err != nil {
			return // closed
		}
		n.mu.Lock()
		srv := n.srv
		if srv == nil {
			n.counts.Dropped++
		}
		n.mu.Unlock()
		if srv == nil || !srv.lis.deliver(routedConn{conn}) {
			_ = conn.Close()
		}
	}
}

// isSelf reports whether a "node" metadata value names this node.
func (n *Node) isSelf(name string) bool {
	if h, _, err := net.SplitHostPort(name); err == nil {
		name = h
	}
	if name == "localhost" || name == n.ip.String() || name == n.addr {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.public {
		if name == p.ip.String() {
			return true
		}
	}
	return false
}

// routeTarget returns the node a request names when it is to be forwarded
// (nil: serve it here), or why it cannot be.
func (s *machineServer) routeTarget(ctx context.Context) (*Node, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("nodes")) > 0 {
		return nil, status.Error(codes.Unimplemented, "simnode: one-to-many routing (metadata \"nodes\") is not simulated")
	}
	names := md.Get("node")
	if len(names) == 0 || s.n.isSelf(names[0]) {
		return nil, nil
	}
	name := names[0]
	if !s.secure {
		return nil, status.Errorf(codes.PermissionDenied, "simnode: maintenance mode does not route requests (to node %s)", name)
	}
	s.n.mu.Lock()
	cp := s.n.cfg != nil && s.n.cfg.Machine().Type().IsControlPlane()
	s.n.mu.Unlock()
	if !cp {
		return nil, status.Errorf(codes.Unimplemented, "simnode: only control planes route requests (to node %s)", name)
	}
	t := s.n.world.lookup(name)
	if t == nil || t == s.n {
		return nil, status.Errorf(codes.Unavailable, "connection error: simnode: no node %s to route to: dial tcp %s: connect: no route to host", name, name)
	}
	return t, nil
}

// forwardContext is the outgoing context of a forwarded call: the caller's
// metadata without routing and transport headers.
func forwardContext(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range in {
		switch {
		case k == "node", k == "nodes", k == "content-type", k == "user-agent", k == "te",
			strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"):
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// messageTypes looks up a method's request and response types.
func messageTypes(method string) (in, out protoreflect.MessageType, err error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, nil, status.Errorf(codes.Internal, "simnode: method %q", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "simnode: cannot route %s: %v", method, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, nil, status.Errorf(codes.Unimplemented, "simnode: cannot route %s", method)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "simnode: cannot route %s", method)
	}
	if in, err = protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName()); err != nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "simnode: cannot route %s: %v", method, err)
	}
	if out, err = protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName()); err != nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "simnode: cannot route %s: %v", method, err)
	}
	return in, out, nil
}

func (s *machineServer) forwardUnary(ctx context.Context, t *Node, method string, req any) (any, error) {
	_, outT, err := messageTypes(method)
	if err != nil {
		return nil, err
	}
	cc, err := s.n.forwardConn(t, peerRoles(ctx))
	if err != nil {
		return nil, err
	}
	s.n.countForwarded()
	out := outT.New().Interface()
	if err := cc.Invoke(forwardContext(ctx), method, req, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *machineServer) forwardStream(ss grpc.ServerStream, t *Node, method string) error {
	inT, outT, err := messageTypes(method)
	if err != nil {
		return err
	}
	cc, err := s.n.forwardConn(t, peerRoles(ss.Context()))
	if err != nil {
		return err
	}
	s.n.countForwarded()
	ctx, cancel := context.WithCancel(forwardContext(ss.Context()))
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	go func() {
		for {
			m := inT.New().Interface()
			if err := ss.RecvMsg(m); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				}
				return
			}
			if err := cs.SendMsg(m); err != nil {
				return
			}
		}
	}()
	for first := true; ; first = false {
		m := outT.New().Interface()
		err := cs.RecvMsg(m)
		if first {
			if h, herr := cs.Header(); herr == nil && len(h) > 0 {
				_ = ss.SetHeader(h)
			}
		}
		if errors.Is(err, io.EOF) {
			ss.SetTrailer(cs.Trailer())
			return nil
		}
		if err != nil {
			return err
		}
		if err := ss.SendMsg(m.(proto.Message)); err != nil {
			return err
		}
	}
}

func (n *Node) countForwarded() {
	n.mu.Lock()
	n.counts.Forwarded++
	n.mu.Unlock()
}

type fwdKey struct {
	to    *Node
	roles string
}

type fwdConn struct {
	srv *server // the target's server generation the connection was made to
	cc  *grpc.ClientConn
}

// forwardConn returns the control plane's connection to node t for callers
// with roles, (re)dialled when t's server changed (it rebooted). A node
// that is down answers Unavailable, as a refused connection does.
func (n *Node) forwardConn(t *Node, roles role.Set) (*grpc.ClientConn, error) {
	t.mu.Lock()
	srv, routedLis := t.srv, t.routedLis
	t.mu.Unlock()
	if srv == nil || routedLis == nil {
		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: connection refused\"", t.addr)
	}
	k := fwdKey{to: t, roles: strings.Join(roles.Strings(), ",")}
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	if n.fwd == nil {
		n.fwd = map[fwdKey]*fwdConn{}
	}
	if f := n.fwd[k]; f != nil {
		if f.srv == srv {
			return f.cc, nil
		}
		_ = f.cc.Close()
		delete(n.fwd, k)
	}
	tc, err := n.forwardTLS(t, roles)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "simnode: routing to %s: %v", t.addr, err)
	}
	cc, err := grpc.NewClient("passthrough:///"+t.addr,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return routedLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "simnode: routing to %s: %v", t.addr, err)
	}
	n.fwd[k] = &fwdConn{srv: srv, cc: cc}
	return cc, nil
}

// forwardTLS is the client side of a forwarded connection: it trusts the
// control plane's OS CA and presents a certificate that CA signs for roles.
func (n *Node) forwardTLS(t *Node, roles role.Set) (*tls.Config, error) {
	n.mu.Lock()
	cfg := n.cfg
	n.mu.Unlock()
	if cfg == nil {
		return nil, errors.New("not configured")
	}
	issuer := cfg.Machine().Security().IssuingCA()
	if issuer == nil || len(issuer.Key) == 0 {
		return nil, errors.New("no OS CA key")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuer)
	if err != nil {
		return nil, err
	}
	kp, err := x509.NewKeyPair(ca,
		x509.Organization(roles.Strings()...),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
		x509.NotAfter(time.Now().Add(24*time.Hour)))
	if err != nil {
		return nil, err
	}
	pool := stdx509.NewCertPool()
	pool.AddCert(ca.Crt)
	return &tls.Config{
		Certificates: []tls.Certificate{*kp.Certificate},
		RootCAs:      pool,
		ServerName:   t.ip.String(),
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// closeForwards closes the control plane's connections to other nodes.
func (n *Node) closeForwards() {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	for k, f := range n.fwd {
		_ = f.cc.Close()
		delete(n.fwd, k)
	}
}

// publicListener is a second address the node answers on (its floating
// IP).
type publicListener struct {
	addr string
	ip   net.IP
	lis  net.Listener
}

// PublicAddrs lists the node's public "host:port" addresses.
func (n *Node) PublicAddrs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, len(n.public))
	for i, p := range n.public {
		out[i] = p.addr
	}
	return out
}

// PublicAddr is the node's first public "host:port", "" without one.
func (n *Node) PublicAddr() string {
	if a := n.PublicAddrs(); len(a) > 0 {
		return a[0]
	}
	return ""
}

// AddPublicAddr makes the node answer on a second address as well
// ("127.x.y.z:port", port 0 for a free one), as when a floating IP is
// associated with a cloud instance; the server certificate names it from
// the next TLS handshake on. It returns the address listened on.
func (n *Node) AddPublicAddr(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("simnode: public address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", fmt.Errorf("simnode: public address %q: host must be an IP address", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("simnode: %w", err)
	}
	p := &publicListener{addr: lis.Addr().String(), ip: ip, lis: lis}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = lis.Close()
		return "", errors.New("simnode: node closed")
	}
	n.public = append(n.public, p)
	srv := n.srv
	n.wg.Add(1)
	n.mu.Unlock()
	n.world.register(ip.String(), n)
	if srv != nil {
		srv.remint(n)
	}
	go n.acceptLoop(lis, true)
	return p.addr, nil
}

// RemovePublicAddr stops answering on a public address (a floating IP
// disassociated). Connections already made through it stay open.
func (n *Node) RemovePublicAddr(addr string) error {
	n.mu.Lock()
	var found *publicListener
	for i, p := range n.public {
		if p.addr == addr {
			found = p
			n.public = append(n.public[:i:i], n.public[i+1:]...)
			break
		}
	}
	n.mu.Unlock()
	if found == nil {
		return fmt.Errorf("simnode %s: no public address %s", n.addr, addr)
	}
	n.world.unregister(found.ip.String(), n)
	return found.lis.Close()
}

// sanIPsLocked are the addresses the node's server certificate names.
func (n *Node) sanIPsLocked() []net.IP {
	ips := []net.IP{n.ip}
	for _, p := range n.public {
		ips = append(ips, p.ip)
	}
	return ips
}
