package testenv

import (
	"testing"
	"time"
)

// WaitFor is the tests' one wait-for helper: it checks cond every few
// milliseconds until it holds, and fails tb with what when d passes first.
// It waits for an event, never for time, so a slow machine only makes a
// test slower, not red.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}
