// Package tenant holds rezuscloud's domain types: a tenant (one Talos
// Kubernetes cluster), its node groups, the machines and nodes they declare,
// and the status model that Home Assistant shows. It also decodes and
// validates tenant files and keeps the tenant store (see docs/design.md §3).
//
// It depends on nothing of the outside world but the TOML decoder and
// machinery's version tables.
package tenant

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Provider is the platform a tenant's machines run on.
type Provider string

// Providers.
const (
	ProviderMetal     Provider = "metal"
	ProviderOCI       Provider = "oci"
	ProviderOpenStack Provider = "openstack"
)

// Providers lists every provider, in the order the docs give them.
var Providers = []Provider{ProviderMetal, ProviderOCI, ProviderOpenStack}

// Role is a node group's Talos machine type.
type Role string

// Roles.
const (
	RoleControlPlane Role = "controlplane"
	RoleWorker       Role = "worker"
)

// Tenant is one cluster, as declared by a tenant file. Name is the file stem.
type Tenant struct {
	Name              string      `toml:"-" json:"name"`
	DisplayName       string      `toml:"display_name" json:"display_name"`
	Provider          Provider    `toml:"provider" json:"provider"`
	TalosVersion      string      `toml:"talos_version" json:"talos_version"`
	KubernetesVersion string      `toml:"kubernetes_version" json:"kubernetes_version"`
	Endpoint          string      `toml:"endpoint" json:"endpoint,omitempty"`
	AutoApply         bool        `toml:"auto_apply" json:"auto_apply"`
	ConfigPatches     []string    `toml:"config_patches" json:"-"`
	OCI               *OCI        `toml:"oci" json:"oci,omitempty"`
	OpenStack         *OpenStack  `toml:"openstack" json:"openstack,omitempty"`
	NodeGroups        []NodeGroup `toml:"node_groups" json:"node_groups"`

	// Schematic is an Image Factory schematic id (64 hex characters): nodes
	// install and upgrade from factory.talos.dev/installer/<schematic>:<v>
	// so their extensions survive upgrades ("" = the plain installer).
	Schematic string `toml:"schematic" json:"schematic,omitempty"`
	// EtcdBackupInterval is how often etcd is snapshotted (a Go duration;
	// "0" turns it off; "" = DefaultBackupInterval). See BackupInterval.
	EtcdBackupInterval string `toml:"etcd_backup_interval" json:"etcd_backup_interval,omitempty"`
	// EtcdBackupKeep is how many snapshots are kept (1..100; 0 = DefaultBackupKeep).
	EtcdBackupKeep int `toml:"etcd_backup_keep" json:"etcd_backup_keep,omitempty"`

	// Path is the file the tenant was read from ("" when built in code).
	Path string `toml:"-" json:"-"`
	// Source is the file's contents as read, to tell one version from
	// another without reading the file again.
	Source []byte `toml:"-" json:"-"`
}

// OCI holds an Oracle Cloud tenant's platform fields.
type OCI struct {
	CompartmentOCID    string `toml:"compartment_ocid" json:"compartment_ocid"`
	Region             string `toml:"region" json:"region"`
	SubnetOCID         string `toml:"subnet_ocid" json:"subnet_ocid"`
	ImageOCID          string `toml:"image_ocid" json:"image_ocid"`
	AvailabilityDomain string `toml:"availability_domain" json:"availability_domain,omitempty"`
}

// OpenStack holds an OpenStack tenant's platform fields.
type OpenStack struct {
	Region         string `toml:"region" json:"region"`
	Network        string `toml:"network" json:"network"`
	Image          string `toml:"image" json:"image"`
	FloatingIPPool string `toml:"floating_ip_pool" json:"floating_ip_pool,omitempty"`
}

// NodeGroup is a set of nodes of one role. Metal groups draw their nodes from
// Machines; cloud groups carry their platform's sizing fields.
type NodeGroup struct {
	Name     string    `toml:"name" json:"name"`
	Role     Role      `toml:"role" json:"role"`
	Count    int       `toml:"count" json:"count"`
	Machines []Machine `toml:"machines" json:"machines,omitempty"`

	// OCI sizing.
	Shape        string  `toml:"shape" json:"shape,omitempty"`
	OCPUs        float64 `toml:"ocpus" json:"ocpus,omitempty"`
	MemoryGB     float64 `toml:"memory_gb" json:"memory_gb,omitempty"`
	BootVolumeGB int     `toml:"boot_volume_gb" json:"boot_volume_gb,omitempty"`

	// OpenStack sizing.
	Flavor   string `toml:"flavor" json:"flavor,omitempty"`
	VolumeGB int    `toml:"volume_gb" json:"volume_gb,omitempty"`

	// Pool, when set, makes the group an energy-aware pool (pool.go).
	Pool *Pool `toml:"pool" json:"pool,omitempty"`
}

// Machine is a bare-metal machine in a metal group's pool.
type Machine struct {
	Address     string `toml:"address" json:"address"`
	MAC         string `toml:"mac" json:"mac,omitempty"`
	InstallDisk string `toml:"install_disk" json:"install_disk"`
	// Power is how the machine is switched (power.Parse): "wol" (the
	// default with a mac), "switch.<id>", "button.<id>",
	// "redfish+https://…", "ipmi://<host>[:port]" or "none".
	Power string `toml:"power" json:"power,omitempty"`
	// RedfishInsecure skips verifying the BMC's certificate.
	RedfishInsecure bool `toml:"redfish_insecure" json:"redfish_insecure,omitempty"`
	// PowerSensor is the Home Assistant sensor that measures the
	// machine's draw (its smart plug's power, W), for the pool's power
	// and energy; "" = the pool's rated watts.
	PowerSensor string `toml:"power_sensor" json:"power_sensor,omitempty"`
}

// NodeIndex is the index of node name in group of tenant ("<tenant>-<group>-<index>"),
// 0 when name is not such a name.
func NodeIndex(tenantName, group, name string) int {
	rest, ok := strings.CutPrefix(name, tenantName+"-"+group+"-")
	if !ok {
		return 0
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 1 {
		return 0
	}
	return i
}

// Node is one node a tenant declares: node Index (1-based) of group Group.
// Its Name, "<tenant>-<group>-<index>", is stable: scaling a group adds or
// removes the highest indexes and never renames the others.
type Node struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	Group  string `json:"group"`
	Role   Role   `json:"role"`
	Index  int    `json:"index"`
	// Machine is the pool machine a metal node runs on; nil for cloud nodes.
	Machine *Machine `json:"machine,omitempty"`
}

// Backup defaults (docs/design.md §10.3).
const (
	DefaultBackupInterval = 24 * time.Hour
	DefaultBackupKeep     = 7
)

// BackupInterval is the etcd backup interval; 0 means off.
func (t *Tenant) BackupInterval() time.Duration {
	if t.EtcdBackupInterval == "" {
		return DefaultBackupInterval
	}
	d, err := time.ParseDuration(t.EtcdBackupInterval)
	if err != nil || d < 0 {
		return DefaultBackupInterval // validation refuses such files
	}
	return d
}

// BackupKeep is how many etcd snapshots are kept.
func (t *Tenant) BackupKeep() int {
	if t.EtcdBackupKeep <= 0 {
		return DefaultBackupKeep
	}
	return t.EtcdBackupKeep
}

// NodeName is the stable name of node index (1-based) of a group.
func NodeName(tenant, group string, index int) string {
	return fmt.Sprintf("%s-%s-%d", tenant, group, index)
}

// Title is what Home Assistant shows for the tenant.
func (t *Tenant) Title() string {
	if t.DisplayName != "" {
		return t.DisplayName
	}
	return t.Name
}

// Group returns the named group, or nil.
func (t *Tenant) Group(name string) *NodeGroup {
	for i := range t.NodeGroups {
		if t.NodeGroups[i].Name == name {
			return &t.NodeGroups[i]
		}
	}
	return nil
}

// Nodes lists the nodes the tenant declares, group by group in file order,
// index by index. Metal node i runs on machine i of its group's pool.
func (t *Tenant) Nodes() []Node {
	var nodes []Node
	for _, g := range t.NodeGroups {
		for i := 1; i <= g.Count; i++ {
			n := Node{Name: NodeName(t.Name, g.Name, i), Tenant: t.Name, Group: g.Name, Role: g.Role, Index: i}
			if t.Provider == ProviderMetal && i <= len(g.Machines) {
				m := g.Machines[i-1]
				n.Machine = &m
			}
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// Node returns the declared node with that name.
func (t *Tenant) Node(name string) (Node, bool) {
	for _, n := range t.Nodes() {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// ControlPlaneGroup returns the group that holds the etcd control plane, or nil.
func (t *Tenant) ControlPlaneGroup() *NodeGroup {
	for i := range t.NodeGroups {
		if t.NodeGroups[i].Role == RoleControlPlane {
			return &t.NodeGroups[i]
		}
	}
	return nil
}

// CountBounds gives the counts a group of this role may have.
func CountBounds(r Role) (lo, hi int) {
	if r == RoleControlPlane {
		return 1, 5
	}
	return 0, 100
}

// Phase is a tenant's lifecycle phase (docs/design.md §4).
type Phase string

// Phases.
const (
	PhaseAbsent        Phase = "absent"
	PhasePlanned       Phase = "planned"
	PhaseProvisioning  Phase = "provisioning"
	PhaseBootstrapping Phase = "bootstrapping"
	PhaseRunning       Phase = "running"
	PhaseDegraded      Phase = "degraded"
	PhaseUpgrading     Phase = "upgrading"
	PhaseDestroying    Phase = "destroying"
	PhaseFailed        Phase = "failed"
	PhaseOrphaned      Phase = "orphaned"
)

// Phases lists every phase (the options of the Phase enum sensor).
var Phases = []Phase{PhaseAbsent, PhasePlanned, PhaseProvisioning, PhaseBootstrapping, PhaseRunning,
	PhaseDegraded, PhaseUpgrading, PhaseDestroying, PhaseFailed, PhaseOrphaned}

// Stage is a node's lifecycle stage (docs/design.md §4).
type Stage string

// Stages.
const (
	StagePending      Stage = "pending"
	StageProvisioning Stage = "provisioning"
	StageUnreachable  Stage = "unreachable"
	StageMaintenance  Stage = "maintenance"
	StageInstalling   Stage = "installing"
	StageBooting      Stage = "booting"
	StageRunning      Stage = "running"
	StageRebooting    Stage = "rebooting"
	StageUpgrading    Stage = "upgrading"
	StageResetting    Stage = "resetting"
	StageShuttingDown Stage = "shutting_down"
)

// Stages lists every stage (the options of the Stage enum sensor).
var Stages = []Stage{StagePending, StageProvisioning, StageUnreachable, StageMaintenance, StageInstalling,
	StageBooting, StageRunning, StageRebooting, StageUpgrading, StageResetting, StageShuttingDown}

// Power is what a node's stage says of its power: "off" for an
// unreachable node, "unknown" before it exists, else "on" (the node's
// Power sensor in Home Assistant and the panel show it).
func (s Stage) Power() string {
	switch s {
	case StageUnreachable:
		return "off"
	case StagePending, StageProvisioning, "":
		return "unknown"
	}
	return "on"
}

// Changes counts the resources a plan adds, changes and destroys.
type Changes struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

// Any reports whether anything changes.
func (c Changes) Any() bool { return c.Add+c.Change+c.Destroy > 0 }

// Result is how an operation ended, or that it started.
type Result string

// Results (also the event types of the bridge's Operation event entity).
const (
	ResultStarted   Result = "started"
	ResultSucceeded Result = "succeeded"
	ResultFailed    Result = "failed"
	ResultCancelled Result = "cancelled"
	// ResultRefused: a command was refused before any operation started
	// (Destroy while not armed, a bad count); Message says why.
	ResultRefused Result = "refused"
)

// OperationResult is the outcome of a finished operation.
type OperationResult struct {
	Name    string    `json:"name"`
	Result  Result    `json:"result"`
	At      time.Time `json:"at"`
	Message string    `json:"message"`
}

// OperationEvent reports an operation starting or ending.
type OperationEvent struct {
	Tenant   string        `json:"tenant"`
	Name     string        `json:"operation"`
	Result   Result        `json:"result"`
	Message  string        `json:"message"`
	Duration time.Duration `json:"-"`
	At       time.Time     `json:"at"`
}

// Activities: what a running operation does, as a person would say it
// (the state document's activity; docs/design.md §11.1).
const (
	ActivityPlanning   = "planning"
	ActivityApplying   = "applying"
	ActivityScaling    = "scaling"
	ActivityUpgrading  = "upgrading"
	ActivityDestroying = "destroying"
	ActivityBackingUp  = "backing_up"
	ActivityDraining   = "draining"
	ActivityRebooting  = "rebooting"
	ActivityPowering   = "powering"
	ActivityRepairing  = "repairing"
)

// View is one tenant as Home Assistant shows it: the file it is shown from
// and every document of it, complete. The engine computes it from facts
// (one pure function); the bridge only renders it.
type View struct {
	Name string
	// Spec is the tenant file; for an orphaned tenant the spec it was last
	// applied with.
	Spec   *Tenant
	Status Status
	// Nodes are the nodes shown, by name: those the file declares, and
	// those that still exist (a removed node until its reset is done).
	Nodes map[string]NodeStatus
}

// Status is a tenant's state document (docs/design.md §4, contract).
type Status struct {
	Phase      Phase   `json:"phase"`
	NodesReady int     `json:"nodes_ready"`
	NodesTotal int     `json:"nodes_total"`
	Progress   int     `json:"progress"`
	Pending    Changes `json:"pending"`
	// Operation names the running operation (its event name: apply, plan,
	// destroy, ...); nil when idle.
	Operation *string `json:"operation"`
	// Activity says what the running operation does (Activity*; "" when
	// idle), OperationStep which step it is in.
	Activity      string `json:"activity"`
	OperationStep string `json:"operation_step"`
	// Queued is the number of operations waiting behind the running one.
	Queued        int              `json:"queued"`
	LastOperation *OperationResult `json:"last_operation"`
	Problem       bool             `json:"problem"`
	// Problems are the reasons of Problem, each one sentence.
	Problems          []string `json:"problems"`
	TalosVersion      string   `json:"talos_version"`
	KubernetesVersion string   `json:"kubernetes_version"`
	// Provider, AutoApply and Counts (nodes per group) are the file's.
	Provider  Provider       `json:"provider"`
	AutoApply bool           `json:"auto_apply"`
	Counts    map[string]int `json:"counts"`
	// Summary is one spoken sentence (Summary).
	Summary string `json:"summary"`
	// TalosVersionRunning and KubernetesVersionRunning are the lowest
	// versions the nodes report ("" when the cluster does not exist).
	TalosVersionRunning      string `json:"talos_version_running"`
	KubernetesVersionRunning string `json:"kubernetes_version_running"`
	// Rollout is the upgrade in progress, nil when none runs.
	Rollout *Rollout `json:"rollout,omitempty"`
	// Backup is the newest etcd snapshot, nil when there is none.
	Backup *BackupInfo `json:"backup,omitempty"`
	// BackupStale: the newest snapshot is older than twice the interval.
	BackupStale bool `json:"backup_stale,omitempty"`
	// Pools are the worker pools' states by group (pool.go).
	Pools map[string]PoolStatus `json:"pools,omitempty"`
}

// Rollout is the progress of a Talos or Kubernetes upgrade.
type Rollout struct {
	Component string `json:"component"` // "talos" or "kubernetes"
	Version   string `json:"version"`   // the target
	Done      int    `json:"done"`      // nodes on target
	Total     int    `json:"total"`
	Node      string `json:"node,omitempty"` // the node in progress
}

// BackupInfo describes an etcd snapshot file.
type BackupInfo struct {
	At   time.Time `json:"at"`
	Size int64     `json:"size"`
	File string    `json:"file"`
}

// NodeStatus is a node's state document (docs/design.md §4, contract).
type NodeStatus struct {
	Stage   Stage  `json:"stage"`
	Ready   bool   `json:"ready"`
	Address string `json:"address"`
	// PrivateAddress is a cloud node's address inside its network; Address
	// is what rezuscloud reaches it through (its own public address, or
	// the endpoint host for a node reached through a control plane).
	PrivateAddress string `json:"private_address,omitempty"`
	Role           Role   `json:"role"`
	Group          string `json:"group"`
	TalosVersion   string `json:"talos_version"`
	// KubernetesVersion is the kubelet version the node reports.
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
	// Power is on, off or unknown.
	Power string `json:"power"`
	// UnreachableSince is when a provisioned node stopped answering (zero
	// when it answers); past the engine's unreachable_after it may be
	// forgotten.
	UnreachableSince time.Time `json:"-"`
	// Forgettable: the node has been unreachable past unreachable_after,
	// so "Forget machine" may remove it (docs/design.md §11.7).
	Forgettable bool `json:"forgettable"`
}
