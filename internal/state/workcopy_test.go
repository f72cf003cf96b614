package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// memReader is a store's Reader in memory.
type memReader struct {
	records map[string][]byte
	secrets map[string]map[string][]byte
}

func (m *memReader) Tenants(context.Context) ([]string, error) {
	var out []string
	for n := range m.records {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func (m *memReader) Record(_ context.Context, t string) ([]byte, bool, error) {
	b, ok := m.records[t]
	return b, ok, nil
}

func (m *memReader) Secret(_ context.Context, t, k string) ([]byte, bool, error) {
	b, ok := m.secrets[t][k]
	return b, ok, nil
}

func (m *memReader) Backups(context.Context, string) ([]Backup, error) { return nil, nil }

func put(t *testing.T, path, data string) {
	t.Helper()
	if err := writeFile(path, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCheckout(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	store := &memReader{
		records: map[string][]byte{"lab": []byte(`{"infra":true}`)},
		secrets: map[string]map[string][]byte{"lab": {SecretsBundle: []byte("bundle"), Talosconfig: []byte("tc")}},
	}

	t.Run("foreign data folder is refused and left alone", func(t *testing.T) {
		data := t.TempDir()
		put(t, filepath.Join(data, "tenants", "home", RecordFile), `{"infra":true}`)
		put(t, filepath.Join(data, "tofu", "state", "other", "v1.tfstate"), `{}`)
		_, err := Checkout(ctx, store, "id1", data, now)
		if !errors.Is(err, ErrForeignData) {
			t.Fatalf("err = %v, want ErrForeignData", err)
		}
		for _, want := range []string{"home", "other", "state copy"} {
			if !contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(data, "tenants", "lab")); !os.IsNotExist(err) {
			t.Errorf("the refused checkout wrote the store's tenant: %v", err)
		}
		if _, err := os.Stat(filepath.Join(data, StoreMarker)); !os.IsNotExist(err) {
			t.Errorf("the refused checkout wrote the marker")
		}
	})

	t.Run("a data folder copied into the store checks out", func(t *testing.T) {
		data := t.TempDir()
		put(t, filepath.Join(data, "tenants", "lab", RecordFile), `{"old":true}`)
		moved, err := Checkout(ctx, store, "id1", data, now)
		if err != nil || len(moved) != 0 {
			t.Fatalf("moved %v, err %v", moved, err)
		}
		if got := read(t, filepath.Join(data, "tenants", "lab", RecordFile)); got != `{"infra":true}` {
			t.Errorf("record = %s, want the store's", got)
		}
		if got := read(t, filepath.Join(data, "tenants", "lab", Talosconfig)); got != "tc" {
			t.Errorf("talosconfig = %s", got)
		}
		fi, _ := os.Stat(filepath.Join(data, "tenants", "lab", SecretsBundle))
		if fi == nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("secrets bundle mode = %v, want 0600", fi)
		}
	})

	t.Run("a former working copy moves stale tenants and secrets aside", func(t *testing.T) {
		data := t.TempDir()
		put(t, filepath.Join(data, StoreMarker), "id1\n")
		put(t, filepath.Join(data, "tenants", "gone", RecordFile), `{}`)
		put(t, filepath.Join(data, "tenants", "gone", SecretsBundle), `b`)
		put(t, filepath.Join(data, "tenants", "lab", Kubeconfig), `stale`)
		moved, err := Checkout(ctx, store, "id1", data, now)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			filepath.Join(data, "replaced", "20261202T100000Z", "tenants", "gone"),
			filepath.Join(data, "replaced", "20261202T100000Z", "tenants", "lab", Kubeconfig),
		}
		if !slices.Equal(moved, want) {
			t.Errorf("moved = %v, want %v", moved, want)
		}
		if got := read(t, filepath.Join(want[0], SecretsBundle)); got != "b" {
			t.Errorf("moved bundle = %q", got)
		}
		if _, err := os.Stat(filepath.Join(data, "tenants", "lab", Kubeconfig)); !os.IsNotExist(err) {
			t.Errorf("the stale kubeconfig is still in use: %v", err)
		}
		// the moved files are not read as state again
		snap, err := ReadDir(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Tenants) != 1 || snap.Tenants[0].Name != "lab" {
			t.Errorf("after checkout the data folder holds %+v", snap.Tenants)
		}
	})

	t.Run("another store's working copy is refused", func(t *testing.T) {
		data := t.TempDir()
		put(t, filepath.Join(data, StoreMarker), "id2\n")
		put(t, filepath.Join(data, "tenants", "gone", RecordFile), `{}`)
		if _, err := Checkout(ctx, store, "id1", data, now); !errors.Is(err, ErrForeignData) {
			t.Fatalf("err = %v, want ErrForeignData", err)
		}
	})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
