package tenant

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestPlace(t *testing.T) {
	tn := &Tenant{NodeGroups: []NodeGroup{
		{Name: "cp", Machines: []Machine{{Address: "192.168.1.21"}}},
		{Name: "workers", Machines: []Machine{{Address: "192.168.1.31"}, {Address: ""}}},
		{Name: "Bad Name"},
		{Name: "cp"},
	}}
	for field, want := range map[string]string{
		"":                                   "",
		"provider":                           "provider",
		"oci.region":                         "oci.region",
		"node_groups":                        "node_groups",
		"node_groups[1]":                     `group "workers"`,
		"node_groups[1].count":               `group "workers": count`,
		"node_groups[1].machines[0].address": `group "workers", machine 192.168.1.31: address`,
		"node_groups[1].machines[1].address": `group "workers", the 2nd machine: address`,
		"node_groups[2].name":                "the 3rd group: name",
		"node_groups[3].name":                "the 4th group: name", // a second "cp"
		"node_groups[9].count":               "the 10th group: count",
		"node_groups[1].cuont":               `group "workers": cuont`,
		"config_patches[0]":                  "config patch 1",
	} {
		if got := tn.place(field); got != want {
			t.Errorf("place(%q) = %q, want %q", field, got, want)
		}
	}
	if got := (*Tenant)(nil).place("node_groups[0].count"); got != "the 1st group: count" {
		t.Errorf("nil tenant: %q", got)
	}
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q", n, got)
		}
	}
}

// TestProblemText: what a notification shows names the file (not its
// folder), the line and the place in the file's own words; the CLI's
// Error keeps file:line:col.
func TestProblemText(t *testing.T) {
	_, err := Parse("/config/tenants/lab.toml", []byte(strings.Replace(goodMetal, "role = \"worker\"\ncount = 1", "role = \"worker\"\ncount = 500", 1)))
	ps, ok := AsProblems(err)
	if !ok || len(ps) == 0 {
		t.Fatalf("no problems: %v", err)
	}
	got := ps.Text()
	if strings.Contains(got, "/config") || regexp.MustCompile(`\[\d+\]`).MatchString(got) {
		t.Errorf("Text has a folder or an index: %q", got)
	}
	if !strings.HasPrefix(got, `lab.toml:`) || !strings.Contains(got, `group "workers": count: 500 is out of range 0..100`) {
		t.Errorf("Text = %q", got)
	}
	if e := ps[0].Error(); !strings.HasPrefix(e, "/config/tenants/lab.toml:") || !strings.Contains(e, `: group "workers": count: `) {
		t.Errorf("Error = %q", e)
	}
}

// TestRefusedEditReads: a count Home Assistant sends that the file cannot
// take is refused in the file's own words, without the container's
// folder or a key path with indices.
func TestRefusedEditReads(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	if err := os.WriteFile(s.Path("lab"), []byte(goodMetal), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.SetCount("lab", "workers", 500)
	want := `tenant lab: group "workers": count cannot be 500 (nothing was changed): 500 is out of range 0..100 for a worker group; 500 nodes but the group's pool has 1 machines`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v\nwant %s…", err, want)
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("the folder is in the message: %v", err)
	}
	if _, ok := AsProblems(err); !ok {
		t.Error("the problems are no longer found in the error")
	}
	// a file that is broken already names its problems the same way
	if err := os.WriteFile(s.Path("lab"), []byte(strings.Replace(goodMetal, `role = "worker"`, `role = "wroker"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.SetCount("lab", "workers", 1)
	if err == nil || !strings.Contains(err.Error(), `lab.toml:16: group "workers": role: "wroker" is not one of controlplane, worker`) || strings.Contains(err.Error(), dir) {
		t.Fatalf("broken file: %v", err)
	}
	snap, _ := s.Load()
	if len(snap.Problems) == 0 || snap.Problems[0].File != "lab.toml" {
		t.Fatalf("snapshot problems name %v", snap.Problems)
	}
}
