// Package metal renders a bare-metal tenant: machines that already exist in
// the house and get their Talos config through the maintenance API (the
// talos package does that), not through tofu.
//
// The document holds one built-in terraform_data resource per selected
// machine, named after its node, so the declared machines live in state like
// any cloud resource and a plan shows what a change adds, changes or removes:
//
//	terraform_data.<node>  input: tenant, group, node, role, address, install_disk, mac,
//	                              config_sha256 (sha256 of the machine config: never the
//	                              config itself, so state carries no secret)
//	                       triggers_replace: the machine address (another machine is
//	                              another resource)
//
// A changed machine config changes config_sha256, so it plans as an in-place
// update. Outputs: nodes (node name -> address, private_address, id). Metal
// has no network stage: its endpoint is always explicit.
package metal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Renderer renders metal tenants.
type Renderer struct{}

// Provider implements provider.Renderer.
func (Renderer) Provider() tenant.Provider { return tenant.ProviderMetal }

// Render implements provider.Renderer.
func (Renderer) Render(in provider.Input) ([]byte, error) {
	nodes, stage, err := provider.Check(in, tenant.ProviderMetal)
	if err != nil {
		return nil, err
	}
	t := in.Tenant
	if stage == provider.StageNetwork {
		return nil, fmt.Errorf("metal: tenant %q: metal tenants have no network stage (their endpoint is explicit); render %q", t.Name, provider.StageFull)
	}
	doc := provider.NewDoc()
	outNodes := map[string]any{}
	for _, n := range nodes {
		m := n.Machine
		if m == nil {
			g := t.Group(n.Group)
			have, count := 0, 0
			if g != nil {
				have, count = len(g.Machines), g.Count
			}
			return nil, fmt.Errorf("metal: tenant %q: node %s has no machine: group %q has %d machine(s) for count %d", t.Name, n.Name, n.Group, have, count)
		}
		if m.Address == "" {
			return nil, fmt.Errorf("metal: tenant %q: node %s: machine %d of group %q has no address", t.Name, n.Name, n.Index, n.Group)
		}
		sum := sha256.Sum256(in.MachineConfigs[n.Name])
		input := map[string]any{
			"tenant":        provider.Lit(t.Name),
			"group":         provider.Lit(n.Group),
			"node":          provider.Lit(n.Name),
			"role":          string(n.Role),
			"address":       provider.Lit(m.Address),
			"install_disk":  provider.Lit(m.InstallDisk),
			"mac":           provider.Lit(m.MAC),
			"config_sha256": hex.EncodeToString(sum[:]),
		}
		addr := doc.Resource("terraform_data", provider.Ident(n.Name), map[string]any{
			"input":            input,
			"triggers_replace": []any{provider.Lit(m.Address)},
		})
		outNodes[n.Name] = provider.NodeOutputValue(
			provider.Expr(addr+".output.address"),
			provider.Expr(addr+".output.address"),
			provider.Expr(addr+".id"),
		)
	}
	doc.Output(provider.OutputNodes, "node name -> address, private_address, id", outNodes)
	return doc.Encode()
}
