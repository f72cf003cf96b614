package tofu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// bareRunner is a Runner without a tofu binary: its store, backend and
// workspaces, for what needs no tofu.
func bareRunner(t *testing.T, dataDir string) *Runner {
	t.Helper()
	st, err := httpstate.Open(filepath.Join(dataDir, "state"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpstate.Start(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	return &Runner{cfg: Config{DataDir: dataDir, Passphrase: testPass, GracePeriod: 10 * time.Second},
		log: zaptest.NewLogger(t), file: st, states: st.Backend(), server: srv, locks: map[string]*sync.Mutex{}}
}

func fakeState(serial int, lineage string) []byte {
	return fmt.Appendf(nil, `{"serial":%d,"lineage":%q,"meta":{},"encrypted_data":"c2VjcmV0","encryption_version":"v0"}`, serial, lineage)
}

// TestRecoverErroredState: a state tofu could not upload is imported only
// when it continues the stored one (same lineage, greater serial); anything
// else is moved aside and kept, never imported over newer state and never
// left to block the next command.
func TestRecoverErroredState(t *testing.T) {
	for _, c := range []struct {
		name    string
		stored  []byte // nil: no stored state
		errored []byte
		want    string // imported, stale, unreadable
	}{
		{"no stored state", nil, fakeState(3, "L"), "imported"},
		{"newer", fakeState(5, "L"), fakeState(6, "L"), "imported"},
		{"older", fakeState(5, "L"), fakeState(4, "L"), "stale"},
		{"same serial", fakeState(5, "L"), fakeState(5, "L"), "stale"},
		{"other lineage", fakeState(5, "L"), fakeState(9, "M"), "stale"},
		{"empty (full disk)", fakeState(5, "L"), []byte{}, "unreadable"},
		{"truncated", fakeState(5, "L"), fakeState(6, "L")[:20], "unreadable"},
		{"no serial", fakeState(5, "L"), []byte(`{"lineage":"L"}`), "unreadable"},
		// tofu leaves the lineage out of the errored.tfstate of a first apply
		{"first apply, no lineage", nil, fakeState(1, ""), "imported"},
		{"newer, no lineage", fakeState(1, "L"), fakeState(2, ""), "imported"},
		{"older, no lineage", fakeState(3, "L"), fakeState(2, ""), "stale"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := bareRunner(t, t.TempDir())
			ws, err := r.Workspace("lab", WorkspaceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c.stored != nil {
				if err := r.file.Put("lab", c.stored, ""); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(ws.Dir(), ErroredStateFile)
			if err := os.WriteFile(p, c.errored, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.Recover(context.Background(), "lab"); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Fatalf("%s still in place: %v", ErroredStateFile, err)
			}
			kept, _ := filepath.Glob(p + "." + c.want + "-*")
			if len(kept) != 1 {
				all, _ := filepath.Glob(p + ".*")
				t.Fatalf("want it moved to %s.%s-*, have %v", ErroredStateFile, c.want, all)
			}
			if b, _ := os.ReadFile(kept[0]); string(b) != string(c.errored) {
				t.Errorf("moved file changed: %q", b)
			}
			cur, _, _ := r.file.Get("lab")
			want := c.stored
			if c.want == "imported" {
				want = c.errored
			}
			if string(cur) != string(want) {
				t.Errorf("stored state = %s, want %s", cur, want)
			}
		})
	}
}

// TestRecoverKeepsErroredWhileLocked: a command meeting errored.tfstate
// while the lock is held leaves both alone and says so; Recover (at start,
// when no tofu of ours can hold it) releases the lock and imports.
func TestRecoverKeepsErroredWhileLocked(t *testing.T) {
	r := bareRunner(t, t.TempDir())
	ws, err := r.Workspace("lab", WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.file.Put("lab", fakeState(1, "L"), ""); err != nil {
		t.Fatal(err)
	}
	if err := r.file.Lock("lab", httpstate.LockInfo{ID: "dead-tofu", Operation: "OperationTypeApply"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(ws.Dir(), ErroredStateFile)
	if err := os.WriteFile(p, fakeState(2, "L"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = ws.recoverErroredState(context.Background(), "plan")
	if !errors.Is(err, ErrStateLocked) || !strings.Contains(err.Error(), ErroredStateFile) {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal("errored.tfstate moved while locked")
	}
	if err := r.Recover(context.Background(), "lab"); err != nil {
		t.Fatal(err)
	}
	if _, ok := lockOf(t, r, "lab"); ok {
		t.Error("stale lock kept")
	}
	if cur, _, _ := r.file.Get("lab"); string(cur) != string(fakeState(2, "L")) {
		t.Errorf("state = %s", cur)
	}
	// A tenant that never ran tofu has nothing to recover.
	if err := r.Recover(context.Background(), "never"); err != nil {
		t.Errorf("Recover(never) = %v", err)
	}
	if err := r.Recover(context.Background(), "../x"); err == nil {
		t.Error("Recover accepted a bad name")
	}
}
