// Package openstack renders an OpenStack tenant for
// terraform-provider-openstack v3.4.0.
//
// Resources (names are stable: the tenant's fixed parts have fixed names,
// per-node parts are named after the node):
//
//	openstack_networking_secgroup_v2.cluster               security group "rezuscloud-<tenant>", every node
//	openstack_networking_secgroup_rule_v2.cluster-ipv4|6   ingress of everything from that group itself
//	openstack_networking_secgroup_v2.controlplane          security group "rezuscloud-<tenant>-controlplane",
//	                                                       control planes only
//	openstack_networking_secgroup_rule_v2.<port>-ipv4|6    its ingress from anywhere: TCP 50000 (talos-api),
//	                                                       6443 (kube-api)
//	openstack_networking_port_v2.<node>                    one port per node on the tenant's network, in the
//	                                                       cluster group (control planes also in controlplane)
//	openstack_networking_floatingip_v2.<node>              control planes only, when floating_ip_pool is set
//	openstack_networking_floatingip_associate_v2.<node>    binds it to the node's port (full stage)
//	openstack_compute_instance_v2.<node>                   boots from a volume made from the image
//	                                                       (volume_gb, default 20), user_data = machine config
//	data.openstack_networking_network_v2.network           when network is a name, not an id
//	data.openstack_images_image_v2.talos                   when image is a name, not an id (most recent)
//
// Only control planes are open to the outside: workers take traffic from
// the cluster's own group only (trustd, 50001, is reached from inside it),
// and rezuscloud reaches them through a control plane's Talos API.
//
// The network stage holds the security groups, their rules, the control
// planes' ports and floating IPs; the full stage adds the workers' ports, the
// floating IP associations and the instances. Instances ignore changes to
// user_data, image and block_device, so a new machine config or image (the
// talos package upgrades in place) never recreates a server. Every resource
// carries the tenant in its tags (and instances in metadata too).
//
// Outputs: endpoint_address (the first control plane's floating IP, or its
// fixed IP without a pool) in both stages; nodes in the full stage.
// Credentials reach the provider as OS_* environment variables; the region is
// tenant [openstack] region.
package openstack

import (
	"fmt"
	"regexp"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Provider source and version this renderer is written (and validated) for.
const (
	Source  = "terraform-provider-openstack/openstack"
	Version = "3.4.0"
)

// DefaultVolumeGB is the boot volume size of a group without volume_gb.
const DefaultVolumeGB = 20

// Renderer renders OpenStack tenants.
type Renderer struct{}

// Provider implements provider.Renderer.
func (Renderer) Provider() tenant.Provider { return tenant.ProviderOpenStack }

var reUUID = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

type rule struct {
	name string
	port int
}

// publicPorts are open to the outside on control planes only.
var publicPorts = []rule{{"talos-api", 50000}, {"kube-api", 6443}}

var ethertypes = []struct{ suffix, ethertype, anywhere string }{
	{"ipv4", "IPv4", "0.0.0.0/0"},
	{"ipv6", "IPv6", "::/0"},
}

// Render implements provider.Renderer.
func (Renderer) Render(in provider.Input) ([]byte, error) {
	nodes, stage, err := provider.Check(in, tenant.ProviderOpenStack)
	if err != nil {
		return nil, err
	}
	t := in.Tenant
	ost := t.OpenStack
	if ost == nil {
		return nil, fmt.Errorf("openstack: tenant %q has no [openstack] table", t.Name)
	}
	if ost.Network == "" {
		return nil, fmt.Errorf("openstack: tenant %q: [openstack] network is empty", t.Name)
	}
	if ost.Image == "" {
		return nil, fmt.Errorf("openstack: tenant %q: [openstack] image is empty", t.Name)
	}
	cp := t.ControlPlaneGroup()
	if cp == nil || cp.Count < 1 {
		return nil, fmt.Errorf("openstack: tenant %q has no control-plane node", t.Name)
	}
	for _, g := range t.NodeGroups {
		if g.Count > 0 && g.Flavor == "" {
			return nil, fmt.Errorf("openstack: tenant %q: node group %q has no flavor", t.Name, g.Name)
		}
		if g.VolumeGB < 0 {
			return nil, fmt.Errorf("openstack: tenant %q: node group %q: volume_gb %d is negative", t.Name, g.Name, g.VolumeGB)
		}
	}
	firstCP := tenant.NodeName(t.Name, cp.Name, 1)

	doc := provider.NewDoc()
	doc.RequiredProvider("openstack", Source, Version)
	pcfg := map[string]any{}
	if ost.Region != "" {
		pcfg["region"] = provider.Lit(ost.Region)
	}
	doc.Provider("openstack", pcfg)

	networkID := provider.Lit(ost.Network)
	if !reUUID.MatchString(ost.Network) {
		d := doc.Data("openstack_networking_network_v2", "network", map[string]any{"name": provider.Lit(ost.Network)})
		networkID = provider.Expr(d + ".id")
	}

	sg := doc.Resource("openstack_networking_secgroup_v2", "cluster", map[string]any{
		"name":        provider.Lit("rezuscloud-" + t.Name),
		"description": provider.Lit("rezuscloud tenant " + t.Name + ": all traffic inside the cluster"),
		"tags":        provider.TagList(t.Name, "", "", ""),
	})
	cpSG := doc.Resource("openstack_networking_secgroup_v2", "controlplane", map[string]any{
		"name":        provider.Lit("rezuscloud-" + t.Name + "-controlplane"),
		"description": provider.Lit("rezuscloud tenant " + t.Name + ": Talos and Kubernetes API of the control planes"),
		"tags":        provider.TagList(t.Name, "", "", string(tenant.RoleControlPlane)),
	})
	for _, e := range ethertypes {
		for _, r := range publicPorts {
			doc.Resource("openstack_networking_secgroup_rule_v2", r.name+"-"+e.suffix, map[string]any{
				"description":       fmt.Sprintf("%s (%d/tcp)", r.name, r.port),
				"direction":         "ingress",
				"ethertype":         e.ethertype,
				"protocol":          "tcp",
				"port_range_min":    r.port,
				"port_range_max":    r.port,
				"remote_ip_prefix":  e.anywhere,
				"security_group_id": provider.Expr(cpSG + ".id"),
			})
		}
		doc.Resource("openstack_networking_secgroup_rule_v2", "cluster-"+e.suffix, map[string]any{
			"description":       "all traffic between the cluster's nodes",
			"direction":         "ingress",
			"ethertype":         e.ethertype,
			"remote_group_id":   provider.Expr(sg + ".id"),
			"security_group_id": provider.Expr(sg + ".id"),
		})
	}

	imageID := provider.Lit(ost.Image)
	if stage == provider.StageFull && !reUUID.MatchString(ost.Image) {
		d := doc.Data("openstack_images_image_v2", "talos", map[string]any{
			"name":        provider.Lit(ost.Image),
			"most_recent": true,
		})
		imageID = provider.Expr(d + ".id")
	}

	outNodes := map[string]any{}
	var endpoint string
	for _, n := range nodes {
		isCP := n.Role == tenant.RoleControlPlane
		if stage == provider.StageNetwork && !isCP {
			continue
		}
		id := provider.Ident(n.Name)
		g := t.Group(n.Group)
		groups := []any{provider.Expr(sg + ".id")}
		if isCP {
			groups = append(groups, provider.Expr(cpSG+".id"))
		}
		port := doc.Resource("openstack_networking_port_v2", id, map[string]any{
			"name":               provider.Lit(n.Name),
			"network_id":         networkID,
			"admin_state_up":     true,
			"security_group_ids": groups,
			"tags":               provider.TagList(t.Name, n.Group, n.Name, string(n.Role)),
		})
		fixedIP := provider.Expr(port + ".all_fixed_ips[0]")
		address := fixedIP
		var fip string
		if isCP && ost.FloatingIPPool != "" {
			fip = doc.Resource("openstack_networking_floatingip_v2", id, map[string]any{
				"pool":        provider.Lit(ost.FloatingIPPool),
				"description": provider.Lit("rezuscloud " + n.Name),
				"tags":        provider.TagList(t.Name, n.Group, n.Name, string(n.Role)),
			})
			address = provider.Expr(fip + ".address")
		}
		if n.Name == firstCP {
			endpoint = address
		}
		if stage == provider.StageNetwork {
			continue
		}
		if fip != "" {
			doc.Resource("openstack_networking_floatingip_associate_v2", id, map[string]any{
				"floating_ip": provider.Expr(fip + ".address"),
				"port_id":     provider.Expr(port + ".id"),
			})
		}
		volume := g.VolumeGB
		if volume == 0 {
			volume = DefaultVolumeGB
		}
		inst := doc.Resource("openstack_compute_instance_v2", id, map[string]any{
			"name":         provider.Lit(n.Name),
			"flavor_name":  provider.Lit(g.Flavor),
			"user_data":    provider.Lit(string(in.MachineConfigs[n.Name])),
			"config_drive": true,
			"metadata":     provider.Labels(t.Name, n.Group, n.Name, string(n.Role)),
			// Nova tags are at most 60 characters: the tenant only; group,
			// node and role are in metadata.
			"tags":    provider.TagList(t.Name, "", "", ""),
			"network": []any{map[string]any{"port": provider.Expr(port + ".id")}},
			"block_device": []any{map[string]any{
				"uuid":                  imageID,
				"source_type":           "image",
				"destination_type":      "volume",
				"volume_size":           volume,
				"boot_index":            0,
				"delete_on_termination": true,
			}},
			"lifecycle": map[string]any{
				// A new machine config or image never recreates a server:
				// Talos applies configs and upgrades in place. block_device
				// also covers volume_gb: resizing would destroy the node.
				"ignore_changes": []any{"user_data", "image_id", "image_name", "block_device"},
			},
		})
		outNodes[n.Name] = provider.NodeOutputValue(address, fixedIP, provider.Expr(inst+".id"))
	}
	if endpoint == "" {
		return nil, fmt.Errorf("openstack: tenant %q: first control plane %s not among the nodes", t.Name, firstCP)
	}
	doc.Output(provider.OutputEndpoint, "the address the cluster endpoint names (first control plane)", endpoint)
	if stage == provider.StageFull {
		doc.Output(provider.OutputNodes, "node name -> address, private_address, id", outNodes)
	}
	return doc.Encode()
}
