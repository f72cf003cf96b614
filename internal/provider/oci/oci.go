// Package oci renders an Oracle Cloud (OCI) tenant for the oracle/oci
// provider (>= 6, < 8).
//
// The provider cannot be built here, so this renderer is checked by shape
// (golden files and structural tests) against the provider's schema:
// shape_config and source_details are single nested blocks,
// assign_public_ip and boot_volume_size_in_gbs are strings, ocpus and
// memory_in_gbs are numbers.
//
// Resources (stable names; per-node parts are named after the node):
//
//	data.oci_core_subnet.nodes                                   the tenant's subnet (for its VCN)
//	oci_core_network_security_group.cluster                      NSG "rezuscloud-<tenant>" in that VCN, every node
//	oci_core_network_security_group_security_rule.cluster|egress ingress of all traffic from that NSG itself;
//	                                                             egress all
//	oci_core_network_security_group.controlplane                 NSG "rezuscloud-<tenant>-controlplane", control
//	                                                             planes only
//	oci_core_network_security_group_security_rule.<name>         its ingress from anywhere: TCP 50000
//	                                                             (talos-api), 6443 (kube-api)
//	oci_core_public_ip.endpoint                                  reserved public IP of the endpoint, when the tenant
//	                                                             has no explicit endpoint; assigned (full stage) to the
//	                                                             first control plane's private IP, found through
//	data.oci_core_private_ips.endpoint
//	data.oci_identity_availability_domains.ads                   when availability_domain is empty: node i of a group
//	                                                             runs in AD (i-1) mod number of ADs
//	oci_core_instance.<node>                                     shape (default VM.Standard.A1.Flex, the free tier),
//	                                                             shape_config for Flex shapes (ocpus default 1,
//	                                                             memory_gb default 6), image and boot volume
//	                                                             (boot_volume_gb, default and minimum 50), VNIC in the
//	                                                             subnet and NSG, metadata.user_data = base64 config
//
// Control planes get a public IP (the first one the reserved endpoint IP,
// the others an ephemeral one) and the controlplane NSG; workers only a
// private one and the cluster NSG, so they take traffic from the cluster
// only (trustd, 50001, is reached from inside it): rezuscloud reaches them
// through a control plane's Talos API. Instances ignore changes
// to metadata.user_data (the provider would otherwise replace the instance)
// and to the image. Every resource carries freeform_tags with the tenant
// (and group, node, role).
//
// The network stage holds the NSG, its rules and the reserved IP; the full
// stage adds the instances and the IP assignment. Outputs: endpoint_address
// (the reserved IP, when rezuscloud manages the endpoint) in both stages;
// nodes in the full stage. Credentials reach the provider through its
// environment (OCI_TENANCY_OCID, OCI_USER_OCID, OCI_FINGERPRINT,
// OCI_PRIVATE_KEY, OCI_REGION or the TF_VAR_ forms); the region is tenant
// [oci] region when set.
package oci

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Provider source and version constraint.
const (
	Source  = "oracle/oci"
	Version = ">= 6.0.0, < 8.0.0"
)

// Defaults for node groups that leave sizing out.
const (
	DefaultShape        = "VM.Standard.A1.Flex"
	DefaultOCPUs        = 1
	DefaultMemoryGB     = 6
	DefaultBootVolumeGB = 50
	MinBootVolumeGB     = 50
)

// Renderer renders OCI tenants.
type Renderer struct{}

// Provider implements provider.Renderer.
func (Renderer) Provider() tenant.Provider { return tenant.ProviderOCI }

// IsFlex reports whether a shape takes a shape_config.
func IsFlex(shape string) bool { return strings.HasSuffix(shape, ".Flex") }

type sizing struct {
	shape          string
	ocpus, memory  float64
	bootVolumeGB   int
	hasShapeConfig bool
}

func groupSizing(t *tenant.Tenant, g *tenant.NodeGroup) (sizing, error) {
	s := sizing{shape: g.Shape, ocpus: g.OCPUs, memory: g.MemoryGB, bootVolumeGB: g.BootVolumeGB}
	if s.shape == "" {
		s.shape = DefaultShape
	}
	if s.ocpus < 0 || s.memory < 0 || s.bootVolumeGB < 0 {
		return s, fmt.Errorf("oci: tenant %q: node group %q: ocpus, memory_gb and boot_volume_gb must not be negative", t.Name, g.Name)
	}
	if IsFlex(s.shape) {
		s.hasShapeConfig = true
		if s.ocpus == 0 {
			s.ocpus = DefaultOCPUs
		}
		if s.memory == 0 {
			s.memory = DefaultMemoryGB
		}
	} else if s.ocpus != 0 || s.memory != 0 {
		return s, fmt.Errorf("oci: tenant %q: node group %q: ocpus and memory_gb only apply to Flex shapes, not %q", t.Name, g.Name, s.shape)
	}
	if s.bootVolumeGB == 0 {
		s.bootVolumeGB = DefaultBootVolumeGB
	}
	if s.bootVolumeGB < MinBootVolumeGB {
		return s, fmt.Errorf("oci: tenant %q: node group %q: boot_volume_gb %d is below OCI's minimum of %d", t.Name, g.Name, s.bootVolumeGB, MinBootVolumeGB)
	}
	return s, nil
}

type rule struct {
	name string
	port int
}

// publicPorts are open to the outside on control planes only.
var publicPorts = []rule{{"talos-api", 50000}, {"kube-api", 6443}}

// Render implements provider.Renderer.
func (Renderer) Render(in provider.Input) ([]byte, error) {
	nodes, stage, err := provider.Check(in, tenant.ProviderOCI)
	if err != nil {
		return nil, err
	}
	t := in.Tenant
	c := t.OCI
	if c == nil {
		return nil, fmt.Errorf("oci: tenant %q has no [oci] table", t.Name)
	}
	for _, f := range []struct{ name, value string }{
		{"compartment_ocid", c.CompartmentOCID}, {"subnet_ocid", c.SubnetOCID}, {"image_ocid", c.ImageOCID},
	} {
		if f.value == "" {
			return nil, fmt.Errorf("oci: tenant %q: [oci] %s is empty", t.Name, f.name)
		}
	}
	cp := t.ControlPlaneGroup()
	if cp == nil || cp.Count < 1 {
		return nil, fmt.Errorf("oci: tenant %q has no control-plane node", t.Name)
	}
	sizes := map[string]sizing{}
	for i := range t.NodeGroups {
		g := &t.NodeGroups[i]
		s, err := groupSizing(t, g)
		if err != nil {
			return nil, err
		}
		sizes[g.Name] = s
	}
	firstCP := tenant.NodeName(t.Name, cp.Name, 1)
	managedEndpoint := t.Endpoint == ""
	compartment := provider.Lit(c.CompartmentOCID)
	subnet := provider.Lit(c.SubnetOCID)

	doc := provider.NewDoc()
	doc.RequiredProvider("oci", Source, Version)
	pcfg := map[string]any{}
	if c.Region != "" {
		pcfg["region"] = provider.Lit(c.Region)
	}
	doc.Provider("oci", pcfg)

	subnetData := doc.Data("oci_core_subnet", "nodes", map[string]any{"subnet_id": subnet})
	nsg := doc.Resource("oci_core_network_security_group", "cluster", map[string]any{
		"compartment_id": compartment,
		"vcn_id":         provider.Expr(subnetData + ".vcn_id"),
		"display_name":   provider.Lit("rezuscloud-" + t.Name),
		"freeform_tags":  provider.Labels(t.Name, "", "", ""),
	})
	nsgID := provider.Expr(nsg + ".id")
	cpNSG := doc.Resource("oci_core_network_security_group", "controlplane", map[string]any{
		"compartment_id": compartment,
		"vcn_id":         provider.Expr(subnetData + ".vcn_id"),
		"display_name":   provider.Lit("rezuscloud-" + t.Name + "-controlplane"),
		"freeform_tags":  provider.Labels(t.Name, "", "", string(tenant.RoleControlPlane)),
	})
	cpNSGID := provider.Expr(cpNSG + ".id")
	const ruleType = "oci_core_network_security_group_security_rule"
	for _, r := range publicPorts {
		doc.Resource(ruleType, r.name, map[string]any{
			"network_security_group_id": cpNSGID,
			"description":               fmt.Sprintf("%s (%d/tcp)", r.name, r.port),
			"direction":                 "INGRESS",
			"protocol":                  "6",
			"source":                    "0.0.0.0/0",
			"source_type":               "CIDR_BLOCK",
			"tcp_options": map[string]any{
				"destination_port_range": map[string]any{"min": r.port, "max": r.port},
			},
		})
	}
	doc.Resource(ruleType, "cluster", map[string]any{
		"network_security_group_id": nsgID,
		"description":               "all traffic between the cluster's nodes",
		"direction":                 "INGRESS",
		"protocol":                  "all",
		"source":                    nsgID,
		"source_type":               "NETWORK_SECURITY_GROUP",
	})
	doc.Resource(ruleType, "egress", map[string]any{
		"network_security_group_id": nsgID,
		"description":               "all outbound traffic",
		"direction":                 "EGRESS",
		"protocol":                  "all",
		"destination":               "0.0.0.0/0",
		"destination_type":          "CIDR_BLOCK",
	})

	var endpointIP string
	publicIP := map[string]any{
		"compartment_id": compartment,
		"lifetime":       "RESERVED",
		"display_name":   provider.Lit("rezuscloud-" + t.Name + "-endpoint"),
		"freeform_tags":  provider.Labels(t.Name, "", "", ""),
	}
	if managedEndpoint {
		endpointIP = provider.Expr(doc.Resource("oci_core_public_ip", "endpoint", publicIP) + ".ip_address")
		doc.Output(provider.OutputEndpoint, "the address the cluster endpoint names (reserved public IP)", endpointIP)
	}
	if stage == provider.StageNetwork {
		if !managedEndpoint {
			return nil, fmt.Errorf("oci: tenant %q has an explicit endpoint: it needs no network stage", t.Name)
		}
		return doc.Encode()
	}

	ads := ""
	if c.AvailabilityDomain == "" {
		ads = doc.Data("oci_identity_availability_domains", "ads", map[string]any{"compartment_id": compartment}) + ".availability_domains"
	}
	outNodes := map[string]any{}
	for _, n := range nodes {
		s := sizes[n.Group]
		id := provider.Ident(n.Name)
		ad := provider.Lit(c.AvailabilityDomain)
		if ads != "" {
			ad = provider.Expr(fmt.Sprintf("%s[%d %% length(%s)].name", ads, n.Index-1, ads))
		}
		isCP := n.Role == tenant.RoleControlPlane
		reserved := managedEndpoint && n.Name == firstCP
		labels := provider.Labels(t.Name, n.Group, n.Name, string(n.Role))
		nsgs := []any{nsgID}
		if isCP {
			nsgs = append(nsgs, cpNSGID)
		}
		body := map[string]any{
			"availability_domain": ad,
			"compartment_id":      compartment,
			"display_name":        provider.Lit(n.Name),
			"shape":               provider.Lit(s.shape),
			"source_details": map[string]any{
				"source_type":             "image",
				"source_id":               provider.Lit(c.ImageOCID),
				"boot_volume_size_in_gbs": strconv.Itoa(s.bootVolumeGB),
			},
			"create_vnic_details": map[string]any{
				"subnet_id":        subnet,
				"assign_public_ip": strconv.FormatBool(isCP && !reserved),
				"nsg_ids":          nsgs,
				"display_name":     provider.Lit(n.Name),
				"freeform_tags":    labels,
			},
			"metadata": map[string]any{
				"user_data": base64.StdEncoding.EncodeToString(in.MachineConfigs[n.Name]),
			},
			"freeform_tags": labels,
			"lifecycle": map[string]any{
				// A changed user_data makes the provider replace the
				// instance; Talos applies new configs and images in place.
				"ignore_changes": []any{`metadata["user_data"]`, "source_details[0].source_id"},
			},
		}
		if s.hasShapeConfig {
			body["shape_config"] = map[string]any{"ocpus": s.ocpus, "memory_in_gbs": s.memory}
		}
		inst := doc.Resource("oci_core_instance", id, body)
		private := provider.Expr(inst + ".private_ip")
		address := private
		switch {
		case reserved:
			address = endpointIP
			pips := doc.Data("oci_core_private_ips", "endpoint", map[string]any{
				"subnet_id":  subnet,
				"ip_address": private,
			})
			publicIP["private_ip_id"] = provider.Expr(pips + ".private_ips[0].id")
		case isCP:
			address = provider.Expr(inst + ".public_ip")
		}
		outNodes[n.Name] = provider.NodeOutputValue(address, private, provider.Expr(inst+".id"))
	}
	doc.Output(provider.OutputNodes, "node name -> address, private_address, id", outNodes)
	return doc.Encode()
}
