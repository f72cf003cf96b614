package simnode

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// World is a set of simulated nodes that can see each other: nodes of one
// World configured from the same secrets (the same OS CA) form one cluster,
// which shares its etcd bootstrap state and lends workers the OS CA key
// (what trustd does on real control planes). Clusters are forgotten once
// all their nodes are reset or closed.
//
// Tests that reuse one secrets bundle across independent clusters must give
// each its own World.
type World struct {
	mu       sync.Mutex
	clusters map[string]*cluster
	nodes    map[string]*Node // by IP (private and public) and by "host:port"
	// kubeconfig, when set, is what every control plane's Kubeconfig
	// gives: a real API server's the test runs (SetKubeconfig)
	kubeconfig []byte
}

// SetKubeconfig makes every control plane of the World give kc as its
// cluster's kubeconfig: the kubeconfig of a real API server a test runs
// beside the simulated nodes (testenv.StartKube), so that what the engine
// does through Kubernetes reaches a real one.
func (w *World) SetKubeconfig(kc []byte) {
	w.mu.Lock()
	w.kubeconfig = append([]byte(nil), kc...)
	w.mu.Unlock()
}

// NewWorld returns an empty World.
func NewWorld() *World { return &World{clusters: map[string]*cluster{}, nodes: map[string]*Node{}} }

// register makes n known under name (its IP or "host:port") for node
// routing; the first node of a name keeps it.
func (w *World) register(name string, n *Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.nodes[name]; !ok {
		w.nodes[name] = n
	}
}

func (w *World) unregister(name string, n *Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nodes[name] == n {
		delete(w.nodes, name)
	}
}

// lookup finds the node a routed request names.
func (w *World) lookup(name string) *Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodes[name]
}

type cluster struct {
	key          string
	issuer       *x509.PEMEncodedCertificateAndKey // OS CA with its key, once a control plane joined
	bootstrapped bool
	members      map[*Node]struct{}
}

func clusterKey(cfg config.Provider) string {
	ca := cfg.Machine().Security().IssuingCA()
	if ca == nil {
		return ""
	}
	sum := sha256.Sum256(ca.Crt)
	return hex.EncodeToString(sum[:])
}

// join adds n to the cluster its config names.
func (w *World) join(cfg config.Provider, n *Node) *cluster {
	key := clusterKey(cfg)
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.clusters[key]
	if c == nil {
		c = &cluster{key: key, members: map[*Node]struct{}{}}
		w.clusters[key] = c
	}
	c.members[n] = struct{}{}
	if ca := cfg.Machine().Security().IssuingCA(); ca != nil && len(ca.Key) > 0 && c.issuer == nil {
		c.issuer = ca
	}
	return c
}

func (w *World) leave(c *cluster, n *Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(c.members, n)
	if len(c.members) == 0 && w.clusters[c.key] == c {
		delete(w.clusters, c.key)
	}
}

func (w *World) issuer(c *cluster) *x509.PEMEncodedCertificateAndKey {
	w.mu.Lock()
	defer w.mu.Unlock()
	return c.issuer
}

func (w *World) bootstrapped(c *cluster) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return c.bootstrapped
}

// bootstrap marks the cluster bootstrapped; false if it already was. The
// running members re-evaluate their readiness.
func (w *World) bootstrap(c *cluster) bool {
	w.mu.Lock()
	if c.bootstrapped {
		w.mu.Unlock()
		return false
	}
	c.bootstrapped = true
	members := make([]*Node, 0, len(c.members))
	for m := range c.members {
		members = append(members, m)
	}
	w.mu.Unlock()
	go func() {
		for _, m := range members {
			m.refreshReady()
		}
	}()
	return true
}
