// Package state is what rezuscloud keeps about its tenants, independent of
// where it is kept (the data folder, or PostgreSQL in package
// state/postgres): tenant records, Talos secrets, the etcd backups' index,
// the OpenTofu states (served to tofu through httpstate.Backend), and, for a
// store that several instances share, leadership with fencing.
package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// ErrFenced refuses a write from a leadership that is no longer the
// current one: another instance has led since, and whatever the old leader
// believed may be stale. Nothing was written. It wraps httpstate.ErrRefused,
// so the state server answers tofu with a status it does not retry.
var ErrFenced = fmt.Errorf("%w: this instance no longer leads (another instance has taken over since)", httpstate.ErrRefused)

// ErrNewerSchema refuses to use a store whose schema was made by a newer
// rezuscloud than this one.
var ErrNewerSchema = errors.New("the state store was created or upgraded by a newer rezuscloud")

// ErrNotEmpty refuses to copy into a store that already holds state.
var ErrNotEmpty = errors.New("the target store is not empty")

// ErrWrongPassphrase is a store whose secrets were encrypted under another
// state passphrase.
var ErrWrongPassphrase = errors.New("the state passphrase does not match the one the store's secrets are encrypted with")

// Secret kinds: the files the engine keeps next to a tenant's record.
const (
	SecretsBundle = "secrets.yaml"
	Talosconfig   = "talosconfig"
	Kubeconfig    = "kubeconfig"
)

// SecretKinds lists the secret kinds a store keeps.
var SecretKinds = []string{SecretsBundle, Talosconfig, Kubeconfig}

// IsSecretKind reports whether kind is one of SecretKinds.
func IsSecretKind(kind string) bool {
	for _, k := range SecretKinds {
		if k == kind {
			return true
		}
	}
	return false
}

// Backup is one etcd snapshot in the backups' index (the snapshot file
// itself stays where the engine wrote it).
type Backup struct {
	Tenant string
	File   string // base name, etcd-<stamp>.snapshot
	Size   int64
	At     time.Time
	SHA256 [32]byte
}

// Member is an instance that shares the store.
type Member struct {
	Instance string
	LastSeen time.Time
	Leader   bool
}

// Leadership is this instance leading the store, from Campaign until it is
// lost or resigned.
type Leadership interface {
	// Epoch is this leadership's number; every leadership has a higher one
	// than those before it.
	Epoch() int64
	// Lost is closed when the leadership ends: the session holding it died,
	// could not be checked in time, or Resign was called.
	Lost() <-chan struct{}
	// Resign gives the leadership up.
	Resign(ctx context.Context) error
	// Writer writes under this leadership's epoch.
	Writer() Writer
}

// Reader reads a store.
type Reader interface {
	// Tenants lists the tenants that have a record, sorted.
	Tenants(ctx context.Context) ([]string, error)
	// Record is a tenant's record (the engine's JSON), ok=false when none.
	Record(ctx context.Context, tenant string) (data []byte, ok bool, err error)
	// Secret is a tenant's secret of kind (SecretKinds), decrypted.
	Secret(ctx context.Context, tenant, kind string) (data []byte, ok bool, err error)
	// Backups is a tenant's backups' index, newest first.
	Backups(ctx context.Context, tenant string) ([]Backup, error)
}

// Writer writes a store under one leadership's epoch: every write is
// refused with ErrFenced once a newer leadership exists.
type Writer interface {
	PutRecord(ctx context.Context, tenant string, data []byte) error
	DeleteRecord(ctx context.Context, tenant string) error
	PutSecret(ctx context.Context, tenant, kind string, data []byte) error
	DeleteSecret(ctx context.Context, tenant, kind string) error
	PutBackup(ctx context.Context, b Backup) error
	DeleteBackup(ctx context.Context, tenant, file string) error
	// States is tofu's state backend writing under this epoch.
	States() httpstate.Backend
}
