package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/control"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web"
)

// views is a fixed set of views that never changes.
type views []web.View

func (v views) Views() []web.View        { return v }
func (v views) Changed() <-chan struct{} { return nil }

// TestBackupPre: backup-pre reports each cluster and exits 0, also when
// the add-on does not answer.
func TestBackupPre(t *testing.T) {
	dir, err := os.MkdirTemp("", "rc") // a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(cfg, []byte("data_dir = \""+dir+"\"\ntenants_dir = \""+dir+"/tenants\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"backup-pre", "--config", cfg, "--wait", "1s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d without an add-on: %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "does not answer") || !strings.Contains(out.String(), "the backup carries the last ones taken") {
		t.Fatalf("without an add-on: %q", out.String())
	}

	ln, err := control.Listen(control.SocketPath(dir, false))
	if err != nil {
		t.Fatal(err)
	}
	kept := &tenant.BackupInfo{At: time.Now().Add(-time.Hour), File: "etcd-20261202T030000Z.snapshot"}
	src := views{{Name: "lab", Status: tenant.Status{Phase: tenant.PhaseRunning, Backup: kept}},
		{Name: "new", Status: tenant.Status{Phase: tenant.PhaseAbsent}}}
	cmd := func(_ context.Context, r hass.Request) hass.Response {
		return hass.Response{Status: "ok", Data: map[string]any{"queued": true}} // never finishes
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&control.Server{Views: src, Command: cmd}).Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	out.Reset()
	if code := run(context.Background(), []string{"backup-pre", "--config", cfg, "--wait", "200ms"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	for _, want := range []string{"lab: timeout: no snapshot within the time backup_pre has; the backup carries etcd-20261202T030000Z.snapshot",
		"new: skipped: no running cluster (phase absent)", "done in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
