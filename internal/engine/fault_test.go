package engine

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

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// bareEngine is an engine whose tenant workers are not started: commands
// can be checked against a queue that nothing drains.
func bareEngine(t *testing.T, file string) (*Engine, *tenant.Store) {
	t.Helper()
	bin, _ := testenv.Tofu(t)
	dir := t.TempDir()
	store := &tenant.Store{Dir: filepath.Join(dir, "tenants")}
	if err := os.MkdirAll(store.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.Path("lab"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := tofu.New(tofu.Config{Binary: bin, DataDir: filepath.Join(dir, "data", "tofu"), Passphrase: pass})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{DataDir: filepath.Join(dir, "data"), Store: store, Runner: r, Publisher: newRecorder()})
	if err != nil {
		t.Fatal(err)
	}
	return e, store
}

// addIdle registers a tenant without starting its worker.
func (e *Engine) addIdle(t *testing.T, name string, rec record) *tenantState {
	t.Helper()
	s, err := e.opts.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	ts := newTenantState(e, name, rec)
	for _, tt := range s.Tenants {
		if tt.Name == name {
			ts.setSpec(tt)
		}
	}
	e.mu.Lock()
	e.ts[name] = ts
	e.mu.Unlock()
	return ts
}

// A scale refused because the tenant's queue is full changes nothing: the
// file keeps its count (fault matrix item 5).
func TestScaleRefusedWritesNothing(t *testing.T) {
	file := tenantFile([]string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, 1, false)
	e, store := bareEngine(t, file)
	ts := e.addIdle(t, "lab", record{Infra: true, Bootstrapped: true})
	for range cap(ts.queue) {
		ts.queue <- &operation{name: opPlan}
	}
	for _, call := range []func() error{
		func() error { return e.Scale(context.Background(), "lab", "workers", 2) },
		func() error { return e.SetAutoApply(context.Background(), "lab", true) },
	} {
		err := call()
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("a command with a full queue: err = %v, want ErrBusy", err)
		}
	}
	data, err := os.ReadFile(store.Path("lab"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != file {
		t.Fatalf("a refused command changed the tenant file:\n%s", data)
	}
	// with room again, the same scale is taken
	<-ts.queue
	if err := e.Scale(context.Background(), "lab", "workers", 2); err != nil {
		t.Fatalf("scale with room: %v", err)
	}
	if data, _ := os.ReadFile(store.Path("lab")); !strings.Contains(string(data), "count = 2") {
		t.Fatalf("scale did not write the count:\n%s", data)
	}
	if n := len(ts.queue); n != cap(ts.queue) {
		t.Fatalf("the scale queued %d operations, want the queue full again", n-(cap(ts.queue)-1))
	}
}

// Records saved at once from many goroutines (the config markers of nodes
// configured in parallel) all reach the file (fault matrix item 9).
func TestConcurrentRecordSavesKeepEveryMarker(t *testing.T) {
	e, _ := bareEngine(t, tenantFile([]string{"127.0.0.1", "127.0.0.2"}, 1, false))
	const nodes = 48
	for round := range 5 {
		rec := record{Infra: true, Nodes: map[string]nodeRecord{}}
		for i := range nodes {
			rec.Nodes[fmt.Sprintf("lab-w-%d", i)] = nodeRecord{Address: fmt.Sprintf("127.0.0.%d", i+1)}
		}
		ts := newTenantState(e, "lab", rec)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := ts.recs.save(func(r *record) { setConfigHash(r, fmt.Sprintf("lab-w-%d", i), fmt.Sprintf("hash-%d", i)) }); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		got, err := e.loadRecord("lab")
		if err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			n := fmt.Sprintf("lab-w-%d", i)
			if got.Nodes[n].ConfigHash != fmt.Sprintf("hash-%d", i) {
				t.Fatalf("round %d: node %s lost its config marker (%q)", round, n, got.Nodes[n].ConfigHash)
			}
		}
	}
}

// Apply and Plan pressed while the tenant file does not validate are
// refused with the file's problem; nothing runs (fault matrix item 10).
func TestApplyRefusedOnInvalidFile(t *testing.T) {
	file := tenantFile([]string{"127.0.0.1", "127.0.0.2"}, 1, false)
	e, store := bareEngine(t, file)
	rec := newRecorder()
	e.opts.Publisher = rec
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, time.Hour) }() // the watcher reads once; the press must not rely on it
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-e.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("engine not ready")
	}
	broken := strings.Replace(file, `role = "worker"`, `role = "wroker"`, 1)
	if err := os.WriteFile(store.Path("lab"), []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"apply": func() error { return e.Apply(ctx, "lab") },
		"plan":  func() error { return e.Plan(ctx, "lab") },
	} {
		err := call()
		if err == nil {
			t.Fatalf("%s of an invalid file was accepted", name)
		}
		if !strings.Contains(err.Error(), "lab.toml:") || !strings.Contains(err.Error(), "role") {
			t.Fatalf("%s: the error does not say where the file is wrong: %v", name, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 0 {
		t.Fatalf("operations ran: %+v", rec.events)
	}
}

// A node that falls back to maintenance mode after it was given its config
// is noticed and given it again; one that keeps falling back fails the
// apply with a message that says so, instead of a silent wait until the
// node timeout (fault matrix item 6).
func TestMaintenanceFallback(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		f := newFixture(t, 2, 1, false)
		f.sims[1].FailInstall(1)
		if err := f.eng.Apply(context.Background(), "lab"); err != nil {
			t.Fatal(err)
		}
		f.rec.wait(t, "phase running", long, phaseIs(tenant.PhaseRunning))
		if c := f.sims[1].Calls(); c.Apply != 2 {
			t.Fatalf("the worker got %d applies, want 2 (the config again after the fallback)", c.Apply)
		}
	})
	t.Run("always", func(t *testing.T) {
		f := newFixture(t, 2, 1, false)
		f.sims[1].FailInstall(100)
		if err := f.eng.Apply(context.Background(), "lab"); err != nil {
			t.Fatal(err)
		}
		var ev tenant.OperationEvent
		f.rec.wait(t, "apply failed", long, func(r *recorder) bool {
			var ok bool
			ev, ok = r.lastEvent("apply")
			return ok && ev.Result == tenant.ResultFailed
		})
		if !strings.Contains(ev.Message, "lab-workers-1 fell back to maintenance mode 3 times") {
			t.Fatalf("failure message: %s", ev.Message)
		}
		if c := f.sims[1].Calls(); c.Apply != 3 {
			t.Fatalf("the worker got %d applies, want 3", c.Apply)
		}
	})
}
