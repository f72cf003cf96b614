package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// newLab is a metal tenant whose machine 192.168.1.11 is also the lab's.
const newLab = `# a second lab, written from the panel
provider           = "metal"
talos_version      = "v1.13.0"
kubernetes_version = "1.35.0"

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = "192.168.1.11"   # the lab's worker
  install_disk = "/dev/sda"
`

func TestStoreCreate(t *testing.T) {
	good := strings.Replace(newLab, "192.168.1.11", "192.168.1.20", 1)
	tests := []struct {
		name, tenant, data string
		want               string // "" = written
		wantLine           int    // of the first problem, when > 0
	}{
		{name: "valid file kept byte for byte", tenant: "lab2", data: good},
		{name: "invalid file", tenant: "lab2", data: strings.Replace(good, "count = 1", "count = 2", 1),
			want: `group "cp": count`, wantLine: 9},
		{name: "unknown key", tenant: "lab2", data: good + "colour = \"blue\"\n", want: "unknown key", wantLine: 13},
		{name: "address of another tenant, in either name order", tenant: "aaa", data: newLab,
			want: `192.168.1.11 is already a machine of tenant "lab"`, wantLine: 11},
		{name: "address of another tenant, later in name order", tenant: "zzz", data: newLab,
			want: `192.168.1.11 is already a machine of tenant "lab"`, wantLine: 11},
		{name: "existing tenant", tenant: "lab", data: good, want: "exists already"},
		{name: "existing invalid file", tenant: "broken", data: good, want: "exists already"},
		{name: "path in the name", tenant: "../evil", data: good, want: "tenant name"},
		{name: "reserved name", tenant: "bridge", data: good, want: "reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := adoptStore(t)
			write(t, s.Dir, "broken.toml", "provider = 1\n")
			before := dirState(t, s.Dir)
			tn, err := s.Create(tc.tenant, []byte(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(s.Path(tc.tenant))
				if string(got) != tc.data || tn.Name != tc.tenant {
					t.Fatalf("written %q as %q, want the bytes given", got, tn.Name)
				}
				snap, err := s.Load()
				if err != nil || len(snap.Invalid) != 1 {
					t.Fatalf("after create the watcher sees invalid %v (%v): only broken", snap.Invalid, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if tc.wantLine > 0 {
				ps, ok := AsProblems(err)
				if !ok || ps[0].Line != tc.wantLine || ps[0].File != s.Path(tc.tenant) {
					t.Fatalf("problems %#v, want the first at %s:%d", ps, s.Path(tc.tenant), tc.wantLine)
				}
			}
			if after := dirState(t, s.Dir); after != before {
				t.Fatalf("a refused create changed the directory:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestStoreReplace(t *testing.T) {
	s := adoptStore(t)
	old, err := s.Read("lab")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(old), "count = 0", "count = 0 # none yet", 1)
	if _, err := s.Replace("lab", []byte(edited), Sum(old)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Read("lab"); string(got) != edited {
		t.Fatalf("file = %q, want the edit byte for byte", got)
	}

	// an edit from the old version is refused: it would lose the first
	if _, err := s.Replace("lab", old, Sum(old)); !errors.Is(err, ErrChanged) {
		t.Fatalf("stale edit: err = %v, want ErrChanged", err)
	}
	// an invalid edit is refused, located, and writes nothing
	bad := strings.Replace(edited, `role  = "controlplane"`, `role  = "boss"`, 1)
	_, err = s.Replace("lab", []byte(bad), Sum([]byte(edited)))
	if _, ok := AsProblems(err); !ok || !strings.Contains(err.Error(), `lab.toml:8:1: group "cp": role: "boss"`) {
		t.Fatalf("invalid edit: %v, want a problem at lab.toml:8", err)
	}
	// taking an address another tenant has is refused, whatever the order
	s2 := adoptStore(t)
	write(t, s2.Dir, "aaa.toml", strings.Replace(newLab, "192.168.1.11", "192.168.1.30", 1))
	_, err = s2.Replace("aaa", []byte(newLab), "")
	if err == nil || !strings.Contains(err.Error(), `aaa.toml:11:3:`) {
		t.Fatalf("cross-tenant edit: %v, want a problem at aaa.toml:11", err)
	}
	if got, _ := s.Read("lab"); string(got) != edited {
		t.Fatal("a refused replace changed the file")
	}
	if _, err := s.Replace("nope", []byte(newLab), ""); err == nil {
		t.Fatal("replacing a missing tenant succeeded")
	}
}

// dirState describes a directory's files and contents.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.WriteString(e.Name() + "=" + Sum(data) + "\n")
	}
	return b.String()
}
