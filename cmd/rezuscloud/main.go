// Command rezuscloud runs Talos Kubernetes clusters from Home Assistant.
// It only parses flags and wires the internal packages together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// errUsage marks a usage error: exit status 2.
var errUsage = errors.New("usage")

const usage = `rezuscloud runs Talos Kubernetes clusters from Home Assistant.

Usage:
  rezuscloud run      [--config FILE]            the long-running add-on (default)
  rezuscloud demo     [--nodes N] [--mqtt URL]   everything on embedded defaults
  rezuscloud validate FILE...                    check tenant files
  rezuscloud render   --tenant FILE --out DIR    write main.tf.json and Talos configs
  rezuscloud backup-pre [--config FILE]          fresh etcd snapshots before a Home Assistant backup (always exits 0)
  rezuscloud state copy --from DIR|URL --to DIR|URL  move the state between a data folder and PostgreSQL
  rezuscloud version

"rezuscloud COMMAND -h" lists the flags of a command.
`

func main() {
	// every file rezuscloud and its tofu create is private: state, plans,
	// secrets, kubeconfigs (the runner also strips group and world bits
	// after each tofu command)
	syscall.Umask(0o077)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = cmdRun(ctx, args, stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, args, stdout, stderr)
	case "validate":
		err = cmdValidate(args, stdout, stderr)
	case "render":
		err = cmdRender(ctx, args, stdout, stderr)
	case "backup-pre":
		err = cmdBackupPre(ctx, args, stdout, stderr)
	case "state":
		err = cmdState(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "rezuscloud", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "rezuscloud: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		return 2
	case errors.Is(err, errProblems):
		return 1
	default:
		fmt.Fprintln(stderr, "rezuscloud:", err)
		return 1
	}
}

// newFlags returns a flag set that reports usage errors to stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rezuscloud "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses flags, turning a bad flag into errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
