package wsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
)

// BenchmarkRequestRoundTrip: HA fires rezuscloud_request (as an automation
// would), the link runs the handler and fires rezuscloud_response; the clock
// stops when HA has the response with the request's transaction.
func BenchmarkRequestRoundTrip(b *testing.B) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	opts := testOptions(fake.URL, testToken)
	opts.PingInterval = time.Minute
	c := startClient(b, fake, opts)
	l := NewLink(c.Client, newEngine().handle, nil)
	defer l.Close()
	ctx := waitCtx(b)
	if err := fake.WaitSubscribers(ctx, EventRequest, 1); err != nil {
		b.Fatal(err)
	}
	responses, cancel := fake.Listen(EventResponse, 16)
	defer cancel()

	for i := 0; b.Loop(); i++ {
		tx := fmt.Sprint("tx-", i)
		if err := fake.Fire(EventRequest, map[string]any{"action": "scale", "tenant": "lab", "group": "workers",
			"count": i % 100, "transaction": tx}); err != nil {
			b.Fatal(err)
		}
		select {
		case ev := <-responses:
			var r struct{ Transaction string }
			if err := json.Unmarshal(ev.Data, &r); err != nil || r.Transaction != tx {
				b.Fatalf("response %s for %s", ev.Data, tx)
			}
		case <-ctx.Done():
			b.Fatal("no response")
		}
	}
}

// BenchmarkScriptRoundTrip: a second WebSocket client plays the HA script:
// it fires rezuscloud_request with fire_event and waits for the matching
// rezuscloud_response on its own subscription (two clients, both through HA).
func BenchmarkScriptRoundTrip(b *testing.B) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	opts := testOptions(fake.URL, testToken)
	opts.PingInterval = time.Minute
	addon := startClient(b, fake, opts)
	l := NewLink(addon.Client, newEngine().handle, nil)
	defer l.Close()
	script := startClient(b, fake, opts)
	responses := make(chan json.RawMessage, 16)
	script.Subscribe(EventResponse, func(ev json.RawMessage) { responses <- ev })
	ctx := waitCtx(b)
	if err := fake.WaitSubscribers(ctx, EventRequest, 1); err != nil {
		b.Fatal(err)
	}
	if err := fake.WaitSubscribers(ctx, EventResponse, 1); err != nil {
		b.Fatal(err)
	}
	if err := script.WaitConnected(ctx); err != nil {
		b.Fatal(err)
	}

	for i := 0; b.Loop(); i++ {
		tx := fmt.Sprint("tx-", i)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := script.FireEvent(rctx, EventRequest, map[string]any{"action": "scale", "tenant": "lab",
			"group": "workers", "count": i % 100, "transaction": tx})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		select {
		case ev := <-responses:
			var e struct {
				Data struct{ Transaction string }
			}
			if err := json.Unmarshal(ev, &e); err != nil || e.Data.Transaction != tx {
				b.Fatalf("response %s for %s", ev, tx)
			}
		case <-ctx.Done():
			b.Fatal("no response")
		}
	}
}
