package openstack_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack"
	"github.com/rezuscloud/rezuscloud/internal/provider/providertest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the testdata golden files")

func lab(workers int) *tenant.Tenant {
	return &tenant.Tenant{
		Name: "lab", Provider: tenant.ProviderOpenStack,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		OpenStack: &tenant.OpenStack{Region: "RegionOne", Network: "private", Image: "talos-v1.13.0-openstack-amd64", FloatingIPPool: "public"},
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Flavor: "m1.medium", VolumeGB: 30},
			{Name: "workers", Role: tenant.RoleWorker, Count: workers, Flavor: "m1.large"},
		},
	}
}

func configs(t *tenant.Tenant) map[string][]byte {
	m := map[string][]byte{}
	for _, n := range t.Nodes() {
		m[n.Name] = []byte(fmt.Sprintf("version: v1alpha1\nmachine:\n  type: %s\ncluster:\n  controlPlane:\n    endpoint: https://203.0.113.10:6443\n# ${not.a.reference} %%{ if x }\n", n.Role))
	}
	return m
}

func render(t testing.TB, ten *tenant.Tenant, stage provider.Stage) []byte {
	t.Helper()
	in := provider.Input{Tenant: ten, Stage: stage}
	if stage != provider.StageNetwork {
		in.MachineConfigs = configs(ten)
	}
	doc, err := openstack.Renderer{}.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// noPool is lab without a floating IP pool, with ids instead of names.
func noPool() *tenant.Tenant {
	ten := lab(1)
	ten.OpenStack = &tenant.OpenStack{Network: "9f0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8", Image: "0e1d2c3b-4a59-6877-8695-a4b3c2d1e0f9"}
	ten.NodeGroups[0].Count = 3
	return ten
}

func TestGolden(t *testing.T) {
	providertest.Golden(t, *update, "openstack-network.tf.json", render(t, lab(2), provider.StageNetwork))
	providertest.Golden(t, *update, "openstack-full.tf.json", render(t, lab(2), provider.StageFull))
	providertest.Golden(t, *update, "openstack-nopool-full.tf.json", render(t, noPool(), provider.StageFull))
}

func TestDeterministic(t *testing.T) {
	a := render(t, lab(2), "")
	for i := 0; i < 20; i++ {
		if b := render(t, lab(2), ""); !bytes.Equal(a, b) {
			t.Fatal("two renders of the same tenant differ")
		}
	}
}

func TestDocumentsAreSound(t *testing.T) {
	for name, doc := range map[string][]byte{
		"network": render(t, lab(2), provider.StageNetwork),
		"full":    render(t, lab(2), provider.StageFull),
		"nopool":  render(t, noPool(), provider.StageFull),
	} {
		if err := provider.CheckDocument(doc); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		var d struct {
			Terraform map[string]json.RawMessage `json:"terraform"`
		}
		_ = json.Unmarshal(doc, &d)
		if want := `{"openstack":{"source":"terraform-provider-openstack/openstack","version":"3.4.0"}}`; compact(d.Terraform["required_providers"]) != want {
			t.Errorf("%s: required_providers %s", name, d.Terraform["required_providers"])
		}
		for _, bad := range []string{"OS_PASSWORD", "password", "backend", "encryption"} {
			if bytes.Contains(doc, []byte(bad)) {
				t.Errorf("%s: document contains %q", name, bad)
			}
		}
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	_ = json.Compact(&b, raw)
	return b.String()
}

type instance struct {
	Name        string            `json:"name"`
	FlavorName  string            `json:"flavor_name"`
	UserData    string            `json:"user_data"`
	Metadata    map[string]string `json:"metadata"`
	Tags        []string          `json:"tags"`
	BlockDevice []struct {
		UUID       string `json:"uuid"`
		SourceType string `json:"source_type"`
		DestType   string `json:"destination_type"`
		VolumeSize int    `json:"volume_size"`
		BootIndex  int    `json:"boot_index"`
	} `json:"block_device"`
	Network   []map[string]string `json:"network"`
	Lifecycle struct {
		IgnoreChanges []string `json:"ignore_changes"`
	} `json:"lifecycle"`
}

func TestInstances(t *testing.T) {
	ten := lab(2)
	doc := render(t, ten, provider.StageFull)
	var d struct {
		Resource struct {
			Instances map[string]instance `json:"openstack_compute_instance_v2"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Resource.Instances) != 3 {
		t.Fatalf("%d instances, want 3", len(d.Resource.Instances))
	}
	cp := d.Resource.Instances["lab-cp-1"]
	if cp.Name != "lab-cp-1" || cp.FlavorName != "m1.medium" {
		t.Errorf("cp: %+v", cp)
	}
	wantUD := strings.ReplaceAll(strings.ReplaceAll(string(configs(ten)["lab-cp-1"]), "${", "$${"), "%{", "%%{")
	if cp.UserData != wantUD {
		t.Errorf("user_data %q, want the escaped config %q", cp.UserData, wantUD)
	}
	bd := cp.BlockDevice[0]
	if bd.UUID != "${data.openstack_images_image_v2.talos.id}" || bd.SourceType != "image" || bd.DestType != "volume" || bd.VolumeSize != 30 || bd.BootIndex != 0 {
		t.Errorf("cp block_device %+v", bd)
	}
	if w := d.Resource.Instances["lab-workers-1"]; w.BlockDevice[0].VolumeSize != openstack.DefaultVolumeGB {
		t.Errorf("worker volume %d, want the default %d", w.BlockDevice[0].VolumeSize, openstack.DefaultVolumeGB)
	}
	for _, want := range []string{"user_data", "image_id", "block_device"} {
		if !contains(cp.Lifecycle.IgnoreChanges, want) {
			t.Errorf("ignore_changes %v lacks %s", cp.Lifecycle.IgnoreChanges, want)
		}
	}
	if cp.Metadata["rezuscloud_tenant"] != "lab" || cp.Metadata["rezuscloud_group"] != "cp" || !contains(cp.Tags, "rezuscloud_tenant=lab") {
		t.Errorf("tenant labels: metadata %v, tags %v", cp.Metadata, cp.Tags)
	}
	if cp.Network[0]["port"] != "${openstack_networking_port_v2.lab-cp-1.id}" {
		t.Errorf("network %v", cp.Network)
	}
}

func TestSecurityGroupRules(t *testing.T) {
	doc := render(t, lab(1), provider.StageNetwork)
	var d struct {
		Resource struct {
			Groups map[string]struct {
				Name string `json:"name"`
			} `json:"openstack_networking_secgroup_v2"`
			Rules map[string]struct {
				Direction     string `json:"direction"`
				Ethertype     string `json:"ethertype"`
				Protocol      string `json:"protocol"`
				Min           int    `json:"port_range_min"`
				Max           int    `json:"port_range_max"`
				RemoteIP      string `json:"remote_ip_prefix"`
				RemoteGroupID string `json:"remote_group_id"`
				GroupID       string `json:"security_group_id"`
			} `json:"openstack_networking_secgroup_rule_v2"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if d.Resource.Groups["cluster"].Name != "rezuscloud-lab" || d.Resource.Groups["controlplane"].Name != "rezuscloud-lab-controlplane" || len(d.Resource.Groups) != 2 {
		t.Errorf("security groups %+v", d.Resource.Groups)
	}
	const cluster, controlplane = "${openstack_networking_secgroup_v2.cluster.id}", "${openstack_networking_secgroup_v2.controlplane.id}"
	ports := map[int]int{}
	internal := 0
	for name, r := range d.Resource.Rules {
		if r.Direction != "ingress" {
			t.Errorf("%s: direction %s", name, r.Direction)
		}
		if r.RemoteGroupID == cluster && r.Protocol == "" && r.GroupID == cluster {
			internal++
			continue
		}
		// Everything open to the outside is on the control planes' group.
		if r.Protocol != "tcp" || r.Min != r.Max || r.GroupID != controlplane || r.RemoteIP == "" {
			t.Errorf("%s: %+v", name, r)
		}
		ports[r.Min]++
	}
	if !reflect.DeepEqual(ports, map[int]int{50000: 2, 6443: 2}) || internal != 2 {
		t.Errorf("public ports %v (IPv4+IPv6 each), internal rules %d", ports, internal)
	}
}

// TestOnlyControlPlanesArePublic: control planes' ports are in both groups,
// workers' in the cluster's own group only.
func TestOnlyControlPlanesArePublic(t *testing.T) {
	var d struct {
		Resource struct {
			Ports map[string]struct {
				Groups []string `json:"security_group_ids"`
			} `json:"openstack_networking_port_v2"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(render(t, lab(2), provider.StageFull), &d); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"lab-cp-1":      {"${openstack_networking_secgroup_v2.cluster.id}", "${openstack_networking_secgroup_v2.controlplane.id}"},
		"lab-workers-1": {"${openstack_networking_secgroup_v2.cluster.id}"},
		"lab-workers-2": {"${openstack_networking_secgroup_v2.cluster.id}"},
	}
	if len(d.Resource.Ports) != len(want) {
		t.Errorf("%d ports, want %d", len(d.Resource.Ports), len(want))
	}
	for node, groups := range want {
		if got := d.Resource.Ports[node].Groups; !reflect.DeepEqual(got, groups) {
			t.Errorf("%s: security groups %v, want %v", node, got, groups)
		}
	}
}

func TestStages(t *testing.T) {
	net, err := provider.Addresses(render(t, lab(2), provider.StageNetwork))
	if err != nil {
		t.Fatal(err)
	}
	full, _ := provider.Addresses(render(t, lab(2), provider.StageFull))
	// Every network-stage resource keeps its name (and body) in the full stage.
	for addr, body := range net {
		if !strings.HasPrefix(addr, "resource.") && !strings.HasPrefix(addr, "data.") {
			continue
		}
		if full[addr] != body {
			t.Errorf("%s differs between the stages", addr)
		}
	}
	for _, want := range []string{"resource.openstack_networking_secgroup_v2.cluster", "resource.openstack_networking_port_v2.lab-cp-1",
		"resource.openstack_networking_floatingip_v2.lab-cp-1", "output.endpoint_address"} {
		if _, ok := net[want]; !ok {
			t.Errorf("network stage lacks %s", want)
		}
	}
	for addr := range net {
		if strings.Contains(addr, "instance") || strings.Contains(addr, "workers") || addr == "output.nodes" {
			t.Errorf("network stage holds %s", addr)
		}
	}
	if net["output.endpoint_address"] != full["output.endpoint_address"] {
		t.Error("endpoint_address differs between the stages")
	}
	if !strings.Contains(net["output.endpoint_address"], "openstack_networking_floatingip_v2.lab-cp-1.address") {
		t.Errorf("endpoint_address %s", net["output.endpoint_address"])
	}
	np, _ := provider.Addresses(render(t, noPool(), provider.StageFull))
	if !strings.Contains(np["output.endpoint_address"], "openstack_networking_port_v2.lab-cp-1.all_fixed_ips[0]") {
		t.Errorf("endpoint_address without a pool: %s", np["output.endpoint_address"])
	}
	for addr := range np {
		if strings.Contains(addr, "floatingip") || strings.Contains(addr, "data.") {
			t.Errorf("no pool, ids given: unexpected %s", addr)
		}
	}
}

func TestScaleChangesOnlyThatNode(t *testing.T) {
	diff, err := provider.DiffAddresses(render(t, lab(2), ""), render(t, lab(3), ""))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"output.nodes", "resource.openstack_compute_instance_v2.lab-workers-3", "resource.openstack_networking_port_v2.lab-workers-3"}
	if !reflect.DeepEqual(diff, want) {
		t.Errorf("2 -> 3 workers changed %v, want %v", diff, want)
	}
}

func TestBadInput(t *testing.T) {
	noTable := lab(1)
	noTable.OpenStack = nil
	noImage := lab(1)
	noImage.OpenStack.Image = ""
	noFlavor := lab(1)
	noFlavor.NodeGroups[1].Flavor = ""
	missing := configs(lab(2))
	delete(missing, "lab-cp-1")
	for _, tc := range []struct {
		name string
		in   provider.Input
		want string
	}{
		{"metal tenant", provider.Input{Tenant: &tenant.Tenant{Name: "x", Provider: tenant.ProviderMetal}}, `has provider "metal"`},
		{"no table", provider.Input{Tenant: noTable, MachineConfigs: configs(noTable)}, "no [openstack] table"},
		{"no image", provider.Input{Tenant: noImage, MachineConfigs: configs(noImage)}, "[openstack] image is empty"},
		{"no flavor", provider.Input{Tenant: noFlavor, MachineConfigs: configs(noFlavor)}, `node group "workers" has no flavor`},
		{"missing config", provider.Input{Tenant: lab(2), MachineConfigs: missing}, "no machine config for node(s) lab-cp-1"},
	} {
		_, err := openstack.Renderer{}.Render(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestTofuValidate validates every render against the real
// terraform-provider-openstack v3.4.0 schema.
func TestTofuValidate(t *testing.T) {
	bin, rc := testenv.Tofu(t)
	if rc == "" {
		msg := "no tofu CLI config with a provider mirror (.tools/tofurc): run make tools"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	digitTenant := lab(1)
	digitTenant.Name = "1lab"
	for name, doc := range map[string][]byte{
		"network":      render(t, lab(2), provider.StageNetwork),
		"full":         render(t, lab(2), provider.StageFull),
		"nopool":       render(t, noPool(), provider.StageFull),
		"digit-tenant": render(t, digitTenant, provider.StageFull),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), doc, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, code := testenv.RunTofu(t, bin, rc, dir, "init", "-input=false", "-backend=false"); code != 0 {
				t.Fatal("tofu init failed")
			}
			out, code := testenv.RunTofu(t, bin, rc, dir, "validate", "-json")
			var v struct {
				Valid        bool `json:"valid"`
				ErrorCount   int  `json:"error_count"`
				WarningCount int  `json:"warning_count"`
			}
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("validate -json: %v: %s", err, out)
			}
			if code != 0 || !v.Valid || v.WarningCount != 0 {
				t.Fatalf("tofu validate: exit %d, valid %v, %d errors, %d warnings: %s", code, v.Valid, v.ErrorCount, v.WarningCount, out)
			}
		})
	}
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

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
		if _, err := (openstack.Renderer{}).Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestExplainWithoutNova(t *testing.T) {
	const errored = "Error: Error waiting for instance (9c525c75-c181-4121-8fe4-bc8be56f7a27) to become ready: unexpected state 'ERROR', wanted target 'ACTIVE'. last error: %!s(<nil>)"
	for _, tc := range []struct {
		name, msg string
		env       map[string]string
		want      string
	}{
		{"other error", "Error: Quota exceeded for instances", nil, "Error: Quota exceeded for instances"},
		{"no credentials", errored, nil, "Error: Error waiting for instance (9c525c75-c181-4121-8fe4-bc8be56f7a27) to become ready: it went to ERROR (Nova's fault unknown: no OpenStack credentials (OS_AUTH_URL, OS_USERNAME, OS_PASSWORD))"},
	} {
		if got := (openstack.Renderer{}).Explain(t.Context(), lab(1), tc.env, tc.msg); got != tc.want {
			t.Errorf("%s:\ngot  %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
