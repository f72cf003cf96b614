package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rezuscloud/rezuscloud/internal/state"
)

// leaderLock is the session-level advisory lock whose holder leads.
const leaderLock = 0x72657a7573_02

// leaderSessionParams are the leadership session's server-side TCP
// settings (settable per session by any role).
var leaderSessionParams = map[string]string{
	"tcp_keepalives_idle":     "3",
	"tcp_keepalives_interval": "1",
	"tcp_keepalives_count":    "3",
	"tcp_user_timeout":        "6000",
	// the campaign waits in pg_advisory_lock for as long as another leads
	"statement_timeout": "0",
}

// Leadership is this instance leading the store: it holds the advisory lock
// on a connection of its own, and ends when that session does.
type Leadership struct {
	s     *Store
	conn  *pgx.Conn
	epoch int64
	lost  chan struct{}
	once  sync.Once
	mu    sync.Mutex // the connection: one query at a time
	done  chan struct{}
	cause error
}

var _ state.Leadership = (*Leadership)(nil)

// Campaign blocks until this instance leads: it holds the advisory lock on
// a dedicated connection and has raised the epoch, so every write of an
// earlier leadership is refused from now on. It returns when ctx ends
// first.
func (s *Store) Campaign(ctx context.Context) (*Leadership, error) {
	cfg := s.cfg.ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = appName(s.instance, "leader")
	// The server must notice a leader whose machine died (no FIN, no RST)
	// within the failover goal, not after the system's two-hour keepalive:
	// probes after 3 s idle, every second, 3 unanswered end the session
	// (and with it the lock); unacknowledged data for 6 s does too.
	for k, v := range leaderSessionParams {
		cfg.RuntimeParams[k] = v
	}
	for {
		l, err := s.campaignOnce(ctx, cfg)
		if err == nil || ctx.Err() != nil {
			return l, err
		}
		var oe *OpenError
		if errors.As(err, &oe) && !oe.Retry {
			return nil, err // a password changed since Open: waiting will not help
		}
		// The connection broke while waiting (the server restarted, the
		// session was ended): wait a little and campaign again.
		t := time.NewTimer(s.beat)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (s *Store) campaignOnce(ctx context.Context, cfg *pgx.ConnConfig) (*Leadership, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.describe(err)
	}
	// Blocks in the server until the lock is free (the leader's session
	// ended); ctx ending cancels the wait and breaks the connection.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(leaderLock)); err != nil {
		_ = conn.Close(context.Background())
		return nil, s.wrap("campaign", err)
	}
	var epoch int64
	if err := conn.QueryRow(ctx, `UPDATE rezuscloud.leader SET epoch = epoch + 1, instance = $1, since = now()
		WHERE id = 1 RETURNING epoch`, s.instance).Scan(&epoch); err != nil {
		_ = conn.Close(context.Background())
		return nil, s.wrap("campaign: new epoch", err)
	}
	l := &Leadership{s: s, conn: conn, epoch: epoch, lost: make(chan struct{}), done: make(chan struct{})}
	go l.watch()
	return l, nil
}

// Epoch is this leadership's number.
func (l *Leadership) Epoch() int64 { return l.epoch }

// Lost is closed when the leadership ends.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Err says why the leadership ended (nil while it lasts).
func (l *Leadership) Err() error {
	select {
	case <-l.lost:
		return l.cause
	default:
		return nil
	}
}

// Writer writes under this leadership's epoch (a *Writer, for Import).
func (l *Leadership) Writer() state.Writer { return l.s.Writer(l.epoch) }

// watch checks the session every heartbeat with a cheap query: a failed
// or late answer ends the leadership (the lock may be gone with it).
func (l *Leadership) watch() {
	defer close(l.done)
	t := time.NewTicker(l.s.beat)
	defer t.Stop()
	for {
		select {
		case <-l.lost:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*l.s.beat)
		l.mu.Lock()
		var one int
		err := l.conn.QueryRow(ctx, `SELECT 1`).Scan(&one)
		l.mu.Unlock()
		cancel()
		if err != nil {
			l.end(fmt.Errorf("state store postgres://%s: leadership (epoch %d) lost: its session failed a check: %s",
				l.s.where, l.epoch, scrub(err.Error(), l.s.password)))
			return
		}
	}
}

func (l *Leadership) end(cause error) {
	l.once.Do(func() {
		l.cause = cause
		close(l.lost)
		go func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = l.conn.Close(ctx)
		}()
	})
}

// Resign gives the leadership up: the lock is released (closing the
// session releases it too) and Lost is closed.
func (l *Leadership) Resign(ctx context.Context) error {
	select {
	case <-l.lost:
		return nil
	default:
	}
	l.mu.Lock()
	_, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(leaderLock))
	l.mu.Unlock()
	l.end(errors.New("resigned"))
	<-l.done
	if err != nil {
		return l.s.wrap("resign", err)
	}
	return nil
}
