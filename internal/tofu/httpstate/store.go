// Package httpstate is the state backend rezuscloud gives tofu: tofu's
// standard "http" backend talking to an in-process server on 127.0.0.1 that
// keeps each tenant's state in files under the data dir.
//
// It exists so that neither a killed tofu nor a killed add-on loses state:
//
//   - every state upload is written atomically (temp file, fsync, rename,
//     fsync of the directory) as a new numbered version; the last N versions
//     are kept for rollback and the newest is the current state;
//   - the lock tofu takes (LOCK/UNLOCK) is a file too, so a lock left by a
//     crash is still there after a restart: Lock shows it and ForceUnlock
//     clears it;
//   - a disk-space reserve (ReserveSize) is kept in the store's directory
//     and released when a state write meets a full disk, so the state that
//     holds what an apply just did can still be saved;
//   - the server answers a LOCK on a held lock with 423 Locked and the
//     holder's lock JSON, which tofu shows as "state already locked" with the
//     holder's ID, operation and time.
//
// The state tofu uploads is already encrypted by tofu (see package tofu), so
// these files hold ciphertext; they are 0600 in 0700 directories anyway.
package httpstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// DefaultKeep is how many state versions a Store keeps per tenant when
// Open is given 0.
const DefaultKeep = 10

// ErrLocked is returned when a lock is held by someone else; the *LockError
// carrying it names the holder.
var ErrLocked = errors.New("state is locked")

// ErrInvalidName is returned for a tenant name that cannot be a directory.
var ErrInvalidName = errors.New("invalid state name")

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// LockInfo is tofu's lock description (statemgr.LockInfo), as sent in the
// LOCK body and returned to a conflicting locker.
type LockInfo struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation"`
	Info      string    `json:"Info"`
	Who       string    `json:"Who"`
	Version   string    `json:"Version"`
	Created   time.Time `json:"Created"`
	Path      string    `json:"Path"`
}

// LockError is a lock conflict: Holder holds the lock.
type LockError struct {
	Name   string
	Holder LockInfo
	raw    []byte
}

func (e *LockError) Error() string {
	h := e.Holder
	return fmt.Sprintf("state %q is locked by %s (lock ID %s, %s since %s)", e.Name, orUnknown(h.Who), h.ID,
		orUnknown(h.Operation), h.Created.Format(time.RFC3339))
}

func (e *LockError) Unwrap() error { return ErrLocked }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Version is one stored state version.
type Version struct {
	Seq      int64
	Size     int64
	Modified time.Time
}

// Store keeps states and locks in files: <dir>/<name>/v<seq>.tfstate and
// <dir>/<name>/lock.json. It is safe for concurrent use within a process;
// only one process should use a directory at a time.
type Store struct {
	dir  string
	keep int
	mu   sync.Mutex
	// unsaved holds, per name, a state upload the full disk refused even
	// after the reserve was spent: the only record of what that tofu run
	// did. Get serves it and every call tries to write it again.
	unsaved map[string][]byte
}

// ErrDiskFull is a state upload that the full disk refused. The Store
// keeps the state in memory (Unsaved), serves it to the next tofu, and
// writes it as soon as there is room.
var ErrDiskFull = errors.New("the data folder is full")

// Open opens (creating) a store in dir that keeps the last keep versions of
// each state (DefaultKeep when keep <= 0).
func Open(dir string, keep int) (*Store, error) {
	if keep <= 0 {
		keep = DefaultKeep
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	s := &Store{dir: dir, keep: keep, unsaved: map[string][]byte{}}
	// Best effort: on a disk that is already full there is no reserve until
	// space is freed (the Runner retries after each command).
	_ = s.reserve()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// ValidName reports whether name can be a state name (a tenant name:
// letters, digits, '.', '_' and '-', not starting with a punctuation mark).
func ValidName(name string) bool { return validName.MatchString(name) }

func (s *Store) nameDir(name string) (string, error) {
	if !validName.MatchString(name) {
		return "", fmt.Errorf("%w %q", ErrInvalidName, name)
	}
	return filepath.Join(s.dir, name), nil
}

// versions lists a state's versions, oldest first.
func (s *Store) versions(dir string) ([]Version, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Version
	for _, e := range ents {
		seq, ok := ParseVersionFile(e.Name())
		if !ok {
			continue
		}
		v := Version{Seq: seq}
		if fi, err := e.Info(); err == nil {
			v.Size, v.Modified = fi.Size(), fi.ModTime()
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

func versionFile(dir string, seq int64) string {
	return filepath.Join(dir, VersionFile(seq))
}

// VersionFile is the file name of state version seq in a name's folder
// (v<seq, 12 digits>.tfstate).
func VersionFile(seq int64) string { return fmt.Sprintf("v%012d.tfstate", seq) }

// ParseVersionFile is VersionFile's inverse: ok=false for any other name.
func ParseVersionFile(name string) (seq int64, ok bool) {
	digits, pre := strings.CutPrefix(name, "v")
	digits, suf := strings.CutSuffix(digits, ".tfstate")
	if !pre || !suf || digits == "" {
		return 0, false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	return seq, err == nil
}

// Get returns the current state of name, or ok=false when there is none.
func (s *Store) Get(name string) (data []byte, ok bool, err error) {
	dir, err := s.nameDir(name)
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if data, ok := s.unsaved[name]; ok {
		// newer than any file: try to write it, serve it either way
		if s.put(dir, data) == nil {
			delete(s.unsaved, name)
		}
		return slices.Clone(data), true, nil
	}
	vs, err := s.versions(dir)
	if err != nil || len(vs) == 0 {
		return nil, false, err
	}
	data, err = safefile.Read(versionFile(dir, vs[len(vs)-1].Seq), MaxStateSize)
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// Versions lists the kept versions of name, oldest first; the last is the
// current state.
func (s *Store) Versions(name string) ([]Version, error) {
	dir, err := s.nameDir(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions(dir)
}

// GetVersion returns one kept version of name.
func (s *Store) GetVersion(name string, seq int64) ([]byte, error) {
	dir, err := s.nameDir(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return safefile.Read(versionFile(dir, seq), MaxStateSize)
}

// Put stores data as the new current state of name. When the state is
// locked, lockID must be the holder's ID (tofu sends it as ?ID=); a Put
// without a lock held needs no ID.
func (s *Store) Put(name string, data []byte, lockID string) error {
	dir, err := s.nameDir(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, raw, ok, err := s.readLock(dir); err != nil {
		return err
	} else if ok && held.ID != lockID {
		return &LockError{Name: name, Holder: held, raw: raw}
	}
	err = s.put(dir, data)
	switch {
	case err == nil:
		delete(s.unsaved, name)
	case diskFull(err):
		s.unsaved[name] = slices.Clone(data)
		err = fmt.Errorf("%w: state %s (%d bytes) is kept in memory until it can be written: %w", ErrDiskFull, name, len(data), err)
	}
	return err
}

// Unsaved reports whether name has a state the full disk refused, held in
// memory only.
func (s *Store) Unsaved(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.unsaved[name]
	return ok
}

// FlushUnsaved writes the states held in memory where there is room now;
// it returns the names it wrote and those still unsaved.
func (s *Store) FlushUnsaved() (written, left []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, data := range s.unsaved {
		dir, err := s.nameDir(name)
		if err == nil && s.put(dir, data) == nil {
			delete(s.unsaved, name)
			written = append(written, name)
			continue
		}
		left = append(left, name)
	}
	sort.Strings(written)
	sort.Strings(left)
	return written, left
}

func (s *Store) put(dir string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	vs, err := s.versions(dir)
	if err != nil {
		return err
	}
	next := int64(1)
	if len(vs) > 0 {
		next = vs[len(vs)-1].Seq + 1
	}
	err = atomicfile.Write(versionFile(dir, next), data, 0o600)
	if err != nil && diskFull(err) && s.releaseReserve() {
		// The disk filled up: the reserve makes room for this state, which
		// holds what tofu just did. The caller sees HasReserve turn false.
		err = atomicfile.Write(versionFile(dir, next), data, 0o600)
	}
	if err != nil {
		return err
	}
	// Prune after the new version is durable: the oldest go first.
	for i := 0; i < len(vs)+1-s.keep; i++ {
		_ = os.Remove(versionFile(dir, vs[i].Seq))
	}
	return nil
}

// Rollback makes a kept version the current state again (as a new version,
// so the rollback itself can be undone). It refuses while the state is
// locked.
func (s *Store) Rollback(name string, seq int64) error {
	dir, err := s.nameDir(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, raw, ok, err := s.readLock(dir); err != nil {
		return err
	} else if ok {
		return &LockError{Name: name, Holder: held, raw: raw}
	}
	data, err := safefile.Read(versionFile(dir, seq), MaxStateSize)
	if err != nil {
		return err
	}
	return s.put(dir, data)
}

func lockFile(dir string) string { return filepath.Join(dir, "lock.json") }

// maxLockFile caps lock.json (tofu's lock info: a few hundred bytes).
const maxLockFile = 1 << 20

func (s *Store) readLock(dir string) (LockInfo, []byte, bool, error) {
	raw, err := safefile.Read(lockFile(dir), maxLockFile)
	if errors.Is(err, os.ErrNotExist) {
		return LockInfo{}, nil, false, nil
	}
	if err != nil {
		return LockInfo{}, nil, false, err
	}
	li, raw := ParseLock(raw, "lock.json")
	return li, raw, true, nil
}

// Lock takes the lock of name for info (info.ID must be set). When someone
// else holds it, it returns a *LockError naming the holder. Taking a lock one
// already holds (same ID) succeeds.
func (s *Store) Lock(name string, info LockInfo) error {
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return s.lockRaw(name, info, raw)
}

func (s *Store) lockRaw(name string, info LockInfo, raw []byte) error {
	if info.ID == "" {
		return errors.New("lock: no lock ID")
	}
	dir, err := s.nameDir(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held, hraw, ok, err := s.readLock(dir)
	if err != nil {
		return err
	}
	if ok {
		if held.ID == info.ID {
			return nil
		}
		return &LockError{Name: name, Holder: held, raw: hraw}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(lockFile(dir), raw, 0o600)
}

// Unlock releases the lock of name held under id. Unlocking a state that is
// not locked succeeds; a lock held under another ID is a *LockError.
func (s *Store) Unlock(name, id string) error {
	dir, err := s.nameDir(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held, raw, ok, err := s.readLock(dir)
	if err != nil || !ok {
		return err
	}
	if held.ID != id {
		return &LockError{Name: name, Holder: held, raw: raw}
	}
	return removeDurable(lockFile(dir))
}

// LockOf reports who holds the lock of name. A lock that outlived the
// process that took it (a killed tofu, a crashed add-on) shows up here.
func (s *Store) LockOf(name string) (LockInfo, bool) {
	dir, err := s.nameDir(name)
	if err != nil {
		return LockInfo{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	li, _, ok, err := s.readLock(dir)
	if err != nil {
		return LockInfo{}, false
	}
	return li, ok
}

// ForceUnlock removes a stale lock of name. id must be the holder's ID, as
// shown by LockOf, so that a lock taken since cannot be removed by mistake.
func (s *Store) ForceUnlock(name, id string) error {
	if err := s.Unlock(name, id); err != nil {
		return fmt.Errorf("force-unlock: %w", err)
	}
	return nil
}

func removeDurable(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
