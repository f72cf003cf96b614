package state

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// Snapshot is everything a store holds, in memory, to move it from one
// store to another (rezuscloud state copy).
type Snapshot struct {
	Tenants []Tenant // sorted by name
}

// Tenant is what a store holds of one tenant.
type Tenant struct {
	Name    string
	Record  []byte            // nil: none
	Secrets map[string][]byte // kind → plaintext
	States  []StateVersion    // oldest first
	Backups []Backup          // newest first
}

// StateVersion is one kept version of a tenant's OpenTofu state (tofu's
// ciphertext).
type StateVersion struct {
	Seq     int64
	Data    []byte
	SHA256  [32]byte
	Created time.Time
}

// Verify checks the version's data against its checksum.
func (v StateVersion) Verify(tenant string) error {
	if sha256.Sum256(v.Data) != v.SHA256 {
		return fmt.Errorf("tenant %s: state version %d: checksum mismatch", tenant, v.Seq)
	}
	return nil
}

// Counts says how much a snapshot holds, for messages.
func (s *Snapshot) Counts() (tenants, records, secrets, states, backups int) {
	for _, t := range s.Tenants {
		tenants++
		if t.Record != nil {
			records++
		}
		secrets += len(t.Secrets)
		states += len(t.States)
		backups += len(t.Backups)
	}
	return
}

// The data folder's layout, as the engine and the tofu runner keep it:
//
//	<data>/tenants/<tenant>/engine.json          the record
//	<data>/tenants/<tenant>/<kind>               secrets.yaml, talosconfig, kubeconfig
//	<data>/tofu/state/<tenant>/v<seq>.tfstate    state versions (lock.json: a held lock)
//	<data>/backups/<tenant>/etcd-<stamp>.snapshot etcd snapshots (only their index is moved)
const (
	RecordFile = "engine.json"
	maxFile    = 16 << 20
)

func tenantsDir(data string) string { return filepath.Join(data, "tenants") }
func statesDir(data string) string  { return filepath.Join(data, "tofu", "state") }
func backupsDir(data string) string { return filepath.Join(data, "backups") }

// ReadDir reads the state of the data folder data. It refuses a state
// that is locked (a tofu is running, or one died: finish or force-unlock
// it first) and a file it does not know under tenants/ (so that nothing is
// left behind unnoticed).
func ReadDir(data string) (*Snapshot, error) {
	byName := map[string]*Tenant{}
	get := func(name string) *Tenant {
		t := byName[name]
		if t == nil {
			t = &Tenant{Name: name, Secrets: map[string][]byte{}}
			byName[name] = t
		}
		return t
	}
	if err := eachTenantDir(tenantsDir(data), func(name, dir string) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			f := e.Name()
			p := filepath.Join(dir, f)
			switch {
			case strings.HasPrefix(f, "."):
				continue // a temporary file of an interrupted write
			case f == RecordFile:
				b, err := safefile.Read(p, maxFile)
				if err != nil {
					return err
				}
				get(name).Record = b
			case IsSecretKind(f):
				b, err := safefile.Read(p, maxFile)
				if err != nil {
					return err
				}
				get(name).Secrets[f] = b
			default:
				return fmt.Errorf("%s: a file the state store does not know; move it away (or remove it) and copy again", p)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := eachTenantDir(statesDir(data), func(name, dir string) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			f := e.Name()
			p := filepath.Join(dir, f)
			if f == "lock.json" {
				b, _ := safefile.Read(p, maxFile)
				li, _ := httpstate.ParseLock(b, p)
				return fmt.Errorf("tenant %s: the state is locked (lock ID %s, %s by %s): stop rezuscloud, or let the operation finish, and copy again",
					name, li.ID, li.Operation, li.Who)
			}
			seq, ok := httpstate.ParseVersionFile(f)
			if !ok {
				continue
			}
			b, err := safefile.Read(p, httpstate.MaxStateSize)
			if err != nil {
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			t := get(name)
			t.States = append(t.States, StateVersion{Seq: seq, Data: b, SHA256: sha256.Sum256(b), Created: fi.ModTime().UTC()})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := eachTenantDir(backupsDir(data), func(name, dir string) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			f := e.Name()
			if !strings.HasPrefix(f, "etcd-") || !strings.HasSuffix(f, ".snapshot") || !e.Type().IsRegular() {
				continue
			}
			b, err := hashFile(filepath.Join(dir, f))
			if err != nil {
				return err
			}
			b.Tenant, b.File = name, f
			if at, ok := backupTime(f); ok {
				b.At = at
			}
			t := get(name)
			t.Backups = append(t.Backups, b)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	snap := &Snapshot{}
	for _, t := range byName {
		sort.Slice(t.States, func(i, j int) bool { return t.States[i].Seq < t.States[j].Seq })
		sort.Slice(t.Backups, func(i, j int) bool {
			if !t.Backups[i].At.Equal(t.Backups[j].At) {
				return t.Backups[i].At.After(t.Backups[j].At)
			}
			return t.Backups[i].File > t.Backups[j].File
		})
		snap.Tenants = append(snap.Tenants, *t)
	}
	sort.Slice(snap.Tenants, func(i, j int) bool { return snap.Tenants[i].Name < snap.Tenants[j].Name })
	return snap, nil
}

// eachTenantDir calls f for every tenant directory under root (none when
// root is missing).
func eachTenantDir(root string, f func(name, dir string) error) error {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if !httpstate.ValidName(e.Name()) {
			return fmt.Errorf("%s: not a tenant name", filepath.Join(root, e.Name()))
		}
		if err := f(e.Name(), filepath.Join(root, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// hashFile is a backup's index entry: size, time (the file's), checksum.
func hashFile(path string) (Backup, error) {
	f, err := os.Open(path)
	if err != nil {
		return Backup{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Backup{}, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Backup{}, fmt.Errorf("%s: %w", path, err)
	}
	b := Backup{Size: fi.Size(), At: fi.ModTime().UTC()}
	copy(b.SHA256[:], h.Sum(nil))
	return b, nil
}

// backupTime is the time in a snapshot's name, etcd-<UTC
// yyyymmddThhmmssZ>[-n].snapshot, as the engine names them.
func backupTime(file string) (time.Time, bool) {
	stamp := strings.TrimSuffix(strings.TrimPrefix(file, "etcd-"), ".snapshot")
	stamp, _, _ = strings.Cut(stamp, "-")
	at, err := time.Parse("20060102T150405Z", stamp)
	return at, err == nil
}

// DirEmpty reports whether the data folder data holds no state: no tenant
// record or secret, no state version.
func DirEmpty(data string) (bool, error) {
	snapEmpty := true
	for _, root := range []string{tenantsDir(data), statesDir(data)} {
		if err := eachTenantDir(root, func(name, dir string) error {
			ents, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if !strings.HasPrefix(e.Name(), ".") {
					snapEmpty = false
				}
			}
			return nil
		}); err != nil {
			return false, err
		}
	}
	return snapEmpty, nil
}

// WriteDir writes snap into the data folder data, which must hold no state
// (ErrNotEmpty), in the engine's layout: files 0600 in 0700 folders,
// written atomically. Every state version is checked against its checksum
// before and after it is written. The backups' index is not written: the
// snapshot files are where the engine keeps them; WriteDir returns the
// entries whose file is not (or not the same) in data/backups.
func WriteDir(data string, snap *Snapshot) (missing []Backup, err error) {
	empty, err := DirEmpty(data)
	if err != nil {
		return nil, err
	}
	if !empty {
		return nil, fmt.Errorf("%w: %s already holds tenant records or states", ErrNotEmpty, data)
	}
	for _, t := range snap.Tenants {
		if !httpstate.ValidName(t.Name) {
			return nil, fmt.Errorf("%w %q", httpstate.ErrInvalidName, t.Name)
		}
		for _, v := range t.States {
			if err := v.Verify(t.Name); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range snap.Tenants {
		td := filepath.Join(tenantsDir(data), t.Name)
		if t.Record != nil {
			if err := writeFile(filepath.Join(td, RecordFile), t.Record); err != nil {
				return nil, err
			}
		}
		for kind, b := range t.Secrets {
			if !IsSecretKind(kind) {
				return nil, fmt.Errorf("tenant %s: unknown secret kind %q", t.Name, kind)
			}
			if err := writeFile(filepath.Join(td, kind), b); err != nil {
				return nil, err
			}
		}
		sd := filepath.Join(statesDir(data), t.Name)
		for _, v := range t.States {
			p := filepath.Join(sd, httpstate.VersionFile(v.Seq))
			if err := writeFile(p, v.Data); err != nil {
				return nil, err
			}
			back, err := safefile.Read(p, httpstate.MaxStateSize)
			if err != nil {
				return nil, err
			}
			if sha256.Sum256(back) != v.SHA256 {
				return nil, fmt.Errorf("tenant %s: state version %d: %s does not read back as written", t.Name, v.Seq, p)
			}
			if !v.Created.IsZero() {
				_ = os.Chtimes(p, v.Created, v.Created)
			}
		}
		for _, b := range t.Backups {
			have, err := hashFile(filepath.Join(backupsDir(data), t.Name, b.File))
			if err != nil || have.SHA256 != b.SHA256 {
				missing = append(missing, b)
			}
		}
	}
	return missing, nil
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Equal reports whether two snapshots hold the same (for tests and the
// copy's check; the times are not compared).
func (s *Snapshot) Equal(o *Snapshot) bool {
	if len(s.Tenants) != len(o.Tenants) {
		return false
	}
	for i, a := range s.Tenants {
		b := o.Tenants[i]
		if a.Name != b.Name || !bytes.Equal(a.Record, b.Record) || (a.Record == nil) != (b.Record == nil) ||
			len(a.Secrets) != len(b.Secrets) || len(a.States) != len(b.States) || len(a.Backups) != len(b.Backups) {
			return false
		}
		for k, v := range a.Secrets {
			if w, ok := b.Secrets[k]; !ok || !bytes.Equal(v, w) {
				return false
			}
		}
		for j, v := range a.States {
			if w := b.States[j]; v.Seq != w.Seq || v.SHA256 != w.SHA256 || !bytes.Equal(v.Data, w.Data) {
				return false
			}
		}
		for j, v := range a.Backups {
			if w := b.Backups[j]; v.File != w.File || v.Size != w.Size || v.SHA256 != w.SHA256 || !v.At.Equal(w.At) {
				return false
			}
		}
	}
	return true
}
