// Package logging builds rezuscloud's zap logger: readable lines for the
// add-on log, a level that can change at run time (the bridge's Log level
// select), and a last line of defence that scrubs secrets from every line
// before it is written, whatever field or message carried them.
package logging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// Levels are the accepted log levels, in the order the UI lists them.
var Levels = []string{"debug", "info", "warn", "error"}

// Logger is a zap logger with its adjustable level and redactor.
type Logger struct {
	*zap.Logger
	Level    zap.AtomicLevel
	Redactor *Redactor
}

// New returns a console logger writing to w at level.
func New(level string, w io.Writer) (*Logger, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	lvl := zap.NewAtomicLevelAt(l)
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeLevel = zapcore.CapitalLevelEncoder
	ec.EncodeCaller = nil
	ec.CallerKey = ""
	ec.ConsoleSeparator = " "
	r := &Redactor{}
	enc := &redactingEncoder{Encoder: zapcore.NewConsoleEncoder(ec), r: r}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return &Logger{Logger: zap.New(core), Level: lvl, Redactor: r}, nil
}

// ParseLevel is the one parser of a log level setting: exactly one of
// Levels (zap's own parser would also take "dpanic", "WARN" and others the
// UI does not offer).
func ParseLevel(level string) (zapcore.Level, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil || !slices.Contains(Levels, level) {
		return 0, fmt.Errorf("%q is not one of %s", level, strings.Join(Levels, ", "))
	}
	return lvl, nil
}

// SetLevel changes the level at run time.
func (l *Logger) SetLevel(level string) error {
	lvl, err := ParseLevel(level)
	if err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	l.Level.SetLevel(lvl)
	return nil
}

// Redactor holds the secret values that must never be written.
type Redactor struct {
	mu      sync.RWMutex
	secrets [][]byte
}

// Add registers secret values (empty and very short ones are ignored: they
// would scrub ordinary words). Their JSON-escaped forms are registered too.
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if len(s) < 6 {
			continue
		}
		r.secrets = append(r.secrets, []byte(s))
		if q, err := json.Marshal(s); err == nil {
			if esc := q[1 : len(q)-1]; !bytes.Equal(esc, []byte(s)) {
				r.secrets = append(r.secrets, esc)
			}
		}
	}
}

// pemBlock matches private keys and certificates, raw or JSON-escaped.
var pemBlock = regexp.MustCompile(`-----BEGIN ([A-Z0-9 ]+)-----(?s:.*?)-----END [A-Z0-9 ]+-----`)

// Scrub replaces every registered secret and every PEM block in b.
func (r *Redactor) Scrub(b []byte) []byte {
	b = pemBlock.ReplaceAll(b, []byte("[redacted $1]"))
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, s := range r.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte("[redacted]"))
		}
	}
	return b
}

// redactingEncoder scrubs each encoded line.
type redactingEncoder struct {
	zapcore.Encoder
	r *Redactor
}

func (e *redactingEncoder) Clone() zapcore.Encoder {
	return &redactingEncoder{Encoder: e.Encoder.Clone(), r: e.r}
}

func (e *redactingEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	buf, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil {
		return nil, err
	}
	clean := e.r.Scrub(buf.Bytes()) // always a copy, never aliasing buf
	buf.Reset()
	buf.Write(clean)
	return buf, nil
}
