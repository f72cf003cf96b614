package tenant

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodMetal = `display_name = "Lab"
provider = "metal"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"

[[node_groups]]
name = "cp"
role = "controlplane"
count = 1
  [[node_groups.machines]]
  address = "192.0.2.21"
  install_disk = "/dev/sda"

[[node_groups]]
name = "workers"
role = "worker"
count = 1
  [[node_groups.machines]]
  address = "192.0.2.31"
  install_disk = "/dev/sda"
`

const goodOCI = `provider = "oci"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"
[oci]
compartment_ocid = "ocid1.compartment.oc1..aaaa"
region = "eu-frankfurt-1"
subnet_ocid = "ocid1.subnet.oc1.eu-frankfurt-1.aaaa"
image_ocid = "ocid1.image.oc1.eu-frankfurt-1.aaaa"
[[node_groups]]
name = "cp"
role = "controlplane"
count = 1
shape = "VM.Standard.A1.Flex"
ocpus = 2
memory_gb = 12
`

const goodOpenStack = `provider = "openstack"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"
[openstack]
region = "RegionOne"
network = "lan"
image = "talos-v1.13.0"
[[node_groups]]
name = "cp"
role = "controlplane"
count = 3
flavor = "m1.large"
volume_gb = 20
`

func TestDesignExampleIsValid(t *testing.T) {
	tn, err := Load("testdata/lab.toml")
	if err != nil {
		t.Fatalf("DESIGN §3 example: %v", err)
	}
	if tn.Name != "lab" || tn.Title() != "Lab" || len(tn.Nodes()) != 3 {
		t.Fatalf("got name %q title %q nodes %d", tn.Name, tn.Title(), len(tn.Nodes()))
	}
	want := []string{"lab-cp-1", "lab-workers-1", "lab-workers-2"}
	for i, n := range tn.Nodes() {
		if n.Name != want[i] {
			t.Errorf("node %d = %q, want %q", i, n.Name, want[i])
		}
	}
	if m := tn.Nodes()[1].Machine; m == nil || m.Address != "192.168.1.31" || m.MAC != "aa:bb:cc:dd:ee:31" {
		t.Errorf("lab-workers-1 machine = %+v", m)
	}
}

func TestBrokenFileReportsEveryProblem(t *testing.T) {
	_, err := Load("testdata/broken.toml")
	ps, ok := AsProblems(err)
	if !ok {
		t.Fatalf("want Problems, got %v", err)
	}
	want := []string{
		"testdata/broken.toml:8:1: group \"cp\": count: a control plane needs an odd count",
		"testdata/broken.toml:19:1: group \"workers\": cuont: unknown key (did you mean \"count\"?)",
		"testdata/broken.toml:22:3: group \"workers\", machine 192.168.1.21: address: 192.168.1.21 is already used by group \"cp\"",
	}
	if len(ps) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(ps), len(want), ps)
	}
	for i, w := range want {
		if !strings.HasPrefix(ps[i].Error(), w) {
			t.Errorf("problem %d:\n got %s\nwant %s…", i, ps[i].Error(), w)
		}
	}
}

func TestGoodFiles(t *testing.T) {
	for name, src := range map[string]string{"metal": goodMetal, "oci": goodOCI, "openstack": goodOpenStack} {
		if _, err := Parse("t/"+name+".toml", []byte(src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestRules breaks one rule at a time in an otherwise good file and checks
// the problem is found, located at the right key, and alone.
func TestRules(t *testing.T) {
	tests := []struct {
		name, base, file, old, new, field, msg string
	}{
		{"bad tenant name", goodMetal, "Lab_1", "", "", "", "tenant name"},
		{"reserved tenant name", goodMetal, "bridge", "", "", "", "reserved"},
		{"long tenant name", goodMetal, strings.Repeat("a", 41), "", "", "", "longer than 40"},
		{"unknown key", goodMetal, "", `display_name = "Lab"`, `dispaly_name = "Lab"`, "dispaly_name", "unknown key (did you mean \"display_name\"?)"},
		{"unknown group key", goodMetal, "", `role = "worker"`, `role = "worker"` + "\nzone = 1", "node_groups[1].zone", "unknown key"},
		{"missing provider", goodMetal, "", `provider = "metal"`, ``, "provider", "missing"},
		{"bad provider", goodMetal, "", `provider = "metal"`, `provider = "aws"`, "provider", "not one of"},
		{"bad talos version", goodMetal, "", `talos_version = "v1.13.0"`, `talos_version = "1.13"`, "talos_version", "not a Talos version"},
		{"missing kube version", goodMetal, "", `kubernetes_version = "1.35.0"`, ``, "kubernetes_version", "missing"},
		{"kube with v", goodMetal, "", `kubernetes_version = "1.35.0"`, `kubernetes_version = "v1.35.0"`, "kubernetes_version", "no leading v"},
		{"kube unsupported", goodMetal, "", `kubernetes_version = "1.35.0"`, `kubernetes_version = "1.20.0"`, "kubernetes_version", "not supported by Talos v1.13.0"},
		{"bad endpoint", goodMetal, "", `display_name = "Lab"`, `endpoint = "http://x"`, "endpoint", "https://"},
		{"json patch", goodMetal, "", `display_name = "Lab"`, `config_patches = ['[{"op":"add","path":"/machine/x","value":1}]']`, "config_patches[0]", "JSON patches are not supported"},
		{"garbage patch", goodMetal, "", `display_name = "Lab"`, `config_patches = ['{{{']`, "config_patches[0]", "not a Talos machine config patch"},
		{"bad group name", goodMetal, "", `name = "workers"`, `name = "Workers!"`, "node_groups[1].name", "lower-case"},
		{"duplicate group", goodMetal, "", `name = "workers"`, `name = "cp"`, "node_groups[1].name", "already the name of the 1st group"},
		{"bad role", goodMetal, "", `role = "worker"`, `role = "etcd"`, "node_groups[1].role", "not one of controlplane, worker"},
		{"two control planes", goodMetal, "", `role = "worker"`, `role = "controlplane"`, "node_groups[1].role", "only one group"},
		{"no control plane", goodMetal, "", `role = "controlplane"`, `role = "worker"`, "node_groups", "exactly one must hold"},
		{"even control plane", goodOpenStack, "", `count = 3`, `count = 4`, "node_groups[0].count", "odd count"},
		{"control plane zero", goodOpenStack, "", `count = 3`, `count = 0`, "node_groups[0].count", "out of range 1..5"},
		{"control plane seven", goodOpenStack, "", `count = 3`, `count = 7`, "node_groups[0].count", "out of range 1..5"},
		{"negative workers", goodMetal, "", "count = 1\n  [[node_groups.machines]]\n  address = \"192.0.2.31\"", "count = -1\n  [[node_groups.machines]]\n  address = \"192.0.2.31\"", "node_groups[1].count", "out of range 0..100"},
		{"missing count", goodMetal, "", "role = \"worker\"\ncount = 1", "role = \"worker\"", "node_groups[1].count", "missing"},
		{"count over pool", goodMetal, "", "role = \"worker\"\ncount = 1", "role = \"worker\"\ncount = 2", "node_groups[1].count", "pool has 1 machines"},
		{"bad address", goodMetal, "", `address = "192.0.2.31"`, `address = "host.lan"`, "node_groups[1].machines[0].address", "not an IP"},
		{"duplicate address", goodMetal, "", `address = "192.0.2.31"`, `address = "192.0.2.21"`, "node_groups[1].machines[0].address", "already used"},
		{"bad mac", goodMetal, "", `address = "192.0.2.31"`, `address = "192.0.2.31"` + "\n  mac = \"zz\"", "node_groups[1].machines[0].mac", "not a MAC"},
		{"bad disk", goodMetal, "", "address = \"192.0.2.31\"\n  install_disk = \"/dev/sda\"", "address = \"192.0.2.31\"\n  install_disk = \"sda\"", "node_groups[1].machines[0].install_disk", "disk device"},
		{"machines on cloud", goodOpenStack, "", `volume_gb = 20`, "volume_gb = 20\n[[node_groups.machines]]\naddress = \"192.0.2.1\"\ninstall_disk = \"/dev/sda\"", "node_groups[0].machines", "does not apply"},
		{"shape on metal", goodMetal, "", `role = "worker"`, "role = \"worker\"\nshape = \"x\"", "node_groups[1].shape", "does not apply"},
		{"oci table on metal", goodMetal, "", "[[node_groups]]\nname = \"cp\"", "[oci]\nregion = \"x\"\n[[node_groups]]\nname = \"cp\"", "oci", "only belongs"},
		{"missing oci table", goodOCI, "", "[oci]\ncompartment_ocid = \"ocid1.compartment.oc1..aaaa\"\nregion = \"eu-frankfurt-1\"\nsubnet_ocid = \"ocid1.subnet.oc1.eu-frankfurt-1.aaaa\"\nimage_ocid = \"ocid1.image.oc1.eu-frankfurt-1.aaaa\"\n", "", "oci", "needs an [oci] table"},
		{"missing oci field", goodOCI, "", `region = "eu-frankfurt-1"`, ``, "oci.region", "missing"},
		{"bad ocid", goodOCI, "", `image_ocid = "ocid1.image.oc1.eu-frankfurt-1.aaaa"`, `image_ocid = "talos"`, "oci.image_ocid", "not an OCID"},
		{"flex without size", goodOCI, "", "ocpus = 2", "", "node_groups[0].shape", "Flex shape needs"},
		{"missing shape", goodOCI, "", `shape = "VM.Standard.A1.Flex"`, "", "node_groups[0].shape", "missing"},
		{"missing flavor", goodOpenStack, "", `flavor = "m1.large"`, "", "node_groups[0].flavor", "missing"},
		{"missing openstack field", goodOpenStack, "", `network = "lan"`, "", "openstack.network", "missing"},
		{"node name too long", goodOpenStack, strings.Repeat("t", 30), `name = "cp"`, `name = "` + strings.Repeat("g", 35) + `"`, "node_groups[0].name", "too long for a hostname"},
		{"wrong type", goodMetal, "", `count = 1`, `count = "one"`, "node_groups[0].count", ""},
		{"syntax error", goodMetal, "", `provider = "metal"`, `provider = "metal`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.base
			if tc.old != "" || tc.new != "" {
				if !strings.Contains(src, tc.old) {
					t.Fatalf("test bug: %q not in base", tc.old)
				}
				src = strings.Replace(src, tc.old, tc.new, 1)
			}
			name := tc.file
			if name == "" {
				name = "lab"
			}
			file := "dir/" + name + ".toml"
			_, err := Parse(file, []byte(src))
			ps, ok := AsProblems(err)
			if !ok {
				t.Fatalf("want problems, got %v", err)
			}
			if len(ps) != 1 {
				t.Fatalf("want exactly 1 problem, got %d:\n%v", len(ps), ps)
			}
			p := ps[0]
			if p.File != file || (tc.field != "" && p.Field != tc.field) || !strings.Contains(p.Msg, tc.msg) {
				t.Fatalf("got %s\nwant field %q and message containing %q", p.Error(), tc.field, tc.msg)
			}
			if p.Line < 1 || p.Column < 1 {
				t.Errorf("problem not located: %s", p.Error())
			}
		})
	}
}

func TestCheckAcrossTenants(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.toml", goodMetal)
	write(t, dir, "b.toml", strings.Replace(goodMetal, "192.0.2.31", "192.0.2.41", 1))
	s := &Store{Dir: dir}
	snap, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Tenants) != 1 || snap.Tenants[0].Name != "a" {
		t.Fatalf("tenants = %v", snap.Tenants)
	}
	if len(snap.Problems) != 1 || !strings.Contains(snap.Problems[0].Error(), `b.toml:11:3: group "cp", machine 192.0.2.21: address: 192.0.2.21 is already a machine of tenant "a"`) {
		t.Fatalf("problems = %v", snap.Problems)
	}
	if len(snap.Invalid) != 1 || snap.Invalid[0] != "b" {
		t.Fatalf("invalid = %v", snap.Invalid)
	}
}

func TestNodeNamesStableWhenScaling(t *testing.T) {
	dir := t.TempDir()
	src := strings.Replace(goodMetal, "count = 1\n  [[node_groups.machines]]\n  address = \"192.0.2.31\"\n  install_disk = \"/dev/sda\"",
		"count = 1 # keep this comment\n  [[node_groups.machines]]\n  address = \"192.0.2.31\"\n  install_disk = \"/dev/sda\"\n  [[node_groups.machines]]\n  address = \"192.0.2.32\"\n  install_disk = \"/dev/sda\"", 1)
	write(t, dir, "lab.toml", src)
	s := &Store{Dir: dir}
	before, err := Load(s.Path("lab"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.SetCount("lab", "workers", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(after.Nodes()); strings.Join(got, ",") != "lab-cp-1,lab-workers-1,lab-workers-2" {
		t.Fatalf("after scale up: %v", got)
	}
	if before.Nodes()[1] != after.Nodes()[1] && before.Nodes()[1].Machine.Address != after.Nodes()[1].Machine.Address {
		t.Fatalf("node 1 changed: %+v -> %+v", before.Nodes()[1], after.Nodes()[1])
	}
	data, _ := os.ReadFile(s.Path("lab"))
	if !strings.Contains(string(data), "count = 2 # keep this comment") {
		t.Fatalf("file not edited in place:\n%s", data)
	}
	// a count the pool cannot hold is refused and the file is unchanged
	if _, err := s.SetCount("lab", "workers", 3); err == nil || !strings.Contains(err.Error(), "pool has 2 machines") {
		t.Fatalf("SetCount 3: %v", err)
	}
	if again, _ := os.ReadFile(s.Path("lab")); string(again) != string(data) {
		t.Fatal("refused change modified the file")
	}
	if _, err := s.SetCount("lab", "nope", 1); err == nil {
		t.Fatal("unknown group accepted")
	}
	on, err := s.SetAutoApply("lab", true)
	if err != nil || !on.AutoApply {
		t.Fatalf("SetAutoApply: %v %v", on, err)
	}
	off, err := s.SetAutoApply("lab", false)
	if err != nil || off.AutoApply {
		t.Fatalf("SetAutoApply off: %v %v", off, err)
	}
	if fi, _ := os.Stat(s.Path("lab")); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
}

func names(ns []Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func write(t *testing.T, dir, name, src string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzTenantFile feeds arbitrary bytes to the decoder and validator: they
// must never panic, and a file they accept must give consistent nodes.
func FuzzTenantFile(f *testing.F) {
	for _, s := range []string{goodMetal, goodOCI, goodOpenStack, "", "[[node_groups]]\n[[node_groups.machines]]", "a = [{b = 1}]"} {
		f.Add([]byte(s))
	}
	if data, err := os.ReadFile("testdata/broken.toml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tn, err := Parse("fuzz/lab.toml", data)
		if err != nil {
			if _, ok := AsProblems(err); !ok {
				t.Fatalf("error is not Problems: %v", err)
			}
			return
		}
		for _, n := range tn.Nodes() {
			if tn.Provider == ProviderMetal && n.Machine == nil {
				t.Fatalf("metal node %s without machine", n.Name)
			}
		}
	})
}
