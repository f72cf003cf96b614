package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// MaxRecord caps a tenant record, MaxSecret a secret.
const (
	MaxRecord = 4 << 20
	MaxSecret = 4 << 20
)

// Writer writes under one epoch; see state.Writer.
type Writer struct {
	s     *Store
	epoch int64
}

var _ state.Writer = (*Writer)(nil)

// Writer writes under epoch (a Leadership's; Leadership.Writer is the
// usual way to get one).
func (s *Store) Writer(epoch int64) *Writer { return &Writer{s: s, epoch: epoch} }

// Epoch is the epoch the writer writes under.
func (w *Writer) Epoch() int64 { return w.epoch }

// fenced runs f in a transaction that first locks the leader row and
// refuses, changing nothing, when a newer leadership exists.
func (w *Writer) fenced(ctx context.Context, what string, f func(tx pgx.Tx) error) error {
	tx, err := w.s.pool.Begin(ctx)
	if err != nil {
		return w.s.wrap(what, err)
	}
	defer tx.Rollback(context.Background())
	var cur int64
	if err := tx.QueryRow(ctx, `SELECT epoch FROM rezuscloud.leader WHERE id = 1 FOR UPDATE`).Scan(&cur); err != nil {
		return w.s.wrap(what, err)
	}
	if cur != w.epoch {
		return w.s.wrap(what, fmt.Errorf("%w (epoch %d, the store's is %d)", state.ErrFenced, w.epoch, cur))
	}
	if err := f(tx); err != nil {
		var le *httpstate.LockError
		if errors.As(err, &le) || errors.Is(err, httpstate.ErrInvalidName) {
			return err
		}
		return w.s.wrap(what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return w.s.wrap(what, err)
	}
	return nil
}

func checkTenant(tenant string) error {
	if !httpstate.ValidName(tenant) {
		return fmt.Errorf("%w %q", httpstate.ErrInvalidName, tenant)
	}
	return nil
}

// PutRecord stores a tenant's record.
func (w *Writer) PutRecord(ctx context.Context, tenant string, data []byte) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if len(data) > MaxRecord {
		return fmt.Errorf("tenant %s: record of %d bytes is over %d", tenant, len(data), MaxRecord)
	}
	return w.fenced(ctx, "tenant "+tenant+": record", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO rezuscloud.records VALUES ($1, $2, $3, now())
			ON CONFLICT (tenant) DO UPDATE SET data = $2, epoch = $3, updated = now()`, tenant, data, w.epoch)
		return err
	})
}

// DeleteRecord removes a tenant's record (none is no error).
func (w *Writer) DeleteRecord(ctx context.Context, tenant string) error {
	return w.fenced(ctx, "tenant "+tenant+": delete record", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM rezuscloud.records WHERE tenant = $1`, tenant)
		return err
	})
}

func secretContext(tenant, kind string) string { return "secret/" + tenant + "/" + kind }

// PutSecret seals and stores a tenant's secret of kind.
func (w *Writer) PutSecret(ctx context.Context, tenant, kind string, data []byte) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if !state.IsSecretKind(kind) {
		return fmt.Errorf("tenant %s: unknown secret kind %q", tenant, kind)
	}
	if len(data) > MaxSecret {
		return fmt.Errorf("tenant %s: %s of %d bytes is over %d", tenant, kind, len(data), MaxSecret)
	}
	sealed, err := w.s.seal.seal(data, secretContext(tenant, kind))
	if err != nil {
		return fmt.Errorf("tenant %s: %s: %w", tenant, kind, err)
	}
	return w.fenced(ctx, "tenant "+tenant+": "+kind, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO rezuscloud.secrets VALUES ($1, $2, $3, $4, now())
			ON CONFLICT (tenant, kind) DO UPDATE SET sealed = $3, epoch = $4, updated = now()`, tenant, kind, sealed, w.epoch)
		return err
	})
}

// DeleteSecret removes a tenant's secret of kind (none is no error).
func (w *Writer) DeleteSecret(ctx context.Context, tenant, kind string) error {
	return w.fenced(ctx, "tenant "+tenant+": delete "+kind, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM rezuscloud.secrets WHERE tenant = $1 AND kind = $2`, tenant, kind)
		return err
	})
}

// PutBackup adds (or replaces) an entry of the backups' index.
func (w *Writer) PutBackup(ctx context.Context, b state.Backup) error {
	if err := checkTenant(b.Tenant); err != nil {
		return err
	}
	if b.File == "" || !httpstate.ValidName(b.File) {
		return fmt.Errorf("tenant %s: backup file name %q", b.Tenant, b.File)
	}
	return w.fenced(ctx, "tenant "+b.Tenant+": backup "+b.File, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO rezuscloud.backups VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant, file) DO UPDATE SET size = $3, taken = $4, sha256 = $5`,
			b.Tenant, b.File, b.Size, b.At.UTC(), b.SHA256[:])
		return err
	})
}

// DeleteBackup removes an entry of the backups' index.
func (w *Writer) DeleteBackup(ctx context.Context, tenant, file string) error {
	return w.fenced(ctx, "tenant "+tenant+": delete backup "+file, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM rezuscloud.backups WHERE tenant = $1 AND file = $2`, tenant, file)
		return err
	})
}

// Tenants lists the tenants that have a record.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant FROM rezuscloud.records ORDER BY tenant`)
	if err != nil {
		return nil, s.wrap("tenants", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.wrap("tenants", err)
	}
	return names, nil
}

// Record is a tenant's record.
func (s *Store) Record(ctx context.Context, tenant string) ([]byte, bool, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM rezuscloud.records WHERE tenant = $1`, tenant).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.wrap("tenant "+tenant+": record", err)
	}
	return data, true, nil
}

// Secret is a tenant's secret of kind, opened.
func (s *Store) Secret(ctx context.Context, tenant, kind string) ([]byte, bool, error) {
	var sealed []byte
	err := s.pool.QueryRow(ctx, `SELECT sealed FROM rezuscloud.secrets WHERE tenant = $1 AND kind = $2`, tenant, kind).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.wrap("tenant "+tenant+": "+kind, err)
	}
	data, err := s.seal.open(sealed, secretContext(tenant, kind))
	if err != nil {
		return nil, false, fmt.Errorf("state store postgres://%s: tenant %s: %s does not open (damaged, or sealed under another passphrase): %w",
			s.where, tenant, kind, err)
	}
	return data, true, nil
}

// Backups is a tenant's backups' index, newest first.
func (s *Store) Backups(ctx context.Context, tenant string) ([]state.Backup, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, file, size, taken, sha256 FROM rezuscloud.backups
		WHERE tenant = $1 ORDER BY taken DESC, file DESC`, tenant)
	if err != nil {
		return nil, s.wrap("tenant "+tenant+": backups", err)
	}
	out, err := pgx.CollectRows(rows, scanBackup)
	if err != nil {
		return nil, s.wrap("tenant "+tenant+": backups", err)
	}
	return out, nil
}

func scanBackup(r pgx.CollectableRow) (state.Backup, error) {
	var b state.Backup
	var sum []byte
	if err := r.Scan(&b.Tenant, &b.File, &b.Size, &b.At, &sum); err != nil {
		return b, err
	}
	if len(sum) != sha256.Size {
		return b, fmt.Errorf("backup %s/%s: checksum of %d bytes", b.Tenant, b.File, len(sum))
	}
	copy(b.SHA256[:], sum)
	b.At = b.At.UTC()
	return b, nil
}

// Epoch is the store's current epoch (that of the newest leadership).
func (s *Store) Epoch(ctx context.Context) (int64, error) {
	var e int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM rezuscloud.leader WHERE id = 1`).Scan(&e); err != nil {
		return 0, s.wrap("epoch", err)
	}
	return e, nil
}
