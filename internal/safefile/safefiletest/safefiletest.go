// Package safefiletest puts hostile things where a reader expects a small
// file (a FIFO, a symlink to /dev/zero, a huge sparse file, a directory),
// for the tests of every reader that goes through safefile.
package safefiletest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// Kind is one hostile thing at a path.
type Kind struct {
	Name string
	// Want is what the reader's error says about it.
	Want string
	// Type is the file type the path keeps (os.Lstat): the reader must not
	// change it.
	Type os.FileMode
	// Make puts it at path.
	Make func(path string) error
}

// Kinds are the hostile things a data folder can hold in place of a file.
func Kinds() []Kind {
	return []Kind{
		{Name: "fifo", Want: "not a regular file (a FIFO)", Type: os.ModeNamedPipe,
			Make: func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{Name: "dev-zero", Want: "not a regular file (a character device)", Type: os.ModeSymlink,
			Make: func(p string) error { return os.Symlink("/dev/zero", p) }},
		{Name: "huge-sparse", Want: "larger than", Type: 0, Make: func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(1 << 40) // 1 TiB of holes, no blocks
		}},
		{Name: "directory", Want: "not a regular file (a directory)", Type: os.ModeDir,
			Make: func(p string) error { return os.Mkdir(p, 0o700) }},
	}
}

// Put makes k at path, failing t on an error. Should a reader still block
// on a FIFO there when the test ends, a writer opened at cleanup lets it
// return.
func Put(t testing.TB, k Kind, path string) {
	t.Helper()
	if err := k.Make(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Unblock(path) })
}

// Unblock opens path for writing without blocking and closes it: a reader
// blocked opening a FIFO there returns (with nothing read).
func Unblock(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

// Within runs fn and fails t when it has not returned after d (the
// blocking open of a FIFO never returns on its own). unblock, when set, is
// called before failing so that fn can end.
func Within(t testing.TB, d time.Duration, unblock func(), fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		if unblock != nil {
			unblock()
		}
		t.Fatalf("still blocked after %v", d)
	}
}

// Unchanged fails t when path no longer holds k.
func Unchanged(t testing.TB, k Kind, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Errorf("%s (%s) is gone: %v", path, k.Name, err)
		return
	}
	if fi.Mode().Type() != k.Type {
		t.Errorf("%s (%s) changed: now %v", path, k.Name, fi.Mode())
	}
}
