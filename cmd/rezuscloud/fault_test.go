package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
