package logging

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
)

const testKey = `-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7secretkeymaterial
-----END PRIVATE KEY-----`

func TestSecretsNeverLogged(t *testing.T) {
	var out bytes.Buffer
	l, err := New("debug", &out)
	if err != nil {
		t.Fatal(err)
	}
	const pass = "correct-horse-battery-staple-42"
	l.Redactor.Add(pass, testKey)
	l.Info("starting with "+pass, zap.String("passphrase", pass))
	l.Debug("key", zap.String("private_key", testKey), zap.Any("nested", map[string]string{"k": testKey}))
	l.Warn("failed", zap.Error(errors.New("auth with "+pass+" refused")))
	// a PEM block nobody registered is scrubbed too
	l.Info("cert dump", zap.String("ca", "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"))
	got := out.String()
	for _, secret := range []string{pass, "secretkeymaterial", "abc\\n"} {
		if strings.Contains(got, secret) {
			t.Errorf("log contains %q:\n%s", secret, got)
		}
	}
	if strings.Count(got, "\n") != 4 || !strings.Contains(got, "[redacted]") || !strings.Contains(got, "[redacted PRIVATE KEY]") {
		t.Errorf("unexpected log:\n%s", got)
	}
}

func TestLevel(t *testing.T) {
	var out bytes.Buffer
	l, err := New("warn", &out)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	if err := l.SetLevel("debug"); err != nil {
		t.Fatal(err)
	}
	l.Debug("shown")
	if strings.Contains(out.String(), "hidden") || !strings.Contains(out.String(), "shown") {
		t.Fatalf("levels not applied:\n%s", out.String())
	}
	if err := l.SetLevel("loud"); err == nil {
		t.Fatal("bad level accepted")
	}
	if _, err := New("loud", &out); err == nil {
		t.Fatal("bad level accepted")
	}
}

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{{"debug", true}, {"info", true}, {"warn", true}, {"error", true}, {"", false}, {"WARN", false}, {"dpanic", false}, {"loud", false}} {
		if _, err := ParseLevel(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParseLevel(%q) = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}
