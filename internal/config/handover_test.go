package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHandOverPassphrase walks a user through the one-time handover of a
// generated passphrase: the copy appears once (0600), the Problem stays
// while it is there and never holds the passphrase, a deleted copy is not
// written again, a typo in the option is named, and the option holding the
// same passphrase removes the copy.
func TestHandOverPassphrase(t *testing.T) {
	cfg := Default()
	cfg.DataDir, cfg.ConfigDir = t.TempDir(), t.TempDir()
	pass, created, err := StatePassphrase(cfg.DataDir, "")
	if err != nil || !created {
		t.Fatal(err, created)
	}
	cp := filepath.Join(cfg.ConfigDir, PassphraseCopy)
	noSecret := func(h Handover) {
		t.Helper()
		if strings.Contains(h.Problem, pass.Reveal()) {
			t.Fatal("the Problem holds the passphrase")
		}
	}

	h, err := HandOverPassphrase(cfg, pass)
	if err != nil || h.Wrote != cp || !strings.Contains(h.Problem, PassphraseCopy) {
		t.Fatalf("first start: %+v %v", h, err)
	}
	noSecret(h)
	fi, err := os.Stat(cp)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("copy: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(cp); strings.TrimSpace(string(b)) != pass.Reveal() {
		t.Fatal("the copy is not the passphrase")
	}

	// a restart with the copy still there: the Problem stays, nothing new
	if h, err = HandOverPassphrase(cfg, pass); err != nil || h.Wrote != "" || h.Problem == "" {
		t.Fatalf("restart: %+v %v", h, err)
	}

	// a typo in the option, copy still there
	typo := cfg
	typo.Tofu.StatePassphrase = pass + "x"
	if h, err = HandOverPassphrase(typo, pass+"x"); err != nil || !strings.Contains(h.Problem, "typo") {
		t.Fatalf("typo: %+v %v", h, err)
	}
	noSecret(h)

	// the option holds it: the copy goes, the Problem too
	set := cfg
	set.Tofu.StatePassphrase = pass
	if h, err = HandOverPassphrase(set, pass); err != nil || h.Removed != cp || h.Problem != "" {
		t.Fatalf("option set: %+v %v", h, err)
	}
	if _, err := os.Stat(cp); !os.IsNotExist(err) {
		t.Fatalf("copy left: %v", err)
	}

	// the user deleted the copy without setting the option: it is not
	// written again, and there is nothing left to ask
	if h, err = HandOverPassphrase(cfg, pass); err != nil || h.Wrote != "" || h.Problem != "" {
		t.Fatalf("after deleting the copy: %+v %v", h, err)
	}
	if _, err := os.Stat(cp); !os.IsNotExist(err) {
		t.Fatal("the copy came back")
	}

	// outside add-on mode nothing is written
	cfg.ConfigDir = ""
	if h, err = HandOverPassphrase(cfg, pass); err != nil || h != (Handover{}) {
		t.Fatalf("standalone: %+v %v", h, err)
	}
}

// TestHandOverMCPToken: in add-on mode a generated MCP token has a 0600
// copy in the config folder while the option is empty; the copy goes once
// the option holds a token of the user's own; outside add-on mode nothing
// is written.
func TestHandOverMCPToken(t *testing.T) {
	tok := Secret("generated-token-0123456789abcdef")
	cfg := Config{DataDir: t.TempDir(), ConfigDir: t.TempDir()}
	cp, err := HandOverMCPToken(cfg, tok)
	if err != nil || cp != filepath.Join(cfg.ConfigDir, MCPTokenCopy) {
		t.Fatalf("copy %q, %v", cp, err)
	}
	data, err := os.ReadFile(cp)
	if err != nil || strings.TrimSpace(string(data)) != tok.Reveal() {
		t.Fatalf("copy holds %q (%v)", data, err)
	}
	if fi, _ := os.Stat(cp); fi.Mode().Perm() != 0o600 {
		t.Errorf("copy mode %v", fi.Mode().Perm())
	}
	cfg.MCP.Token = "the-users-own-token-0123456789ab"
	if cp, err := HandOverMCPToken(cfg, cfg.MCP.Token); err != nil || cp != "" {
		t.Fatalf("with the option set: %q, %v", cp, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.ConfigDir, MCPTokenCopy)); !os.IsNotExist(err) {
		t.Errorf("the copy is still there once the option is set: %v", err)
	}
	out := Config{DataDir: t.TempDir()}
	if cp, err := HandOverMCPToken(out, tok); err != nil || cp != "" {
		t.Errorf("outside add-on mode: %q, %v", cp, err)
	}
}
