package testenv

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	WaitFor(t, 10*time.Second, "three increments", func() bool { return n.Load() == 3 })
	if n.Load() != 3 {
		t.Fatalf("n = %d after WaitFor", n.Load())
	}
}

// TestWaitForTimesOut checks the failure path through a recording TB.
func TestWaitForTimesOut(t *testing.T) {
	rec := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine as it would end a test
		defer close(done)
		WaitFor(rec, 10*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if rec.msg == "" {
		t.Fatal("WaitFor on a condition that never holds did not fail")
	}
}

type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = format
	runtime.Goexit()
}
