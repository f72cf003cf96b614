package tofu

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startGroup starts a shell script in its own process group, as the runner
// starts tofu, and records it. The process is reaped in the background (a
// zombie counts as gone anyway) and killed at the end of the test.
func startGroup(t *testing.T, script string) (procRecord, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	rec, err := newProcRecord(cmd.Process.Pid, "apply", []string{"apply"})
	if err != nil {
		t.Fatal(err)
	}
	return rec, done
}

func TestProcRecord(t *testing.T) {
	self, err := newProcRecord(os.Getpid(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !self.alive() {
		t.Fatal("this process is not alive by its own record")
	}
	for name, p := range map[string]procRecord{
		"other start time": {PID: self.PID, StartTime: self.StartTime + 1, BootID: self.BootID},
		"other boot":       {PID: self.PID, StartTime: self.StartTime, BootID: "another-boot"},
		"no such pid":      {PID: 1 << 30, StartTime: 1},
		"init":             {PID: 1},
	} {
		if p.alive() {
			t.Errorf("%s: alive", name)
		}
	}
}

// TestStopOrphan: a recorded process still running is interrupted, killed
// when it ignores SIGINT past the grace period, and waited for; a record
// that names another process (reused pid) signals nothing.
func TestStopOrphan(t *testing.T) {
	ctx := context.Background()
	t.Run("exits on SIGINT", func(t *testing.T) {
		rec, done := startGroup(t, "exec sleep 300")
		stopped, err := stopOrphan(ctx, rec, time.Minute, 10*time.Millisecond)
		if err != nil || !stopped {
			t.Fatalf("stopOrphan = %v, %v", stopped, err)
		}
		if rec.alive() {
			t.Fatal("still alive")
		}
		<-done
	})
	t.Run("ignores SIGINT", func(t *testing.T) {
		rec, done := startGroup(t, "trap '' INT; sleep 300 & wait; sleep 300")
		stopped, err := stopOrphan(ctx, rec, 200*time.Millisecond, 10*time.Millisecond)
		if err != nil || !stopped {
			t.Fatalf("stopOrphan = %v, %v", stopped, err)
		}
		<-done
	})
	t.Run("reused pid", func(t *testing.T) {
		rec, done := startGroup(t, "exec sleep 300")
		other := rec
		other.StartTime++
		stopped, err := stopOrphan(ctx, other, time.Minute, 10*time.Millisecond)
		if err != nil || stopped {
			t.Fatalf("stopOrphan = %v, %v", stopped, err)
		}
		select {
		case <-done:
			t.Fatal("a process the record does not name was stopped")
		default:
		}
		if !rec.alive() {
			t.Fatal("a process the record does not name was stopped")
		}
	})
}
