package tofu

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// Error is a failed tofu command. Its message carries what a user can act on
// (the cause and tofu's error diagnostics, summary and detail) and never the
// environment: the passphrase, the backend password and the credentials are
// redacted from everything it shows.
type Error struct {
	Op          string // init, plan, apply, destroy, output, validate
	Tenant      string
	ExitCode    int          // -1 when tofu did not exit on its own
	Diagnostics []Diagnostic // tofu's error diagnostics
	// Stderr is the tail of what tofu wrote to stderr (redacted); shown
	// only when there are no diagnostics.
	Stderr string
	// Lock is the lock holder when the cause is ErrStateLocked.
	Lock *httpstate.LockInfo
	// Causes are the sentinels the failure was classified as (ErrCanceled,
	// ErrStateLocked, ErrDecrypt, ...) and the underlying error.
	Causes []error

	secrets []string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tofu %s %s: ", e.Op, e.Tenant)
	var parts []string
	for _, c := range e.Causes {
		parts = append(parts, c.Error())
	}
	if e.Lock != nil {
		parts = append(parts, fmt.Sprintf("held by %s since %s (lock ID %s; if no tofu runs for this tenant, force-unlock it)",
			orUnknown(e.Lock.Who), e.Lock.Created.Format("2006-01-02 15:04:05Z07:00"), e.Lock.ID))
	}
	seen := map[string]bool{}
	for _, d := range e.Diagnostics {
		if ds := d.String(); !seen[ds] {
			seen[ds] = true
			parts = append(parts, ds)
		}
	}
	if len(e.Diagnostics) == 0 && strings.TrimSpace(e.Stderr) != "" {
		parts = append(parts, strings.TrimSpace(e.Stderr))
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("exit status %d", e.ExitCode))
	}
	b.WriteString(strings.Join(parts, "; "))
	return redact(b.String(), e.secrets)
}

// Unwrap lets errors.Is match the causes.
func (e *Error) Unwrap() []error { return e.Causes }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}

// newError classifies a failure from its diagnostics.
func (w *Workspace) newError(op string, code int, diags []Diagnostic, stderr string, cause error) *Error {
	sec := w.secrets()
	e := &Error{Op: op, Tenant: w.name, ExitCode: code, Stderr: redact(stderr, sec), secrets: sec}
	for i := range diags {
		diags[i].Summary = redact(diags[i].Summary, sec)
		diags[i].Detail = redact(diags[i].Detail, sec)
	}
	e.Diagnostics = diags
	text := ""
	for _, d := range diags {
		text += d.Summary + "\n" + d.Detail + "\n"
	}
	text += stderr
	// tofu shows only the status of a request the backend refused; the
	// server kept why (this instance no longer leads the shared store).
	refusal := w.r.server.TakeRefusal(w.name)
	switch {
	case refusal != nil:
		e.Causes = append(e.Causes, refusal)
	case strings.Contains(text, "already locked"):
		e.Causes = append(e.Causes, ErrStateLocked)
		ctx, cancel := stateContext(context.Background())
		li, ok, err := w.r.states.LockOf(ctx, w.name)
		cancel()
		if err != nil {
			w.r.log.Warn("reading the state lock", zap.String("tenant", w.name), zap.Error(err))
		}
		if ok {
			e.Lock = &li
		}
	case strings.Contains(text, "decryption failed") || strings.Contains(text, "message authentication failed"):
		e.Causes = append(e.Causes, ErrDecrypt)
	case providerFailure(diags):
		e.Causes = append(e.Causes, ErrProvider)
	}
	if w.r.file != nil && w.r.file.Unsaved(w.name) {
		e.Causes = append(e.Causes, ErrStateUnsaved)
	}
	if cause != nil {
		e.Causes = append(e.Causes, cause)
	}
	return e
}

// providerSummaries are the summaries of the diagnostics tofu gives when it
// cannot find, resolve or install a provider (OpenTofu's command/init.go and
// meta_backend.go). A failure whose text merely mentions a provider (a
// syntax error in a provider block, a backend error) is not one of them.
var providerSummaries = map[string]bool{
	"Failed to query available provider packages":  true,
	"Failed to resolve provider packages":          true,
	"Failed to install provider":                   true,
	"Failed to install provider from shared cache": true,
	"Incompatible provider version":                true,
	"Invalid provider registry host":               true,
	"Invalid dependency on built-in provider":      true,
	"Invalid legacy provider address":              true,
	"Required plugins are not installed":           true,
	"Missing required provider":                    true,
}

// providerFailure reports whether an error diagnostic says a provider is
// not available.
func providerFailure(diags []Diagnostic) bool {
	for _, d := range diags {
		if d.Severity == "error" && providerSummaries[strings.TrimPrefix(d.Summary, "Error: ")] {
			return true
		}
	}
	return false
}
