package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresBin is the directory holding the PostgreSQL server binaries
// (initdb, postgres): $REZUSCLOUD_PGBIN, or the newest of Debian's
// /usr/lib/postgresql/<major>/bin.
func postgresBin() string {
	if b := os.Getenv("REZUSCLOUD_PGBIN"); b != "" {
		return b
	}
	best, bestMajor := "/usr/lib/postgresql/15/bin", -1
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for _, d := range dirs {
		if m, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil && m > bestMajor {
			best, bestMajor = d, m
		}
	}
	return best
}

// PostgresOptions tunes the server a test starts.
type PostgresOptions struct {
	// Durable keeps PostgreSQL's default durability (fsync, synchronous
	// commit). Tests run without it, which is much faster and loses nothing
	// but a crash of the test machine; benchmarks that compare the cost of
	// a durable write use it.
	Durable bool
	// TLS turns TLS on with a certificate for 127.0.0.1 signed by a
	// throw-away CA (RootCAFile); plain connections still work.
	TLS bool
}

// Postgres is a real PostgreSQL server in its own data directory under
// t.TempDir(), listening on 127.0.0.1 at a free port (no Unix socket),
// with password (SCRAM) authentication only. It has a superuser and a role
// Role that owns the database Database. It is stopped when the test ends.
//
// initdb and postgres refuse to run as root: when the test runs as root
// the server runs as the "postgres" user (Debian's package creates it) or,
// without it, "nobody", through the process credentials; the data directory
// is chowned to that user and the temporary directories above it are made
// traversable (0711) so that it can reach it.
type Postgres struct {
	// Port is the loopback port; it stays the same across Restart.
	Port int
	// URL is postgres://Role@127.0.0.1:Port/Database?sslmode=disable, without
	// the password.
	URL string
	// Role, Password and Database are what URL logs in as.
	Role, Password, Database string
	// Dir is the server's data directory.
	Dir string
	// RootCAFile is the PEM file of the CA that signed the server's
	// certificate (PostgresOptions.TLS), for sslrootcert=.
	RootCAFile string

	t         testing.TB
	adminPass string
	cred      *syscall.Credential
	log       *syncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	dbs  int
}

// StartPostgres starts a server for t. It skips the test (fails under CI)
// when the binaries are missing.
func StartPostgres(t testing.TB, opts ...PostgresOptions) *Postgres {
	t.Helper()
	var o PostgresOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	bin := postgresBin()
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			missing(t, "PostgreSQL server not available (make packages installs Debian's postgresql): "+err.Error())
		}
	}
	p := &Postgres{
		Role: "rezuscloud", Database: "rezuscloud",
		Password: randomHex(t), adminPass: randomHex(t),
		t: t, log: &syncBuffer{},
	}
	base := t.TempDir()
	p.Dir = filepath.Join(base, "data")
	cred, err := serverCredential()
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	p.cred = cred
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	pwfile := filepath.Join(base, "pwfile")
	if err := os.WriteFile(pwfile, []byte(p.adminPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := makeReachable(base, int(cred.Uid), int(cred.Gid), p.Dir, pwfile); err != nil {
			t.Fatalf("testenv: postgres: %v", err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", p.Dir, "-U", "postgres", "--pwfile", pwfile,
		"--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = base
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v: %s", err, out)
	}
	_ = os.Remove(pwfile)
	if p.Port, err = freePort(); err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = ''\n"+
		"max_connections = 50\nshared_buffers = 16MB\nlog_min_messages = warning\n"+
		"password_encryption = 'scram-sha-256'\n", p.Port)
	if o.TLS {
		cert, key, _, err := writeCerts(base)
		if err != nil {
			t.Fatalf("testenv: postgres certificates: %v", err)
		}
		if cred != nil {
			for _, f := range []string{cert, key} {
				if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		p.RootCAFile = filepath.Join(base, "ca.crt")
		conf += fmt.Sprintf("ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n", cert, key)
	}
	if !o.Durable {
		conf += "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
	}
	f, err := os.OpenFile(filepath.Join(p.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("testenv: postgresql.conf: %v", err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", p.Role, p.Password),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", p.Database, p.Role),
	} {
		if err := p.admin(ctx, "postgres", q); err != nil {
			t.Fatalf("testenv: postgres setup: %v", err)
		}
	}
	p.URL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", p.Role, p.Port, p.Database)
	return p
}

// URLWithPassword is URL with the password in it (for clients that take
// one string).
func (p *Postgres) URLWithPassword() string {
	u, _ := url.Parse(p.URL)
	u.User = url.UserPassword(p.Role, p.Password)
	return u.String()
}

func randomHex(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// serverCredential is who the server runs as: nil (the caller) unless the
// caller is root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, fmt.Errorf("running as root and neither a postgres nor a nobody user exists to run the server as")
}

// makeReachable chowns paths to uid:gid and makes base and the directories
// above it up to the system temp dir traversable (not listable) for others.
func makeReachable(base string, uid, gid int, paths ...string) error {
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(base); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			return err
		}
	}
	return nil
}

func (p *Postgres) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("postgres already running")
	}
	bin := postgresBin()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", p.Dir)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.Dir = p.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	// Ready when a login works: the port listens before recovery is over.
	deadline := time.Now().Add(60 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("postgres exited: %s", p.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		lastErr = p.ping(ctx)
		cancel()
		if lastErr == nil {
			p.cmd, p.done = cmd, done
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("postgres did not accept logins on %d within 60 s (%v): %s", p.Port, lastErr, p.log.String())
}

func (p *Postgres) ping(ctx context.Context) error {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p.Port), time.Second)
	if err != nil {
		return err
	}
	_ = c.Close()
	conn, err := p.connect(ctx, "postgres")
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func (p *Postgres) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", p.Port, db))
	if err != nil {
		return nil, err
	}
	cfg.Password = p.adminPass
	return pgx.ConnectConfig(ctx, cfg)
}

func (p *Postgres) admin(ctx context.Context, db, sql string, args ...any) error {
	conn, err := p.connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// NewDatabase creates another empty database owned by Role and returns
// its URL (like URL, without the password): a fresh store without a
// second server.
func (p *Postgres) NewDatabase() string {
	p.t.Helper()
	p.mu.Lock()
	p.dbs++
	name := fmt.Sprintf("%s_%d", p.Database, p.dbs)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.admin(ctx, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", name, p.Role)); err != nil {
		p.t.Fatalf("testenv: postgres: create database: %v", err)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", p.Role, p.Port, name)
}

// Exec runs sql as the superuser in the test database (to inspect or
// change what the code under test cannot).
func (p *Postgres) Exec(sql string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.admin(ctx, p.Database, sql, args...); err != nil {
		p.t.Fatalf("testenv: postgres: %s: %v", sql, err)
	}
}

// QueryInt64 runs a query returning one integer as the superuser in the
// test database.
func (p *Postgres) QueryInt64(sql string, args ...any) int64 {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := p.connect(ctx, p.Database)
	if err != nil {
		p.t.Fatalf("testenv: postgres: %v", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		p.t.Fatalf("testenv: postgres: %s: %v", sql, err)
	}
	return n
}

// Terminate ends every session of the test role whose application_name
// starts with prefix (all of the role's sessions for ""), as
// pg_terminate_backend does when an administrator or a crash of the
// client's network cuts them. It returns how many it ended.
func (p *Postgres) Terminate(prefix string) int {
	p.t.Helper()
	return int(p.QueryInt64(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE usename = $1 AND starts_with(application_name, $2) AND pid <> pg_backend_pid()`, p.Role, prefix))
}

// Stop shuts the server down (fast shutdown: sessions are ended), SIGKILL
// after 10 s. Stopping a stopped server does nothing.
func (p *Postgres) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.cmd, p.done = nil, nil
}

// Restart stops the server if it runs and starts it again on the same port
// with the same data.
func (p *Postgres) Restart() {
	p.t.Helper()
	p.Stop()
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: restart: %v", err)
	}
}

// Start starts a stopped server again (after Stop).
func (p *Postgres) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: start: %v", err)
	}
}

// Log returns what the server logged so far.
func (p *Postgres) Log() string { return p.log.String() }
