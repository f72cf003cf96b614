package tofu

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func parseFile(t testing.TB, name string) ([]Event, *observer.ObservedLogs) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	var evs []Event
	if err := ParseStream(bytes.NewReader(data), zap.New(core), func(ev Event) { evs = append(evs, ev) }); err != nil {
		t.Fatal(err)
	}
	return evs, logs
}

func TestParsePlan(t *testing.T) {
	evs, logs := parseFile(t, "plan.jsonl")
	if logs.Len() != 3 {
		t.Errorf("non-JSON lines logged = %d, want 3 (the CLI config warning box)", logs.Len())
	}
	var s stream
	for _, ev := range evs {
		s.handle(ev, RunOptions{})
	}
	if len(evs) != 6 || evs[0].Type != EventVersion {
		t.Fatalf("events = %d (%v)", len(evs), evs[0].Type)
	}
	if len(s.planned) != 3 || s.planned[0].Resource.Addr != "terraform_data.controlplane[1]" || s.planned[0].Action != "create" {
		t.Errorf("planned = %+v", s.planned)
	}
	if s.planned[0].Resource.ResourceType != "terraform_data" || string(s.planned[0].Resource.ResourceKey) != "1" {
		t.Errorf("resource = %+v", s.planned[0].Resource)
	}
	if s.summary == nil || s.summary.Add != 3 || s.summary.Operation != "plan" || s.summary.Empty() {
		t.Errorf("summary = %+v", s.summary)
	}
	if o := s.outputs["secret"]; !o.Sensitive || o.Action != "create" {
		t.Errorf("outputs = %+v", s.outputs)
	}
	if s.streamPlanned != 3 {
		t.Errorf("planned weight = %d", s.streamPlanned)
	}
	if evs[1].Time.IsZero() || evs[1].Level != "info" {
		t.Errorf("meta = %+v", evs[1])
	}
}

func TestParseApplyProgress(t *testing.T) {
	evs, logs := parseFile(t, "apply.jsonl")
	if logs.Len() != 0 {
		t.Errorf("logged %d lines", logs.Len())
	}
	s := stream{initialPlanned: 3}
	var prog []Progress
	for _, ev := range evs {
		s.handle(ev, RunOptions{OnProgress: func(p Progress) { prog = append(prog, p) }})
	}
	if len(prog) != 2 || prog[0].Completed != 0 || prog[1].Completed != 1 || prog[1].Planned != 3 {
		t.Errorf("progress = %+v", prog)
	}
	c := evs[2]
	if c.Type != EventApplyComplete || c.IDKey != "id" || c.IDValue != "2b4856c3-1240-7b87-3a32-7f6f2d0b2357" {
		t.Errorf("apply_complete = %+v", c)
	}
	if p := evs[3]; p.Type != EventApplyProgress || p.Elapsed != 10 {
		t.Errorf("apply_progress = %+v", p)
	}
	if p := evs[4]; p.Provisioner != "local-exec" || p.Output != "working" {
		t.Errorf("provision_progress = %+v", p)
	}
	r := s.result()
	if r.Summary == nil || r.Summary.Add != 3 || r.Summary.Operation != "apply" {
		t.Errorf("summary = %+v", r.Summary)
	}
	if string(r.Outputs["bootstrap_ip"].Value) != `"10.0.0.10"` || r.Outputs["secret"].Value != nil {
		t.Errorf("outputs = %+v", r.Outputs)
	}
}

func TestParseFailedApply(t *testing.T) {
	evs, _ := parseFile(t, "apply-failed.jsonl")
	var s stream
	for _, ev := range evs {
		s.handle(ev, RunOptions{})
	}
	if s.summary != nil {
		t.Errorf("a failed apply has no summary, got %+v", s.summary)
	}
	if len(s.errors) != 1 {
		t.Fatalf("errors = %+v", s.errors)
	}
	d := s.errors[0]
	if d.Summary != "local-exec provisioner error" || d.Address != "terraform_data.fail" || d.Range.Start.Line != 11 {
		t.Errorf("diagnostic = %+v", d)
	}
	if got := d.String(); !strings.Contains(got, "exit status 3") || !strings.Contains(got, "(terraform_data.fail, main.tf.json:11)") {
		t.Errorf("String() = %q", got)
	}
	if evs[4].Type != EventApplyErrored || evs[4].Level != "info" {
		t.Errorf("apply_errored = %+v", evs[4])
	}
}

func TestParseMisc(t *testing.T) {
	evs, logs := parseFile(t, "misc.jsonl")
	if logs.Len() != 1 || logs.All()[0].ContextMap()["line"] != "not json at all" {
		t.Errorf("logs = %+v", logs.All())
	}
	if len(evs) != 6 {
		t.Fatalf("events = %d", len(evs))
	}
	if evs[0].Type != EventLog || !strings.Contains(evs[0].Message, "Interrupt received") {
		t.Errorf("log = %+v", evs[0])
	}
	if evs[2].Diagnostic.Severity != "warning" || evs[3].Diagnostic.Range != nil {
		t.Errorf("diagnostics = %+v %+v", evs[2].Diagnostic, evs[3].Diagnostic)
	}
	if evs[4].Type != EventRefreshStart || evs[4].IDValue != "ebed0c1a" {
		t.Errorf("refresh = %+v", evs[4])
	}
	if evs[5].Type != EventLog { // init lines carry no type
		t.Errorf("untyped = %+v", evs[5])
	}
}

func TestLineWriterSplitsWrites(t *testing.T) {
	data, _ := os.ReadFile(filepath.Join("testdata", "apply.jsonl"))
	var n int
	w := &lineWriter{log: zap.NewNop(), fn: func(Event) { n++ }}
	for i := 0; i < len(data); i += 7 { // arbitrary chunking
		w.Write(data[i:min(i+7, len(data))])
	}
	w.flush()
	if n != 7 {
		t.Errorf("events = %d, want 7", n)
	}
}

func BenchmarkParseStream(b *testing.B) {
	var all []byte
	for _, f := range []string{"plan.jsonl", "apply.jsonl", "apply-failed.jsonl", "misc.jsonl", "real/plan.jsonl", "real/apply.jsonl", "real/destroy.jsonl"} {
		d, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, d...)
	}
	lines := bytes.Count(all, []byte("\n"))
	b.SetBytes(int64(len(all)))
	b.ReportAllocs()
	for b.Loop() {
		var s stream
		_ = ParseStream(bytes.NewReader(all), zap.NewNop(), func(ev Event) { s.handle(ev, RunOptions{}) })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// Streams recorded from the real tofu 1.12.6 (testdata/real).
func TestParseRecorded(t *testing.T) {
	collect := func(name string, initial int) (*stream, []Progress) {
		evs, logs := parseFile(t, filepath.Join("real", name))
		if logs.Len() != 0 {
			t.Errorf("%s: %d non-JSON lines", name, logs.Len())
		}
		s := &stream{initialPlanned: initial}
		var prog []Progress
		for _, ev := range evs {
			s.handle(ev, RunOptions{OnProgress: func(p Progress) { prog = append(prog, p) }})
		}
		return s, prog
	}
	if s, _ := collect("init.jsonl", 0); len(s.errors) != 0 {
		t.Errorf("init errors = %+v", s.errors)
	}
	s, _ := collect("init-fail.jsonl", 0)
	if len(s.errors) != 1 || s.errors[0].Summary != "Failed to resolve provider packages" || !strings.Contains(s.errors[0].Detail, "example/nope") {
		t.Errorf("init-fail errors = %+v", s.errors)
	}
	s, _ = collect("plan.jsonl", 0)
	if s.summary == nil || s.summary.Add != 2 || s.streamPlanned != 2 {
		t.Errorf("plan = %+v %d", s.summary, s.streamPlanned)
	}
	// apply of a plan file repeats the planned changes, then applies them.
	s, prog := collect("apply.jsonl", 2)
	if last := prog[len(prog)-1]; last.Completed != 2 || last.Planned != 2 || s.summary.Add != 2 {
		t.Errorf("apply progress = %+v", prog)
	}
	// A replace is a delete and a create: two completions.
	s, _ = collect("plan-replace.jsonl", 0)
	if s.streamPlanned != 2 || s.summary.Add != 1 || s.summary.Remove != 1 {
		t.Errorf("plan-replace = %+v %d", s.summary, s.streamPlanned)
	}
	_, prog = collect("apply-replace.jsonl", 2)
	if last := prog[len(prog)-1]; last.Completed != 2 || last.Planned != 2 {
		t.Errorf("apply-replace progress = %+v", prog)
	}
	s, _ = collect("plan-nochange.jsonl", 0)
	if s.summary == nil || !s.summary.Empty() || len(s.planned) != 0 {
		t.Errorf("plan-nochange = %+v", s.summary)
	}
	s, prog = collect("destroy.jsonl", 0)
	if last := prog[len(prog)-1]; last.Completed != 2 || last.Planned != 2 || s.summary.Remove != 2 || s.summary.Operation != "destroy" {
		t.Errorf("destroy = %+v %+v", s.summary, prog)
	}
	data, _ := os.ReadFile(filepath.Join("testdata", "real", "validate.json"))
	if ds := diagnosticsOf(data); len(ds) != 1 || !strings.Contains(ds[0].Detail, `"inputt"`) {
		t.Errorf("validate diagnostics = %+v", ds)
	}
}
