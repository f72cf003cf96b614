package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/state/postgres"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestSharedHealth: a standby is healthy while the store answers (it must
// not be restarted for not leading), a leader is what its check says, and
// a standby whose store is gone is not healthy.
func TestSharedHealth(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := postgres.Open(ctx, pg.URL, pg.Password, "a", "health-test-passphrase-0123", postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h := &sharedHealth{store: store}
	if err := h.Check(); err != nil || h.Busy() != "" {
		t.Fatalf("standby with a store that answers: %v %q", err, h.Busy())
	}
	down := errors.New("not connected to the MQTT broker")
	h.lead(func() error { return down }, func() string { return "apply lab" })
	if err := h.Check(); !errors.Is(err, down) || h.Busy() != "apply lab" {
		t.Fatalf("leader: %v %q, want its own check", err, h.Busy())
	}
	h.lead(nil, nil)
	pg.Stop()
	if err := h.Check(); err == nil || !strings.Contains(err.Error(), "standing by, but the state store does not answer") {
		t.Fatalf("standby without its store: %v", err)
	}
}
