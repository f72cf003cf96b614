package postgres

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// TestStateRealTofu: the real tofu keeps its state in PostgreSQL through
// the http backend: init, apply (lock, upload, unlock), a second apply on
// top of the first's state, and a lock held by someone else refused with
// the holder named.
func TestStateRealTofu(t *testing.T) {
	bin, rc := testenv.Tofu(t)
	p := testenv.StartPostgres(t)
	ctx := ctxT(t)
	s := open(t, p, p.URL, "a")
	states := lead(t, s).Writer().States()
	srv, err := httpstate.StartBackend(states, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	dir := t.TempDir()
	writeConfig := func(value string) {
		cfg := map[string]any{
			"terraform": map[string]any{"backend": map[string]any{"http": map[string]any{}}},
			"resource":  map[string]any{"terraform_data": map[string]any{"marker": map[string]any{"input": value}}},
		}
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tofu := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "TF_IN_AUTOMATION=1",
			"TF_CLI_CONFIG_FILE=" + rc, "TF_HTTP_RETRY_MAX=0"}, srv.Env("lab")...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	writeConfig("one")
	if out, err := tofu("init", "-input=false", "-no-color"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	for _, v := range []string{"one", "two"} {
		writeConfig(v)
		if out, err := tofu("apply", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatalf("apply %s: %v\n%s", v, err, out)
		}
		data, ok, err := states.Get(ctx, "lab")
		if err != nil || !ok || !strings.Contains(string(data), `"input"`) || !strings.Contains(string(data), `"`+v+`"`) {
			t.Fatalf("state after apply %s: %v %v %.300s", v, ok, err, data)
		}
		if _, held, err := states.LockOf(ctx, "lab"); err != nil || held {
			t.Fatalf("lock after apply %s: held %v, %v", v, held, err)
		}
	}
	if vs, err := states.Versions(ctx, "lab"); err != nil || len(vs) < 2 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	if err := states.Lock(ctx, "lab", httpstate.LockInfo{ID: "held-by-the-other-box", Operation: "OperationTypeApply", Who: "root@other"}, nil); err != nil {
		t.Fatal(err)
	}
	writeConfig("three")
	out, err := tofu("apply", "-auto-approve", "-input=false", "-no-color", "-lock-timeout=0s")
	if err == nil || !strings.Contains(out, "held-by-the-other-box") {
		t.Fatalf("apply over a held lock: %v\n%s", err, out)
	}
	if data, _, _ := states.Get(ctx, "lab"); strings.Contains(string(data), `"three"`) {
		t.Fatal("the refused apply wrote its state")
	}
}
