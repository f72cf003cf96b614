package tofu

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/safefile/safefiletest"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// TestHostileWorkspaceFiles: a FIFO, a symlink to /dev/zero, a huge sparse
// file or a directory in place of a workspace's files gives an error that
// names the file, at once, and changes nothing: the process record (a tofu
// it named may be alive, so the lock is kept), the state tofu could not
// upload (neither imported nor moved aside), the document and the init
// stamp, and the CLI config given to New.
func TestHostileWorkspaceFiles(t *testing.T) {
	cases := []struct {
		name string
		file string // in the workspace
		run  func(r *Runner, ws *Workspace) error
	}{
		{"process record", ProcessFile, func(r *Runner, _ *Workspace) error { return r.Recover(context.Background(), "lab") }},
		{"errored state", ErroredStateFile, func(r *Runner, _ *Workspace) error {
			r.file.ForceUnlock("lab", "dead-tofu") // recovery reads it only while unlocked
			return r.Recover(context.Background(), "lab")
		}},
		{"document", ConfigFile, func(_ *Runner, ws *Workspace) error { _, err := ws.needsInit(); return err }},
		{"init stamp", initStampFile, func(_ *Runner, ws *Workspace) error {
			if err := ws.WriteConfig([]byte(`{}`)); err != nil {
				return err
			}
			_, err := ws.needsInit()
			return err
		}},
	}
	for _, c := range cases {
		for _, k := range safefiletest.Kinds() {
			t.Run(c.name+"/"+k.Name, func(t *testing.T) {
				r := bareRunner(t, t.TempDir())
				ws, err := r.Workspace("lab", WorkspaceOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.file.Put("lab", fakeState(1, "L"), ""); err != nil {
					t.Fatal(err)
				}
				if err := r.file.Lock("lab", httpstate.LockInfo{ID: "dead-tofu"}); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(ws.Dir(), c.file)
				safefiletest.Put(t, k, path)
				safefiletest.Within(t, 10*time.Second, func() { safefiletest.Unblock(path) }, func() { err = c.run(r, ws) })
				if c.name == "init stamp" {
					// an unreadable stamp only means "init again" (which
					// rewrites it): it must not block or be read
					if err != nil {
						t.Fatalf("needsInit: %v", err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), k.Want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want %q naming %s", err, k.Want, path)
				}
				safefiletest.Unchanged(t, k, path)
				if c.name == "process record" {
					if _, held := lockOf(t, r, "lab"); !held {
						t.Error("the state lock was released with an unreadable process record")
					}
				}
				if cur, _, _ := r.file.Get("lab"); string(cur) != string(fakeState(1, "L")) {
					t.Errorf("stored state changed: %s", cur)
				}
				if moved, _ := filepath.Glob(path + ".*"); len(moved) != 0 {
					t.Errorf("moved aside: %v", moved)
				}
			})
		}
	}
	for _, k := range safefiletest.Kinds() {
		t.Run("CLI config/"+k.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tofurc")
			safefiletest.Put(t, k, path)
			var err error
			safefiletest.Within(t, 10*time.Second, func() { safefiletest.Unblock(path) }, func() {
				var r *Runner
				r, err = New(Config{Binary: filepath.Join(t.TempDir(), "no-tofu"), AllowMissing: true,
					DataDir: t.TempDir(), CLIConfigFile: path, Passphrase: testPass})
				if err == nil {
					r.Close(context.Background())
				}
			})
			if err == nil || !strings.Contains(err.Error(), k.Want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("New = %v, want %q naming %s", err, k.Want, path)
			}
			safefiletest.Unchanged(t, k, path)
		})
	}
}
