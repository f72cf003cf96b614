package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// States is tofu's state backend in the store, writing under w's epoch:
// versions in rezuscloud.states (the last Keep of each state, with their
// SHA-256, checked on every read), locks in rezuscloud.state_locks. tofu
// encrypts the state before it is uploaded, so the rows hold ciphertext.
func (w *Writer) States() httpstate.Backend { return &states{w: w} }

type states struct{ w *Writer }

var _ httpstate.Backend = (*states)(nil)

func checkName(name string) error {
	if !httpstate.ValidName(name) {
		return fmt.Errorf("%w %q", httpstate.ErrInvalidName, name)
	}
	return nil
}

func verify(name string, seq int64, data, sum []byte) error {
	got := sha256.Sum256(data)
	if !bytes.Equal(got[:], sum) {
		return fmt.Errorf("state %s version %d: checksum mismatch (the stored state is damaged)", name, seq)
	}
	return nil
}

func (b *states) Get(ctx context.Context, name string) ([]byte, bool, error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	var seq int64
	var data, sum []byte
	err := b.w.s.pool.QueryRow(ctx, `SELECT seq, data, sha256 FROM rezuscloud.states WHERE name = $1
		ORDER BY seq DESC LIMIT 1`, name).Scan(&seq, &data, &sum)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, b.w.s.wrap("state "+name, err)
	}
	if err := verify(name, seq, data, sum); err != nil {
		return nil, false, b.w.s.wrap("state "+name, err)
	}
	return data, true, nil
}

func (b *states) Versions(ctx context.Context, name string) ([]httpstate.Version, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	rows, err := b.w.s.pool.Query(ctx, `SELECT seq, length(data), created FROM rezuscloud.states WHERE name = $1 ORDER BY seq`, name)
	if err != nil {
		return nil, b.w.s.wrap("state "+name+": versions", err)
	}
	vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (httpstate.Version, error) {
		var v httpstate.Version
		err := r.Scan(&v.Seq, &v.Size, &v.Modified)
		return v, err
	})
	if err != nil {
		return nil, b.w.s.wrap("state "+name+": versions", err)
	}
	return vs, nil
}

func (b *states) GetVersion(ctx context.Context, name string, seq int64) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var data, sum []byte
	err := b.w.s.pool.QueryRow(ctx, `SELECT data, sha256 FROM rezuscloud.states WHERE name = $1 AND seq = $2`, name, seq).Scan(&data, &sum)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("state %s: no version %d", name, seq)
	}
	if err != nil {
		return nil, b.w.s.wrap(fmt.Sprintf("state %s version %d", name, seq), err)
	}
	if err := verify(name, seq, data, sum); err != nil {
		return nil, b.w.s.wrap("state "+name, err)
	}
	return data, nil
}

// holder is the lock of name in tx, locked for the transaction.
func holder(ctx context.Context, tx pgx.Tx, name string) (id string, raw []byte, ok bool, err error) {
	err = tx.QueryRow(ctx, `SELECT id, info FROM rezuscloud.state_locks WHERE name = $1 FOR UPDATE`, name).Scan(&id, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, false, nil
	}
	return id, raw, err == nil, err
}

func lockError(name string, raw []byte) error {
	li, raw := httpstate.ParseLock(raw, "state_locks")
	return httpstate.NewLockError(name, li, raw)
}

// Put is the hot path (every state upload of every apply), so it is one
// round trip: the fence, the lock check, the insert and the pruning go in
// one pipelined batch, which the server runs as one implicit transaction.
// A fenced upload stops at the fence; the insert and the pruning repeat the
// lock check in their WHERE, so a locked upload changes nothing either.
func (b *states) Put(ctx context.Context, name string, data []byte, lockID string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if len(data) > httpstate.MaxStateSize {
		return fmt.Errorf("state %s: %d bytes is over %d", name, len(data), httpstate.MaxStateSize)
	}
	sum := sha256.Sum256(data)
	w := b.w
	const unlocked = `NOT EXISTS (SELECT 1 FROM rezuscloud.state_locks WHERE name = $1 AND id <> $2)`
	batch := &pgx.Batch{}
	batch.Queue(`SELECT rezuscloud.fence($1)`, w.epoch)
	batch.Queue(`SELECT id, info FROM rezuscloud.state_locks WHERE name = $1 FOR UPDATE`, name)
	batch.Queue(`INSERT INTO rezuscloud.states
		SELECT $1, m.next, $3, $4, $5, now()
		FROM (SELECT coalesce(max(seq), 0) + 1 AS next FROM rezuscloud.states WHERE name = $1) m
		WHERE `+unlocked, name, lockID, data, sum[:], w.epoch)
	batch.Queue(`DELETE FROM rezuscloud.states
		WHERE name = $1 AND seq <= (SELECT max(seq) FROM rezuscloud.states WHERE name = $1) - $3 AND `+unlocked,
		name, lockID, int64(w.s.keep))
	br := w.s.pool.SendBatch(ctx, batch)
	_, err := br.Exec()
	var id string
	var raw []byte
	locked := false
	if err == nil {
		err = br.QueryRow().Scan(&id, &raw)
		locked = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return w.s.wrap("state "+name+": upload", fencedError(err))
	case locked && id != lockID:
		return lockError(name, raw)
	}
	return nil
}

func (b *states) Lock(ctx context.Context, name string, info httpstate.LockInfo, raw []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if info.ID == "" {
		return errors.New("lock: no lock ID")
	}
	if raw == nil {
		var err error
		if raw, err = json.Marshal(info); err != nil {
			return err
		}
	}
	return b.w.fenced(ctx, "state "+name+": lock", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO rezuscloud.state_locks VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING`,
			name, info.ID, raw, time.Now().UTC())
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		id, held, ok, err := holder(ctx, tx, name)
		if err != nil || !ok || id == info.ID {
			return err
		}
		return lockError(name, held)
	})
}

func (b *states) Unlock(ctx context.Context, name, id string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return b.w.fenced(ctx, "state "+name+": unlock", func(tx pgx.Tx) error {
		held, raw, ok, err := holder(ctx, tx, name)
		if err != nil || !ok {
			return err
		}
		if held != id {
			return lockError(name, raw)
		}
		_, err = tx.Exec(ctx, `DELETE FROM rezuscloud.state_locks WHERE name = $1`, name)
		return err
	})
}

func (b *states) LockOf(ctx context.Context, name string) (httpstate.LockInfo, bool, error) {
	if err := checkName(name); err != nil {
		return httpstate.LockInfo{}, false, err
	}
	var raw []byte
	err := b.w.s.pool.QueryRow(ctx, `SELECT info FROM rezuscloud.state_locks WHERE name = $1`, name).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return httpstate.LockInfo{}, false, nil
	}
	if err != nil {
		return httpstate.LockInfo{}, false, b.w.s.wrap("state "+name+": lock", err)
	}
	li, _ := httpstate.ParseLock(raw, "state_locks")
	return li, true, nil
}

func (b *states) ForceUnlock(ctx context.Context, name, id string) error {
	if err := b.Unlock(ctx, name, id); err != nil {
		return fmt.Errorf("force-unlock: %w", err)
	}
	return nil
}
