package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rezuscloud/rezuscloud/internal/command"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
)

const testToken = "s3cr3t-long-lived-token-0123456789"

// syncBuffer collects log output safely across goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger() (*zap.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(buf), zap.DebugLevel)
	return zap.New(core), buf
}

func testOptions(url, token string) Options {
	return Options{
		URL:          url,
		Token:        token,
		PingInterval: 20 * time.Millisecond,
		PongTimeout:  200 * time.Millisecond,
		BackoffMin:   5 * time.Millisecond,
		BackoffMax:   50 * time.Millisecond,
		AuthTimeout:  2 * time.Second,
	}
}

type runningClient struct {
	*Client
	logs *syncBuffer
	errc chan error
}

// startClient runs a client against fake until the test ends and checks, at
// the end, that the token never reached the logs and the fake saw no
// protocol violation.
func startClient(t testing.TB, fake *fakeha.Server, opts Options) *runningClient {
	t.Helper()
	log, logs := testLogger()
	c := New(opts, log)
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningClient{Client: c, logs: logs, errc: make(chan error, 1)}
	go func() { rc.errc <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-rc.errc:
			if err != nil {
				t.Errorf("Run after cancel: %v", err)
			}
			rc.errc <- err
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("protocol violations seen by fake HA: %v", v)
		}
		if bytes.Contains([]byte(logs.String()), []byte(opts.Token)) && opts.Token != "" {
			t.Errorf("token found in logs")
		}
	})
	return rc
}

func waitCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// engine is a stand-in for the request handler the lead wires: it validates
// like the MQTT request API and changes state only for a valid request.
type engine struct {
	mu     sync.Mutex
	counts map[string]int // "tenant/group" -> count
	calls  int
}

func newEngine() *engine {
	return &engine{counts: map[string]int{"lab/workers": 2, "lab/cp": 1}}
}

func (e *engine) handle(_ context.Context, data json.RawMessage) command.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls++
	var req struct {
		Action      string          `json:"action"`
		Tenant      string          `json:"tenant"`
		Group       string          `json:"group"`
		Count       *int            `json:"count"`
		Transaction json.RawMessage `json:"transaction"`
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return command.Response{Status: "error", Error: err.Error()}
	}
	fail := func(format string, a ...any) command.Response {
		return command.Response{Status: "error", Error: fmt.Sprintf(format, a...), Transaction: req.Transaction}
	}
	switch req.Action {
	case "scale":
		key := req.Tenant + "/" + req.Group
		if _, ok := e.counts[key]; !ok {
			return fail("unknown tenant or group %q", key)
		}
		if req.Count == nil || *req.Count < 0 || *req.Count > 100 {
			return fail("count must be 0..100")
		}
		e.counts[key] = *req.Count
		return command.Response{Status: "ok", Data: map[string]any{"group": req.Group, "count": *req.Count}, Transaction: req.Transaction}
	case "":
		return fail("action is required")
	default:
		return fail("unknown action %q", req.Action)
	}
}

func (e *engine) snapshot() (map[string]int, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := make(map[string]int, len(e.counts))
	for k, v := range e.counts {
		m[k] = v
	}
	return m, e.calls
}

func decode(t testing.TB, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	return m
}

func withTransaction(tx string) func(fakeha.Event) bool {
	return func(e fakeha.Event) bool {
		var d struct {
			Transaction any `json:"transaction"`
		}
		return json.Unmarshal(e.Data, &d) == nil && d.Transaction == tx
	}
}
