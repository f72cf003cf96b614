package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rezuscloud/rezuscloud/internal/command"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func TestAuthAccepted(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	opts := testOptions(fake.URL, testToken)
	var pongs atomic.Int32
	opts.Dialer = pongCountingDialer(&pongs)
	c := startClient(t, fake, opts)

	if err := c.WaitConnected(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if !c.Connected() {
		t.Fatal("Connected() = false after WaitConnected")
	}
	if got := c.HAVersion(); got != fakeha.HAVersion {
		t.Errorf("HAVersion = %q", got)
	}
	if got := fake.Accepted(); got != 1 {
		t.Errorf("accepted connections = %d, want 1", got)
	}
	// The heartbeat runs every 20ms: a few cycles must pass without a reconnect.
	testenv.WaitFor(t, 5*time.Second, "three heartbeats answered", func() bool { return pongs.Load() >= 3 })
	if got := fake.Accepted(); got != 1 {
		t.Errorf("accepted connections after heartbeats = %d, want 1", got)
	}
}

func TestAuthRefusedIsTerminal(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	wrong := "wrong-token-value-9876543210"
	log, logs := testLogger()
	c := New(testOptions(fake.URL, wrong), log)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Run(ctx)
	if !errors.Is(err, ErrAuthInvalid) {
		t.Fatalf("Run = %v, want ErrAuthInvalid", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for the context instead of stopping on auth_invalid")
	}
	if !strings.Contains(err.Error(), "Invalid access token or password") {
		t.Errorf("error does not carry HA's message: %v", err)
	}
	for _, s := range []string{err.Error(), logs.String()} {
		if strings.Contains(s, wrong) {
			t.Errorf("token leaked: %s", s)
		}
	}
	// Negative-check window (Run has returned; nothing to wait for): longer
	// than the backoff, so a retry would have dialled by now.
	time.Sleep(50 * time.Millisecond)
	if d, f := fake.Dials(), fake.AuthFailures(); d != 1 || f != 1 {
		t.Errorf("dials=%d auth failures=%d, want 1 and 1 (no hammering)", d, f)
	}
	if c.Connected() {
		t.Error("Connected() after auth_invalid")
	}
}

func TestDisabledClient(t *testing.T) {
	for _, opts := range []Options{{}, {URL: "ws://x/api/websocket"}, {Token: "t"}} {
		c := New(opts, nil)
		if !c.Disabled() {
			t.Fatalf("%v: not disabled", opts)
		}
		if err := c.Run(context.Background()); err != nil {
			t.Errorf("Run of a disabled client = %v, want nil at once", err)
		}
		if _, err := c.Call(context.Background(), map[string]any{"type": "ping"}); !errors.Is(err, ErrDisabled) {
			t.Errorf("Call = %v, want ErrDisabled", err)
		}
		l := NewLink(c, func(context.Context, json.RawMessage) command.Response { return command.Response{} }, nil)
		l.Operation(opEvent("lab", "apply", "failed")) // must not block or panic
		l.Close()
	}
	var l *Link
	l.Operation(opEvent("lab", "apply", "failed"))
	l.Close()
	var c *Client
	if !c.Disabled() || c.Connected() {
		t.Error("nil client must read as disabled")
	}
}

func TestCallNotConnected(t *testing.T) {
	c := New(testOptions("ws://127.0.0.1:1/api/websocket", testToken), nil)
	start := time.Now()
	if err := c.FireEvent(context.Background(), "x", nil); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("FireEvent before Run = %v, want ErrNotConnected", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Error("Call without a connection blocked")
	}
}

func TestCallResultsAndErrors(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	ctx := waitCtx(t)
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}

	res, err := c.Call(ctx, map[string]any{"type": "fire_event", "event_type": "x", "event_data": map[string]any{"a": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if m := decode(t, res); m["context"] == nil {
		t.Errorf("fire_event result without context: %s", res)
	}

	_, err = c.Call(ctx, map[string]any{"type": "no_such_command"})
	var haErr *Error
	if !errors.As(err, &haErr) || haErr.Code != "unknown_command" {
		t.Fatalf("unknown command: %v, want *Error unknown_command", err)
	}

	fake.FailService("light", "turn_on", "service_validation_error", "Entity light.x not found")
	err = c.CallService(ctx, "light", "turn_on", map[string]any{"entity_id": "light.x"})
	if !errors.As(err, &haErr) || haErr.Code != "service_validation_error" || haErr.Message != "Entity light.x not found" {
		t.Fatalf("failing service: %v", err)
	}
	calls := fake.ServiceCalls()
	if len(calls) != 1 || calls[0].Domain != "light" || string(calls[0].ServiceData) != `{"entity_id":"light.x"}` {
		t.Errorf("recorded calls: %+v", calls)
	}

	// A value that does not encode fails the call, not the connection.
	if err := c.FireEvent(ctx, "x", map[string]any{"f": func() {}}); err == nil {
		t.Error("unencodable event data accepted")
	}
	if err := c.FireEvent(ctx, "x", nil); err != nil {
		t.Errorf("call after an encoding failure: %v", err)
	}
	if got := fake.Accepted(); got != 1 {
		t.Errorf("accepted = %d: the connection was dropped", got)
	}

	// The caller's message is not modified.
	msg := map[string]any{"type": "ping"}
	if _, err := c.Call(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if _, ok := msg["id"]; ok {
		t.Error("Call wrote an id into the caller's map")
	}
}

func TestSubscribeAndFireEvent(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	got := make(chan json.RawMessage, 10)
	c.Subscribe("my_event", func(ev json.RawMessage) { got <- ev })
	ctx := waitCtx(t)
	if err := fake.WaitSubscribers(ctx, "my_event", 1); err != nil {
		t.Fatal(err)
	}
	// A subscription made while connected is made at once.
	late := make(chan json.RawMessage, 10)
	c.Subscribe("", func(ev json.RawMessage) { late <- ev })
	if err := fake.WaitSubscribers(ctx, "other", 1); err != nil {
		t.Fatal(err)
	}

	// The client's own fire_event reaches its own subscription, as in HA.
	if err := c.FireEvent(ctx, "my_event", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-got:
		m := decode(t, ev)
		if m["event_type"] != "my_event" || m["data"].(map[string]any)["n"] != 1.0 {
			t.Errorf("event: %s", ev)
		}
	case <-ctx.Done():
		t.Fatal("event not delivered")
	}
	select {
	case <-late:
	case <-ctx.Done():
		t.Fatal("event not delivered to the all-events subscription")
	}
	if evs := fake.Events("my_event"); len(evs) != 1 || string(evs[0].Data) != `{"n":1}` {
		t.Errorf("recorded: %+v", evs)
	}
}

func TestReconnectRestoresSubscriptions(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	got := make(chan json.RawMessage, 10)
	c.Subscribe("my_event", func(ev json.RawMessage) { got <- ev })
	ctx := waitCtx(t)
	if err := fake.WaitSubscribers(ctx, "my_event", 1); err != nil {
		t.Fatal(err)
	}

	fake.SetRefuse(true) // HA restarting: upgrades fail for a while
	fake.DropConnections()
	// The client noticed the drop and retried while HA refused (a refused
	// dial follows the teardown that clears Connected).
	testenv.WaitFor(t, 5*time.Second, "two refused reconnect attempts", func() bool { return fake.Dials() >= 3 })
	if c.Connected() {
		t.Error("Connected() while HA is down")
	}
	fake.SetRefuse(false)

	if err := fake.WaitAccepted(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitSubscribers(ctx, "my_event", 1); err != nil {
		t.Fatal(err)
	}
	if n := fake.Subscribers("my_event"); n != 1 {
		t.Errorf("subscriptions after reconnect = %d, want 1", n)
	}
	if err := fake.Fire("my_event", map[string]any{"after": "reconnect"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-got:
		if !strings.Contains(string(ev), "reconnect") {
			t.Errorf("event: %s", ev)
		}
	case <-ctx.Done():
		t.Fatal("event after reconnect not delivered")
	}
	if d := fake.Dials(); d < 3 {
		t.Errorf("dials = %d: expected refused attempts while HA was down", d)
	}
}

func TestHeartbeatDetectsHungServer(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	opts := testOptions(fake.URL, testToken)
	opts.PongTimeout = 50 * time.Millisecond
	c := startClient(t, fake, opts)
	ctx := waitCtx(t)
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	fake.SetPong(false)
	if err := fake.WaitAccepted(ctx, 2); err != nil {
		t.Fatal("no reconnect after pongs stopped:", err)
	}
	fake.SetPong(true)
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestIDsIncreaseUnderConcurrency(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	c.Subscribe("a", func(json.RawMessage) {})
	c.Subscribe("b", func(json.RawMessage) {})
	ctx := waitCtx(t)
	if err := fake.WaitSubscribers(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var failed sync.Map
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if g == 0 && i == 20 {
					fake.DropConnections() // reconnect in the middle
				}
				var err error
				if i%2 == 0 {
					err = c.FireEvent(ctx, "a", map[string]any{"g": g, "i": i})
				} else {
					err = c.CallService(ctx, "test", "noop", nil)
				}
				if err != nil && !errors.Is(err, ErrNotConnected) && !errors.Is(err, ErrConnectionLost) {
					failed.Store(fmt.Sprint(g, i), err)
				}
				if errors.Is(err, ErrNotConnected) {
					_ = c.WaitConnected(ctx)
				}
			}
		}()
	}
	wg.Wait()
	failed.Range(func(k, v any) bool { t.Errorf("call %v: %v", k, v); return true })
	if v := fake.Violations(); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
}

// The fake itself must catch a client that reuses an id.
func TestFakeRejectsNonIncreasingID(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	ws, _, err := websocket.DefaultDialer.Dial(fake.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var m map[string]any
	_ = ws.ReadJSON(&m) // auth_required
	_ = ws.WriteJSON(map[string]any{"type": "auth", "access_token": testToken})
	_ = ws.ReadJSON(&m) // auth_ok
	if m["type"] != "auth_ok" {
		t.Fatalf("auth: %v", m)
	}
	_ = ws.WriteJSON(map[string]any{"id": 5, "type": "ping"})
	_ = ws.ReadJSON(&m)
	_ = ws.WriteJSON(map[string]any{"id": 5, "type": "ping"})
	_ = ws.ReadJSON(&m)
	if m["success"] != false || m["error"].(map[string]any)["code"] != "id_reuse" {
		t.Errorf("reused id answered with %v", m)
	}
	if v := fake.Violations(); len(v) != 1 || !strings.Contains(v[0], "does not increase") {
		t.Errorf("violations = %v", v)
	}
}

func TestResolveOptions(t *testing.T) {
	cases := []struct {
		url, token, sup string
		want            Options
		err             string
	}{
		{"", "", "", Options{}, ""},
		{"", "", "sup", Options{URL: SupervisorURL, Token: "sup"}, ""},
		{"ws://ha:8123/api/websocket", "tok", "sup", Options{URL: "ws://ha:8123/api/websocket", Token: "tok"}, ""},
		{"http://homeassistant.local:8123", "tok", "", Options{URL: "ws://homeassistant.local:8123/api/websocket", Token: "tok"}, ""},
		{"https://ha.example.org/", "tok", "", Options{URL: "wss://ha.example.org/api/websocket", Token: "tok"}, ""},
		{"ws://ha:8123/api/websocket", "", "sup", Options{}, "homeassistant.token is required"},
		{"", "tok", "", Options{}, "homeassistant.url is required"},
		{"ftp://ha", "tok", "", Options{}, "scheme"},
		{"ws://user:pw@ha:8123/api/websocket", "tok", "", Options{}, "credentials"},
	}
	for _, tc := range cases {
		got, err := ResolveOptions(tc.url, tc.token, tc.sup)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q/%q: err = %v, want %q", tc.url, tc.token, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("error leaks URL credentials: %v", err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q/%q/%q = %+v, %v; want %+v", tc.url, tc.token, tc.sup, got, err, tc.want)
		}
	}
	o := Options{URL: "ws://x", Token: testToken}
	if strings.Contains(o.String(), testToken) || strings.Contains(fmt.Sprintf("%v %+v", o, o), testToken) {
		t.Error("Options prints its token")
	}
}

func TestUpgradeUnauthorizedIsTerminal(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "401: Unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	c := New(testOptions("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/websocket", testToken), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, ErrAuthInvalid) || strings.Contains(err.Error(), testToken) {
		t.Fatalf("Run = %v, want ErrAuthInvalid without the token", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestServerDownKeepsRetrying(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "502: Bad Gateway", http.StatusBadGateway)
	}))
	defer srv.Close()
	c := New(testOptions("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/websocket", testToken), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil after ctx done", err)
	}
	// Backoff 5ms doubling to a 50ms cap (jittered) over 300ms: several
	// attempts, but far from a busy loop.
	if n := hits.Load(); n < 3 || n > 40 {
		t.Errorf("%d attempts in 300ms", n)
	}
}

// pongCountingDialer dials like the default dialer and counts the pongs the
// server sends (server frames are not masked, so the JSON is on the wire).
// A pong split across two reads is missed; callers wait for "at least".
func pongCountingDialer(n *atomic.Int32) *websocket.Dialer {
	return &websocket.Dialer{
		HandshakeTimeout: 5 * time.Second,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return pongConn{Conn: c, n: n}, nil
		},
	}
}

type pongConn struct {
	net.Conn
	n *atomic.Int32
}

func (c pongConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int32(bytes.Count(p[:k], []byte(`"type":"pong"`))))
	return k, err
}
