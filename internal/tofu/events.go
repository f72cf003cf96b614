package tofu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
)

// EventType is the "type" of one line of tofu's machine-readable UI
// (`-json`, UI format 1.2).
type EventType string

// The event types callers act on. Types not listed here are still delivered
// with their raw type and message.
const (
	EventVersion           EventType = "version"
	EventLog               EventType = "log"
	EventDiagnostic        EventType = "diagnostic"
	EventPlannedChange     EventType = "planned_change"
	EventResourceDrift     EventType = "resource_drift"
	EventChangeSummary     EventType = "change_summary"
	EventOutputs           EventType = "outputs"
	EventApplyStart        EventType = "apply_start"
	EventApplyProgress     EventType = "apply_progress"
	EventApplyComplete     EventType = "apply_complete"
	EventApplyErrored      EventType = "apply_errored"
	EventRefreshStart      EventType = "refresh_start"
	EventRefreshComplete   EventType = "refresh_complete"
	EventProvisionStart    EventType = "provision_start"
	EventProvisionProgress EventType = "provision_progress"
	EventProvisionComplete EventType = "provision_complete"
	EventProvisionErrored  EventType = "provision_errored"
)

// Event is one parsed line of the `-json` stream. Which of the optional
// fields are set depends on Type: Resource and Action for planned_change and
// the apply_*/refresh_*/provision_* hooks, Diagnostic for diagnostic, Changes
// for change_summary, Outputs for outputs. Lines without a type (tofu init
// prints those) come out as EventLog.
type Event struct {
	Type    EventType
	Level   string // "info", "warn", "error"
	Message string
	Time    time.Time

	Resource *Resource
	Action   string // create, update, replace, delete, read, noop
	Reason   string // planned_change: why (e.g. "cannot_update")
	IDKey    string
	IDValue  string
	Elapsed  float64 // seconds, apply_progress/apply_complete/apply_errored

	Provisioner string // provision_*
	Output      string // provision_progress: a line the provisioner printed

	Diagnostic *Diagnostic
	Changes    *ChangeSummary
	Outputs    map[string]OutputEvent
}

// Resource names the resource instance an event is about.
type Resource struct {
	Addr         string          `json:"addr"`
	Module       string          `json:"module"`
	Resource     string          `json:"resource"`
	Provider     string          `json:"implied_provider"`
	ResourceType string          `json:"resource_type"`
	ResourceName string          `json:"resource_name"`
	ResourceKey  json.RawMessage `json:"resource_key,omitempty"` // a number, a string or null
}

// Diagnostic is an error or warning tofu reports.
type Diagnostic struct {
	Severity string `json:"severity"` // "error" or "warning"
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	Address  string `json:"address,omitempty"`
	Range    *Range `json:"range,omitempty"`
}

// Range is where in the configuration a diagnostic points.
type Range struct {
	Filename string `json:"filename"`
	Start    Pos    `json:"start"`
	End      Pos    `json:"end"`
}

// Pos is a position in a configuration file.
type Pos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
	Byte   int `json:"byte"`
}

// String renders a diagnostic as "summary: detail (address, file:line)".
func (d Diagnostic) String() string {
	s := d.Summary
	if d.Detail != "" {
		s += ": " + d.Detail
	}
	var where []byte
	if d.Address != "" {
		where = append(where, d.Address...)
	}
	if d.Range != nil && d.Range.Filename != "" {
		if len(where) > 0 {
			where = append(where, ", "...)
		}
		where = fmt.Appendf(where, "%s:%d", d.Range.Filename, d.Range.Start.Line)
	}
	if len(where) > 0 {
		s += " (" + string(where) + ")"
	}
	return s
}

// ChangeSummary counts what a plan, apply or destroy changes.
type ChangeSummary struct {
	Add       int    `json:"add"`
	Change    int    `json:"change"`
	Import    int    `json:"import"`
	Remove    int    `json:"remove"`
	Forget    int    `json:"forget"`
	Operation string `json:"operation"` // plan, apply, destroy
}

// Empty reports whether nothing is added, changed, removed, imported or
// forgotten.
func (c ChangeSummary) Empty() bool {
	return c.Add == 0 && c.Change == 0 && c.Remove == 0 && c.Import == 0 && c.Forget == 0
}

// OutputEvent is one output in an "outputs" event. After a plan it carries
// the planned Action; after an apply the Value (omitted when sensitive).
type OutputEvent struct {
	Sensitive bool            `json:"sensitive"`
	Action    string          `json:"action,omitempty"`
	Type      json.RawMessage `json:"type,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
}

// wireEvent is the JSON shape of a UI line.
type wireEvent struct {
	Level     string    `json:"@level"`
	Message   string    `json:"@message"`
	Timestamp time.Time `json:"@timestamp"`
	Type      EventType `json:"type"`

	Hook *struct {
		Resource    *Resource `json:"resource"`
		Action      string    `json:"action"`
		IDKey       string    `json:"id_key"`
		IDValue     string    `json:"id_value"`
		Elapsed     float64   `json:"elapsed_seconds"`
		Provisioner string    `json:"provisioner"`
		Output      string    `json:"output"`
	} `json:"hook"`
	Change *struct {
		Resource *Resource `json:"resource"`
		Action   string    `json:"action"`
		Reason   string    `json:"reason"`
	} `json:"change"`
	Diagnostic *Diagnostic            `json:"diagnostic"`
	Changes    *ChangeSummary         `json:"changes"`
	Outputs    map[string]OutputEvent `json:"outputs"`
}

// errNotJSON marks a line that is not a JSON object.
var errNotJSON = errors.New("not a JSON UI line")

// ParseLine decodes one line of the `-json` stream. A line that is not a
// JSON object returns an error; callers log it and go on.
func ParseLine(line []byte) (Event, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return Event{}, errNotJSON
	}
	var w wireEvent
	if err := json.Unmarshal(line, &w); err != nil {
		return Event{}, fmt.Errorf("%w: %v", errNotJSON, err)
	}
	ev := Event{
		Type:       w.Type,
		Level:      w.Level,
		Message:    w.Message,
		Time:       w.Timestamp,
		Diagnostic: w.Diagnostic,
		Changes:    w.Changes,
		Outputs:    w.Outputs,
	}
	if ev.Type == "" {
		ev.Type = EventLog
		if w.Diagnostic != nil {
			ev.Type = EventDiagnostic
		}
	}
	if h := w.Hook; h != nil {
		ev.Resource, ev.Action = h.Resource, h.Action
		ev.IDKey, ev.IDValue, ev.Elapsed = h.IDKey, h.IDValue, h.Elapsed
		ev.Provisioner, ev.Output = h.Provisioner, h.Output
	}
	if c := w.Change; c != nil {
		ev.Resource, ev.Action, ev.Reason = c.Resource, c.Action, c.Reason
	}
	if ev.Type == EventDiagnostic && ev.Diagnostic == nil {
		ev.Diagnostic = &Diagnostic{Severity: w.Level, Summary: w.Message}
	}
	return ev, nil
}

// ParseStream reads `-json` lines from r until EOF and calls fn for each
// event in order. Lines that are not JSON are logged (at warn level, as
// tofu only prints those for problems such as a missing CLI config) and
// skipped. It returns only read errors.
func ParseStream(r io.Reader, log *zap.Logger, fn func(Event)) error {
	if log == nil {
		log = zap.NewNop()
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			handleLine(line, log, fn)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func handleLine(line []byte, log *zap.Logger, fn func(Event)) {
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	ev, err := ParseLine(line)
	if err != nil {
		log.Warn("tofu printed a line that is not JSON", zap.ByteString("line", bytes.TrimSpace(line)))
		return
	}
	fn(ev)
}

// lineWriter is an io.Writer that splits what it is given into lines and
// hands each to handleLine: it is the child's stdout, so the stream is parsed
// as it arrives.
type lineWriter struct {
	buf []byte
	log *zap.Logger
	fn  func(Event)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		handleLine(w.buf[:i], w.log, w.fn)
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) == 0 {
		w.buf = nil // let a large line's buffer go
	}
	return len(p), nil
}

// flush handles a last line without a newline.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		handleLine(w.buf, w.log, w.fn)
		w.buf = nil
	}
}
