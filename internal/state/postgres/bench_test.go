package postgres

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// tofuState is a state of about size bytes shaped like the one tofu
// uploads: JSON around base64 ciphertext (incompressible).
func tofuState(b testing.TB, size int) []byte {
	raw := make([]byte, size*3/4)
	if _, err := rand.Read(raw); err != nil {
		b.Fatal(err)
	}
	return []byte(`{"serial":1,"lineage":"L","meta":{"key_provider.pbkdf2.main":"e30="},"encrypted_data":"` +
		base64.StdEncoding.EncodeToString(raw) + `","encryption_version":"v0"}`)
}

// BenchmarkStateUpload is one tofu state upload (POST through the http
// backend server, as tofu sends it) into the data folder's store and into
// PostgreSQL with its default durability (fsync, synchronous commit), on the
// same machine. Each iteration uploads to both, alternating which goes
// first, so that the load of a shared machine weighs on both alike;
// ns/op is the pair, file-µs and pg-µs each, pg/file their ratio.
func BenchmarkStateUpload(b *testing.B) {
	p := testenv.StartPostgres(b, testenv.PostgresOptions{Durable: true})
	for _, size := range []int{16 << 10, 64 << 10} {
		body := tofuState(b, size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			fs, err := httpstate.Open(b.TempDir(), 0)
			if err != nil {
				b.Fatal(err)
			}
			pg := lead(b, open(b, p, p.NewDatabase(), "bench")).Writer().States()
			var servers [2]*httpstate.Server
			for i, be := range []httpstate.Backend{fs.Backend(), pg} {
				if servers[i], err = httpstate.StartBackend(be, nil); err != nil {
					b.Fatal(err)
				}
				defer servers[i].Close(context.Background())
			}
			c := &http.Client{Timeout: 30 * time.Second}
			upload := func(srv *httpstate.Server) time.Duration {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, srv.URL("lab"), bytes.NewReader(body))
				req.SetBasicAuth(httpstate.Username, srv.Password())
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("upload: %s", resp.Status)
				}
				return time.Since(start)
			}
			var spent [2]time.Duration
			b.SetBytes(2 * int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				first := i % 2
				spent[first] += upload(servers[first])
				spent[1-first] += upload(servers[1-first])
			}
			b.StopTimer()
			b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "file-µs")
			b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "pg-µs")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "pg/file")
		})
	}
}

// BenchmarkStoreSize reports what one tenant costs in PostgreSQL: a record,
// its three secrets, the index of ten etcd backups and the kept ten versions
// of a 64 KiB state, as pg_total_relation_size of the store's tables
// (with their indexes and TOAST) divided by the tenants.
func BenchmarkStoreSize(b *testing.B) {
	p := testenv.StartPostgres(b)
	const tenants = 20
	ctx := ctxT(b)
	for i := 0; i < b.N; i++ {
		s, err := Open(ctx, p.NewDatabase(), p.Password, "size", passphrase, Options{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.Campaign(ctx)
		if err != nil {
			b.Fatal(err)
		}
		w := l.Writer()
		record := bytes.Repeat([]byte(`{"nodes":{"n":{"ip":"10.0.0.2"}}}`), 100)
		for t := 0; t < tenants; t++ {
			name := fmt.Sprintf("tenant-%02d", t)
			if err := w.PutRecord(ctx, name, record); err != nil {
				b.Fatal(err)
			}
			for _, kind := range state.SecretKinds {
				if err := w.PutSecret(ctx, name, kind, bytes.Repeat([]byte("k"), 8<<10)); err != nil {
					b.Fatal(err)
				}
			}
			for j := 0; j < 10; j++ {
				if err := w.PutBackup(ctx, state.Backup{Tenant: name, File: fmt.Sprintf("etcd-%d.snapshot", j), Size: 1 << 20, At: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
			for j := 0; j < httpstate.DefaultKeep+2; j++ {
				if err := w.States().Put(ctx, name, tofuState(b, 64<<10), ""); err != nil {
					b.Fatal(err)
				}
			}
		}
		var total int64
		if err := s.pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'rezuscloud' AND c.relkind = 'r'`).Scan(&total); err != nil {
			b.Fatal(err)
		}
		var states int64
		if err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('rezuscloud.states')`).Scan(&states); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(total)/tenants/1024, "KiB/tenant")
		b.ReportMetric(float64(states)/tenants/1024, "state-KiB/tenant")
		_ = l.Resign(ctx)
		s.Close()
	}
}

// BenchmarkFailover is the time from the leader's death to a standby's
// Campaign returning: "terminate" ends the leader's session
// (pg_terminate_backend, what the server does when keepalives find the
// leader's machine gone) and also times the old leader seeing Lost;
// "sigkill" kills a leader process (this test binary, re-run as
// TestStateHelperLeader) with SIGKILL.
func BenchmarkFailover(b *testing.B) {
	p := testenv.StartPostgres(b)
	b.Run("terminate", func(b *testing.B) {
		url := p.NewDatabase()
		stores := [2]*Store{open(b, p, url, "one"), open(b, p, url, "two")}
		l, err := stores[0].Campaign(ctxT(b))
		if err != nil {
			b.Fatal(err)
		}
		var takeover, noticed time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			standby := stores[(i+1)%2]
			got := campaignAsync(b, standby)
			b.StopTimer()
			waitCampaigning(b, p, standby.Instance())
			b.StartTimer()
			start := time.Now()
			p.Terminate(appName(stores[i%2].Instance(), "leader"))
			nl := <-got
			takeover += time.Since(start)
			<-l.Lost()
			noticed += time.Since(start)
			if nl == nil {
				b.Fatal("no new leadership")
			}
			l = nl
		}
		b.StopTimer()
		_ = l.Resign(context.Background())
		b.ReportMetric(float64(takeover.Microseconds())/1000/float64(b.N), "takeover-ms")
		b.ReportMetric(float64(noticed.Microseconds())/1000/float64(b.N), "lost-ms")
	})
	b.Run("sigkill", func(b *testing.B) {
		url := p.NewDatabase()
		standby := open(b, p, url, "standby")
		var takeover time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			cmd := exec.Command(os.Args[0], "-test.run=^TestStateHelperLeader$")
			cmd.Env = append(os.Environ(), "REZUSCLOUD_TEST_LEADER_URL="+url, "REZUSCLOUD_TEST_LEADER_PASSWORD="+p.Password)
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "leading\n" {
				_ = cmd.Process.Kill()
				b.Fatalf("helper leader: %q %v", line, err)
			}
			got := campaignAsync(b, standby)
			waitCampaigning(b, p, standby.Instance())
			b.StartTimer()
			start := time.Now()
			_ = cmd.Process.Signal(syscall.SIGKILL)
			nl := <-got
			takeover += time.Since(start)
			b.StopTimer()
			_ = cmd.Wait()
			if nl == nil {
				b.Fatal("no new leadership")
			}
			_ = nl.Resign(context.Background())
			b.StartTimer()
		}
		b.ReportMetric(float64(takeover.Microseconds())/1000/float64(b.N), "takeover-ms")
	})
}

func waitCampaigning(b *testing.B, p *testenv.Postgres, instance string) {
	b.Helper()
	testenv.WaitFor(b, 20*time.Second, instance+" waiting for the leader lock", func() bool {
		return p.QueryInt64(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
			appName(instance, "leader")) == 1
	})
}

// TestStateHelperLeader is BenchmarkFailover's leader process: it leads,
// says so on stdout and waits to be killed. It does nothing in a normal run.
func TestStateHelperLeader(t *testing.T) {
	url := os.Getenv("REZUSCLOUD_TEST_LEADER_URL")
	if url == "" {
		t.Skip("the leader process of BenchmarkFailover")
	}
	s, err := Open(context.Background(), url, os.Getenv("REZUSCLOUD_TEST_LEADER_PASSWORD"), "helper", passphrase, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Campaign(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("leading")
	select {
	case <-l.Lost():
	case <-time.After(time.Minute):
	}
	t.Fatal("the leader was not killed within a minute")
}

// campaignAsync campaigns for s in the background; the channel gets the
// leadership (nil after an error, reported on b).
func campaignAsync(b *testing.B, s *Store) <-chan *Leadership {
	got := make(chan *Leadership, 1)
	go func() {
		nl, err := s.Campaign(context.Background())
		if err != nil {
			b.Error(err)
		}
		got <- nl
	}()
	return got
}
