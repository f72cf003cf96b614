// Package testenv finds and starts the real peers that tests run against.
package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Tofu returns the tofu binary tests run and the CLI config that goes with it
// (the filesystem mirror of the pinned providers that `make tools` builds).
//
// $REZUSCLOUD_TOFU names the binary when set; otherwise it is the repository's
// .tools/bin/tofu. cliConfig is $REZUSCLOUD_TOFURC when set, else
// .tools/tofurc next to the binary's bin directory, else "" (no mirror: only
// built-in providers such as terraform_data work).
//
// When the binary is missing the test is skipped, or fails when $CI is set,
// so that CI never silently skips the real-tofu tests.
func Tofu(t testing.TB) (bin, cliConfig string) {
	t.Helper()
	bin = os.Getenv("REZUSCLOUD_TOFU")
	root := repoRoot()
	if bin == "" {
		if root == "" {
			missing(t, "tofu: cannot find the repository root (go.mod) and $REZUSCLOUD_TOFU is unset; run make tools")
			return "", ""
		}
		bin = filepath.Join(root, ".tools", "bin", "tofu")
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		missing(t, "tofu binary not found at "+bin+"; run make tools (or set REZUSCLOUD_TOFU)")
		return "", ""
	}
	cliConfig = os.Getenv("REZUSCLOUD_TOFURC")
	if cliConfig == "" {
		rc := filepath.Join(filepath.Dir(filepath.Dir(bin)), "tofurc")
		if _, err := os.Stat(rc); err == nil {
			cliConfig = rc
		}
	}
	return bin, cliConfig
}

func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
}

// repoRoot walks up from the working directory (the package dir when tests
// run) to the directory holding go.mod, falling back to this source file's
// directory.
func repoRoot() string {
	if dir, err := os.Getwd(); err == nil {
		if root := findGoMod(dir); root != "" {
			return root
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return findGoMod(filepath.Dir(file))
	}
	return ""
}

func findGoMod(dir string) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// RunTofu runs tofu in dir with an environment built from scratch (a HOME
// inside dir, TF_IN_AUTOMATION, and cliConfig, or an empty CLI config of our
// own when there is none), and returns stdout and the exit code.
func RunTofu(t testing.TB, bin, cliConfig, dir string, args ...string) ([]byte, int) {
	t.Helper()
	home := filepath.Join(dir, ".home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if cliConfig == "" {
		cliConfig = filepath.Join(home, "empty.tofurc")
		if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"TF_CLI_CONFIG_FILE=" + cliConfig,
		"TF_IN_AUTOMATION=1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), 0
	case errors.As(err, &exit):
		t.Logf("tofu %v: exit %d\nstdout: %s\nstderr: %s", args, exit.ExitCode(), stdout.Bytes(), stderr.Bytes())
		return stdout.Bytes(), exit.ExitCode()
	default:
		t.Fatalf("tofu %v: %v", args, err)
		return nil, -1
	}
}
