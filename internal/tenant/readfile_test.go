package tenant

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs Store.Load and fails the test when it has not returned by
// the deadline (a blocking open of a FIFO never returns on its own).
func loadWithin(t *testing.T, s *Store, d time.Duration) *Snapshot {
	t.Helper()
	type res struct {
		snap *Snapshot
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		snap, err := s.Load()
		ch <- res{snap, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.snap
	case <-time.After(d):
		t.Fatalf("Store.Load has not returned after %v", d)
		return nil
	}
}

// within runs fn and fails the test when it has not returned by the
// deadline.
func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
	}
}

func problemOf(snap *Snapshot, file string) (Problem, bool) {
	for _, p := range snap.Problems {
		if p.File == filepath.Base(file) { // the store names files within its folder
			return p, true
		}
	}
	return Problem{}, false
}

// TestLoadRefusesHostileFiles: a tenants dir holding a FIFO, a symlink to a
// device and an oversized (sparse) file next to a good tenant loads the
// good tenant and names each bad file, without blocking on the FIFO or
// reading the others.
func TestLoadRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "good.toml"), []byte(goodMetal), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Should Load hang on the FIFO, a writer lets the goroutine finish.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	zero := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sub := filepath.Join(dir, "dir.toml")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}

	s := &Store{Dir: dir}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	snap := loadWithin(t, s, 30*time.Second)
	runtime.ReadMemStats(&after)

	if len(snap.Tenants) != 1 || snap.Tenants[0].Name != "good" {
		t.Fatalf("tenants = %v, want only good", snap.Tenants)
	}
	for _, c := range []struct{ file, want string }{
		{fifo, "not a regular file"},
		{zero, "not a regular file"},
		{sub, "not a regular file"},
		{big, "larger than"},
	} {
		p, ok := problemOf(snap, c.file)
		if !ok {
			t.Errorf("no problem reported for %s: %v", c.file, snap.Problems)
			continue
		}
		if !strings.Contains(p.Msg, c.want) || !strings.Contains(p.Error(), filepath.Base(c.file)) {
			t.Errorf("%s: problem %q, want %q naming the file", c.file, p.Error(), c.want)
		}
	}
	if got := len(snap.Invalid); got != 4 {
		t.Errorf("invalid = %v, want the 4 bad files", snap.Invalid)
	}
	// Nothing of the 1 GiB file (or of /dev/zero) may have been read.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("Load allocated %d MiB", alloc>>20)
	}

	// After the FIFO is gone the store loads as before (nothing is stuck).
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	snap = loadWithin(t, s, 30*time.Second)
	if _, ok := problemOf(snap, fifo); ok || len(snap.Tenants) != 1 {
		t.Fatalf("after removing the FIFO: %v %v", snap.Tenants, snap.Problems)
	}
}

// TestReadTenantFile covers the single-file paths: Load and the edits read
// through the same checks.
func TestReadTenantFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(goodMetal), 0o644); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact.toml")
	if err := os.WriteFile(exact, make([]byte, MaxFileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	over := filepath.Join(dir, "over.toml")
	if err := os.WriteFile(over, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path    string
		wantErr string
		size    int
	}{
		{good, "", len(goodMetal)},
		{link, "", len(goodMetal)}, // a symlink to a regular file is fine
		{exact, "", MaxFileSize},
		{over, "larger than", 0},
		{fifo, "not a regular file", 0},
		{"/dev/zero", "not a regular file", 0},
		{filepath.Join(dir, "missing.toml"), "no such file", 0},
	} {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			var data []byte
			var err error
			within(t, 30*time.Second, func() { data, err = readTenantFile(c.path) })
			if c.wantErr == "" {
				if err != nil || len(data) != c.size {
					t.Fatalf("got %d bytes, %v; want %d", len(data), err, c.size)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("err = %v, want %q naming %s", err, c.wantErr, c.path)
			}
		})
	}
	var err error
	within(t, 30*time.Second, func() { _, err = Load(fifo) })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Load(fifo) = %v", err)
	}
	s := &Store{Dir: dir}
	within(t, 30*time.Second, func() { _, err = s.SetAutoApply("fifo", true) })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("SetAutoApply on a FIFO = %v", err)
	}
}

// BenchmarkLoadBesideHugeFile loads a store whose dir also holds a 1 GiB
// sparse *.toml: -benchmem shows that the big file is not read.
func BenchmarkLoadBesideHugeFile(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "good.toml"), []byte(goodMetal), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "big.toml"))
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	s := &Store{Dir: dir}
	b.ReportAllocs()
	for b.Loop() {
		snap, err := s.Load()
		if err != nil || len(snap.Tenants) != 1 || len(snap.Problems) != 1 {
			b.Fatalf("%v %v", snap, err)
		}
	}
}
