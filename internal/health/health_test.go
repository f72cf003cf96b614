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
	}, time.Minute)
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

func TestHandler(t *testing.T) {
	var down atomic.Bool
	c := NewChecker(func() error {
		if down.Load() {
			return errors.New("mqtt not connected")
		}
		return nil
	}, time.Nanosecond)
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
	go func() { done <- Serve(ctx, ln, NewChecker(func() error { return nil }, 0)) }()
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
