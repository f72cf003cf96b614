package talos_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/safefile/safefiletest"
	"github.com/rezuscloud/rezuscloud/internal/talos"
)

// TestHostileSecretFiles: a FIFO, a symlink to /dev/zero, a huge sparse
// file or a directory in place of a tenant's secrets bundle or talosconfig
// is an error naming the file, at once; LoadOrCreateSecrets does not take
// it for a missing bundle (no new bundle replaces it) and nothing changes.
func TestHostileSecretFiles(t *testing.T) {
	for _, k := range safefiletest.Kinds() {
		for _, c := range []struct {
			name, file string
			read       func(dir, path string) error
		}{
			{"secrets", talos.SecretsFile, func(dir, _ string) error {
				_, err := talos.LoadOrCreateSecrets(dir, "lab", "v1.13.0", false)
				return err
			}},
			{"talosconfig", "talosconfig", func(_, path string) error {
				_, err := talos.LoadTalosconfig(path)
				return err
			}},
		} {
			t.Run(c.name+"/"+k.Name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, c.file)
				safefiletest.Put(t, k, path)
				var err error
				safefiletest.Within(t, 10*time.Second, func() { safefiletest.Unblock(path) }, func() { err = c.read(dir, path) })
				if err == nil || !strings.Contains(err.Error(), k.Want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want %q naming %s", err, k.Want, path)
				}
				safefiletest.Unchanged(t, k, path)
			})
		}
	}
}
