package oci_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/oci"
	"github.com/rezuscloud/rezuscloud/internal/provider/providertest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

var update = flag.Bool("update", false, "rewrite the testdata golden files")

func lab(workers int) *tenant.Tenant {
	return &tenant.Tenant{
		Name: "lab", Provider: tenant.ProviderOCI,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		OCI: &tenant.OCI{
			CompartmentOCID: "ocid1.compartment.oc1..aaaa",
			Region:          "eu-frankfurt-1",
			SubnetOCID:      "ocid1.subnet.oc1.eu-frankfurt-1.aaaa",
			ImageOCID:       "ocid1.image.oc1.eu-frankfurt-1.aaaa",
		},
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Shape: "VM.Standard.A1.Flex", OCPUs: 2, MemoryGB: 12, BootVolumeGB: 60},
			{Name: "workers", Role: tenant.RoleWorker, Count: workers},
		},
	}
}

func configs(t *tenant.Tenant) map[string][]byte {
	m := map[string][]byte{}
	for _, n := range t.Nodes() {
		m[n.Name] = []byte(fmt.Sprintf("version: v1alpha1\nmachine:\n  type: %s\n# ${not.a.reference}\n", n.Role))
	}
	return m
}

func render(t testing.TB, ten *tenant.Tenant, stage provider.Stage) []byte {
	t.Helper()
	in := provider.Input{Tenant: ten, Stage: stage}
	if stage != provider.StageNetwork {
		in.MachineConfigs = configs(ten)
	}
	doc, err := oci.Renderer{}.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// explicit is a tenant with its own endpoint, one AD and a fixed shape.
func explicit() *tenant.Tenant {
	ten := lab(1)
	ten.Endpoint = "https://cluster.example.net:6443"
	ten.OCI.AvailabilityDomain = "Uocm:EU-FRANKFURT-1-AD-1"
	ten.NodeGroups[0].Count = 3
	ten.NodeGroups[1].Shape = "VM.Standard2.1"
	return ten
}

func TestGolden(t *testing.T) {
	providertest.Golden(t, *update, "oci-network.tf.json", render(t, lab(2), provider.StageNetwork))
	providertest.Golden(t, *update, "oci-full.tf.json", render(t, lab(2), provider.StageFull))
	providertest.Golden(t, *update, "oci-explicit-full.tf.json", render(t, explicit(), provider.StageFull))
}

func TestDeterministic(t *testing.T) {
	a := render(t, lab(2), "")
	for i := 0; i < 20; i++ {
		if b := render(t, lab(2), ""); !bytes.Equal(a, b) {
			t.Fatal("two renders of the same tenant differ")
		}
	}
}

// instance is oci_core_instance in the shape the provider's schema takes:
// single nested blocks as objects, assign_public_ip and
// boot_volume_size_in_gbs as strings, ocpus and memory_in_gbs as numbers.
type instance struct {
	AvailabilityDomain string            `json:"availability_domain"`
	CompartmentID      string            `json:"compartment_id"`
	DisplayName        string            `json:"display_name"`
	Shape              string            `json:"shape"`
	FreeformTags       map[string]string `json:"freeform_tags"`
	Metadata           map[string]string `json:"metadata"`
	ShapeConfig        *struct {
		OCPUs       float64 `json:"ocpus"`
		MemoryInGBs float64 `json:"memory_in_gbs"`
	} `json:"shape_config"`
	SourceDetails struct {
		SourceType          string `json:"source_type"`
		SourceID            string `json:"source_id"`
		BootVolumeSizeInGBs string `json:"boot_volume_size_in_gbs"`
	} `json:"source_details"`
	CreateVnicDetails struct {
		SubnetID       string            `json:"subnet_id"`
		AssignPublicIP string            `json:"assign_public_ip"`
		NsgIDs         []string          `json:"nsg_ids"`
		FreeformTags   map[string]string `json:"freeform_tags"`
	} `json:"create_vnic_details"`
	Lifecycle struct {
		IgnoreChanges []string `json:"ignore_changes"`
	} `json:"lifecycle"`
}

type document struct {
	Terraform struct {
		RequiredProviders map[string]struct {
			Source  string `json:"source"`
			Version string `json:"version"`
		} `json:"required_providers"`
	} `json:"terraform"`
	Provider map[string]map[string]string `json:"provider"`
	Resource struct {
		Instances map[string]instance `json:"oci_core_instance"`
		PublicIP  map[string]struct {
			CompartmentID string            `json:"compartment_id"`
			Lifetime      string            `json:"lifetime"`
			PrivateIPID   string            `json:"private_ip_id"`
			FreeformTags  map[string]string `json:"freeform_tags"`
		} `json:"oci_core_public_ip"`
		NSG   map[string]map[string]any `json:"oci_core_network_security_group"`
		Rules map[string]struct {
			NSGID      string `json:"network_security_group_id"`
			Direction  string `json:"direction"`
			Protocol   string `json:"protocol"`
			Source     string `json:"source"`
			SourceType string `json:"source_type"`
			TCPOptions *struct {
				DestinationPortRange struct {
					Min int `json:"min"`
					Max int `json:"max"`
				} `json:"destination_port_range"`
			} `json:"tcp_options"`
		} `json:"oci_core_network_security_group_security_rule"`
	} `json:"resource"`
	Data   map[string]map[string]map[string]any `json:"data"`
	Output map[string]struct {
		Value any `json:"value"`
	} `json:"output"`
}

func decode(t *testing.T, doc []byte) document {
	t.Helper()
	var d document
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("the document does not have the expected shape: %v", err)
	}
	return d
}

func TestShape(t *testing.T) {
	ten := lab(2)
	raw := render(t, ten, provider.StageFull)
	if err := provider.CheckDocument(raw); err != nil {
		t.Fatal(err)
	}
	d := decode(t, raw)
	if rp := d.Terraform.RequiredProviders["oci"]; rp.Source != oci.Source || rp.Version == "" {
		t.Errorf("required_providers.oci = %+v", rp)
	}
	if d.Provider["oci"]["region"] != "eu-frankfurt-1" {
		t.Errorf("provider.oci = %v", d.Provider["oci"])
	}
	if len(d.Resource.Instances) != 3 {
		t.Fatalf("%d instances, want 3", len(d.Resource.Instances))
	}
	cp := d.Resource.Instances["lab-cp-1"]
	if cp.Shape != "VM.Standard.A1.Flex" || cp.ShapeConfig == nil || cp.ShapeConfig.OCPUs != 2 || cp.ShapeConfig.MemoryInGBs != 12 {
		t.Errorf("cp shape %q config %+v", cp.Shape, cp.ShapeConfig)
	}
	if cp.SourceDetails.SourceType != "image" || cp.SourceDetails.SourceID != ten.OCI.ImageOCID || cp.SourceDetails.BootVolumeSizeInGBs != "60" {
		t.Errorf("cp source_details %+v", cp.SourceDetails)
	}
	w := d.Resource.Instances["lab-workers-2"]
	if w.Shape != oci.DefaultShape || w.ShapeConfig.OCPUs != oci.DefaultOCPUs || w.ShapeConfig.MemoryInGBs != oci.DefaultMemoryGB || w.SourceDetails.BootVolumeSizeInGBs != "50" {
		t.Errorf("worker defaults: %+v %+v", w.ShapeConfig, w.SourceDetails)
	}
	ud, err := base64.StdEncoding.DecodeString(cp.Metadata["user_data"])
	if err != nil || !bytes.Equal(ud, configs(ten)["lab-cp-1"]) {
		t.Errorf("metadata.user_data is not the base64 machine config: %v", err)
	}
	if !slices.Contains(cp.Lifecycle.IgnoreChanges, `metadata["user_data"]`) {
		t.Errorf("ignore_changes %v", cp.Lifecycle.IgnoreChanges)
	}
	vnic := cp.CreateVnicDetails
	if vnic.SubnetID != ten.OCI.SubnetOCID || !reflect.DeepEqual(vnic.NsgIDs, []string{"${oci_core_network_security_group.cluster.id}", "${oci_core_network_security_group.controlplane.id}"}) {
		t.Errorf("cp vnic %+v", vnic)
	}
	// The first control plane gets the reserved endpoint IP instead of an
	// ephemeral one; workers stay private.
	if vnic.AssignPublicIP != "false" || w.CreateVnicDetails.AssignPublicIP != "false" {
		t.Errorf("assign_public_ip: cp %q worker %q", vnic.AssignPublicIP, w.CreateVnicDetails.AssignPublicIP)
	}
	for name, in := range d.Resource.Instances {
		if in.FreeformTags["rezuscloud_tenant"] != "lab" || in.FreeformTags["rezuscloud_node"] != name || in.CreateVnicDetails.FreeformTags["rezuscloud_tenant"] != "lab" {
			t.Errorf("%s: freeform_tags %v", name, in.FreeformTags)
		}
		if in.CompartmentID != ten.OCI.CompartmentOCID {
			t.Errorf("%s: compartment %q", name, in.CompartmentID)
		}
	}
	// ADs spread through the data source, index modulo the AD count, per group.
	const ads = "data.oci_identity_availability_domains.ads.availability_domains"
	for name, idx := range map[string]int{"lab-cp-1": 0, "lab-workers-1": 0, "lab-workers-2": 1} {
		want := fmt.Sprintf("${%s[%d %% length(%s)].name}", ads, idx, ads)
		if got := d.Resource.Instances[name].AvailabilityDomain; got != want {
			t.Errorf("%s: availability_domain %q, want %q", name, got, want)
		}
	}
	ip := d.Resource.PublicIP["endpoint"]
	if ip.Lifetime != "RESERVED" || ip.PrivateIPID != "${data.oci_core_private_ips.endpoint.private_ips[0].id}" || ip.FreeformTags["rezuscloud_tenant"] != "lab" {
		t.Errorf("endpoint public IP %+v", ip)
	}
	if got := d.Data["oci_core_private_ips"]["endpoint"]["ip_address"]; got != "${oci_core_instance.lab-cp-1.private_ip}" {
		t.Errorf("private IP lookup %v", got)
	}
	if got := d.Output[provider.OutputEndpoint].Value; got != "${oci_core_public_ip.endpoint.ip_address}" {
		t.Errorf("endpoint_address = %v", got)
	}
	nodes := d.Output[provider.OutputNodes].Value.(map[string]any)
	if len(nodes) != 3 || nodes["lab-cp-1"].(map[string]any)["address"] != "${oci_core_public_ip.endpoint.ip_address}" ||
		nodes["lab-workers-1"].(map[string]any)["address"] != "${oci_core_instance.lab-workers-1.private_ip}" {
		t.Errorf("nodes output %v", nodes)
	}
}

func TestSecurityRules(t *testing.T) {
	d := decode(t, render(t, lab(1), provider.StageNetwork))
	ports := map[int]bool{}
	for name, r := range d.Resource.Rules {
		// What is open to the outside is on the control planes' NSG only.
		wantNSG := "${oci_core_network_security_group.cluster.id}"
		if r.TCPOptions != nil || r.SourceType == "CIDR_BLOCK" {
			wantNSG = "${oci_core_network_security_group.controlplane.id}"
		}
		if r.NSGID != wantNSG {
			t.Errorf("%s: nsg %q, want %q", name, r.NSGID, wantNSG)
		}
		if r.TCPOptions != nil {
			if r.Direction != "INGRESS" || r.Protocol != "6" || r.SourceType != "CIDR_BLOCK" || r.TCPOptions.DestinationPortRange.Min != r.TCPOptions.DestinationPortRange.Max {
				t.Errorf("%s: %+v", name, r)
			}
			ports[r.TCPOptions.DestinationPortRange.Min] = true
		}
	}
	if !reflect.DeepEqual(ports, map[int]bool{50000: true, 6443: true}) {
		t.Errorf("public ports %v", ports)
	}
	c := d.Resource.Rules["cluster"]
	if c.Direction != "INGRESS" || c.Protocol != "all" || c.SourceType != "NETWORK_SECURITY_GROUP" || c.Source != "${oci_core_network_security_group.cluster.id}" {
		t.Errorf("cluster rule %+v", c)
	}
	if e := d.Resource.Rules["egress"]; e.Direction != "EGRESS" || e.Protocol != "all" {
		t.Errorf("egress rule %+v", e)
	}
	for _, name := range []string{"cluster", "controlplane"} {
		if nsg := d.Resource.NSG[name]; nsg["vcn_id"] != "${data.oci_core_subnet.nodes.vcn_id}" {
			t.Errorf("nsg %s: %v", name, nsg)
		}
	}
	if len(d.Resource.NSG) != 2 {
		t.Errorf("%d NSGs, want cluster and controlplane", len(d.Resource.NSG))
	}
}

// TestOnlyControlPlanesArePublic: control planes' VNICs are in both NSGs,
// workers' in the cluster's own NSG only.
func TestOnlyControlPlanesArePublic(t *testing.T) {
	d := decode(t, render(t, lab(2), provider.StageFull))
	cluster, cp := "${oci_core_network_security_group.cluster.id}", "${oci_core_network_security_group.controlplane.id}"
	want := map[string][]string{"lab-cp-1": {cluster, cp}, "lab-workers-1": {cluster}, "lab-workers-2": {cluster}}
	if len(d.Resource.Instances) != len(want) {
		t.Errorf("%d instances, want %d", len(d.Resource.Instances), len(want))
	}
	for node, nsgs := range want {
		if got := d.Resource.Instances[node].CreateVnicDetails.NsgIDs; !reflect.DeepEqual(got, nsgs) {
			t.Errorf("%s: nsg_ids %v, want %v", node, got, nsgs)
		}
	}
}

func TestStages(t *testing.T) {
	netDoc := render(t, lab(2), provider.StageNetwork)
	if err := provider.CheckDocument(netDoc); err != nil {
		t.Fatal(err)
	}
	net, _ := provider.Addresses(netDoc)
	full, _ := provider.Addresses(render(t, lab(2), provider.StageFull))
	for addr, body := range net {
		if strings.HasPrefix(addr, "resource.") || strings.HasPrefix(addr, "data.") {
			f, ok := full[addr]
			if !ok {
				t.Errorf("%s is missing from the full stage", addr)
			}
			// The reserved IP gains its assignment in the full stage; the
			// rest is unchanged.
			if addr != "resource.oci_core_public_ip.endpoint" && f != body {
				t.Errorf("%s differs between the stages", addr)
			}
		}
	}
	for addr := range net {
		if strings.Contains(addr, "oci_core_instance") || addr == "output.nodes" {
			t.Errorf("network stage holds %s", addr)
		}
	}
	if _, ok := net["output.endpoint_address"]; !ok {
		t.Error("network stage has no endpoint_address")
	}
}

func TestExplicitEndpoint(t *testing.T) {
	ten := explicit()
	raw := render(t, ten, provider.StageFull)
	if err := provider.CheckDocument(raw); err != nil {
		t.Fatal(err)
	}
	d := decode(t, raw)
	if len(d.Resource.PublicIP) != 0 || d.Data["oci_core_private_ips"] != nil || d.Data["oci_identity_availability_domains"] != nil {
		t.Error("explicit endpoint and AD: no reserved IP, private IP or AD lookup wanted")
	}
	if _, ok := d.Output[provider.OutputEndpoint]; ok {
		t.Error("explicit endpoint: endpoint_address output present")
	}
	for _, name := range []string{"lab-cp-1", "lab-cp-2", "lab-cp-3"} {
		in := d.Resource.Instances[name]
		if in.CreateVnicDetails.AssignPublicIP != "true" || in.AvailabilityDomain != ten.OCI.AvailabilityDomain {
			t.Errorf("%s: %+v", name, in.CreateVnicDetails)
		}
	}
	if w := d.Resource.Instances["lab-workers-1"]; w.Shape != "VM.Standard2.1" || w.ShapeConfig != nil {
		t.Errorf("non-Flex shape: %q %+v", w.Shape, w.ShapeConfig)
	}
	if _, err := (oci.Renderer{}).Render(provider.Input{Tenant: ten, Stage: provider.StageNetwork}); err == nil {
		t.Error("network stage of a tenant with an explicit endpoint: no error")
	}
}

func TestScaleChangesOnlyThatNode(t *testing.T) {
	diff, err := provider.DiffAddresses(render(t, lab(2), ""), render(t, lab(3), ""))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"output.nodes", "resource.oci_core_instance.lab-workers-3"}
	if !reflect.DeepEqual(diff, want) {
		t.Errorf("2 -> 3 workers changed %v, want %v", diff, want)
	}
}

func TestBadInput(t *testing.T) {
	noTable := lab(1)
	noTable.OCI = nil
	noSubnet := lab(1)
	noSubnet.OCI.SubnetOCID = ""
	small := lab(1)
	small.NodeGroups[1].BootVolumeGB = 20
	fixed := lab(1)
	fixed.NodeGroups[1].Shape = "VM.Standard2.1"
	fixed.NodeGroups[1].OCPUs = 2
	missing := configs(lab(2))
	delete(missing, "lab-workers-1")
	for _, tc := range []struct {
		name string
		in   provider.Input
		want string
	}{
		{"openstack tenant", provider.Input{Tenant: &tenant.Tenant{Name: "x", Provider: tenant.ProviderOpenStack}}, `has provider "openstack"`},
		{"no table", provider.Input{Tenant: noTable, MachineConfigs: configs(noTable)}, "no [oci] table"},
		{"no subnet", provider.Input{Tenant: noSubnet, MachineConfigs: configs(noSubnet)}, "[oci] subnet_ocid is empty"},
		{"small boot volume", provider.Input{Tenant: small, MachineConfigs: configs(small)}, "below OCI's minimum of 50"},
		{"ocpus on a fixed shape", provider.Input{Tenant: fixed, MachineConfigs: configs(fixed)}, "only apply to Flex shapes"},
		{"missing config", provider.Input{Tenant: lab(2), MachineConfigs: missing}, "no machine config for node(s) lab-workers-1"},
	} {
		_, err := oci.Renderer{}.Render(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func BenchmarkRender100(b *testing.B) {
	ten := lab(97)
	ten.NodeGroups[0].Count = 3
	cfg := map[string][]byte{}
	big := bytes.Repeat([]byte("machine: {}\n"), 1200) // ~14 KB, a realistic config size
	for _, n := range ten.Nodes() {
		cfg[n.Name] = big
	}
	in := provider.Input{Tenant: ten, MachineConfigs: cfg}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (oci.Renderer{}).Render(in); err != nil {
			b.Fatal(err)
		}
	}
}
