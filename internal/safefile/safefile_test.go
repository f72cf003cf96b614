package safefile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readWithin runs Read and fails the test when it has not returned by the
// deadline (a blocking open of a FIFO never returns on its own).
func readWithin(t *testing.T, path string, max int64) ([]byte, error) {
	t.Helper()
	type res struct {
		data []byte
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		data, err := Read(path, max)
		ch <- res{data, err}
	}()
	select {
	case r := <-ch:
		return r.data, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("Read(%s) has not returned after 30s", path)
		return nil, nil
	}
}

func TestRead(t *testing.T) {
	const max = 1 << 10
	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", 10)
	exact := write("exact", max)
	over := write("over", max+1)
	empty := write("empty", 0)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Should Read block on the FIFO, a writer lets the goroutine finish.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil { // 1 TiB, no blocks
		t.Fatal(err)
	}
	f.Close()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	for _, c := range []struct {
		name    string
		path    string
		size    int
		is      error
		wantMsg string
	}{
		{"regular", good, 10, nil, ""},
		{"empty", empty, 0, nil, ""},
		{"symlink to a regular file", link, 10, nil, ""},
		{"exactly the cap", exact, max, nil, ""},
		{"one byte over", over, 0, ErrTooLarge, "larger than 1024 bytes (it has 1025)"},
		{"huge sparse file", sparse, 0, ErrTooLarge, "larger than 1024 bytes"},
		{"FIFO", fifo, 0, ErrNotRegular, "not a regular file (a FIFO)"},
		{"symlink to /dev/zero", zero, 0, ErrNotRegular, "not a regular file (a character device)"},
		{"/dev/zero", "/dev/zero", 0, ErrNotRegular, "not a regular file (a character device)"},
		{"directory", sub, 0, ErrNotRegular, "not a regular file (a directory)"},
		{"socket", sock, 0, ErrNotRegular, "not a regular file (a socket)"},
		{"missing", filepath.Join(dir, "missing"), 0, fs.ErrNotExist, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			data, err := readWithin(t, c.path, max)
			runtime.ReadMemStats(&after)
			if c.is == nil {
				if err != nil || len(data) != c.size {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(data), err, c.size)
				}
				return
			}
			if !errors.Is(err, c.is) {
				t.Fatalf("err = %v, want %v", err, c.is)
			}
			var pe *os.PathError
			if !errors.As(err, &pe) || pe.Path != c.path || !strings.Contains(err.Error(), c.path) {
				t.Errorf("err = %v, want an *os.PathError naming %s", err, c.path)
			}
			if !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("err = %q, want it to say %q", err, c.wantMsg)
			}
			if data != nil {
				t.Errorf("got %d bytes with the error", len(data))
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("refusing it allocated %d KiB: something was read", alloc>>10)
			}
		})
	}
	// Nothing was changed: the FIFO, the directory and the big file are
	// still what they were.
	for p, want := range map[string]os.FileMode{fifo: os.ModeNamedPipe, sub: os.ModeDir, sparse: 0} {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().Type() != want {
			t.Errorf("%s: %v %v after the read, want type %v", p, fi.Mode(), err, want)
		}
	}
}

// BenchmarkRead compares Read with os.ReadFile on a 4 KiB file (the cost
// of the second stat and the cap), and times refusing a 1 TiB sparse file
// (-benchmem: nothing of it is read).
func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, make([]byte, 4<<10), 0o600); err != nil {
		b.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.Run("safefile/4KiB", func(b *testing.B) {
		for b.Loop() {
			if _, err := Read(small, 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os.ReadFile/4KiB", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadFile(small); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("safefile/1TiB-refused", func(b *testing.B) {
		for b.Loop() {
			if _, err := Read(huge, 1<<20); !errors.Is(err, ErrTooLarge) {
				b.Fatal(err)
			}
		}
	})
}
