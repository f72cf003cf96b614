package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// LogLine is one line of an operation's log: tofu's -json events and the
// Talos steps the engine takes (the panel's live log). It never holds a
// secret: tofu redacts sensitive values, and Options.Scrub removes the
// registered secrets.
type LogLine struct {
	Tenant    string    `json:"tenant"`
	Operation string    `json:"operation"`
	At        time.Time `json:"at"`
	Source    string    `json:"source"` // "tofu" | "talos" | "engine"
	Level     string    `json:"level"`  // "info" | "warn" | "error"
	Text      string    `json:"text"`
}

// Bounds of what the log keeps per tenant.
const (
	logOperations  = 5    // the running and the last few operations
	logLinesPerRun = 2000 // lines of one operation (the first and the newest kept)
	logFollowerBuf = 256  // a follower slower than this loses lines
)

// oplog keeps the lines of each tenant's recent operations and hands new
// ones to followers.
type oplog struct {
	scrub func(string) string
	mu    sync.Mutex
	runs  map[string][][]LogLine // tenant → operations, oldest first
	subs  map[string]map[chan LogLine]struct{}
}

func newOplog() *oplog {
	return &oplog{scrub: func(s string) string { return s }, runs: map[string][][]LogLine{},
		subs: map[string]map[chan LogLine]struct{}{}}
}

func (l *oplog) add(ln LogLine, start bool) {
	ln.Text = l.scrub(ln.Text)
	l.mu.Lock()
	defer l.mu.Unlock()
	runs := l.runs[ln.Tenant]
	if start || len(runs) == 0 {
		runs = append(runs, nil)
		if len(runs) > logOperations {
			runs = runs[len(runs)-logOperations:]
		}
	}
	cur := runs[len(runs)-1]
	if len(cur) >= logLinesPerRun {
		cur = append(cur[:logLinesPerRun/2], cur[len(cur)-logLinesPerRun/2+1:]...)
	}
	runs[len(runs)-1] = append(cur, ln)
	l.runs[ln.Tenant] = runs
	for ch := range l.subs[ln.Tenant] {
		select {
		case ch <- ln:
		default: // a follower that does not keep up loses lines, never blocks the engine
		}
	}
}

func (l *oplog) begin(tenantName, op string, at time.Time) {
	l.add(LogLine{Tenant: tenantName, Operation: op, At: at, Source: "engine", Level: "info", Text: op + " started"}, true)
}

func (l *oplog) end(tenantName, op string, result tenant.Result, msg string, at time.Time) {
	level := "info"
	if result != tenant.ResultSucceeded {
		level = "error"
	}
	l.add(LogLine{Tenant: tenantName, Operation: op, At: at, Source: "engine", Level: level,
		Text: fmt.Sprintf("%s %s: %s", op, result, msg)}, false)
}

// line adds a line of the engine's own (a Talos step).
func (l *oplog) line(tenantName, op, source, level, text string) {
	l.add(LogLine{Tenant: tenantName, Operation: op, At: time.Now(), Source: source, Level: level, Text: text}, false)
}

// tofu adds an event of tofu's -json stream (versions and outputs are not
// worth a line).
func (l *oplog) tofu(tenantName, op string, ev tofu.Event) {
	if ev.Message == "" || ev.Type == "version" || ev.Type == "outputs" {
		return
	}
	level := ev.Level
	if level == "" {
		level = "info"
	}
	at := ev.Time
	if at.IsZero() {
		at = time.Now()
	}
	l.add(LogLine{Tenant: tenantName, Operation: op, At: at, Source: "tofu", Level: level,
		Text: strings.TrimSpace(ev.Message)}, false)
}

// lines returns a tenant's kept lines, oldest first.
func (l *oplog) lines(tenantName string) []LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogLine
	for _, run := range l.runs[tenantName] {
		out = append(out, run...)
	}
	return out
}

// follow streams a tenant's new lines until ctx ends.
func (l *oplog) follow(ctx context.Context, tenantName string) <-chan LogLine {
	ch := make(chan LogLine, logFollowerBuf)
	l.mu.Lock()
	if l.subs[tenantName] == nil {
		l.subs[tenantName] = map[chan LogLine]struct{}{}
	}
	l.subs[tenantName][ch] = struct{}{}
	l.mu.Unlock()
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		delete(l.subs[tenantName], ch)
		if len(l.subs[tenantName]) == 0 {
			delete(l.subs, tenantName)
		}
		l.mu.Unlock()
		close(ch)
	})
	return ch
}

// forget drops a tenant's lines.
func (l *oplog) forget(tenantName string) {
	l.mu.Lock()
	delete(l.runs, tenantName)
	l.mu.Unlock()
}
