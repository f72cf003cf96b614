package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// BenchmarkApplyToRunning measures an Apply of a fresh metal tenant of n
// simulated nodes up to phase running, and how much of it tofu took; then
// it times raw `tofu plan -out && tofu apply` of the same document in a
// copy of the work dir (local state, no encryption) for comparison.
func BenchmarkApplyToRunning(b *testing.B) {
	for _, n := range []int{3, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var total, inTofu, raw time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := newFixture(b, n, n-1, false)
				b.StartTimer()
				start := time.Now()
				if err := f.eng.Apply(context.Background(), "lab"); err != nil {
					b.Fatal(err)
				}
				f.rec.wait(b, "running", 10*time.Minute, phaseIs(tenant.PhaseRunning))
				total += time.Since(start)
				b.StopTimer()
				ts, _ := f.eng.lookup("lab")
				ts.mu.Lock()
				inTofu += ts.last.tofu
				ts.mu.Unlock()
				raw += rawTofu(b, f)
				f.stop()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/apply")
			b.ReportMetric(inTofu.Seconds()/float64(b.N), "s-in-tofu/apply")
			b.ReportMetric(raw.Seconds()/float64(b.N), "s-raw-tofu/apply")
		})
	}
}

// rawTofu runs plan -out and apply with the bare tofu on a copy of the
// tenant's document, without our backend or encryption.
func rawTofu(b *testing.B, f *fixture) time.Duration {
	doc, err := os.ReadFile(filepath.Join(f.dir, "data", "tofu", "work", "lab", "main.tf.json"))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	// the runner's document has an http backend and encryption; the raw
	// run gets the plain render instead
	plain, err := stripBackend(doc)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "main.tf.json"), plain, 0o600)
	rc := filepath.Join(dir, "tofurc")
	os.WriteFile(rc, nil, 0o600)
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TF_IN_AUTOMATION=1", "TF_CLI_CONFIG_FILE=" + rc, "TF_VAR_state_passphrase=" + pass}
	run := func(args ...string) {
		cmd := exec.Command(f.tofuBin, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("tofu %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-input=false")
	start := time.Now()
	run("plan", "-input=false", "-out=plan")
	run("apply", "-input=false", "plan")
	run("output", "-json")
	return time.Since(start)
}

// stripBackend removes the state backend from a runner document, keeping
// the encryption, so the raw run uses local state at the same cost.
func stripBackend(doc []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, err
	}
	if tf, ok := m["terraform"].(map[string]any); ok {
		delete(tf, "backend")
	}
	return json.Marshal(m)
}
