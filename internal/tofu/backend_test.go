package tofu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/state/postgres"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// pgStore opens a PostgreSQL store on a fresh database of p, closed when the
// test ends.
func pgStore(t *testing.T, p *testenv.Postgres) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, p.NewDatabase(), p.Password, "a", testPass, postgres.Options{Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// pgLead makes s's instance the leader, resigned when the test ends.
func pgLead(t *testing.T, s *postgres.Store) *postgres.Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := s.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Resign(context.Background()) })
	return l
}

// stored is what states holds of name: its version numbers and current data.
func stored(t *testing.T, states httpstate.Backend, name string) string {
	t.Helper()
	ctx := context.Background()
	vs, err := states.Versions(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := states.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, v := range vs {
		seqs = append(seqs, v.Seq)
	}
	b, _ := json.Marshal(seqs)
	return string(b) + " " + string(data)
}

// TestStatesPostgres: with Config.States the real tofu keeps its state in
// PostgreSQL (encrypted, nothing under the data folder's state/), a second
// plan sees no changes, and Recover releases a stale lock held there.
func TestStatesPostgres(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	states := pgLead(t, pgStore(t, p)).Writer().States()
	dataDir := t.TempDir()
	r := newRunner(t, dataDir, func(c *Config) { c.States = states })
	if r.Store() != nil || r.states != states {
		t.Fatalf("Store() = %v, States() = %v", r.Store(), r.states)
	}
	ws := workspace(t, r, "lab", dataDoc(2, "pg"))
	if sum := apply(t, ws); sum.Add != 2 {
		t.Fatalf("plan = %+v", sum)
	}
	ctx := context.Background()
	vs, err := states.Versions(ctx, "lab")
	if err != nil || len(vs) == 0 {
		t.Fatalf("versions in PostgreSQL: %v %v", vs, err)
	}
	data, ok, err := states.Get(ctx, "lab")
	if err != nil || !ok || strings.Contains(string(data), marker) || !strings.Contains(string(data), "encrypted_data") {
		t.Fatalf("state in PostgreSQL (want tofu's ciphertext): %v %v %.300s", ok, err, data)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "state")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a data folder state store was made: %v", err)
	}
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.HasChanges() {
		t.Fatalf("second plan = %+v", plan.Summary)
	}

	// A lock a killed tofu left in PostgreSQL: shown, then released.
	if err := states.Lock(ctx, "lab", httpstate.LockInfo{ID: "dead-tofu", Operation: "OperationTypeApply", Created: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if li, held := lockOf(t, r, "lab"); !held || li.ID != "dead-tofu" {
		t.Fatalf("lock = %+v %v", li, held)
	}
	if err := r.Recover(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	if li, held := lockOf(t, r, "lab"); held {
		t.Fatalf("lock after Recover = %+v", li)
	}
	if _, err := ws.Plan(ctx, RunOptions{}); err != nil {
		t.Fatalf("plan after Recover: %v", err)
	}
}

// gateDoc is one terraform_data whose provisioner waits until fifo is
// written to: an apply the test holds in the middle.
func gateDoc(fifo string) []byte {
	b, _ := json.Marshal(map[string]any{"resource": map[string]any{"terraform_data": map[string]any{
		"gate": map[string]any{"input": marker,
			"provisioner": []any{map[string]any{"local-exec": map[string]any{"command": "cat " + fifo}}}},
	}}})
	return b
}

// TestStatesFenced: an instance that no longer leads (another leadership
// has begun since its Writer) cannot change the state in PostgreSQL: a
// command is refused at its lock, and an apply that was fenced while it ran
// is refused at its upload. Both fail with the refusal (not retried), and
// the stored state is what it was.
func TestStatesFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testenv.StartPostgres(t)
	s := pgStore(t, p)
	l1 := pgLead(t, s)
	old := l1.Writer().States()
	r := newRunner(t, "", func(c *Config) { c.States = old })
	ws := workspace(t, r, "lab", dataDoc(1, "one"))
	apply(t, ws)
	fence := func() {
		t.Helper()
		if err := l1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		l2 := pgLead(t, s)
		if l2.Epoch() <= l1.Epoch() {
			t.Fatalf("epoch %d after %d", l2.Epoch(), l1.Epoch())
		}
		l1 = l2
	}
	refused := func(what string, err error, before string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error from the fenced instance", what)
		}
		if !errors.Is(err, state.ErrFenced) || !errors.Is(err, httpstate.ErrRefused) || !strings.Contains(err.Error(), "no longer leads") {
			t.Fatalf("%s: %v, want this instance no longer leads", what, err)
		}
		if after := stored(t, old, "lab"); after != before {
			t.Fatalf("%s changed the stored state:\nbefore %s\nafter  %s", what, before, after)
		}
	}

	// Fenced while an apply runs: refused at the upload.
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteConfig(gateDoc(fifo)); err != nil {
		t.Fatal(err)
	}
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := stored(t, old, "lab")
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := ws.Apply(ctx, plan, RunOptions{OnEvent: func(ev Event) {
			if ev.Type == EventProvisionStart {
				once.Do(func() { close(started) })
			}
		}})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("apply ended before its provisioner started: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the provisioner did not start")
	}
	fence()
	opened := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until cat reads
		if err == nil {
			err = f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the provisioner did not open its gate")
	}
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the fenced apply did not end")
	}
	refused("apply fenced while it ran", err, before)
	t.Logf("fenced apply: %v", err)

	// Fenced before the command: refused at the lock.
	if err := r.ForceUnlock(ctx, "lab", mustLock(t, r).ID); !errors.Is(err, state.ErrFenced) {
		t.Fatalf("force-unlock by the fenced instance: %v", err)
	}
	_ = os.Remove(filepath.Join(ws.Dir(), ErroredStateFile))
	if err := l1.Writer().States().ForceUnlock(ctx, "lab", mustLock(t, r).ID); err != nil {
		t.Fatal(err)
	}
	before = stored(t, old, "lab")
	if err := ws.WriteConfig(dataDoc(1, "two")); err != nil {
		t.Fatal(err)
	}
	_, err = ws.Plan(ctx, RunOptions{})
	refused("plan by the fenced instance", err, before)
	t.Logf("fenced plan: %v", err)
}

func mustLock(t *testing.T, r *Runner) httpstate.LockInfo {
	t.Helper()
	li, held := lockOf(t, r, "lab")
	if !held {
		t.Fatal("not locked")
	}
	return li
}

// flaky fails the first fails uploads as an unreachable database would
// (500: tofu retries), then passes them on, recording when each came.
type flaky struct {
	httpstate.Backend
	mu    sync.Mutex
	fails int
	puts  []time.Time
}

func (f *flaky) Put(ctx context.Context, name string, data []byte, lockID string) error {
	f.mu.Lock()
	f.puts = append(f.puts, time.Now())
	n := len(f.puts)
	f.mu.Unlock()
	if n <= f.fails {
		return errors.New("state store postgres://127.0.0.1: connection refused")
	}
	return f.Backend.Put(ctx, name, data, lockID)
}

// TestStatesRetried: an upload that meets a short database outage is
// retried by tofu (TF_HTTP_RETRY_MAX above its default of 2, waits capped
// by TF_HTTP_RETRY_WAIT_MAX at 5 s instead of 30) and the apply succeeds.
func TestStatesRetried(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	f := &flaky{Backend: pgLead(t, pgStore(t, p)).Writer().States()}
	r := newRunner(t, "", func(c *Config) { c.States = f })
	ws := workspace(t, r, "lab", dataDoc(1, "retried"))
	plan, err := ws.Plan(context.Background(), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.fails, f.puts = 4, nil
	f.mu.Unlock()
	if _, err := ws.Apply(context.Background(), plan, RunOptions{}); err != nil {
		t.Fatalf("apply over a 4-upload outage: %v", err)
	}
	f.mu.Lock()
	puts := f.puts
	f.mu.Unlock()
	if len(puts) != 5 {
		t.Fatalf("%d uploads, want 5 (4 failed, then the retry that passed)", len(puts))
	}
	var gaps []time.Duration
	for i := 1; i < len(puts); i++ {
		gaps = append(gaps, puts[i].Sub(puts[i-1]).Round(10*time.Millisecond))
	}
	t.Logf("waits between the uploads: %v", gaps)
	// retryablehttp waits min*2^n capped at max: 1, 2, 4, then 5 s (8 s
	// without the cap).
	if gap := puts[4].Sub(puts[3]); gap < 4*time.Second || gap > 7*time.Second {
		t.Errorf("the last retry came %v after the one before, want about 5 s (TF_HTTP_RETRY_WAIT_MAX)", gap)
	}
	if data, ok, err := f.Get(context.Background(), "lab"); err != nil || !ok || !strings.Contains(string(data), "encrypted_data") {
		t.Fatalf("state after the outage: %v %v", ok, err)
	}
}
