package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Inputs. Field descriptions are what an LLM reads to fill them in: keep
// them short and concrete.

// ClusterIn names one cluster.
type ClusterIn struct {
	Cluster string `json:"cluster" jsonschema:"the cluster's name, as list_clusters gives it (e.g. lab)"`
}

// NoIn takes nothing.
type NoIn struct{}

// ScaleIn is scale_workers' input.
type ScaleIn struct {
	Cluster string `json:"cluster" jsonschema:"the cluster's name, as list_clusters gives it (e.g. lab)"`
	Group   string `json:"group,omitempty" jsonschema:"the worker group to scale; may be left out when the cluster has one worker group"`
	Count   int    `json:"count" jsonschema:"the number of worker nodes the group should have, within its limits (cluster_status shows min and max)"`
}

// PowerIn is power_worker's input.
type PowerIn struct {
	Cluster string `json:"cluster" jsonschema:"the cluster's name, as list_clusters gives it (e.g. lab)"`
	Node    string `json:"node" jsonschema:"the worker node's name, as cluster_status lists it (e.g. lab-workers-2)"`
	State   string `json:"state" jsonschema:"on to power the machine on, off to shut it down gracefully and switch it off"`
}

// UpgradeIn is upgrade's input.
type UpgradeIn struct {
	Cluster   string `json:"cluster" jsonschema:"the cluster's name, as list_clusters gives it (e.g. lab)"`
	Component string `json:"component" jsonschema:"talos for the operating system, kubernetes for Kubernetes"`
}

// Outputs.

// ClusterSummary is one cluster in list_clusters.
type ClusterSummary struct {
	Name        string `json:"name" jsonschema:"the name tools take"`
	DisplayName string `json:"display_name" jsonschema:"the name people use"`
	Provider    string `json:"provider" jsonschema:"metal, oci or openstack"`
	Phase       string `json:"phase" jsonschema:"absent, planned, provisioning, bootstrapping, running, degraded, upgrading, destroying, failed or orphaned"`
	Operation   string `json:"operation" jsonschema:"the operation running now, empty when none"`
	NodesReady  int    `json:"nodes_ready"`
	NodesTotal  int    `json:"nodes_total"`
	Problem     bool   `json:"problem" jsonschema:"whether something needs attention (see cluster_status for the reasons)"`
	Summary     string `json:"summary" jsonschema:"one sentence a person can be told"`
}

// ClusterList is list_clusters' output.
type ClusterList struct {
	Clusters []ClusterSummary `json:"clusters"`
}

// Group is a node group and the counts scale_workers accepts for it.
type Group struct {
	Name  string `json:"name"`
	Role  string `json:"role" jsonschema:"controlplane or worker; only worker groups can be scaled here"`
	Count int    `json:"count"`
	Min   int    `json:"min"`
	Max   int    `json:"max"`
}

// Node is one node in cluster_status.
type Node struct {
	Name              string `json:"name"`
	Group             string `json:"group"`
	Role              string `json:"role"`
	Stage             string `json:"stage" jsonschema:"pending, provisioning, unreachable, maintenance, installing, booting, running, rebooting, upgrading, resetting or shutting_down"`
	Ready             bool   `json:"ready"`
	Address           string `json:"address,omitempty"`
	TalosVersion      string `json:"talos_version,omitempty"`
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
}

// LastOperation is how the last operation ended.
type LastOperation struct {
	Name    string `json:"name"`
	Result  string `json:"result" jsonschema:"succeeded, failed, cancelled or refused"`
	At      string `json:"at" jsonschema:"when it ended, RFC 3339"`
	Message string `json:"message"`
}

// ClusterStatus is cluster_status' output.
type ClusterStatus struct {
	ClusterSummary
	OperationStep            string         `json:"operation_step,omitempty"`
	Progress                 int            `json:"progress" jsonschema:"percent done of the running operation"`
	Problems                 []string       `json:"problems" jsonschema:"the reasons behind problem, one sentence each"`
	Pending                  tenant.Changes `json:"pending" jsonschema:"resources the pending plan adds, changes and destroys"`
	LastOperation            *LastOperation `json:"last_operation,omitempty"`
	TalosVersion             string         `json:"talos_version" jsonschema:"the version the file asks for"`
	TalosVersionRunning      string         `json:"talos_version_running,omitempty" jsonschema:"the lowest version the nodes run"`
	KubernetesVersion        string         `json:"kubernetes_version"`
	KubernetesVersionRunning string         `json:"kubernetes_version_running,omitempty"`
	AutoApply                bool           `json:"auto_apply" jsonschema:"whether a change to the file is applied without asking"`
	LastBackup               string         `json:"last_backup,omitempty" jsonschema:"when etcd was last backed up, RFC 3339"`
	Groups                   []Group        `json:"groups"`
	Nodes                    []Node         `json:"nodes"`
}

// Change is one resource the pending plan touches (addresses and actions
// only: planned values can hold machine configs, which are secrets).
type Change struct {
	Address string   `json:"address"`
	Type    string   `json:"type"`
	Actions []string `json:"actions" jsonschema:"create, update, delete (a replacement is delete and create)"`
}

// PlanOut is pending_plan's output.
type PlanOut struct {
	Cluster string   `json:"cluster"`
	Pending bool     `json:"pending" jsonschema:"whether a plan waits for apply"`
	Add     int      `json:"add"`
	Change  int      `json:"change"`
	Destroy int      `json:"destroy"`
	Changes []Change `json:"changes"`
}

// Disk is a machine's disk.
type Disk struct {
	Path      string  `json:"path"`
	SizeGB    float64 `json:"size_gb"`
	Model     string  `json:"model,omitempty"`
	Transport string  `json:"transport,omitempty"`
}

// Machine is a machine found on the network, not yet in a cluster.
type Machine struct {
	MAC          string  `json:"mac"`
	Address      string  `json:"address"`
	Manufacturer string  `json:"manufacturer,omitempty"`
	Model        string  `json:"model,omitempty"`
	CPU          string  `json:"cpu,omitempty"`
	Cores        int     `json:"cores"`
	MemoryGB     float64 `json:"memory_gb"`
	Disks        []Disk  `json:"disks"`
}

// MachineList is list_machines' output.
type MachineList struct {
	Machines []Machine `json:"machines"`
}

// WriteOut is every write tool's output: what was queued.
type WriteOut struct {
	Cluster string `json:"cluster"`
	Action  string `json:"action" jsonschema:"the command sent (plan, apply, scale, power, backup, upgrade)"`
	Queued  bool   `json:"queued" jsonschema:"true when an operation was queued; false when the change took effect at once"`
	Message string `json:"message" jsonschema:"what happens next, in one sentence"`
}

// Schema helpers.

func prop(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p := s.Properties[name]
	if p == nil {
		panic("mcp: no property " + name)
	}
	return p
}

// nameProp is a DNS label (tenant, group and node names).
func nameProp(s *jsonschema.Schema, name string) {
	p := prop(s, name)
	p.Pattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	p.MaxLength = jsonschema.Ptr(63)
}

func enumProp(s *jsonschema.Schema, name string, values ...string) {
	p := prop(s, name)
	for _, v := range values {
		p.Enum = append(p.Enum, v)
	}
}

func clusterSchema(s *jsonschema.Schema) { nameProp(s, "cluster") }

// addTools registers the read tools, and the write tools when writes are on.
func (s *Server) addTools() {
	addTool(s, toolDef{name: ToolListClusters, title: "List clusters", idempotent: true,
		desc: "List every Kubernetes cluster rezuscloud manages, with its phase, nodes ready and a one-sentence summary."},
		s.listClusters)
	addTool(s, toolDef{name: ToolClusterStatus, title: "Cluster status", idempotent: true, schema: clusterSchema,
		desc: "One cluster's status: phase, running operation and step, nodes with their stage, the last operation, " +
			"versions, node groups with their limits, and the problem with its reasons."},
		s.clusterStatus)
	addTool(s, toolDef{name: ToolPendingPlan, title: "Pending plan", idempotent: true, schema: clusterSchema,
		desc: "What applying a cluster would change now: the resources its pending plan adds, changes and destroys."},
		s.pendingPlan)
	addTool(s, toolDef{name: ToolListMachines, title: "List machines", idempotent: true,
		desc: "Machines found on the home network that run Talos in maintenance mode and belong to no cluster yet."},
		s.listMachines)
	if !s.opts.Writes {
		return
	}
	addTool(s, toolDef{name: ToolPlan, title: "Plan", write: true, schema: clusterSchema,
		desc: "Queue a plan of one cluster: compute what an apply would change and show it as pending changes. " +
			"Changes nothing in the cluster."},
		s.writeSimple(ToolPlan, "plan", "a plan is queued; pending_plan shows its changes once it has run"))
	addTool(s, toolDef{name: ToolApply, title: "Apply", write: true, schema: clusterSchema,
		desc: "Queue an apply of one cluster: create, change or remove machines and nodes until the cluster " +
			"matches its file. This can start or stop cloud servers, which may cost money."},
		s.writeSimple(ToolApply, "apply", "an apply is queued; cluster_status shows its progress"))
	addTool(s, toolDef{name: ToolScaleWorkers, title: "Scale workers", write: true,
		schema: func(sc *jsonschema.Schema) {
			clusterSchema(sc)
			nameProp(sc, "group")
			lo, hi := tenant.CountBounds(tenant.RoleWorker)
			prop(sc, "count").Minimum = jsonschema.Ptr(float64(lo))
			prop(sc, "count").Maximum = jsonschema.Ptr(float64(hi))
		},
		desc: "Set the number of nodes of one worker group of a cluster (never a control plane). The count is " +
			"written into the cluster's file; a running cluster then plans the change, or applies it with auto apply."},
		s.scaleWorkers)
	addTool(s, toolDef{name: ToolPowerWorker, title: "Power a worker", write: true,
		schema: func(sc *jsonschema.Schema) {
			clusterSchema(sc)
			nameProp(sc, "node")
			enumProp(sc, "state", "on", "off")
		},
		desc: "Power one bare-metal worker node on, or shut it down gracefully and switch it off. " +
			"Control-plane nodes and cloud nodes are refused."},
		s.powerWorker)
	addTool(s, toolDef{name: ToolBackupEtcd, title: "Back up etcd", write: true, schema: clusterSchema,
		desc: "Queue an etcd snapshot of one cluster into the add-on's data folder (only the newest few are kept)."},
		s.writeSimple(ToolBackupEtcd, "backup", "an etcd backup is queued"))
	addTool(s, toolDef{name: ToolUpgrade, title: "Upgrade", write: true,
		schema: func(sc *jsonschema.Schema) { clusterSchema(sc); enumProp(sc, "component", "talos", "kubernetes") },
		desc: "Queue an upgrade of one cluster's Talos or Kubernetes to the version its file names, node by node " +
			"after an etcd snapshot. It never picks a version of its own."},
		s.upgrade)
}

// Read tools.

func (s *Server) listClusters(_ context.Context, _ Caller, _ NoIn) (ClusterList, error) {
	vs := s.opts.Source.Views()
	out := ClusterList{Clusters: make([]ClusterSummary, 0, len(vs))}
	for _, v := range vs {
		out.Clusters = append(out.Clusters, summaryOf(v))
	}
	return out, nil
}

func (s *Server) view(name string) (View, error) {
	if v, ok := s.opts.Source.View(name); ok {
		return v, nil
	}
	var names []string
	for _, v := range s.opts.Source.Views() {
		names = append(names, v.Name)
	}
	if len(names) == 0 {
		return View{}, fmt.Errorf("no cluster named %q: rezuscloud manages no cluster yet", name)
	}
	return View{}, fmt.Errorf("no cluster named %q (the clusters are: %s)", name, strings.Join(names, ", "))
}

func (s *Server) clusterStatus(_ context.Context, _ Caller, in ClusterIn) (ClusterStatus, error) {
	v, err := s.view(in.Cluster)
	if err != nil {
		return ClusterStatus{}, err
	}
	st := v.Status
	out := ClusterStatus{ClusterSummary: summaryOf(v), OperationStep: st.OperationStep,
		Progress: min(max(st.Progress, 0), 100), Problems: append([]string{}, st.Problems...), Pending: st.Pending,
		TalosVersionRunning: st.TalosVersionRunning, KubernetesVersionRunning: st.KubernetesVersionRunning,
		Groups: []Group{}, Nodes: []Node{}}
	if lo := st.LastOperation; lo != nil {
		out.LastOperation = &LastOperation{Name: lo.Name, Result: string(lo.Result), At: rfc3339(lo.At), Message: lo.Message}
	}
	if b := st.Backup; b != nil {
		out.LastBackup = rfc3339(b.At)
	}
	if t := v.Spec; t != nil {
		out.TalosVersion, out.KubernetesVersion, out.AutoApply = t.TalosVersion, t.KubernetesVersion, t.AutoApply
		for _, g := range t.NodeGroups {
			lo, hi := limits(t, &g)
			out.Groups = append(out.Groups, Group{Name: g.Name, Role: string(g.Role), Count: g.Count, Min: lo, Max: hi})
		}
		for _, n := range t.Nodes() {
			ns := v.Nodes[n.Name]
			stage := ns.Stage
			if stage == "" {
				stage = tenant.StagePending
			}
			out.Nodes = append(out.Nodes, Node{Name: n.Name, Group: n.Group, Role: string(n.Role), Stage: string(stage),
				Ready: ns.Ready, Address: ns.Address, TalosVersion: ns.TalosVersion, KubernetesVersion: ns.KubernetesVersion})
		}
	}
	// nodes the engine still reports that the file no longer declares
	// (being removed)
	for _, name := range slices.Sorted(maps.Keys(v.Nodes)) {
		if v.Spec != nil {
			if _, ok := v.Spec.Node(name); ok {
				continue
			}
		}
		ns := v.Nodes[name]
		out.Nodes = append(out.Nodes, Node{Name: name, Group: ns.Group, Role: string(ns.Role), Stage: string(ns.Stage),
			Ready: ns.Ready, Address: ns.Address, TalosVersion: ns.TalosVersion, KubernetesVersion: ns.KubernetesVersion})
	}
	if out.TalosVersion == "" {
		out.TalosVersion = st.TalosVersion
	}
	if out.KubernetesVersion == "" {
		out.KubernetesVersion = st.KubernetesVersion
	}
	return out, nil
}

func (s *Server) pendingPlan(ctx context.Context, _ Caller, in ClusterIn) (PlanOut, error) {
	if _, err := s.view(in.Cluster); err != nil {
		return PlanOut{}, err
	}
	p, err := s.opts.Source.PendingPlan(ctx, in.Cluster)
	if err != nil {
		return PlanOut{}, fmt.Errorf("cluster %s: reading the pending plan: %w", in.Cluster, err)
	}
	out := PlanOut{Cluster: in.Cluster, Changes: []Change{}}
	if p == nil {
		return out, nil
	}
	out.Pending = true
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		a := rc.Change.Actions
		switch {
		case a.Create():
			out.Add++
		case a.Update():
			out.Change++
		case a.Delete():
			out.Destroy++
		case a.Replace():
			out.Add++
			out.Destroy++
		default:
			continue // no-op and read
		}
		acts := make([]string, 0, len(a))
		for _, x := range a {
			acts = append(acts, string(x))
		}
		out.Changes = append(out.Changes, Change{Address: rc.Address, Type: rc.Type, Actions: acts})
	}
	return out, nil
}

func (s *Server) listMachines(_ context.Context, _ Caller, _ NoIn) (MachineList, error) {
	ms := s.opts.Source.Machines()
	out := MachineList{Machines: make([]Machine, 0, len(ms))}
	for _, m := range ms {
		mm := Machine{MAC: m.MAC, Address: m.Address, Manufacturer: m.Manufacturer, Model: m.Model, CPU: m.CPU,
			Cores: m.Cores, MemoryGB: gb(m.MemoryBytes), Disks: []Disk{}}
		for _, d := range m.Disks {
			mm.Disks = append(mm.Disks, Disk{Path: d.DevPath, SizeGB: gb(d.Size), Model: d.Model, Transport: d.Transport})
		}
		out.Machines = append(out.Machines, mm)
	}
	return out, nil
}

// summaryOf is a view's line in list_clusters.
func summaryOf(v View) ClusterSummary {
	st := v.Status
	out := ClusterSummary{Name: v.Name, DisplayName: v.Name, Phase: string(st.Phase), Operation: st.Activity,
		NodesReady: st.NodesReady, NodesTotal: st.NodesTotal, Problem: st.Problem, Summary: st.Summary}
	if out.Phase == "" {
		out.Phase = string(tenant.PhaseAbsent)
	}
	if out.Operation == "" && st.Operation != nil {
		out.Operation = *st.Operation
	}
	if t := v.Spec; t != nil {
		out.DisplayName, out.Provider = t.Title(), string(t.Provider)
		if st.NodesTotal == 0 && st.NodesReady == 0 {
			out.NodesTotal = len(t.Nodes())
		}
	}
	if out.Summary == "" {
		out.Summary = tenant.Summary(st)
	}
	return out
}

// limits are the counts scale_workers accepts for a group: the role's
// bounds, and for metal the size of the machine pool.
func limits(t *tenant.Tenant, g *tenant.NodeGroup) (lo, hi int) {
	lo, hi = tenant.CountBounds(g.Role)
	if t.Provider == tenant.ProviderMetal {
		hi = min(hi, len(g.Machines))
	}
	return lo, hi
}

func gb(b uint64) float64 {
	return float64(b*10/(1<<30)) / 10 // one decimal, rounded down
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339)
}
