package engine

import (
	"net"
	"net/url"
	"slices"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// How nodes are reached (docs/design.md §10.1): metal machines and cloud nodes
// with an address of their own are dialled directly; a cloud node with only
// a private address is reached through the control planes that have a
// public one (and the endpoint's host), naming the node in the request, as
// `talosctl -e <endpoint> -n <private ip>` does. This file is the one place
// that decides it.

// routed reports whether a node is reached through a control plane.
func routed(p tenant.Provider, nr nodeRecord) bool {
	return p != tenant.ProviderMetal && nr.PrivateAddress != "" && (nr.Address == "" || nr.Address == nr.PrivateAddress)
}

// gateways are the Talos API endpoints ("host:port") through which routed
// nodes are reached, in preference order: the control planes with an
// address of their own, by name, then the Kubernetes endpoint's host.
func (e *Engine) gateways(p tenant.Provider, endpoint string, nodes map[string]nodeRecord) []string {
	var names []string
	for n, nr := range nodes {
		if nr.Role == tenant.RoleControlPlane && !routed(p, nr) && nr.Address != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var eps []string
	for _, n := range names {
		eps = append(eps, e.endpoint(nodes[n].Address))
	}
	if u, err := url.Parse(endpoint); err == nil && u.Hostname() != "" {
		if ep := e.endpoint(u.Hostname()); !slices.Contains(eps, ep) {
			eps = append(eps, ep)
		}
	}
	return eps
}

// targetIn is how to reach one node of nodes.
func (e *Engine) targetIn(p tenant.Provider, endpoint string, nodes map[string]nodeRecord, name string) (talos.Target, bool) {
	nr, ok := nodes[name]
	if !ok {
		return talos.Target{}, false
	}
	if routed(p, nr) {
		gw := e.gateways(p, endpoint, nodes)
		if len(gw) == 0 {
			return talos.Target{}, false
		}
		return talos.Route(gw, nr.PrivateAddress), true
	}
	if nr.Address == "" {
		return talos.Target{}, false
	}
	return talos.Direct(e.endpoint(nr.Address)), true
}

// shownAddress is the address a node's state shows: the one it is reached
// through (for a routed node the first gateway's host).
func (e *Engine) shownAddress(p tenant.Provider, endpoint string, nodes map[string]nodeRecord, name string) string {
	nr := nodes[name]
	if !routed(p, nr) {
		return nr.Address
	}
	if gw := e.gateways(p, endpoint, nodes); len(gw) > 0 {
		if host, _, err := net.SplitHostPort(gw[0]); err == nil {
			return host
		}
	}
	return ""
}

// providerLocked is the tenant's platform (metal when nothing is known).
func (ts *tstate) providerLocked() tenant.Provider {
	if t := ts.shownLocked(); t != nil {
		return t.Provider
	}
	return tenant.ProviderMetal
}

// target is how to reach a provisioned node.
func (ts *tstate) target(name string) (talos.Target, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.e.targetIn(ts.providerLocked(), ts.rec.Endpoint, ts.rec.Nodes, name)
}
