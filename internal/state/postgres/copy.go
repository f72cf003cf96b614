package postgres

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rezuscloud/rezuscloud/internal/state"
)

// Empty reports whether the store holds no state (records, secrets,
// states, locks, backups' index).
func (s *Store) Empty(ctx context.Context) (bool, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM rezuscloud.records) + (SELECT count(*) FROM rezuscloud.secrets)
		+ (SELECT count(*) FROM rezuscloud.states) + (SELECT count(*) FROM rezuscloud.state_locks)
		+ (SELECT count(*) FROM rezuscloud.backups)`).Scan(&n)
	if err != nil {
		return false, s.wrap("emptiness", err)
	}
	return n == 0, nil
}

// Export reads the whole store in one consistent snapshot, checking every
// state version against its checksum and opening every secret. A held
// state lock is refused (an operation runs, or one died).
func (s *Store) Export(ctx context.Context) (*state.Snapshot, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, s.wrap("export", err)
	}
	defer tx.Rollback(context.Background())
	byName := map[string]*state.Tenant{}
	var order []string
	get := func(name string) *state.Tenant {
		t := byName[name]
		if t == nil {
			t = &state.Tenant{Name: name, Secrets: map[string][]byte{}}
			byName[name] = t
			order = append(order, name)
		}
		return t
	}
	var locked string
	if err := tx.QueryRow(ctx, `SELECT coalesce(string_agg(name, ', '), '') FROM rezuscloud.state_locks`).Scan(&locked); err != nil {
		return nil, s.wrap("export", err)
	}
	if locked != "" {
		return nil, fmt.Errorf("state store postgres://%s: the state of %s is locked: stop the instances, or let the operation finish, and copy again", s.where, locked)
	}
	type scan func(pgx.Rows) error
	queries := []struct {
		q string
		f scan
	}{
		{`SELECT tenant, data FROM rezuscloud.records ORDER BY tenant`, func(r pgx.Rows) error {
			var name string
			var data []byte
			if err := r.Scan(&name, &data); err != nil {
				return err
			}
			get(name).Record = data
			return nil
		}},
		{`SELECT tenant, kind, sealed FROM rezuscloud.secrets ORDER BY tenant, kind`, func(r pgx.Rows) error {
			var name, kind string
			var sealed []byte
			if err := r.Scan(&name, &kind, &sealed); err != nil {
				return err
			}
			plain, err := s.seal.open(sealed, secretContext(name, kind))
			if err != nil {
				return fmt.Errorf("tenant %s: %s does not open: %w", name, kind, err)
			}
			get(name).Secrets[kind] = plain
			return nil
		}},
		{`SELECT name, seq, data, sha256, created FROM rezuscloud.states ORDER BY name, seq`, func(r pgx.Rows) error {
			var name string
			var v state.StateVersion
			var sum []byte
			if err := r.Scan(&name, &v.Seq, &v.Data, &sum, &v.Created); err != nil {
				return err
			}
			copy(v.SHA256[:], sum)
			if err := v.Verify(name); err != nil {
				return err
			}
			t := get(name)
			t.States = append(t.States, v)
			return nil
		}},
		{`SELECT tenant, file, size, taken, sha256 FROM rezuscloud.backups ORDER BY tenant, taken DESC, file DESC`, func(r pgx.Rows) error {
			b, err := scanBackup(r)
			if err != nil {
				return err
			}
			t := get(b.Tenant)
			t.Backups = append(t.Backups, b)
			return nil
		}},
	}
	for _, q := range queries {
		rows, err := tx.Query(ctx, q.q)
		if err != nil {
			return nil, s.wrap("export", err)
		}
		for rows.Next() {
			if err := q.f(rows); err != nil {
				rows.Close()
				return nil, s.wrap("export", err)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, s.wrap("export", err)
		}
	}
	snap := &state.Snapshot{}
	sort.Strings(order)
	for _, n := range order {
		snap.Tenants = append(snap.Tenants, *byName[n])
	}
	return snap, nil
}

// Import writes snap into the empty store (state.ErrNotEmpty otherwise) in
// one fenced transaction under w's epoch, and checks every stored state
// version against its checksum in the database before committing.
func (w *Writer) Import(ctx context.Context, snap *state.Snapshot) error {
	s := w.s
	for _, t := range snap.Tenants {
		if err := checkTenant(t.Name); err != nil {
			return err
		}
		for _, v := range t.States {
			if err := v.Verify(t.Name); err != nil {
				return err
			}
		}
	}
	return w.fenced(ctx, "import", func(tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM rezuscloud.records) + (SELECT count(*) FROM rezuscloud.secrets)
			+ (SELECT count(*) FROM rezuscloud.states) + (SELECT count(*) FROM rezuscloud.state_locks)
			+ (SELECT count(*) FROM rezuscloud.backups)`).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%w: postgres://%s already holds %d rows of state", state.ErrNotEmpty, s.where, n)
		}
		for _, t := range snap.Tenants {
			if t.Record != nil {
				if _, err := tx.Exec(ctx, `INSERT INTO rezuscloud.records VALUES ($1, $2, $3, now())`, t.Name, t.Record, w.epoch); err != nil {
					return err
				}
			}
			for kind, plain := range t.Secrets {
				if !state.IsSecretKind(kind) {
					return fmt.Errorf("tenant %s: unknown secret kind %q", t.Name, kind)
				}
				sealed, err := s.seal.seal(plain, secretContext(t.Name, kind))
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO rezuscloud.secrets VALUES ($1, $2, $3, $4, now())`, t.Name, kind, sealed, w.epoch); err != nil {
					return err
				}
			}
			for _, v := range t.States {
				created := v.Created
				if created.IsZero() {
					created = time.Now().UTC()
				}
				if _, err := tx.Exec(ctx, `INSERT INTO rezuscloud.states VALUES ($1, $2, $3, $4, $5, $6)`,
					t.Name, v.Seq, v.Data, v.SHA256[:], w.epoch, created); err != nil {
					return err
				}
			}
			for _, b := range t.Backups {
				if _, err := tx.Exec(ctx, `INSERT INTO rezuscloud.backups VALUES ($1, $2, $3, $4, $5)`,
					t.Name, b.File, b.Size, b.At.UTC(), b.SHA256[:]); err != nil {
					return err
				}
			}
		}
		var bad string
		if err := tx.QueryRow(ctx, `SELECT coalesce(string_agg(name || ' version ' || seq, ', '), '') FROM rezuscloud.states
			WHERE sha256 <> sha256(data)`).Scan(&bad); err != nil {
			return err
		}
		if bad != "" {
			return fmt.Errorf("checksum mismatch after the import: %s", bad)
		}
		return nil
	})
}
