package httpstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrRefused is a Backend refusing a request for good: asking again cannot
// succeed (the PostgreSQL store's state.ErrFenced wraps it: this instance no
// longer leads). The Server answers it with a 4xx status, which tofu does not
// retry, and keeps it for Server.TakeRefusal; any other Backend error is a
// 500 that tofu retries.
var ErrRefused = errors.New("write refused")

// Backend is what the Server serves tofu's http backend protocol from: the
// data folder's Store (Store.Backend) or the PostgreSQL store
// (internal/state/postgres). Every method is safe for concurrent use.
type Backend interface {
	// Get returns the current state of name, or ok=false when there is none.
	Get(ctx context.Context, name string) (data []byte, ok bool, err error)
	// Put stores data as the new current state of name; when the state is
	// locked, lockID must be the holder's ID (else a *LockError).
	Put(ctx context.Context, name string, data []byte, lockID string) error
	// Versions lists the kept versions of name, oldest first.
	Versions(ctx context.Context, name string) ([]Version, error)
	// GetVersion returns one kept version of name.
	GetVersion(ctx context.Context, name string, seq int64) ([]byte, error)
	// Lock takes the lock of name for info; raw is the lock JSON as tofu
	// sent it, returned as-is to a conflicting locker (a *LockError).
	// Taking a lock one already holds (same ID) succeeds.
	Lock(ctx context.Context, name string, info LockInfo, raw []byte) error
	// Unlock releases the lock of name held under id; not locked is no
	// error, another holder is a *LockError.
	Unlock(ctx context.Context, name, id string) error
	// LockOf reports who holds the lock of name.
	LockOf(ctx context.Context, name string) (LockInfo, bool, error)
	// ForceUnlock removes a stale lock of name held under id.
	ForceUnlock(ctx context.Context, name, id string) error
}

// NewLockError is a lock conflict over name with holder, whose lock JSON
// (raw, may be nil) is what a conflicting locker gets back.
func NewLockError(name string, holder LockInfo, raw []byte) *LockError {
	return &LockError{Name: name, Holder: holder, raw: raw}
}

// ParseLock decodes tofu's lock JSON read from where; a lock that cannot be
// decoded still means "locked" (never hand out a second lock because the
// first is garbled), so it comes back as a holder named "unreadable".
func ParseLock(raw []byte, where string) (LockInfo, []byte) {
	var li LockInfo
	if err := json.Unmarshal(raw, &li); err != nil {
		li = LockInfo{ID: "unreadable", Info: where + ": " + err.Error()}
		raw, _ = json.Marshal(li)
	}
	return li, raw
}

// Backend is s as a Backend (the context is not used: file operations are
// short and not cancellable).
func (s *Store) Backend() Backend { return fileBackend{s} }

type fileBackend struct{ s *Store }

var _ Backend = fileBackend{}

func (b fileBackend) Get(_ context.Context, name string) ([]byte, bool, error) { return b.s.Get(name) }

func (b fileBackend) Put(_ context.Context, name string, data []byte, lockID string) error {
	return b.s.Put(name, data, lockID)
}

func (b fileBackend) Versions(_ context.Context, name string) ([]Version, error) {
	return b.s.Versions(name)
}

func (b fileBackend) GetVersion(_ context.Context, name string, seq int64) ([]byte, error) {
	return b.s.GetVersion(name, seq)
}

func (b fileBackend) Lock(_ context.Context, name string, info LockInfo, raw []byte) error {
	if raw == nil {
		var err error
		if raw, err = json.Marshal(info); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
	}
	return b.s.lockRaw(name, info, raw)
}

func (b fileBackend) Unlock(_ context.Context, name, id string) error { return b.s.Unlock(name, id) }

func (b fileBackend) LockOf(_ context.Context, name string) (LockInfo, bool, error) {
	dir, err := b.s.nameDir(name)
	if err != nil {
		return LockInfo{}, false, err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	li, _, ok, err := b.s.readLock(dir)
	return li, ok, err
}

func (b fileBackend) ForceUnlock(_ context.Context, name, id string) error {
	return b.s.ForceUnlock(name, id)
}
