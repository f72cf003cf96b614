// Package providertest holds what the renderers' tests share.
package providertest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Golden compares a render with testdata/<name>, rewriting the file first
// when update is set (go test -update).
func Golden(t *testing.T, update bool, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the render (run go test -update after checking the change):\n%s", path, got)
	}
}
