package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// syncWriter collects the log of a serve run.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestWebSocketScale is issue 6's "done when": an automation fires
// rezuscloud_request {"action":"scale",…,"transaction":"t1"} and gets
// rezuscloud_response with transaction t1, and the operation's start and
// end arrive as rezuscloud_operation events.
func TestWebSocketScale(t *testing.T) {
	tofuBin, _ := testenv.Tofu(t)
	broker := testenv.StartMosquitto(t)
	ha := fakeha.New("ha-token-for-tests")
	defer ha.Close()

	// a tenant over simulated nodes (3 machines, 1 worker in use)
	sims, err := simnode.StartOnLoopback(context.Background(), 3, "", 50000, simnode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sims.Close)
	var addrs []string
	for _, s := range sims.Nodes {
		addrs = append(addrs, s.Host())
	}
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir, cfg.TenantsDir = filepath.Join(dir, "data"), filepath.Join(dir, "tenants")
	cfg.MQTT.URL, cfg.Tofu.Binary, cfg.Tofu.StatePassphrase = broker.URL, tofuBin, "websocket-test-passphrase"
	cfg.HomeAssistant = config.HomeAssistant{URL: ha.URL, Token: "ha-token-for-tests"}
	os.MkdirAll(cfg.TenantsDir, 0o700)
	src := demoTenantFile(addrs, simnode.DefaultTalosVersion)
	src = strings.Replace(src, "count = 2\n", "count = 1\n", 1) // one worker of a pool of two
	if err := os.WriteFile(filepath.Join(cfg.TenantsDir, "lab.toml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncWriter
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, &logs, serveHooks{talosPort: 50000, pollInterval: time.Second}) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()

	wait, stop := context.WithTimeout(context.Background(), 4*time.Minute)
	defer stop()
	if err := ha.WaitSubscribers(wait, "rezuscloud_request", 1); err != nil {
		t.Fatalf("rezuscloud never subscribed: %v", err)
	}
	if err := ha.Fire("rezuscloud_request", map[string]any{"action": "scale", "tenant": "lab", "group": "workers", "count": 2, "transaction": "t1"}); err != nil {
		t.Fatal(err)
	}
	resp, err := ha.WaitEvent(wait, "rezuscloud_response", nil)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Status      string `json:"status"`
		Error       string `json:"error"`
		Transaction string `json:"transaction"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil || r.Status != "ok" || r.Transaction != "t1" {
		t.Fatalf("response %s (%v)", resp.Data, err)
	}
	data, _ := os.ReadFile(filepath.Join(cfg.TenantsDir, "lab.toml"))
	if !strings.Contains(string(data), "count = 2") {
		t.Fatalf("scale not written to the file:\n%s", data)
	}

	// the scale of an unprovisioned tenant waits for Apply: apply by event
	if err := ha.Fire("rezuscloud_request", map[string]any{"action": "apply", "tenant": "lab", "transaction": "t2"}); err != nil {
		t.Fatal(err)
	}
	for _, result := range []string{"started", "succeeded"} {
		ev, err := ha.WaitEvent(wait, "rezuscloud_operation", func(e fakeha.Event) bool {
			var op map[string]any
			json.Unmarshal(e.Data, &op)
			return op["tenant"] == "lab" && op["operation"] == "apply" && (op["result"] == result || op["result"] == "failed")
		})
		if err != nil {
			t.Fatalf("no %s operation event: %v", result, err)
		}
		if strings.Contains(string(ev.Data), `"failed"`) {
			t.Fatalf("apply failed: %s", ev.Data)
		}
	}
	// a bad request gets an error response and changes nothing
	if err := ha.Fire("rezuscloud_request", map[string]any{"action": "destroy", "tenant": "lab", "confirm": "nope", "transaction": "t3"}); err != nil {
		t.Fatal(err)
	}
	bad, err := ha.WaitEvent(wait, "rezuscloud_response", func(e fakeha.Event) bool { return strings.Contains(string(e.Data), `"t3"`) })
	if err != nil || !strings.Contains(string(bad.Data), `"error"`) {
		t.Fatalf("bad request: %s %v", bad.Data, err)
	}
	if v := ha.Violations(); len(v) > 0 {
		t.Fatalf("protocol violations: %v", v)
	}
	if strings.Contains(logs.String(), "ha-token-for-tests") || strings.Contains(logs.String(), "websocket-test-passphrase") {
		t.Fatal("a secret reached the log")
	}
}
