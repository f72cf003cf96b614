package web

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestFormWritesValidFiles: for each provider, the form's file is one the
// validator takes, and every value comes back as typed.
func TestFormWritesValidFiles(t *testing.T) {
	base := url.Values{"name": {"edge"}, "display_name": {`Edge "box" \ one`}, "talos_version": {"v1.13.0"},
		"kubernetes_version": {"1.35.0"}, "auto_apply": {"true"},
		"node_groups[0].name": {"cp"}, "node_groups[0].role": {"controlplane"}, "node_groups[0].count": {"1"},
		"node_groups[1].name": {"workers"}, "node_groups[1].role": {"worker"}, "node_groups[1].count": {"2"}}
	tests := []struct {
		provider string
		extra    url.Values
		check    func(*tenant.Tenant) bool
	}{
		{"metal", url.Values{"node_groups[0].machines": {"10.0.0.5 /dev/sda"},
			"node_groups[1].machines": {"10.0.0.6, /dev/nvme0n1, 02:00:00:00:00:06  # the fast one\n\n10.0.0.7 /dev/sda"},
			"node_groups[1].flavor":   {"ignored for metal"}},
			func(tn *tenant.Tenant) bool {
				m := tn.NodeGroups[1].Machines
				return len(m) == 2 && m[0].MAC == "02:00:00:00:00:06" && m[0].InstallDisk == "/dev/nvme0n1" && m[1].Address == "10.0.0.7"
			}},
		{"openstack", url.Values{"openstack.region": {"RegionOne"}, "openstack.network": {"lan"}, "openstack.image": {"talos"},
			"node_groups[0].flavor": {"m1.large"}, "node_groups[1].flavor": {"m1.xlarge"}, "node_groups[1].volume_gb": {"40"}},
			func(tn *tenant.Tenant) bool { return tn.OpenStack.Network == "lan" && tn.NodeGroups[1].VolumeGB == 40 }},
		{"oci", url.Values{"oci.compartment_ocid": {"ocid1.compartment.oc1..aaaa"}, "oci.region": {"eu-frankfurt-1"},
			"oci.subnet_ocid": {"ocid1.subnet.oc1.eu-frankfurt-1.aaaa"}, "oci.image_ocid": {"ocid1.image.oc1.eu-frankfurt-1.aaaa"},
			"node_groups[0].shape": {"VM.Standard.A1.Flex"}, "node_groups[0].ocpus": {"2"}, "node_groups[0].memory_gb": {"12.5"},
			"node_groups[1].shape": {"VM.Standard.E4.Flex"}, "node_groups[1].ocpus": {"1"}, "node_groups[1].memory_gb": {"8"}},
			func(tn *tenant.Tenant) bool {
				return tn.NodeGroups[0].MemoryGB == 12.5 && tn.OCI.Region == "eu-frankfurt-1"
			}},
	}
	for _, tc := range tests {
		t.Run(tc.provider, func(t *testing.T) {
			v := url.Values{"provider": {tc.provider}}
			for k, vs := range base {
				v[k] = vs
			}
			for k, vs := range tc.extra {
				v[k] = vs
			}
			f := readForm(v)
			data := f.toml(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
			if len(f.Errors) > 0 {
				t.Fatalf("form problems %v", f.Errors)
			}
			tn, err := tenant.Parse("edge.toml", []byte(data))
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			if tn.DisplayName != `Edge "box" \ one` || !tn.AutoApply || tn.NodeGroups[1].Count != 2 || !tc.check(tn) {
				t.Fatalf("read back %+v from\n%s", tn, data)
			}
			if !strings.HasPrefix(data, "# edge: written by the rezuscloud panel on 2026-12-02.") {
				t.Fatalf("no header comment:\n%s", data)
			}
		})
	}
}

// TestFormProblemsAtFields: the validator's problems, and the form's own,
// land at the input they are about.
func TestFormProblemsAtFields(t *testing.T) {
	v := url.Values{"name": {"edge"}, "provider": {"metal"}, "talos_version": {"1.13"}, "kubernetes_version": {"1.35.0"},
		"node_groups[0].name": {"cp"}, "node_groups[0].role": {"controlplane"}, "node_groups[0].count": {"three"},
		"node_groups[1].name": {"Workers"}, "node_groups[1].role": {"worker"}, "node_groups[1].count": {"1"},
		"node_groups[1].machines": {"10.0.0.300 /dev/sda\n10.0.0.8 sda"}}
	f := readForm(v)
	data := f.toml(time.Now())
	_, err := tenant.Parse("edge.toml", []byte(data))
	ps, _ := tenant.AsProblems(err)
	f.place(ps)
	for field, want := range map[string]string{
		"talos_version":           "is not a Talos version like v1.13.0",
		"node_groups[0].count":    `"three" is not a whole number`,
		"node_groups[1].name":     "must be lower-case letters",
		"node_groups[1].machines": "line 2: \"sda\" is neither an install disk",
	} {
		if got := f.Err(field); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", field, got, want)
		}
	}
	if got := f.Err("node_groups[1].machines"); !strings.Contains(got, `machine 1: "10.0.0.300" is not an IP address`) {
		t.Errorf("machine address problem: %q", got)
	}
}

func TestTOMLString(t *testing.T) {
	for in, want := range map[string]string{`plain`: `"plain"`, `a"b`: `"a\"b"`, `c:\x`: `"c:\\x"`, "tab\tnl\n": `"tab\tnl\n"`,
		"bell\a": `"bell\u0007"`, "Zürich": `"Zürich"`} {
		if got := tomlString(in); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
		var out struct{ V string }
		if err := toml.Unmarshal([]byte("V = "+tomlString(in)), &out); err != nil || out.V != in {
			t.Errorf("%q does not read back: %q %v", in, out.V, err)
		}
	}
}
