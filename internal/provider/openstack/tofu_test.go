package openstack_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// runTofu runs tofu in dir with an environment built from scratch (a HOME
// inside dir, TF_IN_AUTOMATION, and cliConfig, or an empty CLI config of our
// own when there is none), and returns stdout and the exit code.
func runTofu(t testing.TB, bin, cliConfig, dir string, args ...string) ([]byte, int) {
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
