package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder stands in for a test so that Tofu's Skip and Fatal can be seen.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }

func TestTofuMissing(t *testing.T) {
	t.Setenv("REZUSCLOUD_TOFU", "/nonexistent/tofu")
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	if bin, _ := Tofu(r); bin != "" || !strings.Contains(r.skipped, "run make tools") || r.fatal != "" {
		t.Errorf("bin=%q skipped=%q fatal=%q", bin, r.skipped, r.fatal)
	}
	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	if Tofu(r); !strings.Contains(r.fatal, "run make tools") || r.skipped != "" {
		t.Errorf("skipped=%q fatal=%q", r.skipped, r.fatal)
	}
}

func TestTofuFromEnv(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "tofu")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "tofurc"), nil, 0o644)
	t.Setenv("REZUSCLOUD_TOFU", bin)
	t.Setenv("REZUSCLOUD_TOFURC", "")
	got, rc := Tofu(t)
	if got != bin || rc != filepath.Join(dir, "tofurc") {
		t.Errorf("Tofu = %q, %q", got, rc)
	}
}

func TestRepoRoot(t *testing.T) {
	root := repoRoot()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repoRoot = %q", root)
	}
}
