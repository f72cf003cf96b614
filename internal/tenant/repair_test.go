package tenant

import (
	"os"
	"strings"
	"testing"
)

const repairFile = `provider = "metal"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"

# the control plane
[[node_groups]]
name = "cp"
role = "controlplane"
count = 1
  [[node_groups.machines]]
  address = "127.0.0.10"
  install_disk = "/dev/sda"

# workers: the NUCs
[[node_groups]]
name = "workers"
role = "worker"
count = 2
  [[node_groups.machines]]
  address = "127.0.0.11"   # the one in the cupboard
  mac = "02:00:00:00:00:11"
  install_disk = "/dev/sda"
  [[node_groups.machines]]
  address = "127.0.0.12"
  install_disk = "/dev/nvme0n1"
  power = "switch.nuc_2"

# keep this comment
`

func repairStore(t *testing.T) *Store {
	t.Helper()
	s := &Store{Dir: t.TempDir()}
	if err := os.WriteFile(s.Path("lab"), []byte(repairFile), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestForgetMachine(t *testing.T) {
	s := repairStore(t)
	nt, err := s.ForgetMachine("lab", "workers", "127.0.0.11")
	if err != nil {
		t.Fatal(err)
	}
	g := nt.Group("workers")
	if g.Count != 1 || len(g.Machines) != 1 || g.Machines[0].Address != "127.0.0.12" {
		t.Fatalf("group after forget: %+v", g)
	}
	data, _ := os.ReadFile(s.Path("lab"))
	for _, keep := range []string{"# workers: the NUCs", "# keep this comment", `power = "switch.nuc_2"`, "# the control plane"} {
		if !strings.Contains(string(data), keep) {
			t.Errorf("lost %q:\n%s", keep, data)
		}
	}
	if strings.Contains(string(data), "cupboard") || strings.Contains(string(data), "127.0.0.11") {
		t.Errorf("the machine is still there:\n%s", data)
	}
}

func TestForgetMachineRefused(t *testing.T) {
	s := repairStore(t)
	for _, tc := range []struct{ group, addr, want string }{
		{"cp", "127.0.0.10", "odd"},
		{"workers", "127.0.0.99", "no machine"},
		{"gpu", "127.0.0.11", "no group"},
	} {
		if _, err := s.ForgetMachine("lab", tc.group, tc.addr); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("forget %s %s: %v, want %q", tc.group, tc.addr, err, tc.want)
		}
	}
	if data, _ := os.ReadFile(s.Path("lab")); string(data) != repairFile {
		t.Fatalf("a refused forget changed the file:\n%s", data)
	}
}

func TestReplaceMachine(t *testing.T) {
	s := repairStore(t)
	nt, err := s.ReplaceMachine("lab", "workers", "127.0.0.12", Machine{Address: "127.0.0.13", MAC: "02:00:00:00:00:13", InstallDisk: "/dev/vda"})
	if err != nil {
		t.Fatal(err)
	}
	g := nt.Group("workers")
	if g.Count != 2 || g.Machines[1].Address != "127.0.0.13" || g.Machines[1].MAC != "02:00:00:00:00:13" || g.Machines[1].InstallDisk != "/dev/vda" {
		t.Fatalf("group after replace: %+v", g)
	}
	if g.Machines[0].Address != "127.0.0.11" {
		t.Fatalf("the other machine moved: %+v", g.Machines)
	}
	data, _ := os.ReadFile(s.Path("lab"))
	if !strings.Contains(string(data), "cupboard") || !strings.Contains(string(data), "# keep this comment") {
		t.Errorf("comments lost:\n%s", data)
	}
	// taken already, or the same machine: refused
	if _, err := s.ReplaceMachine("lab", "workers", "127.0.0.13", Machine{Address: "127.0.0.10", InstallDisk: "/dev/sda"}); err == nil {
		t.Error("a machine another node uses was accepted")
	}
	if _, err := s.ReplaceMachine("lab", "cp", "127.0.0.10", Machine{Address: "127.0.0.20", InstallDisk: "/dev/sda"}); err != nil {
		t.Errorf("replacing a control plane: %v", err)
	}
}
