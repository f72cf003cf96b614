package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/state/postgres"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestSharedStore runs the engine over a real PostgreSQL store: the
// records, secrets, backups' index and the OpenTofu state are in the store
// (the data folder holds the working copy and no state), and once another
// instance leads, every write of this one is refused and changes nothing,
// neither in the store nor in the data folder.
func TestSharedStore(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := ctxTimeout(t, 5*time.Minute)
	openStore := func(instance string) *postgres.Store {
		s, err := postgres.Open(ctx, pg.URL, pg.Password, instance, pass, postgres.Options{Heartbeat: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a := openStore("a")
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureShared(t, 2, 1, la.Writer())
	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	f.rec.wait(t, "phase running", long, phaseIs(tenant.PhaseRunning))
	if err := f.eng.Backup(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	f.rec.wait(t, "backup", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("backup")
		return ok && ev.Result == tenant.ResultSucceeded
	})

	data := filepath.Join(f.dir, "data")
	local := func(file string) []byte {
		b, err := os.ReadFile(filepath.Join(data, "tenants", "lab", file))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rec, ok, err := a.Record(ctx, "lab")
	if err != nil || !ok || !bytes.Equal(rec, local("engine.json")) {
		t.Fatalf("the store's record (%v, %v) is not the data folder's", ok, err)
	}
	for _, kind := range state.SecretKinds {
		b, ok, err := a.Secret(ctx, "lab", kind)
		if err != nil || !ok || !bytes.Equal(b, local(kind)) {
			t.Errorf("the store's %s (%v, %v) is not the data folder's", kind, ok, err)
		}
	}
	vs, err := la.Writer().States().Versions(ctx, "lab")
	if err != nil || len(vs) == 0 {
		t.Fatalf("no OpenTofu state in the store: %v %v", vs, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "tofu", "state")); len(ents) != 0 {
		t.Errorf("the data folder holds OpenTofu states too: %v", ents)
	}
	bs, err := a.Backups(ctx, "lab")
	if err != nil || len(bs) != 1 {
		t.Fatalf("backups' index: %v %v", bs, err)
	}
	if sum, err := fileSHA256(filepath.Join(data, "backups", "lab", bs[0].File)); err != nil || sum != bs[0].SHA256 {
		t.Errorf("the index's checksum is not the snapshot's: %v", err)
	}

	// another instance leads: a's writes are refused, nothing changes
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := openStore("b")
	if _, err := b.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	before, beforeLocal := rec, local("engine.json")
	if err := f.eng.Apply(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	f.rec.wait(t, "the fenced apply fails", long, func(r *recorder) bool {
		ev, ok := r.lastEvent("apply")
		return ok && ev.Result == tenant.ResultFailed
	})
	ev, _ := f.rec.lastEvent("apply")
	if !strings.Contains(ev.Message, "no longer leads") {
		t.Errorf("the failed apply says %q, want that this instance no longer leads", ev.Message)
	}
	after, _, err := b.Record(ctx, "lab")
	if err != nil || !bytes.Equal(after, before) {
		t.Errorf("a fenced instance changed the store's record: %v", err)
	}
	if !bytes.Equal(local("engine.json"), beforeLocal) {
		t.Error("a fenced write changed the data folder's record")
	}
	vs2, err := b.Writer(0).States().Versions(ctx, "lab")
	if err != nil || len(vs2) != len(vs) {
		t.Errorf("a fenced instance added state versions: %d → %d (%v)", len(vs), len(vs2), err)
	}
}

// newFixtureShared is newFixture (nodes simulated nodes, workers workers)
// writing through w, its OpenTofu state in w's store.
func newFixtureShared(t *testing.T, nodes, workers int, w state.Writer) *fixture {
	t.Helper()
	f := &fixture{t: t, states: w.States()}
	return f.init(nodes, workers, false, func(o *Options) { o.Shared = w })
}

// TestShareFolderRefreshedAtStart: the share folder gets the kubeconfig
// and talosconfig back at start when it lacks them (a new box that took
// over a shared store, a folder emptied by hand).
func TestShareFolderRefreshedAtStart(t *testing.T) {
	share := filepath.Join(t.TempDir(), "share")
	f := newFixtureTweak(t, 1, 0, false, func(o *Options) { o.ShareDir = share })
	if err := f.eng.Apply(ctxTimeout(t, long), "lab"); err != nil {
		t.Fatal(err)
	}
	f.rec.wait(t, "phase running", long, phaseIs(tenant.PhaseRunning))
	f.stop()
	if err := os.RemoveAll(share); err != nil {
		t.Fatal(err)
	}
	f.rec = newRecorder()
	f.start()
	for _, kind := range []string{state.Kubeconfig, state.Talosconfig} {
		want, err := os.ReadFile(filepath.Join(f.dir, "data", "tenants", "lab", kind))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(share, "lab", kind))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("share folder %s after the start: %v", kind, err)
		}
		if fi, err := os.Stat(filepath.Join(share, "lab", kind)); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", kind, fi.Mode().Perm())
		}
	}
}
