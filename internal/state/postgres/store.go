package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// fenced runs f in a transaction that first passes the fence (locks the
// leader row, refuses when a newer leadership exists), for writes that
// decide on what they read; nothing is written when it is refused.
func (w *Writer) fenced(ctx context.Context, what string, f func(tx pgx.Tx) error) error {
	tx, err := w.s.pool.Begin(ctx)
	if err != nil {
		return w.s.wrap(what, err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT rezuscloud.fence($1)`, w.epoch); err != nil {
		return w.s.wrap(what, fencedError(err))
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

// fencedCode is the SQLSTATE rezuscloud.fence raises.
const fencedCode = "RZ001"

// write runs one statement behind the fence in one round trip: the fence
// and the statement go in one pipelined batch, which the server runs as one
// implicit transaction, so a fenced write runs nothing.
func (w *Writer) write(ctx context.Context, what, sql string, args ...any) error {
	batch := &pgx.Batch{}
	batch.Queue(`SELECT rezuscloud.fence($1)`, w.epoch)
	batch.Queue(sql, args...)
	br := w.s.pool.SendBatch(ctx, batch)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return w.s.wrap(what, fencedError(err))
	}
	return nil
}

// fencedError turns rezuscloud.fence's exception into state.ErrFenced.
func fencedError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == fencedCode {
		return fmt.Errorf("%w (%s)", state.ErrFenced, strings.TrimPrefix(pe.Message, "fenced: "))
	}
	return err
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
	return w.write(ctx, "tenant "+tenant+": record", `INSERT INTO rezuscloud.records VALUES ($1, $2, $3, now())
		ON CONFLICT (tenant) DO UPDATE SET data = $2, epoch = $3, updated = now()`, tenant, data, w.epoch)
}

// DeleteRecord removes a tenant's record (none is no error).
func (w *Writer) DeleteRecord(ctx context.Context, tenant string) error {
	return w.write(ctx, "tenant "+tenant+": delete record", `DELETE FROM rezuscloud.records WHERE tenant = $1`, tenant)
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
	return w.write(ctx, "tenant "+tenant+": "+kind, `INSERT INTO rezuscloud.secrets VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (tenant, kind) DO UPDATE SET sealed = $3, epoch = $4, updated = now()`, tenant, kind, sealed, w.epoch)
}

// DeleteSecret removes a tenant's secret of kind (none is no error).
func (w *Writer) DeleteSecret(ctx context.Context, tenant, kind string) error {
	return w.write(ctx, "tenant "+tenant+": delete "+kind, `DELETE FROM rezuscloud.secrets WHERE tenant = $1 AND kind = $2`, tenant, kind)
}

// PutBackup adds (or replaces) an entry of the backups' index.
func (w *Writer) PutBackup(ctx context.Context, b state.Backup) error {
	if err := checkTenant(b.Tenant); err != nil {
		return err
	}
	if b.File == "" || !httpstate.ValidName(b.File) {
		return fmt.Errorf("tenant %s: backup file name %q", b.Tenant, b.File)
	}
	return w.write(ctx, "tenant "+b.Tenant+": backup "+b.File, `INSERT INTO rezuscloud.backups VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant, file) DO UPDATE SET size = $3, taken = $4, sha256 = $5`,
		b.Tenant, b.File, b.Size, b.At.UTC(), b.SHA256[:])
}

// DeleteBackup removes an entry of the backups' index.
func (w *Writer) DeleteBackup(ctx context.Context, tenant, file string) error {
	return w.write(ctx, "tenant "+tenant+": delete backup "+file, `DELETE FROM rezuscloud.backups WHERE tenant = $1 AND file = $2`, tenant, file)
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
