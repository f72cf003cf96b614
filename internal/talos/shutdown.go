package talos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Shutdown powers a running node off through its secure API (the machine
// Shutdown RPC, as `talosctl shutdown` sends it). The node keeps its
// config: powered on again it boots straight back into the cluster.
func Shutdown(ctx context.Context, t Target, talosconfig []byte) error {
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error { return c.Shutdown(ctx) })
	if err != nil {
		return fmt.Errorf("shutdown %s: %w", t, err)
	}
	return nil
}

// WaitGone waits until the node stops answering (its Talos API is down),
// polling every interval; ctx bounds the wait.
func WaitGone(ctx context.Context, t Target, talosconfig []byte, interval time.Duration) error {
	return waitStage(ctx, t, talosconfig, interval, func(s tenant.Stage) bool { return s == tenant.StageUnreachable }, "stop answering")
}

// WaitAnswering waits until the node answers again, in any stage.
func WaitAnswering(ctx context.Context, t Target, talosconfig []byte, interval time.Duration) error {
	return waitStage(ctx, t, talosconfig, interval, func(s tenant.Stage) bool { return s != tenant.StageUnreachable }, "answer")
}

func waitStage(ctx context.Context, t Target, talosconfig []byte, interval time.Duration, done func(tenant.Stage) bool, what string) error {
	if interval <= 0 {
		interval = time.Second
	}
	for {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := Status(sctx, t, talosconfig)
		cancel()
		if err == nil && done(st.Stage) {
			return nil
		}
		if errors.Is(err, ErrCredentials) && what == "answer" {
			return nil // it answers, with an identity of its own
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s did not %s: %w", t, what, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}
