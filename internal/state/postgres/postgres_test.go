package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate/httpstatetest"
)

const passphrase = "correct horse battery staple"

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open opens the store at url as instance, closed when the test ends.
func open(t testing.TB, p *testenv.Postgres, url, instance string) *Store {
	t.Helper()
	s, err := Open(ctxT(t), url, p.Password, instance, passphrase, Options{Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open %s: %v", instance, err)
	}
	t.Cleanup(s.Close)
	return s
}

func lead(t testing.TB, s *Store) *Leadership {
	t.Helper()
	l, err := s.Campaign(ctxT(t))
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	t.Cleanup(func() { _ = l.Resign(context.Background()) })
	return l
}

func TestStateBackendConformance(t *testing.T) {
	p := testenv.StartPostgres(t)
	httpstatetest.Run(t, func(t *testing.T) httpstate.Backend {
		s := open(t, p, p.NewDatabase(), "a")
		return lead(t, s).Writer().States()
	})
}

func TestStateRecordsSecretsBackups(t *testing.T) {
	p := testenv.StartPostgres(t)
	ctx := ctxT(t)
	s := open(t, p, p.URL, "a")
	w := lead(t, s).Writer()
	if err := w.PutRecord(ctx, "lab", []byte(`{"infra":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.PutRecord(ctx, "lab", []byte(`{"infra":false}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.PutRecord(ctx, "../x", nil); !errors.Is(err, httpstate.ErrInvalidName) {
		t.Fatalf("bad tenant name: %v", err)
	}
	if got, ok, err := s.Record(ctx, "lab"); err != nil || !ok || string(got) != `{"infra":false}` {
		t.Fatalf("Record = %q %v %v", got, ok, err)
	}
	bundle := []byte("cluster:\n  secret: very-secret-value\n")
	if err := w.PutSecret(ctx, "lab", state.SecretsBundle, bundle); err != nil {
		t.Fatal(err)
	}
	if err := w.PutSecret(ctx, "lab", "id_rsa", bundle); err == nil {
		t.Fatal("an unknown secret kind was stored")
	}
	if got, ok, err := s.Secret(ctx, "lab", state.SecretsBundle); err != nil || !ok || !bytes.Equal(got, bundle) {
		t.Fatalf("Secret = %q %v %v", got, ok, err)
	}
	if n := p.QueryInt64(`SELECT count(*) FROM rezuscloud.secrets WHERE position('very-secret-value'::bytea IN sealed) > 0`); n != 0 {
		t.Fatal("the secret is stored in the clear")
	}
	// A sealed value moved to another row does not open.
	p.Exec(`INSERT INTO rezuscloud.secrets SELECT tenant, 'talosconfig', sealed, epoch, updated FROM rezuscloud.secrets`)
	if _, _, err := s.Secret(ctx, "lab", state.Talosconfig); err == nil {
		t.Fatal("a secret copied to another kind opened")
	}
	at := time.Date(2026, 12, 1, 3, 4, 5, 0, time.UTC)
	b := state.Backup{Tenant: "lab", File: "etcd-20261201T030405Z.snapshot", Size: 42, At: at, SHA256: sha256.Sum256([]byte("x"))}
	if err := w.PutBackup(ctx, b); err != nil {
		t.Fatal(err)
	}
	b2 := b
	b2.File, b2.At = "etcd-20261202T030405Z.snapshot", at.Add(24*time.Hour)
	if err := w.PutBackup(ctx, b2); err != nil {
		t.Fatal(err)
	}
	got, err := s.Backups(ctx, "lab")
	if err != nil || len(got) != 2 || got[0] != b2 || got[1] != b {
		t.Fatalf("Backups = %+v, %v", got, err)
	}
	if err := w.DeleteBackup(ctx, "lab", b.File); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Backups(ctx, "lab"); len(got) != 1 {
		t.Fatalf("after delete: %+v", got)
	}
	if names, err := s.Tenants(ctx); err != nil || len(names) != 1 || names[0] != "lab" {
		t.Fatalf("Tenants = %v %v", names, err)
	}
}

// TestStateFencing: a leadership that has been superseded (resigned, or
// its session ended) writes nothing, whatever the write.
func TestStateFencing(t *testing.T) {
	p := testenv.StartPostgres(t)
	writes := []struct {
		name  string
		write func(ctx context.Context, w state.Writer) error
	}{
		{"record", func(ctx context.Context, w state.Writer) error {
			return w.PutRecord(ctx, "lab", []byte(`{"old":true}`))
		}},
		{"delete record", func(ctx context.Context, w state.Writer) error { return w.DeleteRecord(ctx, "lab") }},
		{"secret", func(ctx context.Context, w state.Writer) error {
			return w.PutSecret(ctx, "lab", state.Kubeconfig, []byte("old"))
		}},
		{"delete secret", func(ctx context.Context, w state.Writer) error { return w.DeleteSecret(ctx, "lab", state.Kubeconfig) }},
		{"backup", func(ctx context.Context, w state.Writer) error {
			return w.PutBackup(ctx, state.Backup{Tenant: "lab", File: "etcd-1.snapshot", At: time.Now()})
		}},
		{"delete backup", func(ctx context.Context, w state.Writer) error { return w.DeleteBackup(ctx, "lab", "etcd-0.snapshot") }},
		{"state upload", func(ctx context.Context, w state.Writer) error {
			// the lock's holder's ID: only the fence can refuse it
			return w.States().Put(ctx, "lab", []byte(`{"serial":99}`), "tofu-1")
		}},
		{"state lock", func(ctx context.Context, w state.Writer) error {
			return w.States().Lock(ctx, "free", httpstate.LockInfo{ID: "old"}, nil)
		}},
		{"state force-unlock", func(ctx context.Context, w state.Writer) error { return w.States().ForceUnlock(ctx, "lab", "tofu-1") }},
	}
	for _, how := range []string{"resigned", "session ended"} {
		t.Run(how, func(t *testing.T) {
			ctx := ctxT(t)
			url := p.NewDatabase()
			a, b := open(t, p, url, "a"+strings.ReplaceAll(how, " ", "")), open(t, p, url, "b")
			la := lead(t, a)
			old := la.Writer()
			// What the old leader wrote while it led.
			if err := old.PutRecord(ctx, "lab", []byte(`{"v":1}`)); err != nil {
				t.Fatal(err)
			}
			if err := old.PutSecret(ctx, "lab", state.Kubeconfig, []byte("kc1")); err != nil {
				t.Fatal(err)
			}
			if err := old.PutBackup(ctx, state.Backup{Tenant: "lab", File: "etcd-0.snapshot", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if err := old.States().Put(ctx, "lab", []byte(`{"serial":1}`), ""); err != nil {
				t.Fatal(err)
			}
			if err := old.States().Lock(ctx, "lab", httpstate.LockInfo{ID: "tofu-1"}, nil); err != nil {
				t.Fatal(err)
			}
			if how == "resigned" {
				if err := la.Resign(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				if n := p.Terminate(appName(a.Instance(), "leader")); n != 1 {
					t.Fatalf("ended %d sessions", n)
				}
			}
			lb := lead(t, b)
			if lb.Epoch() <= la.Epoch() {
				t.Fatalf("new epoch %d after %d", lb.Epoch(), la.Epoch())
			}
			before := snapshot(t, p, url)
			for _, wr := range writes {
				if err := wr.write(ctx, old); !errors.Is(err, state.ErrFenced) {
					t.Errorf("%s from the old leadership: %v, want ErrFenced", wr.name, err)
				}
			}
			if after := snapshot(t, p, url); after != before {
				t.Fatalf("the refused writes changed the store:\nbefore %s\nafter  %s", before, after)
			}
			// The new leader writes.
			if err := lb.Writer().PutRecord(ctx, "lab", []byte(`{"v":2}`)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// snapshot is every row of every table of the store (all columns, times
// included) as text, read through the store's role.
func snapshot(t *testing.T, p *testenv.Postgres, url string) string {
	t.Helper()
	s := open(t, p, url, "reader")
	var out strings.Builder
	for _, table := range []string{"leader", "records", "secrets", "backups", "states", "state_locks", "crypt", "schema_version"} {
		var rows string
		if err := s.pool.QueryRow(ctxT(t), `SELECT coalesce(string_agg(r::text, E'\n' ORDER BY r::text), '') FROM rezuscloud.`+table+` r`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		out.WriteString(table + ":\n" + rows + "\n")
	}
	return out.String()
}

// TestStateFailover: a standby's Campaign waits while the leader's session
// lives and returns when it ends; the old leader sees Lost; Members names
// both.
func TestStateFailover(t *testing.T) {
	p := testenv.StartPostgres(t)
	a, b := open(t, p, p.URL, "alpha"), open(t, p, p.URL, "beta")
	la := lead(t, a)
	type result struct {
		l   *Leadership
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Campaign(ctxT(t))
		got <- result{l, err}
	}()
	testenv.WaitFor(t, 20*time.Second, "beta waiting for the leader lock", func() bool {
		return p.QueryInt64(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
			appName("beta", "leader")) == 1
	})
	select {
	case r := <-got:
		t.Fatalf("beta led while alpha leads: %+v", r)
	default:
	}
	// The server drops a dead leader's session within seconds.
	for k, v := range leaderSessionParams {
		var got string
		la.mu.Lock()
		err := la.conn.QueryRow(ctxT(t), `SELECT current_setting($1)`, k).Scan(&got)
		la.mu.Unlock()
		if err != nil || strings.TrimSuffix(got, "ms") != v && got != v+"s" {
			t.Errorf("leader session %s = %q (%v), want %s", k, got, err, v)
		}
	}
	ms, err := a.Members(ctxT(t))
	if err != nil || len(ms) != 2 || ms[0].Instance != "alpha" || !ms[0].Leader || ms[1].Instance != "beta" || ms[1].Leader {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
	p.Terminate(appName("alpha", "leader"))
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("beta did not lead within 20 s of alpha's session ending")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _ = r.l.Resign(context.Background()) })
	if r.l.Epoch() != la.Epoch()+1 {
		t.Fatalf("epoch %d after %d", r.l.Epoch(), la.Epoch())
	}
	select {
	case <-la.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("alpha did not notice that its leadership ended")
	}
	if la.Err() == nil || !strings.Contains(la.Err().Error(), "lost") {
		t.Fatalf("alpha's cause: %v", la.Err())
	}
	ms, err = b.Members(ctxT(t))
	if err != nil || len(ms) != 2 || ms[0].Instance != "beta" || !ms[0].Leader {
		t.Fatalf("Members after failover = %+v, %v", ms, err)
	}
	// alpha comes back as a standby: its Campaign waits.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if l, err := a.Campaign(ctx); err == nil {
		_ = l.Resign(context.Background())
		t.Fatal("alpha led again while beta leads")
	}
}

func TestStateOpenErrors(t *testing.T) {
	p := testenv.StartPostgres(t)
	closed, err := freeClosedPort()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, url, password string
		want                string
		retried             bool
	}{
		{"wrong password", p.URL, "not-the-password", "refused the password for role rezuscloud", false},
		{"unreachable", "postgres://rezuscloud@127.0.0.1:" + closed + "/x?sslmode=disable", "pw-secret-1", "cannot reach the server", true},
		{"no such database", strings.Replace(p.URL, "/rezuscloud?", "/nothere?", 1), p.Password, "database does not exist", false},
		{"TLS verified by default", strings.TrimSuffix(p.URL, "?sslmode=disable"), p.Password, "does not offer TLS", false},
		{"TLS required", strings.Replace(p.URL, "disable", "require", 1), p.Password, "does not offer TLS", false},
		{"sslmode prefer", strings.Replace(p.URL, "disable", "prefer", 1), p.Password, "sslmode=prefer is not offered", false},
		{"scheme", strings.Replace(p.URL, "postgres://", "mysql://", 1), p.Password, `scheme "mysql"`, false},
		{"no role", "postgres://127.0.0.1:5432/x", p.Password, "no role", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// long enough for a slow login, short for the retried case
			d := 20 * time.Second
			if c.retried {
				d = 3 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			var retries atomic.Int32
			_, err := Open(ctx, c.url, c.password, "a", passphrase, Options{OnRetry: func(n int, err error, wait time.Duration) {
				retries.Add(1)
				if strings.Contains(err.Error(), c.password) {
					t.Errorf("retry message holds the password: %v", err)
				}
			}})
			if err == nil {
				t.Fatal("Open worked")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), c.password) || strings.Contains(err.Error(), p.Password) {
				t.Fatalf("error holds the password: %v", err)
			}
			if got := retries.Load() > 0; got != c.retried {
				t.Fatalf("retried = %v (%d), want %v", got, retries.Load(), c.retried)
			}
		})
	}
}

// TestStateOpenWaitsForServer: a server that is down at start is retried
// until it comes up.
func TestStateOpenWaitsForServer(t *testing.T) {
	p := testenv.StartPostgres(t)
	p.Stop()
	retried := make(chan struct{}, 100)
	type result struct {
		s   *Store
		err error
	}
	got := make(chan result, 1)
	go func() {
		s, err := Open(ctxT(t), p.URL, p.Password, "a", passphrase, Options{MaxRetryWait: 200 * time.Millisecond,
			OnRetry: func(int, error, time.Duration) { retried <- struct{}{} }})
		got <- result{s, err}
	}()
	select {
	case <-retried:
	case <-time.After(20 * time.Second):
		t.Fatal("no retry reported")
	}
	p.Start()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.s.Close()
}

func TestStateSchema(t *testing.T) {
	p := testenv.StartPostgres(t)
	ctx := ctxT(t)
	s := open(t, p, p.URL, "a")
	s.Close()
	// Opening again migrates nothing and keeps the data.
	s2 := open(t, p, p.URL, "a")
	s2.Close()
	if v := p.QueryInt64(`SELECT version FROM rezuscloud.schema_version`); v != int64(SchemaVersion) {
		t.Fatalf("schema version %d, want %d", v, SchemaVersion)
	}
	p.Exec(`UPDATE rezuscloud.schema_version SET version = 99`)
	_, err := Open(ctx, p.URL, p.Password, "a", passphrase, Options{})
	if !errors.Is(err, state.ErrNewerSchema) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("Open on a newer schema: %v", err)
	}
	if v := p.QueryInt64(`SELECT version FROM rezuscloud.schema_version`); v != 99 {
		t.Fatalf("the refused Open changed the schema version to %d", v)
	}
}

func TestStateWrongPassphrase(t *testing.T) {
	p := testenv.StartPostgres(t)
	open(t, p, p.URL, "a").Close()
	_, err := Open(ctxT(t), p.URL, p.Password, "b", "another passphrase entirely", Options{})
	if !errors.Is(err, state.ErrWrongPassphrase) {
		t.Fatalf("Open with another passphrase: %v", err)
	}
}

// TestStateTLS: the server's certificate is verified unless the URL says
// otherwise.
func TestStateTLS(t *testing.T) {
	p := testenv.StartPostgres(t, testenv.PostgresOptions{TLS: true})
	base := strings.TrimSuffix(p.URL, "?sslmode=disable")
	cases := []struct {
		name, url, want string
	}{
		{"verified against its CA", base + "?sslrootcert=" + p.RootCAFile, ""},
		{"verify-ca", base + "?sslmode=verify-ca&sslrootcert=" + p.RootCAFile, ""},
		{"unknown CA", base, "could not be verified"},
		{"require: encrypted, not verified", base + "?sslmode=require", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := Open(ctx, c.url, p.Password, "a", passphrase, Options{})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				var ssl bool
				if err := s.pool.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
					t.Fatalf("connection not encrypted: %v %v", ssl, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v, want %q", err, c.want)
			}
		})
	}
}

// TestStateServerRestart: a restart of the server ends the leadership
// (Lost), an upload while it is down fails cleanly, and afterwards the same
// store campaigns again, leads under a newer epoch and uploads; the
// leadership from before the restart stays fenced.
func TestStateServerRestart(t *testing.T) {
	p := testenv.StartPostgres(t)
	ctx := ctxT(t)
	s := open(t, p, p.URL, "a")
	l1 := lead(t, s)
	if err := l1.Writer().States().Put(ctx, "lab", []byte(`{"serial":1}`), ""); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	select {
	case <-l1.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the leadership outlived the server")
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := l1.Writer().States().Put(dctx, "lab", []byte(`{"serial":2}`), "")
	cancel()
	if err == nil {
		t.Fatal("an upload worked while the server was down")
	}
	if strings.Contains(err.Error(), p.Password) {
		t.Fatalf("the error holds the password: %v", err)
	}
	campaigned := make(chan *Leadership, 1)
	go func() {
		l, err := s.Campaign(ctx)
		if err != nil {
			t.Error(err)
		}
		campaigned <- l
	}()
	p.Start()
	l2 := <-campaigned
	if l2 == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = l2.Resign(context.Background()) })
	if l2.Epoch() != l1.Epoch()+1 {
		t.Fatalf("epoch %d after %d", l2.Epoch(), l1.Epoch())
	}
	if err := l2.Writer().States().Put(ctx, "lab", []byte(`{"serial":2}`), ""); err != nil {
		t.Fatalf("upload after the restart: %v", err)
	}
	if err := l1.Writer().States().Put(ctx, "lab", []byte(`{"serial":3}`), ""); !errors.Is(err, state.ErrFenced) {
		t.Fatalf("upload from before the restart: %v", err)
	}
	got, _, err := l2.Writer().States().Get(ctx, "lab")
	if err != nil || string(got) != `{"serial":2}` {
		t.Fatalf("state = %s, %v", got, err)
	}
}

// TestStateOpenTogether: instances starting at once on an empty database
// migrate it once and agree on the key (each reads the others' secrets).
func TestStateOpenTogether(t *testing.T) {
	p := testenv.StartPostgres(t)
	url := p.NewDatabase()
	const n = 3
	stores := make(chan *Store, n)
	for i := 0; i < n; i++ {
		go func() {
			s, err := Open(ctxT(t), url, p.Password, fmt.Sprintf("i%d", i), passphrase, Options{})
			if err != nil {
				t.Error(err)
			}
			stores <- s
		}()
	}
	var all []*Store
	for i := 0; i < n; i++ {
		if s := <-stores; s != nil {
			t.Cleanup(s.Close)
			all = append(all, s)
		}
	}
	if len(all) != n {
		t.FailNow()
	}
	ctx := ctxT(t)
	l := lead(t, all[0])
	if err := l.Writer().PutSecret(ctx, "lab", state.Talosconfig, []byte("tc")); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if got, ok, err := s.Secret(ctx, "lab", state.Talosconfig); err != nil || !ok || string(got) != "tc" {
			t.Fatalf("%s reads %q %v %v", s.Instance(), got, ok, err)
		}
	}
}

// freeClosedPort is a loopback port nothing listens on.
func freeClosedPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return strconv.Itoa(port), nil
}

// TestStateMembers: the leader is named only while it holds the lock.
func TestStateMembers(t *testing.T) {
	p := testenv.StartPostgres(t)
	ctx := ctxT(t)
	a, b := open(t, p, p.URL, "a"), open(t, p, p.URL, "b")
	leaders := func() (names []string) {
		t.Helper()
		ms, err := b.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Leader {
				names = append(names, m.Instance)
			}
		}
		if len(ms) != 2 {
			t.Fatalf("members: %+v", ms)
		}
		return names
	}
	if got := leaders(); len(got) != 0 {
		t.Fatalf("leaders before any campaign: %v", got)
	}
	l := lead(t, a)
	if got := leaders(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("leaders while a leads: %v", got)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := leaders(); len(got) != 0 {
		t.Fatalf("leaders after a resigned: %v", got)
	}
}
