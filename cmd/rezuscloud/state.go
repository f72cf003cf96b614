package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/state/postgres"
)

// The environment that gives the copy its secrets: never flags, which
// other users of the machine can read in the process list.
const (
	envStatePassword   = "REZUSCLOUD_STATE_PASSWORD"
	envStatePassphrase = "REZUSCLOUD_STATE_PASSPHRASE"
)

const stateUsage = `Usage:
  rezuscloud state copy --from DIR|URL --to DIR|URL [--config FILE]

Copies the state (tenant records, Talos secrets, OpenTofu state versions,
the etcd backups' index) from a data folder into an empty PostgreSQL store,
or back, refusing a target that is not empty and checking every state
version's checksum. DIR is a data folder (the add-on's is /data); URL is
postgres://role@host:5432/database. Stop every rezuscloud using either side
first.

The PostgreSQL password comes from $` + envStatePassword + ` or the
configuration's [state] password; the state passphrase (which seals the
secrets in PostgreSQL) from $` + envStatePassphrase + `, the configuration's
[tofu] state_passphrase, or the data folder's generated state-passphrase.
`

// cmdState is "rezuscloud state SUBCOMMAND".
func cmdState(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, stateUsage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "copy":
		return cmdStateCopy(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "rezuscloud state: unknown command %q\n\n%s", args[0], stateUsage)
		return errUsage
	}
}

func isURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

func cmdStateCopy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("state copy", stderr)
	from := fs.String("from", "", "the source: a data `folder` or a postgres:// URL")
	to := fs.String("to", "", "the target (empty): a data `folder` or a postgres:// URL")
	cfgPath := fs.String("config", "", "TOML configuration `file` to take [state] password, [state] instance and [tofu] state_passphrase from")
	wait := fs.Duration("wait", 30*time.Second, "how long to try to reach PostgreSQL")
	fs.Usage = func() { fmt.Fprint(stderr, stateUsage); fs.PrintDefaults() }
	if err := parse(fs, args); err != nil {
		return err
	}
	if *from == "" || *to == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if isURL(*from) == isURL(*to) {
		return fmt.Errorf("state copy: one side must be a data folder and the other a postgres:// URL")
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.LoadFile(*cfgPath); err != nil {
			return err
		}
	}
	dir, url := *from, *to
	if isURL(*from) {
		dir, url = *to, *from
	}
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		dir = abs
	}
	password := os.Getenv(envStatePassword)
	if password == "" {
		password = cfg.State.Password.Reveal()
	}
	passphrase, err := copyPassphrase(cfg, dir)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	store, err := postgres.Open(octx, url, password, cfg.State.InstanceName()+"-copy", passphrase, postgres.Options{
		OnRetry: func(attempt int, err error, wait time.Duration) {
			fmt.Fprintf(stderr, "rezuscloud state copy: %v; trying again in %s\n", err, wait.Round(time.Millisecond))
		}})
	if err != nil {
		return fmt.Errorf("state copy: %w", err)
	}
	defer store.Close()
	start := time.Now()
	var snap *state.Snapshot
	if isURL(*from) {
		if snap, err = store.Export(ctx); err != nil {
			return fmt.Errorf("state copy: %w", err)
		}
		missing, err := state.WriteDir(dir, snap)
		if err != nil {
			return fmt.Errorf("state copy: %w", err)
		}
		for _, b := range missing {
			fmt.Fprintf(stdout, "rezuscloud state copy: tenant %s: etcd backup %s is in the index but not in %s (the snapshot files are not kept in PostgreSQL: copy them there)\n",
				b.Tenant, b.File, filepath.Join(dir, "backups", b.Tenant))
		}
	} else {
		if snap, err = state.ReadDir(dir); err != nil {
			return fmt.Errorf("state copy: %w", err)
		}
		if err := importLed(ctx, store, snap); err != nil {
			return fmt.Errorf("state copy: %w", err)
		}
	}
	tenants, records, secrets, states, backups := snap.Counts()
	fmt.Fprintf(stdout, "rezuscloud state copy: %s → %s: %d tenants (%d records, %d secrets, %d state versions checked, %d backups indexed) in %s\n",
		describeSide(*from, store), describeSide(*to, store), tenants, records, secrets, states, backups, time.Since(start).Round(time.Millisecond))
	return nil
}

// importLed imports under a leadership of its own, so that no instance
// writes the store during the copy; an instance that leads it now is
// refused rather than waited for.
func importLed(ctx context.Context, store *postgres.Store, snap *state.Snapshot) error {
	empty, err := store.Empty(ctx)
	if err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("%w: postgres://%s already holds state", state.ErrNotEmpty, store.Where())
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := store.Campaign(lctx)
	if err != nil {
		if errors.Is(lctx.Err(), context.DeadlineExceeded) {
			ms, _ := store.Members(ctx)
			leader := "another instance"
			for _, m := range ms {
				if m.Leader {
					leader = "instance " + m.Instance
				}
			}
			return fmt.Errorf("%s leads postgres://%s: stop it before copying into the store", leader, store.Where())
		}
		return err
	}
	defer l.Resign(context.Background())
	return store.Writer(l.Epoch()).Import(ctx, snap)
}

func describeSide(s string, store *postgres.Store) string {
	if isURL(s) {
		return "postgres://" + store.Where()
	}
	return s
}

// copyPassphrase is the state passphrase: the environment's, the
// configuration's, or the one generated into the data folder (read, never
// created here).
func copyPassphrase(cfg config.Config, dir string) (string, error) {
	if p := os.Getenv(envStatePassphrase); p != "" {
		return p, nil
	}
	if p := cfg.Tofu.StatePassphrase.Reveal(); p != "" {
		return p, nil
	}
	for _, d := range []string{dir, cfg.DataDir} {
		b, err := safefile.Read(filepath.Join(d, config.PassphraseFile), 4<<10)
		if err == nil {
			if p := strings.TrimSpace(string(b)); len(p) >= 16 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("state copy: no state passphrase: set $%s (or [tofu] state_passphrase with --config); it seals the secrets in PostgreSQL, and must be the one the instances use", envStatePassphrase)
}
