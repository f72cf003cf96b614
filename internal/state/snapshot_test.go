package state

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	data := t.TempDir()
	for name, body := range files {
		p := filepath.Join(data, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

// TestStateReadDir: what a data folder's state is, and what is refused.
func TestStateReadDir(t *testing.T) {
	good := map[string]string{
		"tenants/lab/engine.json":                         `{"infra":true}`,
		"tenants/lab/secrets.yaml":                        "s",
		"tenants/lab/.engine.json.tmp123":                 "partial write",
		"tofu/state/lab/v000000000002.tfstate":            `{"serial":2}`,
		"tofu/state/lab/v000000000010.tfstate":            `{"serial":10}`,
		"tofu/state/.reserve":                             "reserve",
		"backups/lab/etcd-20261201T030405Z.snapshot":      "snap",
		"backups/lab/etcd-20261201T030405Z.snapshot.part": "partial",
	}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name  string
		files map[string]string
		err   string
	}{
		{"good", good, ""},
		{"unknown file", with(map[string]string{"tenants/lab/id_rsa": "x"}), "id_rsa: a file the state store does not know"},
		{"locked", with(map[string]string{"tofu/state/lab/lock.json": `{"ID":"t-1","Operation":"OperationTypeApply","Who":"me"}`}),
			"tenant lab: the state is locked (lock ID t-1, OperationTypeApply by me)"},
		{"bad tenant name", with(map[string]string{"tenants/-x/engine.json": "{}"}), "not a tenant name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := ReadDir(writeTree(t, tc.files))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Tenants) != 1 {
				t.Fatalf("tenants: %+v", snap.Tenants)
			}
			lab := snap.Tenants[0]
			if string(lab.Record) != `{"infra":true}` || string(lab.Secrets[SecretsBundle]) != "s" || len(lab.Secrets) != 1 {
				t.Fatalf("lab: %+v", lab)
			}
			if len(lab.States) != 2 || lab.States[0].Seq != 2 || lab.States[1].Seq != 10 || lab.States[1].SHA256 != sha256.Sum256([]byte(`{"serial":10}`)) {
				t.Fatalf("states: %+v", lab.States)
			}
			want := time.Date(2026, 12, 1, 3, 4, 5, 0, time.UTC)
			if len(lab.Backups) != 1 || lab.Backups[0].Size != 4 || !lab.Backups[0].At.Equal(want) || lab.Backups[0].SHA256 != sha256.Sum256([]byte("snap")) {
				t.Fatalf("backups: %+v", lab.Backups)
			}
		})
	}
}

// TestStateWriteDir: a snapshot written and read again is the same; a
// non-empty folder and a damaged version are refused before anything is
// written.
func TestStateWriteDir(t *testing.T) {
	v := func(seq int64, body string) StateVersion {
		return StateVersion{Seq: seq, Data: []byte(body), SHA256: sha256.Sum256([]byte(body)), Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
	snap := &Snapshot{Tenants: []Tenant{
		{Name: "lab", Record: []byte(`{}`), Secrets: map[string][]byte{Kubeconfig: []byte("kc")}, States: []StateVersion{v(3, "a"), v(4, "b")}},
		{Name: "web", Secrets: map[string][]byte{}, States: []StateVersion{v(1, "c")}},
	}}
	data := t.TempDir()
	missing, err := WriteDir(data, snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 0 {
		t.Fatalf("missing: %+v", missing)
	}
	back, err := ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(snap) {
		t.Fatalf("read back %+v, wrote %+v", back, snap)
	}
	fi, err := os.Stat(filepath.Join(data, "tofu", "state", "lab", "v000000000004.tfstate"))
	if err != nil || fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(snap.Tenants[0].States[1].Created) {
		t.Fatalf("version file: %v %v", err, fi)
	}
	if _, err := WriteDir(data, snap); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("second write: %v", err)
	}
	bad := &Snapshot{Tenants: []Tenant{{Name: "lab", States: []StateVersion{v(1, "a"), {Seq: 2, Data: []byte("x")}}}}}
	empty := t.TempDir()
	if _, err := WriteDir(empty, bad); err == nil || !strings.Contains(err.Error(), "state version 2: checksum mismatch") {
		t.Fatalf("damaged version: %v", err)
	}
	if ok, err := DirEmpty(empty); err != nil || !ok {
		t.Fatalf("a refused write left state behind: %v %v", ok, err)
	}
}
