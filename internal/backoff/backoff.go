// Package backoff is the one retry schedule of the add-on: exponential
// delays from Initial, doubling up to Max, spread by jitter so that many
// retriers (nodes, reconnecting clients) do not act in lock step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is an exponential schedule. The zero Jitter means no jitter.
type Policy struct {
	Initial time.Duration // delay after the first failure (attempt 0)
	Max     time.Duration // cap of every delay; 0: no cap
	Jitter  float64       // fraction in [0, 1]: the delay is drawn from [d·(1-Jitter), d]
}

// Next returns the delay after attempt (0-based): Initial·2^attempt capped
// at Max, then jittered downwards (so Max is a true cap). It is never below
// a millisecond, so a retry loop never spins.
func (p Policy) Next(attempt int) time.Duration {
	d := max(p.Initial, time.Millisecond)
	for i := 0; i < attempt && (p.Max <= 0 || d < p.Max); i++ {
		d *= 2
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	if j := min(max(p.Jitter, 0), 1); j > 0 {
		d = time.Duration(float64(d) * (1 - j*rand.Float64()))
	}
	return max(d, time.Millisecond)
}

// Sleep waits d or until ctx ends, whichever is first; it returns ctx.Err()
// when ctx ended.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Until calls check until it reports done or fails, waiting between calls
// as p schedules (a zero Policy: 100 ms doubling to 2 s) or until wake
// delivers (nil: never), and returns check's error, or the cause of ctx's
// end wrapped with what check said last. It is the one polling loop of the
// add-on: every wait for something to come true goes through it.
func Until(ctx context.Context, p Policy, wake func() <-chan struct{}, check func(ctx context.Context) (done bool, err error)) error {
	if p.Initial <= 0 {
		p = Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	}
	for attempt := 0; ; attempt++ {
		var w <-chan struct{}
		if wake != nil {
			w = wake() // before the check: a change during it is not missed
		}
		done, err := check(ctx)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(p.Next(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-w:
			attempt = -1 // something changed: look again soon after the next one
		case <-t.C:
		}
		t.Stop()
	}
}
