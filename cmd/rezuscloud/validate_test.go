package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidate(t *testing.T) {
	good := "../../internal/tenant/testdata/lab.toml"
	bad := "../../internal/tenant/testdata/broken.toml"
	if code, out, errs := runCLI(t, "validate", good); code != 0 || out != "" || errs != "" {
		t.Fatalf("valid file: exit %d, out %q, err %q", code, out, errs)
	}
	code, out, _ := runCLI(t, "validate", bad)
	if code != 1 || strings.Count(out, "\n") != 3 {
		t.Fatalf("broken file: exit %d, out:\n%s", code, out)
	}
	// file:line:col (the contract), then the place in the file's own words
	for _, want := range []string{`broken.toml:8:1: group "cp": count`, `broken.toml:19:1: group "workers": cuont: unknown key`, `broken.toml:22:3: group "workers", machine 192.168.1.21: address`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if code, _, _ := runCLI(t, "validate"); code != 2 {
		t.Errorf("no files: exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, "validate", "--nope", good); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	// two valid files that share a machine address
	dir := t.TempDir()
	src, _ := os.ReadFile(good)
	other := filepath.Join(dir, "other.toml")
	os.WriteFile(other, src, 0o644)
	code, out, _ = runCLI(t, "validate", good, other)
	if code != 1 || !strings.Contains(out, `other.toml:14:3: group "cp", machine 192.168.1.21: address: 192.168.1.21 is already a machine of tenant "lab"`) {
		t.Fatalf("shared address: exit %d, out:\n%s", code, out)
	}
	if code, _, errs := runCLI(t, "validate", filepath.Join(dir, "missing.toml")); code != 1 {
		t.Fatalf("missing file: exit %d %s", code, errs)
	}
}

func TestVersionAndUnknown(t *testing.T) {
	if code, out, _ := runCLI(t, "version"); code != 0 || out != "rezuscloud dev\n" {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errs := runCLI(t, "frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Fatalf("unknown: %d %q", code, errs)
	}
}
