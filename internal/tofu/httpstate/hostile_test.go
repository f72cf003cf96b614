package httpstate

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/safefile/safefiletest"
)

// TestHostileStateFiles: a FIFO, a symlink to /dev/zero, a huge sparse
// file or a directory in place of the current state version or of
// lock.json is an error naming the file, at once; nothing is changed (no
// lock is handed out over an unreadable one).
func TestHostileStateFiles(t *testing.T) {
	for _, k := range safefiletest.Kinds() {
		t.Run("state/"+k.Name, func(t *testing.T) {
			s, err := Open(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Put("lab", []byte(`{"serial":1}`), ""); err != nil {
				t.Fatal(err)
			}
			path := versionFile(filepath.Join(s.Dir(), "lab"), 2)
			safefiletest.Put(t, k, path)
			for name, read := range map[string]func() error{
				"Get":        func() error { _, _, err := s.Get("lab"); return err },
				"GetVersion": func() error { _, err := s.GetVersion("lab", 2); return err },
				"Rollback":   func() error { return s.Rollback("lab", 2) },
			} {
				safefiletest.Within(t, 10*time.Second, func() { safefiletest.Unblock(path) }, func() { err = read() })
				if err == nil || !strings.Contains(err.Error(), k.Want) || !strings.Contains(err.Error(), path) {
					t.Errorf("%s = %v, want %q naming %s", name, err, k.Want, path)
				}
			}
			safefiletest.Unchanged(t, k, path)
			if vs, _ := s.Versions("lab"); len(vs) != 2 {
				t.Errorf("versions = %v, want the two there were", vs)
			}
		})
		t.Run("lock/"+k.Name, func(t *testing.T) {
			s, err := Open(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			path := lockFile(filepath.Join(s.Dir(), "lab"))
			if err := s.Put("lab", []byte(`{"serial":1}`), ""); err != nil {
				t.Fatal(err)
			}
			safefiletest.Put(t, k, path)
			safefiletest.Within(t, 10*time.Second, func() { safefiletest.Unblock(path) }, func() {
				err = s.Lock("lab", LockInfo{ID: "new"})
			})
			if err == nil || !strings.Contains(err.Error(), k.Want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Lock = %v, want %q naming %s", err, k.Want, path)
			}
			safefiletest.Unchanged(t, k, path)
		})
	}
}
