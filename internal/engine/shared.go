package engine

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// With a shared store (Options.Shared, PostgreSQL) the store is the record
// and the data folder is this instance's working copy of it (the engine,
// talosctl and the share folder read files): every record, secret and
// backup index entry is written to the store first, under this instance's
// leadership, and only then to the data folder. A write the store refuses
// (another instance leads now, or the store cannot be reached) is an
// error of the operation that made it and changes nothing here either, so
// the crash-ordering rule of records.commit holds across machines: what an
// operation is about to do is in the store before it does it.

// sharedTimeout bounds one write to the shared store.
const sharedTimeout = 30 * time.Second

func sharedCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sharedTimeout)
}

// shareRecord is what records.save calls with the record's bytes before it
// writes the file (nil without a shared store).
func (e *Engine) shareRecord(name string) func([]byte) error {
	w := e.opts.Shared
	if w == nil {
		return nil
	}
	return func(data []byte) error {
		ctx, cancel := sharedCtx()
		defer cancel()
		if err := w.PutRecord(ctx, name, data); err != nil {
			return fmt.Errorf("tenant %s: engine record: %w", name, err)
		}
		return nil
	}
}

// shareSecret writes a tenant's secret of kind to the shared store.
func (e *Engine) shareSecret(name, kind string, data []byte) error {
	w := e.opts.Shared
	if w == nil {
		return nil
	}
	sum := sha256.Sum256(data)
	e.sharedMu.Lock()
	same := e.shared[name+"/"+kind] == sum
	e.sharedMu.Unlock()
	if same {
		return nil
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	if err := w.PutSecret(ctx, name, kind, data); err != nil {
		return fmt.Errorf("tenant %s: %s: %w", name, kind, err)
	}
	e.sharedMu.Lock()
	e.shared[name+"/"+kind] = sum
	e.sharedMu.Unlock()
	return nil
}

// shareSecretsBundle writes the tenant's secrets bundle file to the shared
// store when it is not there yet (a new bundle, before tofu creates
// anything that trusts it).
func (e *Engine) shareSecretsBundle(name string) error {
	if e.opts.Shared == nil {
		return nil
	}
	data, err := safefile.Read(talos.SecretsPath(e.tenantDir(name)), 1<<20)
	if err != nil {
		return fmt.Errorf("tenant %s: secrets bundle: %w", name, err)
	}
	return e.shareSecret(name, state.SecretsBundle, data)
}

// unshare removes a tenant's secrets of kinds (and, with record, its
// record) from the shared store. A failure is logged: the tenant's files
// are gone here, and the store keeps a copy that a later leader shows
// again (nothing is lost, and nothing runs on it by itself).
func (e *Engine) unshare(name string, record bool, kinds ...string) {
	w := e.opts.Shared
	if w == nil {
		return
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	for _, k := range kinds {
		if err := w.DeleteSecret(ctx, name, k); err != nil {
			e.log.Error("removing a secret from the shared store", zap.String("tenant", name), zap.String("kind", k), zap.Error(err))
		}
		e.sharedMu.Lock()
		delete(e.shared, name+"/"+k)
		e.sharedMu.Unlock()
	}
	if record {
		if err := w.DeleteRecord(ctx, name); err != nil {
			e.log.Error("removing a record from the shared store", zap.String("tenant", name), zap.Error(err))
		}
	}
}

// shareBackups brings the shared store's backups index to what the
// tenant's backup folder holds after a snapshot (the new file added, the
// pruned ones removed). The snapshot files stay on this machine.
func (e *Engine) shareBackups(name string, written tenant.BackupInfo, removed []string) error {
	w := e.opts.Shared
	if w == nil {
		return nil
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	sum, err := fileSHA256(written.File)
	if err != nil {
		return fmt.Errorf("etcd backup: %w", err)
	}
	if err := w.PutBackup(ctx, state.Backup{Tenant: name, File: filepath.Base(written.File), Size: written.Size,
		At: written.At, SHA256: sum}); err != nil {
		return fmt.Errorf("etcd backup: index: %w", err)
	}
	for _, f := range removed {
		if err := w.DeleteBackup(ctx, name, filepath.Base(f)); err != nil {
			return fmt.Errorf("etcd backup: index: %w", err)
		}
	}
	return nil
}

func fileSHA256(path string) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, fmt.Errorf("%s: %w", path, err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
