package hass

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobs "go.uber.org/zap/zaptest/observer"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// Two bridges with the same base topic get different client ids (so the
// broker does not knock one off for the other) and both log the conflict
// (fault matrix item 7).
func TestTwoInstancesOnOneBaseTopic(t *testing.T) {
	m := broker(t)
	logs := make([]*zapobs.ObservedLogs, 2)
	bridges := make([]*Bridge, 2)
	for i := range bridges {
		core, l := zapobs.New(zapcore.ErrorLevel)
		logs[i] = l
		b := New(fastOptions(m.URL), newFakeCmd(), zap.New(core))
		b.SetTenants(views(labTenant()))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.Start(ctx); err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		t.Cleanup(b.Close)
		bridges[i] = b
	}
	if bridges[0].opts.ClientID == bridges[1].opts.ClientID {
		t.Fatalf("both instances use client id %q", bridges[0].opts.ClientID)
	}
	for i, l := range logs {
		testenv.WaitFor(t, 10*time.Second, "the conflict is logged by both instances", func() bool {
			return l.FilterMessageSnippet("same MQTT base topic").Len() > 0
		})
		_ = i
	}
	// neither was knocked off: both still connected after the exchange
	for i, b := range bridges {
		if !b.client.IsConnectionOpen() {
			t.Fatalf("instance %d lost its connection", i)
		}
	}
}

// Operation events fired while the broker is away are sent, in order, once
// it is back (fault matrix item 8).
func TestEventsQueuedWhileBrokerDown(t *testing.T) {
	m := broker(t)
	opts := fastOptions(m.URL)
	b := startBridge(t, opts, newFakeCmd(), []*tenant.Tenant{labTenant()})
	m.Stop()
	testenv.WaitFor(t, 10*time.Second, "the bridge notices the broker is gone", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return !b.connected
	})
	for _, r := range []tenant.Result{tenant.ResultStarted, tenant.ResultFailed} {
		b.PublishOperation(tenant.OperationEvent{Tenant: "lab", Name: "apply", Result: r, At: time.Now()})
	}
	m.Restart()
	obs := newObserver(t, m.URL, "rezuscloud/bridge/event")
	testenv.WaitFor(t, 15*time.Second, "both events after the broker came back", func() bool {
		return obs.count("rezuscloud/bridge/event") >= 2
	})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var got []string
	for _, x := range obs.all {
		if x.topic != "rezuscloud/bridge/event" {
			continue
		}
		var ev map[string]any
		_ = json.Unmarshal(x.payload, &ev)
		got = append(got, ev["event_type"].(string))
	}
	if strings.Join(got, ",") != "started,failed" {
		t.Fatalf("events %v, want started,failed", got)
	}
}

// A connection-lost notice that paho delivers after the reconnection it
// belongs to must not leave the bridge thinking it is offline: Home
// Assistant's birth still gets its republish (fault matrix item 14).
func TestLateConnectionLostDoesNotMissBirth(t *testing.T) {
	m := broker(t)
	b := startBridge(t, fastOptions(m.URL), newFakeCmd(), []*tenant.Tenant{labTenant()})
	obs := newObserver(t, m.URL, "homeassistant/device/#")
	obs.sync(t)
	b.onConnectionLost(errors.New("a late notice of an old connection"))
	obs.mu.Lock()
	obs.all = nil
	obs.mu.Unlock()
	publish(t, m.URL, "homeassistant/status", []byte("online"), false)
	testenv.WaitFor(t, 10*time.Second, "discovery republished after the birth", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, x := range obs.all {
			if x.topic == "homeassistant/device/rezuscloud_lab/config" && !x.retained {
				return true
			}
		}
		return false
	})
}

// A command published retained while rezuscloud is connected runs once;
// the retained copy that the broker delivers at every later connection is
// ignored (fault matrix item 13: at most once, as DOCS.md says).
func TestRetainedCommandRunsAtMostOnce(t *testing.T) {
	m := broker(t)
	cmd := newFakeCmd()
	opts := fastOptions(m.URL)
	startBridge(t, opts, cmd, []*tenant.Tenant{labTenant()})
	publish(t, m.URL, "rezuscloud/lab/plan", []byte("PRESS"), true)
	cmd.waitCall(t, "plan lab")
	// a restarted bridge gets the retained copy from the broker: it must
	// say it ignores it, and not run it
	core, logs := zapobs.New(zapcore.WarnLevel)
	cmd2 := newFakeCmd()
	b2 := New(opts, cmd2, zap.New(core))
	b2.SetTenants(views(labTenant()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Close)
	testenv.WaitFor(t, 10*time.Second, "the retained copy is seen and ignored", func() bool {
		return logs.FilterMessageSnippet("ignoring retained message").Len() > 0
	})
	for _, c := range cmd2.Calls() {
		if strings.HasPrefix(c, "plan") {
			t.Fatalf("the retained command ran again after a restart: %v", cmd2.Calls())
		}
	}
}
