package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// copyDataFolder is a data folder in the layout the engine and the tofu
// runner write: records and secrets under tenants/, state versions through
// the real file store under tofu/state/, an etcd snapshot under backups/.
func copyDataFolder(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	files := map[string]string{
		"tenants/lab/engine.json":                    `{"infra": true, "nodes": {"lab-cp-1": {"ip": "10.0.0.2"}}}`,
		"tenants/lab/secrets.yaml":                   "cluster:\n  id: abc\n  secret: lab-cluster-secret\n",
		"tenants/lab/talosconfig":                    "context: lab\ncontexts:\n  lab:\n    key: bGFiLWtleQ==\n",
		"tenants/lab/kubeconfig":                     "apiVersion: v1\nclusters: []\n",
		"tenants/web/engine.json":                    `{"infra": false}`,
		"tenants/web/secrets.yaml":                   "cluster:\n  secret: web-secret\n",
		"backups/lab/etcd-20261201T030405Z.snapshot": "etcd snapshot bytes",
		"state-passphrase":                           "generated-passphrase-0123456789abcdef\n",
	}
	for name, body := range files {
		p := filepath.Join(data, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := httpstate.Open(filepath.Join(data, "tofu", "state"), 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ { // keeps versions 3..5
		body := []byte(`{"meta":{"key_provider.pbkdf2.main":"x"},"encrypted_data":"` + strings.Repeat("QUJD", 200*i) + `"}`)
		if err := st.Put("lab", body, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put("web", []byte(`{"serial":1}`), ""); err != nil {
		t.Fatal(err)
	}
	return data
}

// tree is every file under the state's folders of a data folder, with its
// mode and contents.
func tree(t *testing.T, data string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, root := range []string{"tenants", filepath.Join("tofu", "state")} {
		err := filepath.WalkDir(filepath.Join(data, root), func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == filepath.Join(data, root) {
				return nil
			}
			if err != nil {
				return err
			}
			if d.IsDir() || strings.HasPrefix(d.Name(), ".") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fi, _ := d.Info()
			rel, _ := filepath.Rel(data, p)
			out[rel] = fi.Mode().Perm().String() + " " + string(b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestStateCopy: a data folder goes into PostgreSQL and back byte for
// byte; a non-empty target, a held lock and a damaged version are refused.
func TestStateCopy(t *testing.T) {
	p := testenv.StartPostgres(t)
	t.Setenv(envStatePassword, p.Password)
	t.Setenv(envStatePassphrase, "")
	data := copyDataFolder(t)
	want := tree(t, data)
	if len(want) != 10 {
		t.Fatalf("the data folder has %d files: %v", len(want), want)
	}

	code, out, errOut := runCmd(t, "state", "copy", "--from", data, "--to", p.URL)
	if code != 0 {
		t.Fatalf("copy in: exit %d: %s %s", code, out, errOut)
	}
	if !strings.Contains(out, "2 tenants (2 records, 4 secrets, 4 state versions checked, 1 backups indexed)") {
		t.Fatalf("copy in said: %s", out)
	}
	if n := p.QueryInt64(`SELECT count(*) FROM rezuscloud.secrets WHERE position('lab-cluster-secret'::bytea IN sealed) > 0`); n != 0 {
		t.Fatal("a secret went into PostgreSQL in the clear")
	}

	code, _, errOut = runCmd(t, "state", "copy", "--from", data, "--to", p.URL)
	if code != 1 || !strings.Contains(errOut, "target store is not empty") {
		t.Fatalf("second copy in: exit %d: %s", code, errOut)
	}

	// Back out, with the passphrase the data folder generated.
	t.Setenv(envStatePassphrase, "generated-passphrase-0123456789abcdef")
	// The snapshot files themselves are not in PostgreSQL: a folder without
	// them is told which are missing; one with them (copied first) is not.
	code, out, errOut = runCmd(t, "state", "copy", "--from", p.URL, "--to", t.TempDir())
	if code != 0 || !strings.Contains(out, "tenant lab: etcd backup etcd-20261201T030405Z.snapshot is in the index but not in") {
		t.Fatalf("copy out without the backups: exit %d: %s %s", code, out, errOut)
	}
	back := t.TempDir()
	snapFile := filepath.Join("backups", "lab", "etcd-20261201T030405Z.snapshot")
	snapBody, err := os.ReadFile(filepath.Join(data, snapFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(back, "backups", "lab"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(back, snapFile), snapBody, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCmd(t, "state", "copy", "--from", p.URL, "--to", back)
	if code != 0 {
		t.Fatalf("copy out: exit %d: %s %s", code, out, errOut)
	}
	if strings.Contains(out, "not in") {
		t.Fatalf("a backup the data folder has was reported missing: %s", out)
	}
	got := tree(t, back)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s differs after the round trip:\n got %.80q\nwant %.80q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("round trip has %d files, want %d", len(got), len(want))
	}
	// The copy is a working store: the file store reads the newest version.
	st, err := httpstate.Open(filepath.Join(back, "tofu", "state"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if vs, err := st.Versions("lab"); err != nil || len(vs) != 3 || vs[0].Seq != 3 {
		t.Fatalf("versions after the round trip: %+v %v", vs, err)
	}

	code, _, errOut = runCmd(t, "state", "copy", "--from", p.URL, "--to", back)
	if code != 1 || !strings.Contains(errOut, "target store is not empty") {
		t.Fatalf("copy out onto a non-empty folder: exit %d: %s", code, errOut)
	}

	// A damaged version in the database is found, and nothing is written.
	p.Exec(`UPDATE rezuscloud.states SET data = overlay(data placing 'X'::bytea from 10) WHERE name = 'lab' AND seq = 4`)
	damaged := t.TempDir()
	code, _, errOut = runCmd(t, "state", "copy", "--from", p.URL, "--to", damaged)
	if code != 1 || !strings.Contains(errOut, "lab: state version 4: checksum mismatch") {
		t.Fatalf("copy of a damaged version: exit %d: %s", code, errOut)
	}
	if left := tree(t, damaged); len(left) != 0 {
		t.Fatalf("a refused copy wrote %v", left)
	}

	// A wrong passphrase cannot open the store's secrets.
	t.Setenv(envStatePassphrase, "not-the-passphrase-at-all")
	code, _, errOut = runCmd(t, "state", "copy", "--from", p.URL, "--to", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "state passphrase does not match") {
		t.Fatalf("wrong passphrase: exit %d: %s", code, errOut)
	}
	if strings.Contains(errOut, p.Password) {
		t.Fatal("an error holds the PostgreSQL password")
	}
}

// TestStateCopyRefuses: what the copy refuses before it writes anything.
func TestStateCopyRefuses(t *testing.T) {
	p := testenv.StartPostgres(t)
	t.Setenv(envStatePassphrase, "generated-passphrase-0123456789abcdef")
	locked := copyDataFolder(t)
	st, err := httpstate.Open(filepath.Join(locked, "tofu", "state"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Lock("lab", httpstate.LockInfo{ID: "tofu-77", Operation: "OperationTypeApply", Who: "root@box"}); err != nil {
		t.Fatal(err)
	}
	unknown := copyDataFolder(t)
	if err := os.WriteFile(filepath.Join(unknown, "tenants", "lab", "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		password string
		args     []string
		want     string
	}{
		{"locked state", p.Password, []string{"--from", locked, "--to", p.URL}, "tenant lab: the state is locked (lock ID tofu-77"},
		{"unknown file", p.Password, []string{"--from", unknown, "--to", p.URL}, "notes.txt: a file the state store does not know"},
		{"wrong password", "not-it", []string{"--from", unknown, "--to", p.URL}, "refused the password for role rezuscloud"},
		{"two folders", p.Password, []string{"--from", locked, "--to", unknown}, "one side must be a data folder"},
		{"no target", p.Password, []string{"--from", locked}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envStatePassword, tc.password)
			code, _, errOut := runCmd(t, append([]string{"state", "copy"}, tc.args...)...)
			if tc.want == "" {
				if code != 2 {
					t.Fatalf("exit %d, want 2 (usage): %s", code, errOut)
				}
				return
			}
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d: %s; want %q", code, errOut, tc.want)
			}
			if strings.Contains(errOut, p.Password) || (tc.password != "" && strings.Contains(errOut, tc.password)) {
				t.Fatalf("the error holds a password: %s", errOut)
			}
		})
	}
	if n := p.QueryInt64(`SELECT count(*) FROM rezuscloud.records`); n != 0 {
		t.Fatalf("a refused copy wrote %d records", n)
	}
}
