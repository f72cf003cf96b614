package engine

import (
	"net"
	"net/url"
	"slices"
	"strconv"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// How nodes are reached (docs/design.md §10.1): metal machines and cloud nodes
// with an address of their own are dialled directly; a cloud node with only
// a private address is reached through the control planes that have a
// public one (and the endpoint's host), naming the node in the request, as
// `talosctl -e <endpoint> -n <private ip>` does. This file is the one place
// that decides it; its functions are pure.

// talosEndpoint is a node's Talos API endpoint "host:port".
func talosEndpoint(address string, port int) string {
	return net.JoinHostPort(address, strconv.Itoa(port))
}

// routed reports whether a node is reached through a control plane.
func routed(p tenant.Provider, nr nodeRecord) bool {
	return p != tenant.ProviderMetal && nr.PrivateAddress != "" && (nr.Address == "" || nr.Address == nr.PrivateAddress)
}

// gateways are the Talos API endpoints ("host:port") through which routed
// nodes are reached, in preference order: the control planes with an
// address of their own, by name, then the Kubernetes endpoint's host.
func gateways(p tenant.Provider, endpoint string, nodes map[string]nodeRecord, port int) []string {
	var names []string
	for n, nr := range nodes {
		if nr.Role == tenant.RoleControlPlane && !routed(p, nr) && nr.Address != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var eps []string
	for _, n := range names {
		eps = append(eps, talosEndpoint(nodes[n].Address, port))
	}
	if u, err := url.Parse(endpoint); err == nil && u.Hostname() != "" {
		if ep := talosEndpoint(u.Hostname(), port); !slices.Contains(eps, ep) {
			eps = append(eps, ep)
		}
	}
	return eps
}

// targetIn is how to reach one node of nodes.
func targetIn(p tenant.Provider, endpoint string, nodes map[string]nodeRecord, name string, port int) (talos.Target, bool) {
	nr, ok := nodes[name]
	if !ok {
		return talos.Target{}, false
	}
	if routed(p, nr) {
		gw := gateways(p, endpoint, nodes, port)
		if len(gw) == 0 {
			return talos.Target{}, false
		}
		return talos.Route(gw, nr.PrivateAddress), true
	}
	if nr.Address == "" {
		return talos.Target{}, false
	}
	return talos.Direct(talosEndpoint(nr.Address, port)), true
}

// shownAddress is the address a node's state shows: the one it is reached
// through (for a routed node the first gateway's host).
func shownAddress(p tenant.Provider, endpoint string, nodes map[string]nodeRecord, name string, port int) string {
	nr := nodes[name]
	if !routed(p, nr) {
		return nr.Address
	}
	if gw := gateways(p, endpoint, nodes, port); len(gw) > 0 {
		if host, _, err := net.SplitHostPort(gw[0]); err == nil {
			return host
		}
	}
	return ""
}
