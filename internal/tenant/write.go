package tenant

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// ErrExists is returned by Create for a tenant whose file exists already.
var ErrExists = errors.New("a tenant file of that name exists already")

// ErrChanged is returned by Replace when the file changed since the edit
// began (another edit, Home Assistant, or the user's file editor).
var ErrChanged = errors.New("the file changed since you opened it")

// Sum identifies one version of a tenant file's contents (hex SHA-256), so
// that an edit can say which version it started from.
func Sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// Read returns the named tenant's file as it is on disk.
func (s *Store) Read(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("tenant name %v", err)
	}
	data, err := readTenantFile(s.Path(name))
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	return data, nil
}

// Create writes a new tenant file holding exactly data. It refuses, writing
// nothing, a name that is not a valid tenant name, a file that exists
// already (valid or not) and data that the watcher would not take: data
// must validate alone (Parse) and beside every other valid tenant
// (CheckAcrossTenants, e.g. a machine address another tenant uses). The
// error of a refused file is Problems, located in data.
func (s *Store) Create(name string, data []byte) (*Tenant, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("tenant name %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.Path(name)
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("tenant %s: %w (%s)", name, ErrExists, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	return s.write(name, path, data)
}

// Replace replaces a tenant's file with data, kept byte for byte as the
// user wrote it, if data validates with the watcher's rules (as Create).
// base, unless empty, is the Sum of the version the edit started from: a
// file changed since then is refused with ErrChanged, so that no edit is
// lost. A refused file writes nothing.
func (s *Store) Replace(name string, data []byte, base string) (*Tenant, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("tenant name %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.Path(name)
	old, err := readTenantFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	if base != "" && Sum(old) != base {
		return nil, fmt.Errorf("tenant %s: %w: reload it and make your change again", name, ErrChanged)
	}
	return s.write(name, path, data)
}

// write checks data as the watcher will, then writes it atomically.
// Callers hold s.mu.
func (s *Store) write(name, path string, data []byte) (*Tenant, error) {
	if len(data) > MaxFileSize {
		return nil, Problems{{File: path, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}}
	}
	t, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	snap, err := s.Load()
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	// the new file last: a conflict is then reported against it (the
	// watcher reports against the later file in name order, so a file
	// written earlier in that order would otherwise take the blame)
	others := slices.DeleteFunc(slices.Clone(snap.Tenants), func(o *Tenant) bool { return o.Name == name })
	if cross := CheckAcrossTenants(append(others, t)); len(cross) > 0 {
		return nil, cross
	}
	if err := atomicfile.Write(path, data, 0o644); err != nil {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	return t, nil
}
