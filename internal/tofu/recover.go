package tofu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// Recover makes tenant's workspace usable after the add-on was killed or
// the machine lost power. Call it at start-up, before any command of the
// tenant:
//
//  1. a tofu the previous add-on started and that still runs (tofu runs in
//     its own process group, so it outlives a SIGKILL of its parent) is
//     stopped like a cancelled command: SIGINT, SIGKILL after
//     Config.GracePeriod, and waited for. Its lock is not touched while it
//     lives; when it cannot be stopped, Recover fails and leaves the lock.
//  2. the state lock is then stale by construction (only this process's
//     tofu uses the backend) and is released;
//  3. a state tofu could not upload (errored.tfstate) is imported only when
//     it is newer than the stored state (same lineage, greater serial);
//     older, foreign and unreadable ones are moved aside, kept and logged.
func (r *Runner) Recover(ctx context.Context, tenant string) error {
	if !httpstate.ValidName(tenant) {
		return fmt.Errorf("tofu: %w %q", httpstate.ErrInvalidName, tenant)
	}
	w := &Workspace{r: r, name: tenant, dir: filepath.Join(r.cfg.DataDir, "work", tenant), mu: r.tenantLock(tenant)}
	w.mu.Lock()
	defer w.mu.Unlock()
	log := r.log.With(zap.String("tenant", tenant))
	p, ok, err := w.readProcRecord()
	if err != nil {
		return fmt.Errorf("tofu recover %s: %w; its state lock is kept", tenant, err)
	}
	if ok {
		if p.alive() && r.cfg.FinishGrace > 0 {
			log.Warn("waiting for a tofu left running by the previous add-on to finish", zap.Int("pid", p.PID),
				zap.String("command", p.Op), zap.Time("started", p.Started), zap.Duration("finish", r.cfg.FinishGrace))
			waitGone(ctx, p, r.cfg.FinishGrace, r.pollInterval())
		}
		if p.alive() {
			log.Warn("stopping a tofu left running by the previous add-on", zap.Int("pid", p.PID),
				zap.String("command", p.Op), zap.Time("started", p.Started), zap.Duration("grace", r.cfg.GracePeriod))
		}
		stopped, err := stopOrphan(ctx, p, r.cfg.GracePeriod, r.pollInterval())
		if err != nil {
			return fmt.Errorf("tofu recover %s: %w; its state lock is kept", tenant, err)
		}
		if stopped {
			log.Warn("stopped the tofu left running by the previous add-on", zap.Int("pid", p.PID))
		}
		w.removeProcRecord()
	}
	w.removeOutputFiles()
	li, held, err := r.states.LockOf(ctx, tenant)
	if err != nil {
		return fmt.Errorf("tofu recover %s: reading the state lock: %w", tenant, err)
	}
	if held {
		if err := r.states.ForceUnlock(ctx, tenant, li.ID); err != nil {
			return fmt.Errorf("tofu recover %s: %w", tenant, err)
		}
		log.Warn("released a stale state lock left by an interrupted tofu run", zap.String("lock", li.ID),
			zap.String("operation", li.Operation), zap.Time("created", li.Created))
	}
	if _, err := os.Stat(w.dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return w.recoverErroredState(ctx, "recover")
}

func (r *Runner) pollInterval() time.Duration { return 100 * time.Millisecond }

// stateMeta is the part of a state file tofu keeps in clear text also when
// the state is encrypted. The lineage may be empty there (tofu leaves it out
// of an errored.tfstate of a state's first apply).
type stateMeta struct {
	Serial  *int64 `json:"serial"`
	Lineage string `json:"lineage"`
}

func parseStateMeta(data []byte) (stateMeta, error) {
	var m stateMeta
	if len(data) == 0 {
		return m, errors.New("empty")
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("not a state: %w", err)
	}
	if m.Serial == nil {
		return m, errors.New("not a state: no serial")
	}
	return m, nil
}

// recoverErroredState deals with a state tofu could not upload, before the
// next command reads state. It is imported as a new version (the previous
// one stays kept) only when it continues the stored state: same lineage and
// a greater serial, or there is no stored state. Anything else (empty or
// truncated by a full disk, unparsable, older, of another lineage) is moved
// aside with a timestamp and logged, never imported over newer state and
// never left to block every later command. While the state is locked the
// file is left alone: the lock may be the tofu still writing it.
func (w *Workspace) recoverErroredState(ctx context.Context, op string) error {
	p := filepath.Join(w.dir, ErroredStateFile)
	data, err := safefile.Read(p, httpstate.MaxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tofu %s %s: %w", op, w.name, err)
	}
	li, locked, err := w.r.states.LockOf(ctx, w.name)
	if err != nil {
		return fmt.Errorf("tofu %s %s: reading the state lock: %w", op, w.name, err)
	}
	if locked {
		e := w.newError(op, -1, nil, "", fmt.Errorf("%w: %s holds state tofu could not upload; it is imported once the lock is released", ErrStateLocked, ErroredStateFile))
		e.Lock = &li
		return e
	}
	log := w.r.log.With(zap.String("tenant", w.name))
	meta, perr := parseStateMeta(data)
	if perr != nil {
		dst, err := moveAside(p, "unreadable")
		if err != nil {
			return fmt.Errorf("tofu %s %s: %s is %v and cannot be moved aside: %w", op, w.name, ErroredStateFile, perr, err)
		}
		log.Warn("moved aside a state tofu could not upload, it is unusable", zap.String("file", dst), zap.Int("size", len(data)), zap.String("problem", perr.Error()))
		return nil
	}
	cur, have, err := w.r.states.Get(ctx, w.name)
	if err != nil {
		return fmt.Errorf("tofu %s %s: reading the stored state: %w", op, w.name, err)
	}
	if have {
		cm, cerr := parseStateMeta(cur)
		otherLineage := cm.Lineage != "" && meta.Lineage != "" && cm.Lineage != meta.Lineage
		if cerr == nil && (otherLineage || *meta.Serial <= *cm.Serial) {
			dst, err := moveAside(p, "stale")
			if err != nil {
				return fmt.Errorf("tofu %s %s: %w", op, w.name, err)
			}
			log.Warn("kept the stored state: the state tofu could not upload is not newer", zap.String("file", dst),
				zap.Int64("serial", *meta.Serial), zap.String("lineage", meta.Lineage),
				zap.Int64("stored_serial", *cm.Serial), zap.String("stored_lineage", cm.Lineage))
			return nil
		}
	}
	if err := w.r.states.Put(ctx, w.name, data, ""); err != nil {
		return fmt.Errorf("tofu %s %s: importing %s: %w", op, w.name, ErroredStateFile, err)
	}
	dst, err := moveAside(p, "imported")
	if err != nil {
		return fmt.Errorf("tofu %s %s: %w", op, w.name, err)
	}
	log.Warn("imported state tofu could not upload earlier", zap.String("file", dst), zap.Int64("serial", *meta.Serial))
	return nil
}

// moveAside renames p to p.<why>-<UTC time>, keeping it for inspection.
func moveAside(p, why string) (string, error) {
	dst := p + "." + why + "-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(p, dst); err != nil {
		return "", err
	}
	_ = os.Chmod(dst, 0o600)
	return dst, nil
}
