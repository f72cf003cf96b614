package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// etcd backups (docs/design.md §10.3): a snapshot from a control plane through
// the Talos API, written atomically and 0600 to
// <data_dir>/backups/<tenant>/etcd-<UTC yyyymmddThhmmssZ>.snapshot; only
// the newest etcd_backup_keep remain. Taken every etcd_backup_interval,
// before every Talos upgrade, and on demand. The files are inside the
// add-on's data dir, so Home Assistant's backups of the add-on carry them
// together with the secrets bundle a restore needs.

const (
	backupPrefix = "etcd-"
	backupSuffix = ".snapshot"
	backupLayout = "20060102T150405Z"
)

func (e *Engine) backupDir(name string) string { return filepath.Join(e.opts.DataDir, "backups", name) }

// Backup takes an etcd snapshot of the tenant's cluster now (queued behind
// a running operation).
func (e *Engine) Backup(ctx context.Context, name string) error {
	ts, err := e.get(name)
	if err != nil {
		return err
	}
	if !ts.exists() {
		return fmt.Errorf("tenant %s: the cluster is not running (phase %s), so etcd has nothing to back up", name, ts.phase())
	}
	return e.enqueue(name, "backup", nil)
}

// backup is the operation of the button and request.
func (ts *tstate) backup(ctx context.Context) (string, error) {
	tc, err := os.ReadFile(ts.e.talosconfigPath(ts.name))
	if err != nil {
		return "", fmt.Errorf("tenant %s has no talosconfig: press Apply", ts.name)
	}
	info, err := ts.snapshotEtcd(ctx, tc)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("etcd snapshot %s (%d bytes)", info.File, info.Size), nil
}

// snapshotEtcd writes a snapshot from the first control plane that gives
// one and keeps only the newest files.
func (ts *tstate) snapshotEtcd(ctx context.Context, tc []byte) (tenant.BackupInfo, error) {
	e := ts.e
	ts.backupMu.Lock()
	defer ts.backupMu.Unlock()
	t, rec := ts.snapshot()
	if t == nil {
		return tenant.BackupInfo{}, fmt.Errorf("tenant %s has no file", ts.name)
	}
	dir := e.backupDir(ts.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tenant.BackupInfo{}, fmt.Errorf("etcd backup: %w", err)
	}
	var errs []error
	for _, n := range rolloutOrder(t, rec) {
		if rec.Nodes[n].Role != tenant.RoleControlPlane {
			continue
		}
		tg, ok := ts.target(n)
		if !ok {
			continue
		}
		info, err := writeSnapshot(ctx, dir, time.Now(), func(f *os.File) (int64, error) {
			return ts.e.opts.Nodes.EtcdSnapshot(ctx, tg, tc, f)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("from %s: %w", n, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if err := pruneBackups(dir, t.BackupKeep()); err != nil {
			e.log.Warn("removing old etcd snapshots", zap.String("tenant", ts.name), zap.Error(err))
		}
		ts.mu.Lock()
		ts.lastBackup, ts.backupLoaded = &info, true
		ts.mu.Unlock()
		ts.publish()
		e.log.Info("etcd snapshot written", zap.String("tenant", ts.name), zap.String("node", n),
			zap.String("file", info.File), zap.Int64("size", info.Size))
		return info, nil
	}
	if len(errs) == 0 {
		return tenant.BackupInfo{}, fmt.Errorf("etcd backup: tenant %s has no control plane to take a snapshot from", ts.name)
	}
	return tenant.BackupInfo{}, fmt.Errorf("etcd backup: %w", errors.Join(errs...))
}

// writeSnapshot streams a snapshot into <dir>/<name>.part (0600), syncs it
// and renames it into place: a file of that name is always whole.
func writeSnapshot(ctx context.Context, dir string, at time.Time, fill func(*os.File) (int64, error)) (tenant.BackupInfo, error) {
	at = at.UTC().Truncate(time.Second)
	path := filepath.Join(dir, backupPrefix+at.Format(backupLayout)+backupSuffix)
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return tenant.BackupInfo{}, err
	}
	size, err := fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(part, path)
	}
	if err != nil {
		os.Remove(part)
		return tenant.BackupInfo{}, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() //nolint:errcheck // the rename survives a crash
		d.Close()
	}
	return tenant.BackupInfo{At: at, Size: size, File: path}, nil
}

// listBackups is the snapshot files of dir, newest first.
func listBackups(dir string) ([]tenant.BackupInfo, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []tenant.BackupInfo
	for _, de := range ents {
		name := de.Name()
		stamp, ok := strings.CutPrefix(name, backupPrefix)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		stamp, ok = strings.CutSuffix(stamp, backupSuffix)
		if !ok {
			continue
		}
		at, err := time.Parse(backupLayout, stamp)
		if err != nil {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		out = append(out, tenant.BackupInfo{At: at, Size: fi.Size(), File: filepath.Join(dir, name)})
	}
	slices.SortFunc(out, func(a, b tenant.BackupInfo) int { return b.At.Compare(a.At) })
	return out, nil
}

// pruneBackups keeps the newest keep snapshots of dir (and removes parts
// left by an interrupted snapshot).
func pruneBackups(dir string, keep int) error {
	list, err := listBackups(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range list[min(keep, len(list)):] {
		if err := os.Remove(b.File); err != nil {
			errs = append(errs, err)
		}
	}
	parts, _ := filepath.Glob(filepath.Join(dir, backupPrefix+"*"+backupSuffix+".part"))
	for _, p := range parts {
		os.Remove(p)
	}
	return errors.Join(errs...)
}

// recountBackupLocked shows the newest snapshot and whether it is older
// than twice the interval (a problem). ts.mu is held.
func (ts *tstate) recountBackupLocked() {
	if !ts.backupLoaded {
		ts.backupLoaded = true
		if list, err := listBackups(ts.e.backupDir(ts.name)); err == nil && len(list) > 0 {
			ts.lastBackup = &list[0]
		}
	}
	ts.status.Backup = nil
	if ts.lastBackup != nil {
		b := *ts.lastBackup
		ts.status.Backup = &b
	}
	ts.status.BackupStale = ts.backupDueLocked(2) && ts.lastBackup != nil
	if ts.status.BackupStale {
		ts.status.Problem = true
	}
}

// backupDueLocked reports whether the cluster exists, backups are on and
// the newest snapshot is older than factor intervals (or there is none).
func (ts *tstate) backupDueLocked(factor int) bool {
	t := ts.shownLocked()
	if t == nil || ts.spec == nil || !ts.rec.Bootstrapped || len(ts.rec.Nodes) == 0 {
		return false
	}
	iv := t.BackupInterval()
	if iv <= 0 {
		return false
	}
	return ts.lastBackup == nil || time.Since(ts.lastBackup.At) >= time.Duration(factor)*iv
}

// backupLoop takes the periodic snapshots: every check it snapshots each
// idle tenant whose newest snapshot is an interval old, outside the
// operation queue (a failure is logged and shows as a stale backup, it
// fails no operation), and republishes tenants whose staleness changed.
func (e *Engine) backupLoop(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		e.mu.Lock()
		states := make([]*tstate, 0, len(e.ts))
		for _, ts := range e.ts {
			states = append(states, ts)
		}
		e.mu.Unlock()
		for _, ts := range states {
			ts.mu.Lock()
			due := ts.backupDueLocked(1) && ts.cur == "" && len(ts.queue) == 0 &&
				time.Since(ts.backupTried) >= min(ts.shownLocked().BackupInterval(), 5*time.Minute)
			if due {
				ts.backupTried = time.Now()
			}
			wasStale := ts.status.BackupStale
			ts.recountBackupLocked()
			changed := wasStale != ts.status.BackupStale
			ts.mu.Unlock()
			if changed {
				ts.publish()
			}
			if !due {
				continue
			}
			tc, err := os.ReadFile(e.talosconfigPath(ts.name))
			if err != nil {
				continue
			}
			bctx, cancel := context.WithTimeout(ctx, e.opts.NodeTimeout)
			if _, err := ts.snapshotEtcd(bctx, tc); err != nil && ctx.Err() == nil {
				e.log.Warn("periodic etcd backup failed", zap.String("tenant", ts.name), zap.Error(err))
			}
			cancel()
		}
	}
}
