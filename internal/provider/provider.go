// Package provider turns a tenant and its machine configs into one OpenTofu
// JSON configuration document (main.tf.json), and maps `tofu output -json`
// back to the tenant's nodes.
//
// One renderer per platform lives in a sub-package (metal, oci, openstack);
// package platform picks the one a tenant needs.
//
// What every rendered document guarantees:
//
//   - It is deterministic: maps are encoded with sorted keys, every resource
//     has a stable name derived from the tenant and node names (never from a
//     count index), so an unchanged tenant renders identical bytes and plans
//     no changes, and scaling a group adds or removes only that node's
//     resources.
//   - It holds no terraform backend, no encryption block and no credentials:
//     the tofu runner adds state backend and encryption through the
//     environment / CLI, and cloud credentials reach the providers through
//     their own environment variables (OS_* for OpenStack, OCI_* or TF_VAR_*
//     for OCI).
//   - It declares everything it references: no variables at all (values are
//     literals, escaped so "${" and "%{" in a machine config stay literal
//     text), and only resources and data sources it declares.
//   - It declares terraform.required_providers for every provider it uses
//     (metal uses only the built-in terraform_data).
//
// Output contract (read back with ParseNodes and EndpointAddress):
//
//	nodes            map: node name -> {address, private_address, id}; full stage only
//	endpoint_address string: the address the cluster endpoint is to name, both
//	                 stages (OpenStack always; OCI when the tenant has no explicit
//	                 endpoint); metal has none
package provider

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Stage selects which part of a tenant a render holds.
type Stage string

// Stages. See docs/design.md §5 "render in two steps".
const (
	// StageFull is the whole tenant: the network part plus one machine per
	// node, each carrying its machine config. The zero Stage means StageFull.
	StageFull Stage = "full"
	// StageNetwork is the first step for a cloud tenant without an explicit
	// endpoint: only what the endpoint needs (security group and rules, the
	// control planes' ports, a floating / reserved public IP), with the
	// endpoint_address output. Machine configs are not needed and ignored.
	// Every resource of this stage keeps its name in StageFull, so applying
	// the full document afterwards against the same state only adds to it.
	//
	// Apply it only to bring up a new tenant: applied to a state that already
	// holds machines, it would plan to destroy them. Once the endpoint exists,
	// always render StageFull (its outputs carry endpoint_address too).
	StageNetwork Stage = "network"
)

// Input is what a renderer needs.
type Input struct {
	// Tenant is the validated tenant.
	Tenant *tenant.Tenant
	// MachineConfigs holds the Talos machine config of every node, keyed by
	// tenant.Node.Name from Tenant.Nodes(). StageFull needs exactly one
	// non-empty config per declared node; StageNetwork ignores it.
	MachineConfigs map[string][]byte
	// Stage is StageFull (or "") or StageNetwork.
	Stage Stage
}

// NodeOutput is one node as `tofu output -json` reports it.
type NodeOutput struct {
	// Name is tenant.Node.Name.
	Name string `json:"name"`
	// Address is where rezuscloud reaches the node: the public (floating /
	// reserved) address of a cloud node when it has one, else its private
	// address; a metal machine's address.
	Address string `json:"address"`
	// PrivateAddress is the node's address inside the cluster network (the
	// Talos node name to proxy to through a control plane); the same as
	// Address for metal.
	PrivateAddress string `json:"private_address"`
	// ID is the machine's resource id (instance id, terraform_data id).
	ID string `json:"id"`
}

// Renderer renders one platform.
type Renderer interface {
	// Provider is the platform this renderer serves.
	Provider() tenant.Provider
	// Render returns the .tf.json document for in. Every renderer shares
	// the output contract (ParseNodes, EndpointAddress).
	Render(in Input) ([]byte, error)
}

// NeedsNetworkStage reports whether a tenant needs the two-step render: a
// cloud tenant without an explicit endpoint. Metal tenants and tenants with
// an endpoint render StageFull directly.
func NeedsNetworkStage(t *tenant.Tenant) bool {
	return t != nil && t.Endpoint == "" && t.Provider != tenant.ProviderMetal
}

// Check validates what every renderer needs and returns the tenant's nodes:
// a tenant of platform p, a known stage, and for StageFull exactly one
// non-empty machine config per declared node.
func Check(in Input, p tenant.Provider) ([]tenant.Node, Stage, error) {
	t := in.Tenant
	if t == nil {
		return nil, "", fmt.Errorf("%s: no tenant given", p)
	}
	if t.Provider != p {
		return nil, "", fmt.Errorf("%s: tenant %q has provider %q", p, t.Name, t.Provider)
	}
	if t.Name == "" {
		return nil, "", fmt.Errorf("%s: tenant has no name", p)
	}
	stage := in.Stage
	switch stage {
	case "":
		stage = StageFull
	case StageFull, StageNetwork:
	default:
		return nil, "", fmt.Errorf("%s: tenant %q: unknown stage %q (want %q or %q)", p, t.Name, stage, StageFull, StageNetwork)
	}
	nodes := t.Nodes()
	if stage != StageFull {
		return nodes, stage, nil
	}
	declared := make(map[string]bool, len(nodes))
	var missing []string
	for _, n := range nodes {
		declared[n.Name] = true
		if len(in.MachineConfigs[n.Name]) == 0 {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("%s: tenant %q: no machine config for node(s) %s", p, t.Name, strings.Join(missing, ", "))
	}
	var extra []string
	for name := range in.MachineConfigs {
		if !declared[name] {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, "", fmt.Errorf("%s: tenant %q: machine config given for undeclared node(s) %s", p, t.Name, strings.Join(extra, ", "))
	}
	return nodes, stage, nil
}
