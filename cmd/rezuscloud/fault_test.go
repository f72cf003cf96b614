package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With the tofu binary missing, rezuscloud still comes up, announces its
// devices and shows the problem on the bridge; an Apply fails with a clear
// message instead of the add-on exiting before Home Assistant sees anything
// (fault matrix item 12).
func TestE2ETofuMissing(t *testing.T) {
	e := newEnv(t, envOptions{machines: 2, workers: 1})
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(e.dir, "no-such-dir", "tofu")
	var out []string
	for _, l := range strings.Split(string(cfg), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "binary") {
			l = "binary = \"" + missing + "\""
		}
		out = append(out, l)
	}
	if err := os.WriteFile(e.cfgPath, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start() // availability, the tenant's discovery and state
	bridgeState := base + "/bridge/state"
	e.cap.wait(e.proc, startTimeout, "the bridge shows the problem", func() bool {
		m, ok := e.cap.lastMsg(bridgeState)
		if !ok {
			return false
		}
		var d struct {
			Problem        bool   `json:"problem"`
			ProblemMessage string `json:"problem_message"`
		}
		return json.Unmarshal(m.Payload, &d) == nil && d.Problem && strings.Contains(d.ProblemMessage, "OpenTofu")
	})
	if _, ok := e.cap.lastMsg(e.discTopic(e.nodeID(e.node("workers", 1)))); !ok {
		t.Fatal("the node device was not announced")
	}
	mark := e.cap.mark()
	e.publish(base+"/"+e.opts.tenant+"/apply", "PRESS")
	ev := e.waitOp(mark, "apply")
	if ev.EventType != "failed" || !strings.Contains(ev.Message, "tofu") {
		t.Fatalf("apply without tofu: %s: %s", ev.EventType, ev.Message)
	}
	if e.proc.exited() {
		t.Fatal("rezuscloud exited")
	}
}

// A FIFO in place of assist.json in the data folder (issue 19 item 3): the
// add-on starts, ends promptly on SIGTERM and has logged the file as
// unreadable (assist_expose is off, yet the file is read to withdraw what
// was exposed before). Before, the read blocked on the FIFO for ever and
// the stop waited for it.
func TestE2EAssistStateFIFO(t *testing.T) {
	e := newEnv(t, envOptions{machines: 1, workers: 0})
	if err := os.MkdirAll(e.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(e.dataDir, "assist.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()

	// the Assist keeper reads the file before anything else, also when
	// stopped at once
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.proc.done:
	case <-ctx.Done():
		t.Fatalf("rezuscloud has not exited 60s after SIGTERM with a FIFO at %s", fifo)
	}
	if e.proc.code != 0 {
		t.Fatalf("exit code %d after SIGTERM", e.proc.code)
	}
	if log := e.proc.stderr.String(); !strings.Contains(log, "not a regular file (a FIFO)") || !strings.Contains(log, fifo) {
		t.Errorf("the log does not name %s as not a regular file", fifo)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Errorf("the FIFO was changed: %v %v", fi, err)
	}
}
