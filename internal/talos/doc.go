// Package talos does rezuscloud's Talos work with the machinery library:
// the per-tenant secrets bundle, machine configs and talosconfig, the Talos
// API operations of the provisioning flows (apply, bootstrap, kubeconfig,
// reboot, reset) and node status polling (DESIGN.md §6).
//
// Secrets: LoadOrCreateSecrets keeps one bundle per tenant in
// <data dir>/secrets.yaml (0600, written atomically) and refuses to create
// a new one while the tenant has infrastructure (ErrSecretsMissing).
//
// Configs: GenerateConfigs renders every declared node's machine config
// (tenant strategic-merge patches, a HostnameConfig document per node, the
// machine's install disk), validated strictly and encoded without comments.
//
// Operations take a node endpoint "host:port" (port 50000 on real nodes)
// and the tenant's talosconfig. ApplyMaintenance talks to nodes in
// maintenance mode (insecure TLS, like talosctl --insecure); everything else
// uses mTLS. Bootstrap and WaitSecure retry with backoff until their
// context ends. Status maps the MachineStatus resource to the node stages
// of DESIGN.md §4: a node that does not answer is in stage unreachable (not
// an error), and Ready only ever holds in stage running.
//
// Poller polls many nodes with bounded concurrency, a time limit per poll
// and exponential backoff for unreachable nodes, and reports only changes.
//
// Package simnode provides simulated nodes that speak the same API.
package talos
