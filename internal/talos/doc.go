// Package talos does rezuscloud's Talos work with the machinery library:
// the per-tenant secrets bundle, machine configs and talosconfig, the Talos
// API operations of the provisioning flows (apply, bootstrap, kubeconfig,
// reboot, reset) and node status polling (docs/design.md §6).
//
// Secrets: LoadOrCreateSecrets keeps one bundle per tenant in
// <data dir>/secrets.yaml (0600, written atomically) and refuses to create
// a new one while the tenant has infrastructure (ErrSecretsMissing).
//
// Configs: GenerateConfigs renders every declared node's machine config
// (tenant strategic-merge patches, a HostnameConfig document per node, the
// machine's install disk), validated strictly and encoded without comments.
//
// Operations take a Target and the tenant's talosconfig. A Target is
// Direct (the node's own "host:port", port 50000 on real nodes: metal, and
// nodes with an address of their own) or a Route: control-plane endpoints
// in order of preference plus the node's private IP, named in every request
// (client.WithNode) so that the control plane's apid forwards it, as
// `talosctl -e <endpoint> -n <ip>` does (docs/design.md §10.1). An endpoint that
// does not answer passes the call to the next; an error the control plane
// answers for the routed node does not. ApplyMaintenance talks to nodes in
// maintenance mode directly (insecure TLS, like talosctl --insecure;
// maintenance has no routing); everything else uses mTLS. Bootstrap and WaitSecure retry with backoff until their
// context ends. Status maps the MachineStatus resource to the node stages
// of docs/design.md §4: a node that does not answer is in stage unreachable (not
// an error), and Ready only ever holds in stage running.
//
// Poller polls many nodes with bounded concurrency, a time limit per poll
// and exponential backoff for unreachable nodes, and reports only changes.
// It keeps one connection per endpoint and credentials between polls
// (shared by every node routed through that endpoint), remembers per node
// which endpoint answered, and drops a connection when it breaks or no
// target uses it any more.
//
// Package simnode provides simulated nodes that speak the same API.
package talos
