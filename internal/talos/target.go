package talos

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
)

// Target says how a node's Talos API is reached: directly at its own
// address, or through a control plane that forwards each request to the
// node by name (apid node routing, what `talosctl -e <endpoint> -n <ip>`
// does), for cloud nodes that have only a private address.
type Target struct {
	// Endpoints are the "host:port" addresses dialled, in order of
	// preference: the node itself for a direct target, control planes of
	// its cluster for a routed one. When one does not answer the next is
	// tried.
	Endpoints []string
	// Node is the routed node's private address, named in every request
	// (machinery's client.WithNode); "" for a direct target.
	Node string
}

// Direct is the target of a node dialled at its own "host:port" (metal
// nodes, nodes with an address of their own).
func Direct(endpoint string) Target { return Target{Endpoints: []string{endpoint}} }

// Route is the target of a node reached through control planes: the
// control planes' Talos API endpoints ("host:port", in order of preference;
// the first that answers serves) and the node's private IP (a port, if
// any, is dropped).
func Route(controlPlaneEndpoints []string, privateIP string) Target {
	host := privateIP
	if h, _, err := net.SplitHostPort(privateIP); err == nil {
		host = h
	}
	return Target{Endpoints: slices.Clone(controlPlaneEndpoints), Node: host}
}

// Routed reports whether requests are forwarded by a control plane.
func (t Target) Routed() bool { return t.Node != "" }

// Equal reports whether two targets reach a node the same way.
func (t Target) Equal(o Target) bool {
	return t.Node == o.Node && slices.Equal(t.Endpoints, o.Endpoints)
}

// String names the target in messages: "host:port", or
// "10.0.0.5 via 192.0.2.7:50000,192.0.2.8:50000".
func (t Target) String() string {
	eps := strings.Join(t.Endpoints, ",")
	if t.Routed() {
		return t.Node + " via " + eps
	}
	return eps
}

func (t Target) check() error {
	if len(t.Endpoints) == 0 {
		if t.Routed() {
			return fmt.Errorf("node %s: no control plane endpoint to reach it through", t.Node)
		}
		return errors.New("talos target without an endpoint")
	}
	for _, ep := range t.Endpoints {
		if ep == "" {
			return fmt.Errorf("%s: empty endpoint", t)
		}
	}
	return nil
}

// dialer hands out clients for one endpoint: secure ones (mTLS with the
// talosconfig) or, with a nil talosconfig, maintenance ones. release must be
// called when the call is done, with its error.
type dialer interface {
	get(ctx context.Context, endpoint string, talosconfig []byte) (c *client.Client, release func(error), err error)
}

// oneShot dials a new client per call (one-shot operations).
type oneShot struct{}

func (oneShot) get(ctx context.Context, endpoint string, talosconfig []byte) (*client.Client, func(error), error) {
	var c *client.Client
	var err error
	if talosconfig == nil {
		c, err = maintenanceClient(ctx, endpoint)
	} else {
		c, err = secureClient(ctx, endpoint, talosconfig)
	}
	if err != nil {
		return nil, nil, err
	}
	return c, func(error) { _ = c.Close() }, nil
}

// call runs fn with a client for t, starting at endpoint index from
// (modulo their number) and passing to the next endpoint when one does not
// answer or does not present the cluster's identity. A routed call names
// t.Node in its context. It returns the index of the endpoint that gave
// the last answer. A nil talosconfig means the maintenance client.
func (t Target) call(ctx context.Context, d dialer, from int, talosconfig []byte, fn func(context.Context, *client.Client) error) (int, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	if t.Routed() {
		ctx = client.WithNode(ctx, t.Node)
	}
	n := len(t.Endpoints)
	from = ((from % n) + n) % n
	var err error
	i := from
	for k := range n {
		i = (from + k) % n
		var c *client.Client
		var release func(error)
		c, release, err = d.get(ctx, t.Endpoints[i], talosconfig)
		if err != nil {
			return i, err // a talosconfig that does not parse: the same for every endpoint
		}
		err = fn(ctx, c)
		if err != nil && t.Routed() && c.Conn().GetState() == connectivity.Ready {
			// The control plane answered: the error is the routed
			// node's, or its leg's (another control plane would reach it
			// no better).
			err = &routedError{node: t.Node, err: err}
		}
		release(err)
		if err == nil || !endpointFailed(err) || ctx.Err() != nil {
			return i, err
		}
	}
	return i, err
}

// endpointFailed reports errors after which another endpoint may answer:
// the endpoint does not answer, or answers with another identity.
func endpointFailed(err error) bool {
	var re *routedError
	if errors.As(err, &re) {
		return false
	}
	return isUnreachable(err) || isDialError(err) || isTrustError(err)
}

// routedError is an error a control plane answered for the node it routed
// to: the node refused, or the control plane could not reach it (then the
// code is Unavailable, whatever the message says about certificates).
type routedError struct {
	node string
	err  error
}

func (e *routedError) Error() string { return "node " + e.node + ": " + e.err.Error() }
func (e *routedError) Unwrap() error { return e.err }

// routedUnreachable reports a routed node the control plane could not
// reach (down, or in maintenance mode, which has no routing).
func routedUnreachable(err error) bool {
	var re *routedError
	if !errors.As(err, &re) {
		return false
	}
	switch client.StatusCode(re.err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// pool keeps one client per endpoint, credentials and mode for the poller,
// instead of a TLS handshake per poll. A client whose connection broke is
// dropped from the pool at its first error (and closed once its last user
// is done); Prune closes those no target uses any more.
type pool struct {
	mu    sync.Mutex
	conns map[poolKey]*pooled
}

type poolKey struct {
	endpoint string
	secure   bool
	creds    [sha256.Size]byte // of the talosconfig
}

type pooled struct {
	c       *client.Client
	users   int
	evicted bool
}

func newPool() *pool { return &pool{conns: map[poolKey]*pooled{}} }

func keyFor(endpoint string, talosconfig []byte) poolKey {
	return poolKey{endpoint: endpoint, secure: talosconfig != nil, creds: sha256.Sum256(talosconfig)}
}

func (p *pool) get(ctx context.Context, endpoint string, talosconfig []byte) (*client.Client, func(error), error) {
	k := keyFor(endpoint, talosconfig)
	p.mu.Lock()
	e := p.conns[k]
	if e == nil {
		p.mu.Unlock()
		c, _, err := oneShot{}.get(ctx, endpoint, talosconfig)
		if err != nil {
			return nil, nil, err
		}
		p.mu.Lock()
		if e = p.conns[k]; e == nil { // nobody raced us to it
			e = &pooled{c: c}
			p.conns[k] = e
		} else {
			_ = c.Close()
		}
	}
	e.users++
	p.mu.Unlock()
	return e.c, func(err error) { p.release(k, e, err) }, nil
}

func (p *pool) release(k poolKey, e *pooled, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.users--
	if err != nil && !e.evicted && brokenConn(e.c, err) {
		e.evicted = true
		if p.conns[k] == e {
			delete(p.conns, k)
		}
	}
	if e.evicted && e.users == 0 {
		_ = e.c.Close()
	}
}

// brokenConn reports a client whose connection is not usable any more (an
// error that only concerns the routed node, with the control plane's
// connection still ready, keeps it).
func brokenConn(c *client.Client, err error) bool {
	var re *routedError
	if errors.As(err, &re) {
		return false
	}
	return isTrustError(err) || c.Conn().GetState() != connectivity.Ready
}

// prune closes the clients of endpoints keep does not name.
func (p *pool) prune(keep map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.conns {
		if keep[k.endpoint] {
			continue
		}
		delete(p.conns, k)
		e.evicted = true
		if e.users == 0 {
			_ = e.c.Close()
		}
	}
}

// size is the number of pooled clients (tests).
func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}
