// Package postgres keeps rezuscloud's state in PostgreSQL (pgx/v5): tenant
// records, OpenTofu state versions and their locks, Talos secrets sealed with
// the state passphrase, the etcd backups' index, and the leadership of the
// instances sharing the database. The tables live in the schema
// "rezuscloud", brought to this binary's version at Open.
//
// Every write runs in a transaction that first locks the leader row and
// compares the writer's epoch with the current one: a leader that was cut
// off and comes back after another instance took over gets state.ErrFenced
// and changes nothing.
package postgres

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// Options tunes a Store; the zero value is the default.
type Options struct {
	// Keep is how many versions of each OpenTofu state are kept
	// (httpstate.DefaultKeep when 0).
	Keep int
	// Heartbeat is how often the leadership's session is checked and this
	// instance's membership refreshed (default 1 s); a check that takes
	// longer than twice this ends the leadership.
	Heartbeat time.Duration
	// OnRetry is told about every failed attempt to reach the server at
	// Open, with the time until the next one, so the caller can show the
	// problem; Open retries until ctx ends.
	OnRetry func(attempt int, err error, wait time.Duration)
	// MaxRetryWait caps the backoff between attempts (default 30 s).
	MaxRetryWait time.Duration
	// MaxConns caps the pool (default 4); leadership uses one more
	// connection of its own.
	MaxConns int32
}

// Store is a state store in one PostgreSQL database.
type Store struct {
	pool     *pgxpool.Pool
	cfg      *pgxpool.Config
	where    string // role@host:port/db, for errors
	instance string
	keep     int
	beat     time.Duration
	seal     *sealer
	id       string
	password string

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

var _ state.Reader = (*Store)(nil)

// Open connects to the database at rawURL (postgres:// or postgresql://)
// with password (used when not empty, over any password in the URL), as
// instance (its name among those sharing the database), brings the schema
// to this binary's version and registers the instance. TLS is verified
// (sslmode=verify-full) unless the URL says sslmode=require (encrypted, not
// verified), verify-ca or disable. An unreachable server is retried with
// backoff until ctx ends; a wrong password, a missing database, a failed
// certificate check or a newer schema are not. No error carries the
// password.
func Open(ctx context.Context, rawURL, password, instance, passphrase string, o Options) (*Store, error) {
	if instance == "" {
		return nil, errors.New("state store: no instance name")
	}
	cfg, where, err := parseURL(rawURL, password)
	if err != nil {
		return nil, err
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 4
	}
	cfg.MaxConns = o.MaxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = appName(instance, "")
	if o.Keep <= 0 {
		o.Keep = httpstate.DefaultKeep
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.MaxRetryWait <= 0 {
		o.MaxRetryWait = 30 * time.Second
	}
	s := &Store{cfg: cfg, where: where, instance: instance, keep: o.Keep, beat: o.Heartbeat,
		password: cfg.ConnConfig.Password, stop: make(chan struct{})}
	if err := s.connect(ctx, o); err != nil {
		return nil, err
	}
	if err := s.setup(ctx, passphrase); err != nil {
		s.pool.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.heartbeat()
	return s, nil
}

// appName is the application_name of this instance's sessions (role "" for
// the pool, "leader" for the leadership's own connection), which is how an
// administrator (or a test) tells them apart in pg_stat_activity.
func appName(instance, role string) string {
	n := "rezuscloud:" + instance
	if role != "" {
		n += ":" + role
	}
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// parseURL checks the URL and applies the TLS rule; where names the
// server without the password.
func parseURL(rawURL, password string) (*pgxpool.Config, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("state url: not a URL (postgres://user@host:5432/database)")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, "", fmt.Errorf("state url: scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
	if u.Host == "" {
		return nil, "", fmt.Errorf("state url: no host (postgres://user@host:5432/database)")
	}
	q := u.Query()
	switch mode := q.Get("sslmode"); mode {
	case "":
		q.Set("sslmode", "verify-full")
	case "verify-full", "verify-ca", "require", "disable":
	default:
		return nil, "", fmt.Errorf("state url: sslmode=%s is not offered: leave it out (or verify-full) to verify the server's certificate, verify-ca, require (encrypted, not verified) or disable", mode)
	}
	u.RawQuery = q.Encode()
	user := u.User.Username()
	where := fmt.Sprintf("%s@%s%s", user, u.Host, u.Path)
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("state url %s: %s", where, scrub(err.Error(), password, urlPassword(u)))
	}
	if password != "" {
		cfg.ConnConfig.Password = password
	}
	if user == "" {
		return nil, "", fmt.Errorf("state url %s: no role (postgres://role@host:5432/database)", where)
	}
	return cfg, where, nil
}

func urlPassword(u *url.URL) string {
	p, _ := u.User.Password()
	return p
}

// scrub removes the passwords from a message.
func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}

// connect makes the pool and waits until the server answers, retrying
// network failures with backoff.
func (s *Store) connect(ctx context.Context, o Options) error {
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := s.tryConnect(ctx)
		if err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return s.describe(err)
		}
		derr := s.describe(err)
		if o.OnRetry != nil {
			o.OnRetry(attempt, derr, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %v)", derr, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(wait*2, o.MaxRetryWait)
	}
}

func (s *Store) tryConnect(ctx context.Context) error {
	pool, err := pgxpool.NewWithConfig(ctx, s.cfg)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return err
	}
	s.pool = pool
	return nil
}

// retryable: the server could not be reached or is starting up or
// shutting down; anything it answered about us (password, database, role,
// certificate) will not change by waiting.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P03", "57P01", "57P02", "53300": // cannot connect now, shutdown, too many connections
			return true
		}
		return false
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return false
	}
	msg := err.Error()
	if strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:") || strings.Contains(msg, "server refused TLS") {
		return false
	}
	return true
}

// describe says what failed where, in the user's words, without the
// password.
func (s *Store) describe(err error) error {
	msg := scrub(err.Error(), s.password)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01":
			return &OpenError{Where: s.where, Msg: "the server refused the password for role " + s.cfg.ConnConfig.User + " (state password)"}
		case "28000":
			return &OpenError{Where: s.where, Msg: "the server does not let role " + s.cfg.ConnConfig.User + " in from here (pg_hba.conf): " + scrub(pe.Message, s.password)}
		case "3D000":
			return &OpenError{Where: s.where, Msg: "the database does not exist: " + scrub(pe.Message, s.password)}
		}
		return &OpenError{Where: s.where, Msg: scrub(pe.Message, s.password) + " (SQLSTATE " + pe.Code + ")"}
	}
	if strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:") {
		return &OpenError{Where: s.where, Msg: "TLS: the server's certificate could not be verified (" + lastPart(msg) +
			"); give its CA with sslrootcert=… in the URL, or sslmode=require to encrypt without verifying"}
	}
	if strings.Contains(msg, "server refused TLS") {
		return &OpenError{Where: s.where, Msg: "the server does not offer TLS; add sslmode=disable to the URL to connect without it"}
	}
	var ne net.Error
	if errors.As(err, &ne) || strings.Contains(msg, "connect: connection refused") || strings.Contains(msg, "dial") {
		return &OpenError{Where: s.where, Msg: "cannot reach the server: " + lastPart(msg), Retry: true}
	}
	return &OpenError{Where: s.where, Msg: msg, Retry: retryable(err)}
}

func lastPart(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		// keep the last two parts: "dial tcp 1.2.3.4:5: connect: connection refused"
		if j := strings.LastIndex(msg[:i], ": "); j >= 0 {
			return msg[j+2:]
		}
	}
	return msg
}

// OpenError is a failure to open the store: what, and where (role, host,
// port and database, never the password).
type OpenError struct {
	Where string
	Msg   string
	// Retry: the server could not be reached; it may work later.
	Retry bool
}

func (e *OpenError) Error() string { return "state store postgres://" + e.Where + ": " + e.Msg }

// setup migrates the schema, checks the passphrase against the store's
// verifier (creating both on a new store) and registers the instance.
func (s *Store) setup(ctx context.Context, passphrase string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.describe(err)
	}
	defer tx.Rollback(ctx)
	if err := migrate(ctx, tx); err != nil {
		if errors.Is(err, state.ErrNewerSchema) {
			return fmt.Errorf("state store postgres://%s: %w", s.where, err)
		}
		return fmt.Errorf("state store postgres://%s: %s", s.where, scrub(err.Error(), s.password))
	}
	var salt, verifier []byte
	err = tx.QueryRow(ctx, `SELECT salt, verifier FROM rezuscloud.crypt WHERE id = 1`).Scan(&salt, &verifier)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if salt, err = newSalt(); err != nil {
			return err
		}
		if s.seal, err = newSealer(passphrase, salt); err != nil {
			return fmt.Errorf("state store: %w", err)
		}
		if verifier, err = s.seal.seal([]byte(verifierText), "verifier"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO rezuscloud.crypt VALUES (1, $1, $2)`, salt, verifier); err != nil {
			return fmt.Errorf("state store postgres://%s: %w", s.where, err)
		}
	case err != nil:
		return fmt.Errorf("state store postgres://%s: %w", s.where, err)
	default:
		if s.seal, err = newSealer(passphrase, salt); err != nil {
			return fmt.Errorf("state store: %w", err)
		}
		if v, err := s.seal.open(verifier, "verifier"); err != nil || string(v) != verifierText {
			return fmt.Errorf("state store postgres://%s: %w: give every instance the same state passphrase", s.where, state.ErrWrongPassphrase)
		}
	}
	s.id = storeID(salt)
	if _, err := tx.Exec(ctx, `INSERT INTO rezuscloud.members VALUES ($1, now())
		ON CONFLICT (instance) DO UPDATE SET last_seen = now()`, s.instance); err != nil {
		return fmt.Errorf("state store postgres://%s: register instance: %w", s.where, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("state store postgres://%s: %w", s.where, err)
	}
	return nil
}

// heartbeat keeps this instance's membership fresh.
func (s *Store) heartbeat() {
	defer s.wg.Done()
	t := time.NewTicker(s.beat)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.beat)
		_, _ = s.pool.Exec(ctx, `UPDATE rezuscloud.members SET last_seen = now() WHERE instance = $1`, s.instance)
		cancel()
	}
}

// memberWindow is how recently an instance must have been seen to be a
// member: ten heartbeats, at least 5 s (a busy machine's heartbeat can be
// late).
func (s *Store) memberWindow() time.Duration { return max(10*s.beat, 5*time.Second) }

// Members lists the instances seen within the member window, the
// leader first. The leader is the instance that raised the epoch last, and
// only while a session holds the leader lock (between a leader's session
// ending and a standby taking over, none leads).
func (s *Store) Members(ctx context.Context) ([]state.Member, error) {
	rows, err := s.pool.Query(ctx, `WITH held AS (
			SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND classid = ($2::bigint >> 32)::oid AND objid = ($2::bigint & 4294967295)::oid AND objsubid = 1) AS held)
		SELECT m.instance, m.last_seen, held.held AND m.instance = l.instance
		FROM rezuscloud.members m, rezuscloud.leader l, held
		WHERE m.last_seen > now() - $1::interval OR (held.held AND m.instance = l.instance)
		ORDER BY 3 DESC, 1`, fmt.Sprintf("%d milliseconds", s.memberWindow().Milliseconds()), int64(leaderLock))
	if err != nil {
		return nil, s.wrap("members", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (state.Member, error) {
		var m state.Member
		err := r.Scan(&m.Instance, &m.LastSeen, &m.Leader)
		return m, err
	})
	if err != nil {
		return nil, s.wrap("members", err)
	}
	return out, nil
}

// storeID names a store by its random salt (made once, with the store):
// the same for every instance of one store, different for another store,
// and saying nothing about the passphrase.
func storeID(salt []byte) string {
	sum := sha256.Sum256(append([]byte("rezuscloud store id\x00"), salt...))
	return hex.EncodeToString(sum[:8])
}

// ID names this store (the same for every instance that shares it).
func (s *Store) ID() string { return s.id }

// Instance is this instance's name.
func (s *Store) Instance() string { return s.instance }

// Where names the store (role@host:port/database) for messages.
func (s *Store) Where() string { return s.where }

// Close stops the heartbeat and closes the pool (a leadership has its own
// connection: Resign it first).
func (s *Store) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.pool.Close()
	})
}

// wrap gives an error from a query its context; the message never holds
// the password, the chain is kept for errors.Is.
func (s *Store) wrap(what string, err error) error {
	return &wrapped{msg: "state store postgres://" + s.where + ": " + what + ": " + scrub(err.Error(), s.password), err: err}
}

type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }
