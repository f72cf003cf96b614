package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	ts, err := e.lookup(name)
	if err != nil {
		return err
	}
	if !ts.exists() {
		return fmt.Errorf("tenant %s: the cluster is not running (phase %s), so etcd has nothing to back up", name, ts.phase())
	}
	return e.enqueue(name, operation{name: opBackup, activity: tenant.ActivityBackingUp,
		do: func(ctx context.Context, r *run) (string, error) { return ts.backupNow(ctx) }})
}

// backupNow is the operation of the button and request.
func (ts *tenantState) backupNow(ctx context.Context) (string, error) {
	tc, err := ts.talosconfig()
	if err != nil {
		return "", err
	}
	info, err := ts.snapshotEtcd(ctx, tc)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("etcd snapshot %s (%d bytes)", info.File, info.Size), nil
}

// snapshotEtcd writes a snapshot from the first control plane that gives
// one and keeps only the newest files.
func (ts *tenantState) snapshotEtcd(ctx context.Context, tc []byte) (tenant.BackupInfo, error) {
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
		info, err := writeSnapshot(ctx, dir, e.now(), func(f *os.File) (int64, error) {
			return ts.e.opts.Nodes.EtcdSnapshot(ctx, tg, tc, f)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("from %s: %w", n, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		removed, err := pruneBackups(dir, t.BackupKeep())
		if err != nil {
			e.log.Warn("removing old etcd snapshots", zap.String("tenant", ts.name), zap.Error(err))
		}
		if err := e.shareBackups(ts.name, info, removed); err != nil {
			return tenant.BackupInfo{}, err
		}
		ts.mu.Lock()
		ts.backup, ts.backupLoaded = &info, true
		ts.mu.Unlock()
		ts.changed()
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
// and renames it into place: a file of that name is always whole. The
// name is etcd-<UTC yyyymmddThhmmssZ>.snapshot, with -2, -3, ... when
// snapshots of the same second exist already (none is ever overwritten).
func writeSnapshot(ctx context.Context, dir string, at time.Time, fill func(*os.File) (int64, error)) (tenant.BackupInfo, error) {
	at = at.UTC().Truncate(time.Second)
	stamp := at.Format(backupLayout)
	var path string
	for seq := 1; ; seq++ {
		name := backupPrefix + stamp + backupSuffix
		if seq > 1 {
			name = fmt.Sprintf("%s%s-%d%s", backupPrefix, stamp, seq, backupSuffix)
		}
		path = filepath.Join(dir, name)
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
		// never over another snapshot: a link fails when the name exists
		if err = os.Link(part, path); err == nil {
			os.Remove(part)
		}
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

// listBackups is the snapshot files of dir, newest first (by time, then by
// the sequence of snapshots of the same second).
func listBackups(dir string) ([]tenant.BackupInfo, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	type entry struct {
		info tenant.BackupInfo
		seq  int
	}
	var out []entry
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
		seq := 1
		if base, n, ok := strings.Cut(stamp, "-"); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 2 {
				continue
			}
			stamp, seq = base, v
		}
		at, err := time.Parse(backupLayout, stamp)
		if err != nil {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		out = append(out, entry{tenant.BackupInfo{At: at, Size: fi.Size(), File: filepath.Join(dir, name)}, seq})
	}
	slices.SortFunc(out, func(a, b entry) int {
		if c := b.info.At.Compare(a.info.At); c != 0 {
			return c
		}
		return b.seq - a.seq
	})
	infos := make([]tenant.BackupInfo, len(out))
	for i, e := range out {
		infos[i] = e.info
	}
	return infos, nil
}

// pruneBackups keeps the newest keep snapshots of dir (and removes parts
// left by an interrupted snapshot); removed are the snapshots it removed.
func pruneBackups(dir string, keep int) (removed []string, err error) {
	list, err := listBackups(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, b := range list[min(keep, len(list)):] {
		if err := os.Remove(b.File); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, b.File)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, backupPrefix+"*"+backupSuffix+".part"))
	for _, p := range parts {
		os.Remove(p)
	}
	return removed, errors.Join(errs...)
}

// loadBackup reads the newest snapshot from the backup dir, once.
func (ts *tenantState) loadBackup() {
	ts.mu.Lock()
	loaded := ts.backupLoaded
	ts.backupLoaded = true
	ts.mu.Unlock()
	if loaded {
		return
	}
	if list, err := listBackups(ts.e.backupDir(ts.name)); err == nil && len(list) > 0 {
		ts.mu.Lock()
		if ts.backup == nil {
			ts.backup = &list[0]
		}
		ts.mu.Unlock()
	}
}

// backupLoop takes the periodic snapshots: every check it snapshots each
// idle tenant whose newest snapshot is an interval old, outside the
// operation queue (a failure is logged and shows as a stale backup, it
// fails no operation).
func (e *Engine) backupLoop(ctx context.Context, every time.Duration) {
	everyTick(ctx, every, func() {
		for _, ts := range e.states() {
			ts.loadBackup()
			t, rec := ts.snapshot()
			now := e.now()
			ts.mu.Lock()
			due := t != nil && ts.spec != nil && backupDue(t, rec, ts.backup, now, 1) && ts.run == nil && len(ts.queue) == 0 &&
				now.Sub(ts.backupTried) >= min(t.BackupInterval(), 5*time.Minute)
			if due {
				ts.backupTried = now
			}
			ts.mu.Unlock()
			if !due {
				continue
			}
			tc, err := ts.talosconfig()
			if err != nil {
				continue
			}
			bctx, cancel := context.WithTimeout(ctx, e.opts.NodeTimeout)
			if _, err := ts.snapshotEtcd(bctx, tc); err != nil && ctx.Err() == nil {
				e.log.Warn("periodic etcd backup failed", zap.String("tenant", ts.name), zap.Error(err))
			}
			cancel()
		}
	})
}
