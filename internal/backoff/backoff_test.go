package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		p       Policy
		attempt int
		lo, hi  time.Duration
	}{
		{"first", Policy{Initial: 100 * ms, Max: time.Second}, 0, 100 * ms, 100 * ms},
		{"doubles", Policy{Initial: 100 * ms, Max: time.Second}, 2, 400 * ms, 400 * ms},
		{"capped", Policy{Initial: 100 * ms, Max: time.Second}, 10, time.Second, time.Second},
		{"huge attempt stays capped", Policy{Initial: 100 * ms, Max: time.Second}, 1 << 20, time.Second, time.Second},
		{"no cap", Policy{Initial: ms}, 10, 1024 * ms, 1024 * ms},
		{"zero initial is a millisecond", Policy{}, 0, ms, ms},
		{"jitter within bounds", Policy{Initial: 100 * ms, Max: time.Second, Jitter: 0.2}, 1, 160 * ms, 200 * ms},
		{"jitter never exceeds Max", Policy{Initial: 100 * ms, Max: time.Second, Jitter: 0.5}, 10, 500 * ms, time.Second},
		{"jitter above 1 is clamped", Policy{Initial: 100 * ms, Jitter: 5}, 0, ms, 100 * ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 {
				if d := tc.p.Next(tc.attempt); d < tc.lo || d > tc.hi {
					t.Fatalf("Next(%d) = %v, want in [%v, %v]", tc.attempt, d, tc.lo, tc.hi)
				}
			}
		})
	}
}

func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}
