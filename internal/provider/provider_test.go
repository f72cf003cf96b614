package provider_test

import (
	"encoding/json"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// outputs decodes `tofu output -json` as tofu.Workspace.Output returns it.
func outputs(t *testing.T, s string) map[string]*tfjson.StateOutput {
	t.Helper()
	var m map[string]*tfjson.StateOutput
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("outputs %s: %v", s, err)
	}
	return m
}

// recorded is the shape of a real `tofu output -json` (reference §2) for a
// metal tenant, plus an unrelated sensitive output.
const recorded = `{
  "nodes": {
    "sensitive": false,
    "type": ["object", {
      "lab-cp-1": ["object", {"address": "string", "id": "string", "private_address": "string"}],
      "lab-workers-1": ["object", {"address": "string", "id": "string", "private_address": "string"}]
    }],
    "value": {
      "lab-workers-1": {"address": "192.168.1.31", "id": "2b4856c3-1240-7b87-3a32-7f6f2d0b2357", "private_address": "192.168.1.31"},
      "lab-cp-1": {"address": "203.0.113.10", "id": "ebed1c7e-0000-4000-8000-000000000001", "private_address": "10.0.0.5"}
    }
  },
  "endpoint_address": {"sensitive": false, "type": "string", "value": "203.0.113.10"},
  "secret": {"sensitive": true, "type": "string", "value": "s3cr3t"}
}`

func TestParseNodes(t *testing.T) {
	got, err := provider.ParseNodes(outputs(t, recorded))
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.NodeOutput{
		{Name: "lab-cp-1", Address: "203.0.113.10", PrivateAddress: "10.0.0.5", ID: "ebed1c7e-0000-4000-8000-000000000001"},
		{Name: "lab-workers-1", Address: "192.168.1.31", PrivateAddress: "192.168.1.31", ID: "2b4856c3-1240-7b87-3a32-7f6f2d0b2357"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d nodes, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("node %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseNodesEmptyAndBad(t *testing.T) {
	for _, in := range []string{`{}`, `{"endpoint_address":{"sensitive":false,"type":"string","value":"1.2.3.4"}}`, `{"nodes":{"sensitive":false,"type":"dynamic","value":null}}`} {
		got, err := provider.ParseNodes(outputs(t, in))
		if err != nil || len(got) != 0 {
			t.Errorf("ParseNodes(%s) = %+v, %v; want none", in, got, err)
		}
	}
	for _, in := range []string{`{"nodes":{"sensitive":false,"type":"string","value":"x"}}`,
		`{"nodes":{"sensitive":false,"type":"dynamic","value":{"n":{"address":7}}}}`} {
		if _, err := provider.ParseNodes(outputs(t, in)); err == nil {
			t.Errorf("ParseNodes(%s): no error", in)
		}
	}
}

func TestEndpointAddress(t *testing.T) {
	got, err := provider.EndpointAddress(outputs(t, recorded))
	if err != nil || got != "203.0.113.10" {
		t.Errorf("EndpointAddress = %q, %v", got, err)
	}
	if _, err := provider.EndpointAddress(outputs(t, `{}`)); err == nil || !strings.Contains(err.Error(), "network stage") {
		t.Errorf("EndpointAddress({}): %v", err)
	}
	if _, err := provider.EndpointAddress(outputs(t, `{"endpoint_address":{"sensitive":false,"type":"string","value":""}}`)); err == nil {
		t.Error("empty endpoint_address: no error")
	}
}

func TestLit(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                "plain",
		"a ${b} c":             "a $${b} c",
		"%{ if x }y%{ endif }": "%%{ if x }y%%{ endif }",
		"$ { and % {":          "$ { and % {",
	} {
		if got := provider.Lit(in); got != want {
			t.Errorf("Lit(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIdent(t *testing.T) {
	for in, want := range map[string]string{"lab-cp-1": "lab-cp-1", "1lab-cp-1": "_1lab-cp-1"} {
		if got := provider.Ident(in); got != want {
			t.Errorf("Ident(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckDocument(t *testing.T) {
	good := `{"terraform":{"required_providers":{"openstack":{"source":"s","version":"1"}}},
	  "data":{"openstack_images_image_v2":{"talos":{"name":"x"}}},
	  "resource":{"openstack_networking_port_v2":{"a-1":{"name":"$${literal.thing} %%{ x }"}},
	              "terraform_data":{"n":{"input":"${openstack_networking_port_v2.a-1.id} ${data.openstack_images_image_v2.talos.id}"}}},
	  "output":{"o":{"value":"${terraform_data.n.output} ${length(terraform_data.n.id)} ${count.index}"}}}`
	if err := provider.CheckDocument([]byte(good)); err != nil {
		t.Errorf("good document: %v", err)
	}
	bad := `{"terraform":{"backend":{"local":{}},"encryption":{}},
	  "resource":{"oci_core_instance":{"a":{"x":"${var.region} ${talos_machine_secrets.this.id} ${data.oci_core_subnet.s.vcn_id}"}}}}`
	err := provider.CheckDocument([]byte(bad))
	if err == nil {
		t.Fatal("bad document passed")
	}
	for _, want := range []string{"terraform.backend", "terraform.encryption", "undeclared var.region",
		"undeclared talos_machine_secrets.this", "undeclared data.oci_core_subnet.s", `provider "oci" not in required_providers`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestCheckInput(t *testing.T) {
	ten := &tenant.Tenant{Name: "lab", Provider: tenant.ProviderOCI, NodeGroups: []tenant.NodeGroup{
		{Name: "cp", Role: tenant.RoleControlPlane, Count: 1},
		{Name: "workers", Role: tenant.RoleWorker, Count: 2},
	}}
	cfg := map[string][]byte{"lab-cp-1": []byte("a"), "lab-workers-1": []byte("b")}
	for _, tc := range []struct {
		in   provider.Input
		p    tenant.Provider
		want string
	}{
		{provider.Input{}, tenant.ProviderOCI, "no tenant"},
		{provider.Input{Tenant: ten}, tenant.ProviderMetal, `has provider "oci"`},
		{provider.Input{Tenant: ten, MachineConfigs: cfg}, tenant.ProviderOCI, "no machine config for node(s) lab-workers-2"},
		{provider.Input{Tenant: ten, Stage: "half"}, tenant.ProviderOCI, `unknown stage "half"`},
		{provider.Input{Tenant: ten, MachineConfigs: map[string][]byte{"lab-cp-1": {1}, "lab-workers-1": {1}, "lab-workers-2": {1}, "lab-workers-9": {1}}},
			tenant.ProviderOCI, "undeclared node(s) lab-workers-9"},
	} {
		_, _, err := provider.Check(tc.in, tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check: got %v, want an error containing %q", err, tc.want)
		}
	}
	nodes, stage, err := provider.Check(provider.Input{Tenant: ten, Stage: provider.StageNetwork}, tenant.ProviderOCI)
	if err != nil || stage != provider.StageNetwork || len(nodes) != 3 {
		t.Errorf("network stage without configs: %v %v %d", err, stage, len(nodes))
	}
	if !provider.NeedsNetworkStage(ten) {
		t.Error("cloud tenant without endpoint: NeedsNetworkStage false")
	}
	ten.Endpoint = "https://203.0.113.10:6443"
	if provider.NeedsNetworkStage(ten) {
		t.Error("tenant with endpoint: NeedsNetworkStage true")
	}
}
