package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rezuscloud/rezuscloud/internal/state"
)

// migrations are the schema's versions in order: migrations[i] brings the
// schema from version i to i+1. Append only; never edit a released one.
var migrations = []string{
	// 1: the first schema.
	`CREATE TABLE rezuscloud.leader (
		id       int PRIMARY KEY CHECK (id = 1),
		epoch    bigint NOT NULL,
		instance text NOT NULL,
		since    timestamptz NOT NULL
	);
	INSERT INTO rezuscloud.leader VALUES (1, 0, '', now());
	CREATE TABLE rezuscloud.members (
		instance  text PRIMARY KEY,
		last_seen timestamptz NOT NULL
	);
	CREATE TABLE rezuscloud.crypt (
		id       int PRIMARY KEY CHECK (id = 1),
		salt     bytea NOT NULL,
		verifier bytea NOT NULL
	);
	CREATE TABLE rezuscloud.records (
		tenant  text PRIMARY KEY,
		data    bytea NOT NULL,
		epoch   bigint NOT NULL,
		updated timestamptz NOT NULL
	);
	CREATE TABLE rezuscloud.secrets (
		tenant  text NOT NULL,
		kind    text NOT NULL,
		sealed  bytea NOT NULL,
		epoch   bigint NOT NULL,
		updated timestamptz NOT NULL,
		PRIMARY KEY (tenant, kind)
	);
	CREATE TABLE rezuscloud.backups (
		tenant text NOT NULL,
		file   text NOT NULL,
		size   bigint NOT NULL,
		taken  timestamptz NOT NULL,
		sha256 bytea NOT NULL,
		PRIMARY KEY (tenant, file)
	);
	CREATE TABLE rezuscloud.states (
		name    text NOT NULL,
		seq     bigint NOT NULL,
		data    bytea NOT NULL,
		sha256  bytea NOT NULL,
		epoch   bigint NOT NULL,
		created timestamptz NOT NULL,
		PRIMARY KEY (name, seq)
	);
	-- tofu encrypts the state: compressing ciphertext costs time for little
	ALTER TABLE rezuscloud.states ALTER COLUMN data SET STORAGE EXTERNAL;
	-- fence locks the leader row for the rest of the transaction and
	-- raises RZ001 when the writer's epoch is not the store's: the
	-- statements after it in the transaction do not run, nothing commits.
	CREATE FUNCTION rezuscloud.fence(writer bigint) RETURNS bigint LANGUAGE plpgsql AS $fence$
	DECLARE cur bigint;
	BEGIN
		SELECT epoch INTO cur FROM rezuscloud.leader WHERE id = 1 FOR UPDATE;
		IF cur IS DISTINCT FROM writer THEN
			RAISE EXCEPTION 'fenced: epoch % is not the store''s %', writer, cur USING ERRCODE = 'RZ001';
		END IF;
		RETURN cur;
	END
	$fence$;
	CREATE TABLE rezuscloud.state_locks (
		name    text PRIMARY KEY,
		id      text NOT NULL,
		info    bytea NOT NULL,
		created timestamptz NOT NULL
	);`,
}

// SchemaVersion is the schema version this binary brings a store to.
var SchemaVersion = len(migrations)

// migrateLock is the transaction-level advisory lock that keeps two
// instances starting at once from migrating together.
const migrateLock = 0x72657a7573_01

// migrate brings the schema to SchemaVersion in one transaction; a schema
// newer than that is refused with state.ErrNewerSchema, changing nothing.
func migrate(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("schema lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS rezuscloud;
		CREATE TABLE IF NOT EXISTS rezuscloud.schema_version (
			id      int PRIMARY KEY CHECK (id = 1),
			version int NOT NULL
		);
		INSERT INTO rezuscloud.schema_version VALUES (1, 0) ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("schema version table: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT version FROM rezuscloud.schema_version WHERE id = 1 FOR UPDATE`).Scan(&have); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("%w (schema version %d; this rezuscloud knows up to %d): upgrade this instance, or point it at another database",
			state.ErrNewerSchema, have, len(migrations))
	}
	for v := have; v < len(migrations); v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("schema migration %d: %w", v+1, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE rezuscloud.schema_version SET version = $1 WHERE id = 1`, len(migrations)); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	return nil
}
