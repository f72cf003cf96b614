// Package simnode runs simulated Talos nodes: the real Talos machine API
// (machinery's protobuf MachineService and the COSI State service) over gRPC
// and TLS on a loopback address, with the lifecycle a real node goes through.
// rezuscloud's tests and `rezuscloud demo` provision these nodes with the
// very same code (package talos, machinery's client) that drives real ones.
//
// # What it simulates
//
//   - Maintenance mode: a self-signed server certificate, no client
//     certificate asked for, read-only (Version, COSI reads, and
//     ApplyConfiguration; everything else is PermissionDenied, as in apid).
//   - ApplyConfiguration parses and validates the config with machinery
//     (garbage is InvalidArgument) and learns the node's role from it. In
//     maintenance mode the node then goes installing → rebooting → (down) →
//     booting → running, each stage with a configurable delay, and comes back
//     serving TLS signed by the cluster's OS CA (machine.ca of the applied
//     config), requiring client certificates from that CA: the gRPC server
//     is stopped and a new one started on the same address, so clients see
//     the node go away like a real reboot. Roles come from the client
//     certificate's organization (os:admin may change things, os:reader and
//     others may only read).
//   - Workers have no OS CA key in their config; like real workers (trustd),
//     they wait in booting, unreachable, until a control plane of the same
//     cluster in the same World has been configured.
//   - Bootstrap: once per cluster (all nodes of a World configured from the
//     same secrets share one etcd): a second call, on any control plane,
//     answers AlreadyExists; workers answer Unimplemented; maintenance mode
//     PermissionDenied. Control planes are running but not ready until their
//     cluster is bootstrapped.
//   - Kubeconfig (control planes): a tar.gz stream holding an admin
//     kubeconfig minted from the config's Kubernetes CA, naming the cluster
//     endpoint. Workers answer Unimplemented.
//   - MachineStatus (runtime namespace, id "machine") in a COSI state served
//     by the node, so reads and watches work as on real Talos.
//   - Reboot (rebooting → down → booting → running), Reset (graceful or
//     not: resetting → down → maintenance with a new self-signed certificate
//     and the config wiped, ready to be applied again), Version.
//   - Cloud instances: Options.Config boots a node from a machine config
//     given at start (its user_data): no maintenance mode, down until its
//     secure API is up (a worker waits for a control plane of its cluster),
//     then booting → running. Options.PublicAddr (and AddPublicAddr /
//     RemovePublicAddr at run time) adds a second listen address, the
//     floating IP; the server certificate names every address.
//   - apid node routing: a configured control plane that receives a request
//     whose metadata "node" names another node of its World (by private or
//     public IP) forwards it, unary and streaming calls alike (machine API
//     and COSI), over an in-process connection with mutual TLS: the node
//     verifies a client certificate the control plane signs with its OS CA
//     for the caller's roles, so the node's own authorization and behaviour
//     apply. A node that is down answers Unavailable through the control
//     plane; a request naming the node itself is served locally. Counts
//     tells connections on the private address (DirectPrivate) from those
//     on a public one (DirectPublic) and routed requests (Routed, on the
//     node; Forwarded, on the control plane), so tests can assert that
//     nothing dialled a cloud node's private address. Nodes of one World
//     need distinct IPs to be routed to (the first node of an IP keeps it).
//   - Upgrades (upgrade.go): ImageService.Pull and LifecycleService.Upgrade
//     (install only, stage upgrading for InstallDelay; the next Reboot boots
//     the new version, reported by Version, the runtime Version resource and
//     the "schematic" ExtensionStatus), the legacy MachineService.Upgrade
//     (reboots by itself; nodes before 1.13 have only this one), and
//     FailUpgrade (pull fails, installer fails, never comes back until
//     ClearFault/PowerOn). Kubernetes component versions follow the machine
//     config (k8s APIServerConfig etc., StaticPodStatus, KubeletSpec), also
//     after a no-reboot apply. EtcdSnapshot (deterministic pages of
//     Options.EtcdSnapshotSize and etcd's sha256 trailer;
//     TruncateEtcdSnapshot) and EtcdMemberList (the cluster's control
//     planes that are up).
//   - Test knobs: stage delays, FailBootstrap(n) (the next n Bootstrap calls
//     answer FailedPrecondition "bootstrap is not available yet"),
//     SetUnreachable (connections are accepted and dropped at once, and
//     counted) and a record of calls (Calls).
//
// # What it does not simulate
//
// Kubernetes itself (no API server answers at the endpoint; the kubeconfig is
// valid but leads nowhere; package kubesim attaches a kubelet side to a node,
// following Changed, against a real API server testenv.StartKube runs),
// etcd membership (graceful reset does not cordon, drain or leave
// anything), disks and the install itself, drains and etcd
// checks during upgrades, routing by workers (real apid routes on every
// node; rezuscloud routes through control planes only, so a simulated
// worker answers Unimplemented) and in maintenance mode (PermissionDenied, as
// maintenance apid has no routing), one-to-many routing (metadata "nodes":
// Unimplemented), removing a public address cutting the connections made
// through it, events, logs,
// services and etcd RPCs other than the snapshot and member list
// (Unimplemented), staged and try apply modes (applied
// like no-reboot), config changes that need a reboot to take effect (the TLS
// identity changes only at the next reboot), network black holes (an
// unreachable node refuses quickly instead of timing out), and time: stage
// delays are wall-clock sleeps.
package simnode
