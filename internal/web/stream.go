package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The pages follow the engine over server-sent events (one stream per
// page: browsers open few connections per origin, and the origin is Home
// Assistant's, shared with its own): "change" when any view changed (the
// page fetches itself again and swaps its live parts), and on a cluster's
// page "reset" (the log so far) and "line" (a new log line). The
// Supervisor's ingress streams a response without Content-Length as it
// comes (X-Accel-Buffering: no).

// sse is an open event stream.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func openSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	// the reconnect delay, and a first byte so that proxies pass the headers on
	_, _ = fmt.Fprint(w, "retry: 2000\n\n")
	_ = s.rc.Flush()
	return s
}

// send writes one event; data is JSON-encoded unless it is a string.
func (s *sse) send(event string, data any) error {
	var b []byte
	switch d := data.(type) {
	case string:
		b = []byte(d)
	default:
		var err error
		if b, err = json.Marshal(d); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// keepAlive is how often an idle stream says something, so that proxies
// do not close it.
const keepAlive = 25 * time.Second

// events streams "change" whenever a view changes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	st := openSSE(w)
	s.follow(r.Context(), st, nil)
}

// follow sends "change" events (at most a few a second) and keep-alives
// until ctx ends; lines, when not nil, are sent as "line" events.
func (s *Server) follow(ctx context.Context, st *sse, lines <-chan LogLine) {
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	changed := s.src.Changed()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = s.src.Changed()
			if debounce == nil {
				debounce = time.After(100 * time.Millisecond)
			}
		case <-debounce:
			debounce = nil
			if st.send("change", "{}") != nil {
				return
			}
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			if st.send("line", jsonLine(l)) != nil {
				return
			}
		case <-ping.C:
			if _, err := fmt.Fprint(st.w, ": ping\n\n"); err != nil || st.rc.Flush() != nil {
				return
			}
		}
	}
}

// logLine is a log line on the wire.
type logLine struct {
	At        string `json:"at"`
	Clock     string `json:"clock"`
	Operation string `json:"op"`
	Source    string `json:"src"`
	Level     string `json:"level"`
	Text      string `json:"text"`
}

func jsonLine(l LogLine) logLine {
	return logLine{At: l.At.UTC().Format(time.RFC3339Nano), Clock: l.At.Local().Format("15:04:05"),
		Operation: l.Operation, Source: l.Source, Level: l.Level, Text: l.Text}
}

// logStream is a cluster page's stream: the log so far ("reset"), then
// its new lines and the changes.
func (s *Server) logStream(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("t")
	if _, ok := s.src.View(name); !ok {
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// follow first, then read what came before: no line falls in between
	// (one may come twice; those are dropped below)
	in := s.src.Follow(ctx, name)
	backlog := tail(s.src.Log(name), maxLogLines)
	st := openSSE(w)
	out := make([]logLine, 0, len(backlog))
	seen := map[logLine]bool{}
	for _, l := range backlog {
		j := jsonLine(l)
		out = append(out, j)
		seen[j] = true
	}
	if st.send("reset", out) != nil {
		return
	}
	lines := make(chan LogLine, 64)
	go func() {
		defer close(lines)
		for l := range in {
			if len(seen) > 0 && seen[jsonLine(l)] {
				continue // read as part of the backlog already
			}
			select {
			case lines <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	s.follow(ctx, st, lines)
}
