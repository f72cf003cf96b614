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
