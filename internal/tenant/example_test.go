package tenant

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExampleTenant: the example written at the first start is not a
// tenant (the store reads *.toml only), validates once renamed, and is
// written once: a deleted example does not come back.
func TestExampleTenant(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	s := &Store{Dir: dir}
	marker := filepath.Join(data, "example-written")
	p, err := s.WriteExample(marker)
	if err != nil || p != filepath.Join(dir, ExampleFile) {
		t.Fatalf("WriteExample = %q, %v", p, err)
	}
	snap, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Tenants) != 0 || len(snap.Problems) != 0 || len(snap.Invalid) != 0 {
		t.Fatalf("the example is read as a tenant: %+v", snap)
	}

	// renamed, it is a valid tenant named after its new file
	if err := os.Rename(p, s.Path("lab")); err != nil {
		t.Fatal(err)
	}
	snap, err = s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Problems) != 0 || len(snap.Tenants) != 1 || snap.Tenants[0].Name != "lab" {
		t.Fatalf("the renamed example: %v, %d tenants", snap.Problems, len(snap.Tenants))
	}
	lab := snap.Tenants[0]
	if lab.Provider != ProviderMetal || len(lab.NodeGroups) != 2 || len(lab.Nodes()) != 2 {
		t.Fatalf("the example declares %+v", lab)
	}

	// written once: the next start does not bring it back
	if p, err := s.WriteExample(marker); err != nil || p != "" {
		t.Fatalf("second WriteExample = %q, %v", p, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ExampleFile)); !os.IsNotExist(err) {
		t.Fatalf("the example came back: %v", err)
	}
}
