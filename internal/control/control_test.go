package control

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web"
)

// fakeEngine keeps views and answers backup like the engine: the
// operation is queued, and its end shows in the view (a new snapshot, or a
// failed last operation) a moment later.
type fakeEngine struct {
	mu      sync.Mutex
	views   []web.View
	changed chan struct{}
	calls   []string
	// outcome decides what a backup of a tenant does: "ok", "fail",
	// "refuse" (the command path's error) or "hang".
	outcome map[string]string
	delay   time.Duration // how long a snapshot takes
}

func newFake(outcome map[string]string, phases map[string]tenant.Phase) *fakeEngine {
	f := &fakeEngine{changed: make(chan struct{}), outcome: outcome, delay: 3 * time.Second}
	old := &tenant.BackupInfo{At: time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second), File: "etcd-20261130T040000Z.snapshot", Size: 1}
	for _, name := range []string{"a", "b", "c", "d"} {
		if p, ok := phases[name]; ok {
			f.views = append(f.views, web.View{Name: name, Status: tenant.Status{Phase: p, Backup: old}})
		}
	}
	return f
}

func (f *fakeEngine) Views() []web.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]web.View(nil), f.views...)
}

func (f *fakeEngine) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeEngine) command(_ context.Context, r hass.Request) hass.Response {
	f.mu.Lock()
	f.calls = append(f.calls, r.Action+" "+r.Tenant)
	out := f.outcome[r.Tenant]
	f.mu.Unlock()
	if out == "refuse" {
		return hass.ErrorResponse(r, errors.New("tenant "+r.Tenant+" has no talosconfig: press Apply"))
	}
	if out != "hang" {
		go func() {
			time.Sleep(f.delay) // the snapshot takes a while (fake time in the bubble)
			f.mu.Lock()
			defer f.mu.Unlock()
			for i := range f.views {
				v := &f.views[i]
				if v.Name != r.Tenant {
					continue
				}
				now := time.Now()
				if out == "ok" {
					v.Status.Backup = &tenant.BackupInfo{At: now.UTC().Truncate(time.Second), File: "etcd-new.snapshot", Size: 9}
				} else {
					v.Status.LastOperation = &tenant.OperationResult{Name: "backup", Result: tenant.ResultFailed, At: now,
						Message: "etcd backup: from a-cp-1: connection refused"}
				}
			}
			close(f.changed)
			f.changed = make(chan struct{})
		}()
	}
	return hass.Response{Status: "ok", Data: map[string]any{"queued": true}}
}

func TestBackup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[string]string{"a": "ok", "b": "fail", "d": "refuse"},
			map[string]tenant.Phase{"a": tenant.PhaseRunning, "b": tenant.PhaseDegraded, "c": tenant.PhaseAbsent, "d": tenant.PhaseRunning})
		ctx, cancel := context.WithTimeout(context.Background(), DefaultBound)
		defer cancel()
		rep := Backup(ctx, f, f.command, time.Now)
		got := map[string]Result{}
		for _, r := range rep.Results {
			got[r.Tenant] = r
		}
		if r := got["a"]; r.Status != "ok" || r.File != "etcd-new.snapshot" {
			t.Errorf("a: %+v", r)
		}
		if r := got["b"]; r.Status != "failed" || !strings.Contains(r.Message, "connection refused") || r.Kept != "etcd-20261130T040000Z.snapshot" {
			t.Errorf("b (the last good snapshot kept): %+v", r)
		}
		if r := got["c"]; r.Status != "skipped" {
			t.Errorf("c: %+v", r)
		}
		if r := got["d"]; r.Status != "failed" || !strings.Contains(r.Message, "no talosconfig") {
			t.Errorf("d: %+v", r)
		}
		if calls := strings.Join(f.calls, ","); calls != "backup a,backup b,backup d" {
			t.Errorf("commands %s", calls)
		}
		if rep.Took != 3*time.Second {
			t.Errorf("took %v, want the 3 s the snapshots took", rep.Took)
		}
	})
}

func TestBackupBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[string]string{"a": "hang", "b": "ok"}, map[string]tenant.Phase{"a": tenant.PhaseRunning, "b": tenant.PhaseRunning})
		ctx, cancel := context.WithTimeout(context.Background(), DefaultBound)
		defer cancel()
		rep := Backup(ctx, f, f.command, time.Now)
		if r := rep.Results[0]; r.Status != "timeout" || r.Kept != "etcd-20261130T040000Z.snapshot" {
			t.Errorf("a: %+v", r)
		}
		if r := rep.Results[1]; r.Status != "ok" {
			t.Errorf("b: %+v", r)
		}
		if rep.Took != DefaultBound {
			t.Errorf("took %v, want the bound %v", rep.Took, DefaultBound)
		}
	})
}

// TestSocket: backup-pre over the real socket; the socket is private and a
// stale one (a killed add-on's) is replaced, a live one is not taken.
func TestSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "rc") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "run", "control.sock")
	// a stale socket file left behind
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	di, _ := os.Stat(filepath.Dir(path))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("socket %v in %v, want 0600 in 0700", fi.Mode(), di.Mode())
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second listener on a live socket: %v", err)
	}
	f := newFake(map[string]string{"a": "ok"}, map[string]tenant.Phase{"a": tenant.PhaseRunning})
	f.delay = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Views: f, Command: f.command}).Serve(ctx, ln) }()
	rep, err := Ask(context.Background(), path, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Status != "ok" {
		t.Fatalf("report %+v", rep)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the socket outlives the server: %v", err)
	}
	if _, err := Ask(context.Background(), path, time.Second); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("no add-on: %v", err)
	}
}
