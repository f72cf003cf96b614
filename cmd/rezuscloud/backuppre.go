package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/control"
)

// cmdBackupPre is the add-on's backup_pre (config.yaml): before the
// Supervisor copies the add-on's data it asks the running add-on, over its
// control socket, for a fresh etcd snapshot of every running cluster and
// waits for them within a bound. It always exits 0: a Home Assistant
// backup must not fail because a cluster is down, and the snapshots taken
// before stay in the backup.
func cmdBackupPre(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("backup-pre", stderr)
	cfgPath := fs.String("config", "", "TOML configuration `file` of a rezuscloud outside the Supervisor (its data_dir holds the socket); default: the add-on's "+control.AddonSocket)
	wait := fs.Duration("wait", control.DefaultBound, "how long to wait for the snapshots")
	if err := parse(fs, args); err != nil {
		return err
	}
	path := control.AddonSocket
	if *cfgPath != "" {
		cfg, err := config.LoadFile(*cfgPath)
		if err != nil {
			fmt.Fprintf(stdout, "rezuscloud backup-pre: %v; no fresh etcd snapshots, the backup carries the last ones taken\n", err)
			return nil
		}
		path = control.SocketPath(cfg.DataDir, false)
	}
	ctx, cancel := context.WithTimeout(ctx, *wait+30*time.Second)
	defer cancel()
	rep, err := control.Ask(ctx, path, *wait)
	if err != nil {
		fmt.Fprintf(stdout, "rezuscloud backup-pre: %v; no fresh etcd snapshots, the backup carries the last ones taken\n", err)
		return nil
	}
	if len(rep.Results) == 0 {
		fmt.Fprintln(stdout, "rezuscloud backup-pre: no clusters")
	}
	for _, r := range rep.Results {
		line := fmt.Sprintf("rezuscloud backup-pre: %s: %s", r.Tenant, r.Status)
		switch {
		case r.File != "":
			line += ": " + r.File
		case r.Message != "":
			line += ": " + r.Message
		}
		if r.Kept != "" {
			line += "; the backup carries " + r.Kept
		}
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintf(stdout, "rezuscloud backup-pre: done in %s\n", rep.Took.Round(time.Millisecond))
	return nil
}
