package tenant

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const adoptLab = `# the lab cluster
provider           = "metal"
talos_version      = "v1.13.0"
kubernetes_version = "1.35.0"

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = "192.168.1.10"
  install_disk = "/dev/sda"

# workers: adopted from Home Assistant
[[node_groups]]
name  = "workers"
role  = "worker"
count = 1   # set from Home Assistant
  [[node_groups.machines]]
  address      = "192.168.1.11"
  mac          = "02:00:00:00:00:11"
  install_disk = "/dev/sda"

# the gpu box, alone
[[node_groups]]
name  = "gpu"
role  = "worker"
count = 0
`

const adoptCloud = `provider           = "openstack"
talos_version      = "v1.13.0"
kubernetes_version = "1.35.0"
[openstack]
region  = "RegionOne"
network = "lan"
image   = "talos"
[[node_groups]]
name   = "cp"
role   = "controlplane"
count  = 1
flavor = "m1.large"
`

func adoptStore(t *testing.T) *Store {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"lab": adoptLab, "cloud": adoptCloud} {
		if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &Store{Dir: dir}
}

func TestAdopt(t *testing.T) {
	disks := []string{"/dev/nvme0n1", "/dev/sda", "/dev/sr0"}
	fresh := Machine{Address: "192.168.1.20", MAC: "02:00:00:00:00:20", InstallDisk: "/dev/nvme0n1"}
	for _, tc := range []struct {
		name, tenant, group string
		m                   Machine
		wantErr             string
	}{
		{name: "worker group in the middle", tenant: "lab", group: "workers", m: fresh},
		{name: "last group", tenant: "lab", group: "gpu", m: fresh},
		{name: "control plane", tenant: "lab", group: "cp", m: fresh, wantErr: "must stay odd"},
		{name: "cloud group", tenant: "cloud", group: "cp", m: fresh, wantErr: `provider "openstack"`},
		{name: "unknown tenant", tenant: "nope", group: "workers", m: fresh, wantErr: `no tenant "nope"`},
		{name: "unknown group", tenant: "lab", group: "gpus", m: fresh, wantErr: `no group "gpus"`},
		{name: "address in a file", tenant: "lab", group: "gpu", m: Machine{Address: "192.168.1.11", InstallDisk: "/dev/sda"}, wantErr: "already declares 192.168.1.11"},
		{name: "mac in a file", tenant: "lab", group: "gpu", m: Machine{Address: "192.168.1.30", MAC: "02:00:00:00:00:11", InstallDisk: "/dev/sda"}, wantErr: "already declares mac"},
		{name: "disk it lacks", tenant: "lab", group: "workers", m: Machine{Address: "192.168.1.20", InstallDisk: "/dev/vdb"}, wantErr: `no disk "/dev/vdb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := adoptStore(t)
			before, _ := os.ReadFile(s.Path("lab"))
			nt, err := s.Adopt(tc.tenant, tc.group, tc.m, disks)
			after, _ := os.ReadFile(s.Path("lab"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.m.Address) {
					t.Fatalf("error %v, want one naming the machine and saying %q", err, tc.wantErr)
				}
				if string(before) != string(after) {
					t.Fatal("a refused adopt changed the file")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g := nt.Group(tc.group)
			last := g.Machines[len(g.Machines)-1]
			if g.Count != len(g.Machines) || last != tc.m {
				t.Fatalf("group %s: count %d, machines %+v", tc.group, g.Count, g.Machines)
			}
			for _, keep := range []string{"# the lab cluster", "# workers: adopted from Home Assistant", "# set from Home Assistant", "# the gpu box, alone"} {
				if !strings.Contains(string(after), keep) {
					t.Errorf("comment %q lost:\n%s", keep, after)
				}
			}
			reread, err := Parse(s.Path("lab"), after)
			if err != nil {
				t.Fatal(err)
			}
			if len(reread.Nodes()) != len(nt.Nodes()) || reread.Group("cp").Count != 1 {
				t.Fatalf("the file as written does not hold the adopted machine:\n%s", after)
			}
		})
	}
}

func TestMachinePowerValidated(t *testing.T) {
	for _, tc := range []struct{ power, want string }{
		{`power = "switch.rack_plug"`, ""},
		{`power = "redfish+https://bmc.lan/redfish/v1/Systems/1"` + "\n  redfish_insecure = true", ""},
		{`power = "switch.Rack Plug"`, `lab.toml:12:3: group "cp", machine 192.168.1.10: power`},
		{`power = "wol"`, "needs the machine's mac"},
		{`redfish_insecure = true`, "applies only to"},
	} {
		body := strings.Replace(adoptLab, "  address      = \"192.168.1.10\"\n", "  address      = \"192.168.1.10\"\n  "+tc.power+"\n", 1)
		_, err := Parse("/t/lab.toml", []byte(body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.power, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.power, err, tc.want)
		}
	}
}
