package wsapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/command"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func opEvent(tenantName, op string, result tenant.Result) tenant.OperationEvent {
	return tenant.OperationEvent{Tenant: tenantName, Name: op, Result: result,
		Message: "tofu apply: quota exceeded", Duration: 1500 * time.Millisecond, At: time.Now()}
}

// startLink runs a client and a link on fake with a fresh engine, and waits
// until the link's subscription is in place.
func startLink(t *testing.T, fake *fakeha.Server) (*runningClient, *Link, *engine) {
	t.Helper()
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	eng := newEngine()
	l := NewLink(c.Client, eng.handle, nil)
	t.Cleanup(l.Close)
	if err := fake.WaitSubscribers(waitCtx(t), EventRequest, 1); err != nil {
		t.Fatal(err)
	}
	return c, l, eng
}

func TestRequestEventGetsResponse(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	_, _, eng := startLink(t, fake)
	ctx := waitCtx(t)

	if err := fake.Fire(EventRequest, map[string]any{"action": "scale", "tenant": "lab", "group": "workers",
		"count": 3, "transaction": "tx-1"}); err != nil {
		t.Fatal(err)
	}
	ev, err := fake.WaitEvent(ctx, EventResponse, withTransaction("tx-1"))
	if err != nil {
		t.Fatal(err)
	}
	resp := decode(t, ev.Data)
	if resp["status"] != "ok" || resp["data"].(map[string]any)["count"] != 3.0 {
		t.Errorf("response: %s", ev.Data)
	}
	counts, calls := eng.snapshot()
	if counts["lab/workers"] != 3 || calls != 1 {
		t.Errorf("engine: counts=%v calls=%d", counts, calls)
	}
}

func TestBadRequestEventsChangeNothing(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	_, _, eng := startLink(t, fake)
	ctx := waitCtx(t)
	before, _ := eng.snapshot()

	// Data that is not a JSON object: the link answers without the handler.
	for _, raw := range []string{`[1,2]`, `"scale"`, `null`, `42`} {
		fake.FireRaw(EventRequest, json.RawMessage(raw))
	}
	// Objects the handler refuses: its error response, with the transaction.
	bad := []map[string]any{
		{"action": "scale", "tenant": "lab", "group": "workers", "count": -1, "transaction": "bad-count"},
		{"action": "scale", "tenant": "nope", "group": "workers", "count": 1, "transaction": "bad-tenant"},
		{"action": "explode", "tenant": "lab", "transaction": 7.0},
		{"tenant": "lab", "transaction": "no-action"},
	}
	for _, b := range bad {
		if err := fake.Fire(EventRequest, b); err != nil {
			t.Fatal(err)
		}
	}
	// Responses come in order; wait for the last one.
	if _, err := fake.WaitEvent(ctx, EventResponse, withTransaction("no-action")); err != nil {
		t.Fatal(err)
	}
	resps := fake.Events(EventResponse)
	if len(resps) != 8 {
		t.Fatalf("%d responses, want 8", len(resps))
	}
	for i, r := range resps {
		m := decode(t, r.Data)
		if m["status"] != "error" || m["error"] == "" {
			t.Errorf("response %d: %s", i, r.Data)
		}
		if i < 4 {
			if !strings.Contains(m["error"].(string), "JSON object") {
				t.Errorf("response %d: %s", i, r.Data)
			}
		} else if m["transaction"] != bad[i-4]["transaction"] {
			t.Errorf("response %d transaction = %v, want %v", i, m["transaction"], bad[i-4]["transaction"])
		}
	}
	after, calls := eng.snapshot()
	if calls != 4 {
		t.Errorf("handler called %d times, want 4 (never for non-objects)", calls)
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed from %d to %d", k, v, after[k])
		}
	}
}

func TestHandlerPanicAndNilAnswered(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	l := NewLink(c.Client, func(_ context.Context, data json.RawMessage) command.Response {
		if strings.Contains(string(data), "panic") {
			panic("boom")
		}
		return command.Response{}
	}, nil)
	defer l.Close()
	ctx := waitCtx(t)
	if err := fake.WaitSubscribers(ctx, EventRequest, 1); err != nil {
		t.Fatal(err)
	}
	_ = fake.Fire(EventRequest, map[string]any{"action": "panic", "transaction": "p"})
	_ = fake.Fire(EventRequest, map[string]any{"action": "nil", "transaction": "n"})
	for _, tx := range []string{"p", "n"} {
		ev, err := fake.WaitEvent(ctx, EventResponse, withTransaction(tx))
		if err != nil {
			t.Fatal(tx, err)
		}
		if m := decode(t, ev.Data); m["status"] != "error" {
			t.Errorf("%s: %s", tx, ev.Data)
		}
	}
}

func TestRequestAfterReconnect(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c, _, eng := startLink(t, fake)
	ctx := waitCtx(t)

	fake.DropConnections()
	if err := fake.WaitAccepted(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitSubscribers(ctx, EventRequest, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	_ = fake.Fire(EventRequest, map[string]any{"action": "scale", "tenant": "lab", "group": "workers", "count": 5, "transaction": "after"})
	if _, err := fake.WaitEvent(ctx, EventResponse, withTransaction("after")); err != nil {
		t.Fatal(err)
	}
	if counts, _ := eng.snapshot(); counts["lab/workers"] != 5 {
		t.Errorf("counts = %v", counts)
	}
}

func TestOperationEventsAndNotifications(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c, l, _ := startLink(t, fake)
	ctx := waitCtx(t)
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}

	l.Operation(opEvent("lab", "apply", tenant.ResultStarted))
	l.Operation(opEvent("lab", "apply", tenant.ResultFailed))
	if err := fake.WaitNotifications(ctx, func(n map[string]fakeha.Notification) bool { return len(n) == 1 }); err != nil {
		t.Fatal(err)
	}
	n := fake.Notifications()["rezuscloud_lab"]
	for _, want := range []string{"apply", "lab", "quota exceeded", "What to do", "Plan"} {
		if !strings.Contains(n.Title+n.Message, want) {
			t.Errorf("notification lacks %q: %+v", want, n)
		}
	}

	// A second failure replaces it (same id), another tenant gets its own.
	second := opEvent("lab", "destroy", tenant.ResultFailed)
	second.Message = "network unreachable"
	l.Operation(second)
	l.Operation(opEvent("prod", "plan", tenant.ResultFailed))
	if err := fake.WaitNotifications(ctx, func(n map[string]fakeha.Notification) bool {
		return len(n) == 2 && strings.Contains(n["rezuscloud_lab"].Message, "network unreachable")
	}); err != nil {
		t.Fatal(err, fake.Notifications())
	}

	// Success dismisses only that tenant's notification.
	l.Operation(opEvent("lab", "apply", tenant.ResultSucceeded))
	if err := fake.WaitNotifications(ctx, func(n map[string]fakeha.Notification) bool {
		_, lab := n["rezuscloud_lab"]
		_, prod := n["rezuscloud_prod"]
		return !lab && prod
	}); err != nil {
		t.Fatal(err, fake.Notifications())
	}
	// A cancelled operation leaves notifications alone; a further success
	// does not call dismiss again.
	l.Operation(opEvent("prod", "apply", tenant.ResultCancelled))
	l.Operation(opEvent("lab", "plan", tenant.ResultSucceeded))
	if _, err := fake.WaitEvent(ctx, EventOperation, func(e fakeha.Event) bool {
		return strings.Contains(string(e.Data), `"operation":"plan"`) && strings.Contains(string(e.Data), `"tenant":"lab"`)
	}); err != nil {
		t.Fatal(err)
	}
	// Items go out in order: once a marker queued after the plan's dismiss
	// has been fired, that dismiss has been made or skipped.
	l.Operation(opEvent("marker", "plan", tenant.ResultStarted))
	if _, err := fake.WaitEvent(ctx, EventOperation, func(e fakeha.Event) bool {
		return strings.Contains(string(e.Data), `"tenant":"marker"`)
	}); err != nil {
		t.Fatal(err)
	}
	dismisses := 0
	for _, call := range fake.ServiceCalls() {
		if call.Service == "dismiss" {
			dismisses++
		}
	}
	if dismisses != 1 {
		t.Errorf("dismiss called %d times, want 1", dismisses)
	}
	if _, ok := fake.Notifications()["rezuscloud_prod"]; !ok {
		t.Error("cancelled operation dismissed prod's notification")
	}

	var evs []fakeha.Event
	for _, e := range fake.Events(EventOperation) {
		if !strings.Contains(string(e.Data), `"tenant":"marker"`) {
			evs = append(evs, e)
		}
	}
	if len(evs) != 7 {
		t.Fatalf("%d operation events, want 7", len(evs))
	}
	first := decode(t, evs[0].Data)
	for k, want := range map[string]any{"tenant": "lab", "operation": "apply", "result": "started",
		"message": "tofu apply: quota exceeded", "duration": 1.5} {
		if first[k] != want {
			t.Errorf("operation event %s = %v, want %v", k, first[k], want)
		}
	}
	if _, err := time.Parse(time.RFC3339, first["at"].(string)); err != nil {
		t.Errorf("at: %v", err)
	}
}

func TestOperationQueuedWhileDisconnected(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetRefuse(true)
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	l := NewLink(c.Client, newEngine().handle, nil)
	defer l.Close()

	l.Operation(opEvent("lab", "apply", tenant.ResultFailed))
	// The item is queued; let HA refuse the client twice before it comes back.
	testenv.WaitFor(t, 5*time.Second, "two refused connection attempts", func() bool { return fake.Dials() >= 2 })
	fake.SetRefuse(false)
	ctx := waitCtx(t)
	if err := fake.WaitNotifications(ctx, func(n map[string]fakeha.Notification) bool { return len(n) == 1 }); err != nil {
		t.Fatal("failure while HA was down never reached it:", err)
	}
}

func TestOperationNeverBlocks(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetRefuse(true) // HA down the whole time
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	l := NewLink(c.Client, newEngine().handle, nil)
	defer l.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 10*outQueue; i++ {
			l.Operation(opEvent("lab", "apply", tenant.ResultFailed))
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Operation blocked while HA is down")
	}
}
