package addoncheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepository checks this repository's add-on package.
func TestRepository(t *testing.T) {
	errs, warnings := CheckDir("../..")
	for _, err := range errs {
		t.Error(err)
	}
	for _, w := range warnings {
		t.Log("warning:", w)
	}
}

// TestDocsTabSize keeps the Documentation tab (DOCS.md) short: the long
// reference lives in docs/reference.md.
func TestDocsTabSize(t *testing.T) {
	fi, err := os.Stat("../../DOCS.md")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 12*1000 {
		t.Fatalf("DOCS.md is %d bytes; keep it at most 12 KB and move reference material to docs/reference.md", fi.Size())
	}
}

// TestNoLargeFiles: nothing over 5 MB is tracked (the repository is what
// users clone when they add it to Home Assistant).
func TestNoLargeFiles(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if fi, err := os.Stat(filepath.Join("../..", f)); err == nil && fi.Size() > 5<<20 {
			t.Errorf("%s is %d bytes: built files belong in .gitignore", f, fi.Size())
		}
	}
}
