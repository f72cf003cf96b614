// Package health serves the add-on container's health check: GET /healthz
// answers 200 while rezuscloud is connected to its MQTT broker and 503 once
// it has been disconnected for longer than a grace period. The Dockerfile's
// HEALTHCHECK asks it on loopback; the Supervisor restarts an unhealthy
// add-on when its Watchdog is on. A restart would interrupt work in
// progress, so while an operation runs the check stays healthy (the body
// says why), and the grace starts over when the work ends. Nothing else is
// served, and the answer carries no configuration or secrets.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultAddr is where the add-on serves /healthz: loopback inside the
// container, never published (the Dockerfile's HEALTHCHECK uses it).
const DefaultAddr = "127.0.0.1:8096"

// DefaultGrace is how long the check may fail before the add-on is
// reported unhealthy: a broker restart or a reconnect is not a failure.
const DefaultGrace = 2 * time.Minute

// Checker turns a check ("is MQTT connected?") into a health verdict that
// tolerates short outages and never gets work in progress killed.
type Checker struct {
	check func() error
	busy  func() string
	grace time.Duration
	now   func() time.Time

	mu          sync.Mutex
	failingFrom time.Time // zero while the check passes
}

// NewChecker makes a Checker; grace <= 0 means DefaultGrace. busy, when
// not nil, tells whether work is in progress: it returns what runs (e.g.
// "1 operation running"), "" when nothing does.
func NewChecker(check func() error, busy func() string, grace time.Duration) *Checker {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if busy == nil {
		busy = func() string { return "" }
	}
	return &Checker{check: check, busy: busy, grace: grace, now: time.Now}
}

// Check runs the check. err is nil while the check passes, while it has
// failed for less than the grace period, or while work is in progress;
// else it is the check's error with how long it has failed. note, when the
// check fails but the verdict is healthy, says why (within the grace, or
// the work that must not be interrupted). While work is in progress the
// failure's clock is held at zero, so the grace counts from when the work
// ended.
func (c *Checker) Check() (note string, err error) {
	err = c.check()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if err == nil {
		c.failingFrom = time.Time{}
		return "", nil
	}
	if work := c.busy(); work != "" {
		c.failingFrom = now
		return fmt.Sprintf("%v, but %s: not restarting while work is in progress", err, work), nil
	}
	if c.failingFrom.IsZero() {
		c.failingFrom = now
	}
	d := now.Sub(c.failingFrom)
	if d >= c.grace {
		return "", fmt.Errorf("%w (for %s)", err, d.Round(time.Second))
	}
	return fmt.Sprintf("%v (for %s, unhealthy after %s)", err, d.Round(time.Second), c.grace), nil
}

// Healthy is Check without the note.
func (c *Checker) Healthy() error {
	_, err := c.Check()
	return err
}

// ServeHTTP answers GET /healthz: 200 "ok" (with a note when the check
// fails but the verdict is healthy) or 503 with the reason.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/healthz" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	note, err := c.Check()
	if err != nil {
		http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if note != "" {
		fmt.Fprintln(w, "ok: "+note)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Serve serves c on ln until ctx ends, then shuts the server down.
func Serve(ctx context.Context, ln net.Listener, c *Checker) error {
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("health: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("health: shutdown: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}
