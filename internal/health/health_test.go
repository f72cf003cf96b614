package health

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }

func TestCheckerGrace(t *testing.T) {
	var down atomic.Bool
	clk := &clock{}
	c := NewChecker(func() error {
		if down.Load() {
			return errors.New("mqtt not connected")
		}
		return nil
	}, nil, time.Minute)
	c.now = clk.now
	steps := []struct {
		name    string
		down    bool
		advance time.Duration
		healthy bool
	}{
		{"connected", false, 0, true},
		{"just lost", true, 0, true},
		{"within grace", true, 59 * time.Second, true},
		{"grace over", true, time.Second, false},
		{"still down", true, time.Hour, false},
		{"back", false, 0, true},
		{"lost again: grace starts over", true, 30 * time.Second, true},
		{"lost again, later", true, 0, true},
	}
	for _, s := range steps {
		down.Store(s.down)
		clk.advance(s.advance)
		err := c.Healthy()
		if (err == nil) != s.healthy {
			t.Fatalf("%s: Healthy() = %v, want healthy=%v", s.name, err, s.healthy)
		}
		if err != nil && !strings.Contains(err.Error(), "mqtt not connected (for ") {
			t.Fatalf("%s: error %v", s.name, err)
		}
	}
}

// TestCheckerWorkInProgress: a long broker outage does not make the add-on
// unhealthy (and the watchdog restart it) while an operation runs; the
// body says why. Once the work ends, the grace counts from then: the
// watchdog restarts only after a full grace without work and without the
// broker.
func TestCheckerWorkInProgress(t *testing.T) {
	var down atomic.Bool
	var running atomic.Int64
	clk := &clock{}
	c := NewChecker(func() error {
		if down.Load() {
			return errors.New("not connected to the MQTT broker")
		}
		return nil
	}, func() string {
		if n := running.Load(); n > 0 {
			return "an operation is running"
		}
		return ""
	}, 10*time.Minute)
	c.now = clk.now
	steps := []struct {
		name    string
		down    bool
		ops     int64
		advance time.Duration
		healthy bool
		body    string // the note ("" none), or the error
	}{
		{"idle, connected", false, 0, 0, true, ""},
		{"an apply starts", false, 1, time.Minute, true, ""},
		{"the broker goes", true, 1, 0, true, "not connected to the MQTT broker, but an operation is running"},
		{"long past the grace, still applying", true, 1, 3 * time.Hour, true, "not restarting while work is in progress"},
		{"the apply ends: the grace starts now", true, 0, time.Minute, true, "(for 1m0s, unhealthy after 10m0s)"},
		{"within the grace", true, 0, 8 * time.Minute, true, "(for 9m0s, unhealthy after 10m0s)"},
		{"grace over without work", true, 0, time.Minute, false, "not connected to the MQTT broker (for 10m0s)"},
		{"another operation starts", true, 1, time.Minute, true, "an operation is running"},
		{"it ends, the grace again", true, 0, 9 * time.Minute, true, "(for 9m0s"},
		{"and again over", true, 0, time.Minute, false, "(for 10m0s)"},
		{"the broker is back", false, 0, time.Hour, true, ""},
	}
	for _, s := range steps {
		down.Store(s.down)
		running.Store(s.ops)
		clk.advance(s.advance)
		note, err := c.Check()
		if (err == nil) != s.healthy {
			t.Fatalf("%s: Check() = %q, %v, want healthy=%v", s.name, note, err, s.healthy)
		}
		got := note
		if err != nil {
			got = err.Error()
		}
		if s.body == "" && got != "" || !strings.Contains(got, s.body) {
			t.Fatalf("%s: got %q, want %q", s.name, got, s.body)
		}
	}

	// The body says why it is healthy.
	down.Store(true)
	running.Store(2)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), "ok: not connected to the MQTT broker, but an operation is running") {
		t.Fatalf("%d %q", rec.Code, rec.Body.String())
	}
}

func TestHandler(t *testing.T) {
	var down atomic.Bool
	c := NewChecker(func() error {
		if down.Load() {
			return errors.New("mqtt not connected")
		}
		return nil
	}, nil, time.Nanosecond)
	tests := []struct {
		method, path string
		down         bool
		code         int
		body         string
	}{
		{"GET", "/healthz", false, 200, "ok\n"},
		{"HEAD", "/healthz", false, 200, ""},
		{"GET", "/healthz", true, 503, "unhealthy: mqtt not connected"},
		{"POST", "/healthz", false, 405, "method not allowed\n"},
		{"GET", "/", false, 404, "404 page not found\n"},
	}
	for _, tc := range tests {
		down.Store(tc.down)
		if tc.down {
			c.Healthy() // start the failure
		}
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.HasPrefix(rec.Body.String(), tc.body) {
			t.Errorf("%s %s down=%v: %d %q, want %d %q", tc.method, tc.path, tc.down, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
}

// TestServe runs the server on a loopback port and stops it with ctx.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, NewChecker(func() error { return nil }, nil, 0)) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Fatal("still serving after cancel")
	}
}
