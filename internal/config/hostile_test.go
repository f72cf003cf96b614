package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/safefile/safefiletest"
)

// TestHostileFiles: a FIFO, a symlink to /dev/zero, a huge sparse file or
// a directory where the state passphrase, the add-on options, the config
// file or the OCI key file should be is refused at once with an error
// naming it; nothing is created or changed (no new passphrase is generated
// over an unreadable one).
func TestHostileFiles(t *testing.T) {
	readers := []struct {
		name string
		file string
		read func(path string) error
	}{
		{"state passphrase", PassphraseFile, func(p string) error {
			_, _, err := StatePassphrase(filepath.Dir(p), "")
			return err
		}},
		{"add-on options", "options.json", func(p string) error {
			_, err := LoadAddon(context.Background(), p, Supervisor{})
			return err
		}},
		{"config file", "rezuscloud.toml", func(p string) error {
			_, err := LoadFile(p)
			return err
		}},
		{"OCI key file", "oci.pem", func(p string) error {
			_, err := readKeyFile(p, []string{filepath.Dir(p)})
			return err
		}},
	}
	for _, r := range readers {
		for _, k := range safefiletest.Kinds() {
			t.Run(r.name+"/"+k.Name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, r.file)
				safefiletest.Put(t, k, path)
				var err error
				safefiletest.Within(t, 10*time.Second, func() { safefiletest.Unblock(path) }, func() { err = r.read(path) })
				want := k.Want
				if r.name == "OCI key file" && k.Name == "huge-sparse" {
					want = "larger than 64 KB"
				}
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want %q naming %s", err, want, path)
				}
				safefiletest.Unchanged(t, k, path)
				if ents, _ := os.ReadDir(dir); len(ents) != 1 {
					t.Errorf("the folder holds %d entries, want only the hostile one", len(ents))
				}
			})
		}
	}
	// a missing passphrase file is still generated
	if _, created, err := StatePassphrase(t.TempDir(), ""); err != nil || !created {
		t.Fatalf("missing passphrase: %v %v", created, errors.Unwrap(err))
	}
}
