// Package tofu runs OpenTofu for rezuscloud: one work dir per tenant under a
// data dir, a CLI config and an environment of its own, `init` only when the
// providers or the backend changed, `plan -out` / `apply <plan>` / `destroy`
// / `output` / `validate`, the `-json` UI stream parsed into typed events, and
// state that tofu encrypts and that a killed tofu or add-on cannot lose.
//
// # Layout under Config.DataDir
//
//	tofurc            the CLI config tofu gets (TF_CLI_CONFIG_FILE): empty, or a copy of Config.CLIConfigFile
//	home/             HOME of tofu and its children
//	plugin-cache/     TF_PLUGIN_CACHE_DIR
//	work/<tenant>/    main.tf.json, .terraform/, tfplan, the running tofu's record and output (0700 dir, 0600 files)
//	state/<tenant>/   the tenant's state versions and lock (package httpstate)
//
// # State and encryption
//
// State lives in an in-process http backend (package httpstate) over files
// under state/: every upload is an atomic new version, the last
// Config.KeepVersions are kept, and the lock is a file, so a lock left behind
// by a killed tofu or a crashed add-on survives a restart and can be seen
// (Runner.Lock) and cleared (Runner.ForceUnlock). The document carries an
// empty `"backend": {"http": {}}`; address and basic-auth credentials (a
// random password per process) go to tofu as TF_HTTP_* env on every command,
// so they are never written anywhere and a new port needs no new `init`.
// When tofu cannot reach the backend (the add-on died mid-apply) it saves
// the state it could not upload as errored.tfstate (encrypted) and leaves
// the lock; the next command shows that lock, and once it is cleared imports
// the file as a new state version before running, but only when it is newer
// than the stored state (same lineage, greater serial). An empty, unreadable,
// older or foreign one is moved aside (kept, timestamped, logged). The state
// store keeps a disk-space reserve that a full disk releases, so the state of
// an apply can still be saved (httpstate.ReserveSize).
//
// With Config.States set (the PostgreSQL store several instances share) the
// server serves that backend instead and no file store is opened: locks,
// Recover and the errored-state import go to it. A write it refuses for good
// (httpstate.ErrRefused: this instance no longer leads) fails the command
// with that error; one it cannot do now (the database is unreachable) is
// retried by tofu for about 30 s (retryEnv).
//
// # A killed add-on
//
// tofu runs in its own process group and outlives a SIGKILL of the add-on;
// it writes into files in the work dir rather than pipes, so it does not die
// of SIGPIPE halfway either. The running tofu is recorded in the work dir
// (ProcessFile: pid, start time, boot id); at start-up Runner.Recover stops
// such an orphan (SIGINT, SIGKILL after the grace period) and waits for it
// before its lock is released and its errored.tfstate looked at.
//
// # Permissions
//
// Everything under the data dir is private: directories 0700, files 0600.
// Files tofu creates itself get its own modes, so group and world bits are
// removed from the work dir, HOME and the plugin cache after every command
// (the process umask of the add-on, 077, is the first line of defence).
//
// Encryption is tofu's own: the runner adds an `encryption` block (pbkdf2 +
// aes_gcm, enforced for state and plan) to the document, whose passphrase is
// the sensitive variable state_passphrase, given as TF_VAR_state_passphrase.
// The state on disk and the plan file are ciphertext; the passphrase is
// written nowhere by the runner. See PrepareDocument.
//
// # Cancellation
//
// Cancelling a command's context (or its Config.Timeout expiring) sends
// SIGINT to tofu's process group (exec.Cmd.Cancel), as a terminal's Ctrl-C
// would: tofu stops its operation, persists state (in-flight resources
// tainted) and unlocks. Only when it has not exited after Config.GracePeriod
// (exec.Cmd.WaitDelay) is it killed, and its group with it;
// a lock our killed tofu left is then released by the runner, since no other
// tofu can hold it.
package tofu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// Defaults.
const (
	DefaultGracePeriod = 2 * time.Minute
	DefaultTimeout     = time.Hour
	DefaultPath        = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// MinPassphrase is tofu's own minimum for pbkdf2 passphrases.
	MinPassphrase = 16
	// PlanFile is the plan's name in a work dir.
	PlanFile = "tfplan"

	initStampFile = ".rezuscloud-init"
)

// Config configures a Runner.
type Config struct {
	// Binary is the tofu executable: a path, or a name looked up in Path.
	Binary string
	// DataDir holds work dirs, state, HOME, plugin cache and CLI config.
	DataDir string
	// CLIConfigFile, when set, is copied as tofu's CLI config (for example a
	// filesystem_mirror of the providers); otherwise tofu gets an empty one.
	// The user's own ~/.terraformrc is never read.
	CLIConfigFile string
	// Passphrase encrypts state and plans (at least 16 characters). A
	// workspace may bring its own.
	Passphrase string
	// Env is added to every command's environment (e.g. OS_* credentials).
	Env map[string]string
	// Path is PATH for tofu and its provisioners (DefaultPath when empty).
	Path string
	// GracePeriod is how long a cancelled tofu gets between SIGINT and
	// SIGKILL (DefaultGracePeriod when 0).
	GracePeriod time.Duration
	// FinishGrace is how long an apply or destroy that is stopped by a
	// shutdown (its context cancelled with ErrShutdown), or that a previous
	// add-on left running (Recover), may run on before it gets SIGINT. An
	// interrupted cloud provider aborts the requests in flight: a server
	// the cloud created but tofu never heard of is a leaked instance and a
	// port "still in use" at the next apply. 0: SIGINT at once.
	FinishGrace time.Duration
	// Timeout limits each command (DefaultTimeout when 0).
	Timeout time.Duration
	// KeepVersions is how many state versions are kept per tenant
	// (httpstate.DefaultKeep when 0).
	KeepVersions int
	// States, when set, is where the tenants' states and locks are kept
	// (the PostgreSQL store's Writer.States()) instead of the data folder's
	// state/. There is no disk-space reserve then (that is the data folder's
	// full-disk handling), and tofu retries a backend that is unavailable
	// for longer (see retryEnv).
	States httpstate.Backend
	// Logger receives non-JSON output lines and lifecycle messages.
	Logger *zap.Logger
	// AllowMissing makes a missing tofu binary no error of New: the runner
	// is made, Problem says what is wrong and every command fails with
	// ErrTofuNotFound (the add-on comes up and shows the problem instead
	// of exiting before Home Assistant sees anything).
	AllowMissing bool
}

// Runner runs tofu for any number of tenants.
type Runner struct {
	cfg       Config
	binary    string
	missing   error // the binary was not found (Config.AllowMissing)
	log       *zap.Logger
	cliConfig string // path of our CLI config
	cliBytes  []byte
	states    httpstate.Backend // what the state server serves
	file      *httpstate.Store  // the data folder's store; nil with Config.States
	server    *httpstate.Server

	mu    sync.Mutex
	locks map[string]*sync.Mutex

	inits atomic.Int64 // `init` runs, for tests
}

// ErrShutdown is the cause a caller cancels a command's context with when
// the add-on stops (not the user): an apply or destroy then gets
// Config.FinishGrace to finish before it is interrupted.
var ErrShutdown = errors.New("rezuscloud is stopping")

// Sentinel causes; a command's *Error matches them with errors.Is.
var (
	ErrTofuNotFound       = errors.New("tofu binary not found")
	ErrPassphraseTooShort = fmt.Errorf("state passphrase must be at least %d characters", MinPassphrase)
	ErrStateLocked        = errors.New("state is locked")
	ErrDecrypt            = errors.New("state cannot be decrypted (wrong passphrase?)")
	ErrProvider           = errors.New("provider not available")
	ErrCanceled           = errors.New("canceled")
	ErrTimeout            = errors.New("timed out")
	ErrKilled             = errors.New("killed after the grace period")
	// ErrStateUnsaved: the data folder was too full to save the state of
	// what tofu did; it is held in memory (httpstate.ErrDiskFull).
	ErrDiskFilled   = errors.New("the data folder filled up while tofu ran: its state was saved once there was room again; free space in the data folder and press Apply")
	ErrStateUnsaved = errors.New("the data folder is full: the state of what tofu just did could not be saved and is held in memory until there is room; free space in the data folder and press Apply (a restart before that loses it)")
)

// New checks the binary and passphrase, prepares DataDir and starts the state
// backend. Close stops it.
func New(cfg Config) (*Runner, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("tofu: no data dir")
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Passphrase != "" {
		if err := checkPassphrase(cfg.Passphrase); err != nil {
			return nil, err
		}
	}
	bin, err := findBinary(cfg.Binary, cfg.Path)
	var missing error
	if err != nil {
		if !cfg.AllowMissing || !errors.Is(err, ErrTofuNotFound) {
			return nil, err
		}
		missing, bin = err, cfg.Binary
		if bin == "" {
			bin = "tofu"
		}
	}
	r := &Runner{cfg: cfg, binary: bin, missing: missing, log: cfg.Logger, locks: map[string]*sync.Mutex{}}
	for _, d := range []string{"", "home", "plugin-cache", "work"} {
		p := filepath.Join(cfg.DataDir, d)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("tofu: %w", err)
		}
		if err := os.Chmod(p, 0o700); err != nil {
			return nil, fmt.Errorf("tofu: %w", err)
		}
	}
	if cfg.CLIConfigFile != "" {
		if r.cliBytes, err = safefile.Read(cfg.CLIConfigFile, maxSmallFile); err != nil {
			return nil, fmt.Errorf("tofu: CLI config: %w", err)
		}
	}
	r.cliConfig = filepath.Join(cfg.DataDir, "tofurc")
	if err := atomicfile.Write(r.cliConfig, r.cliBytes, 0o600); err != nil {
		return nil, fmt.Errorf("tofu: CLI config: %w", err)
	}
	if cfg.States != nil {
		r.states = cfg.States
		r.server, err = httpstate.StartBackend(cfg.States, r.log.Named("state"))
	} else {
		if r.file, err = httpstate.Open(filepath.Join(cfg.DataDir, "state"), cfg.KeepVersions); err != nil {
			return nil, err
		}
		r.states = r.file.Backend()
		r.server, err = httpstate.Start(r.file, r.log.Named("state"))
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// retryEnv is given to tofu when the states are kept in Config.States: its
// http backend retries an answer of 500 (the database is unreachable: a
// restart, a failover) 8 times, waiting 1, 2, 4, then 5 s (exponential,
// capped), about 32 s in all, instead of its default 2 retries within 3 s,
// so that a short outage does not fail an apply whose resources already
// exist. A refusal (4xx: this instance no longer leads) is not retried.
var retryEnv = []string{"TF_HTTP_RETRY_MAX=8", "TF_HTTP_RETRY_WAIT_MIN=1", "TF_HTTP_RETRY_WAIT_MAX=5"}

// stateTimeout bounds the runner's own calls to the state backend, so that
// a lost database cannot hang the report of a failed command or the
// release of a killed tofu's lock.
const stateTimeout = 30 * time.Second

// stateContext is ctx for a call to the state backend: not cancelled with
// ctx (a lock must be released after a cancelled command), but bounded.
func stateContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
}

func findBinary(bin, path string) (string, error) {
	if bin == "" {
		bin = "tofu"
	}
	if !strings.Contains(bin, "/") {
		for _, dir := range filepath.SplitList(path) {
			p := filepath.Join(dir, bin)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
		return "", fmt.Errorf("%w: no %q in PATH %s", ErrTofuNotFound, bin, path)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("%w at %s: %v", ErrTofuNotFound, bin, errors.Unwrap(err))
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w at %s: not an executable file", ErrTofuNotFound, bin)
	}
	return filepath.Abs(bin)
}

func checkPassphrase(p string) error {
	if len(p) < MinPassphrase {
		return fmt.Errorf("tofu: %w (it has %d)", ErrPassphraseTooShort, len(p))
	}
	return nil
}

// Problem is why the runner cannot run tofu (the binary is missing), or nil.
func (r *Runner) Problem() error { return r.missing }

// Close stops the state backend. Commands must have returned.
func (r *Runner) Close(ctx context.Context) error { return r.server.Close(ctx) }

// Binary is the tofu executable in use.
func (r *Runner) Binary() string { return r.binary }

// Store is the data folder's state store (versions, rollback), or nil when
// the states are kept in Config.States.
func (r *Runner) Store() *httpstate.Store { return r.file }

// Lock reports who holds tenant's state lock. Only this process's tofu uses
// the backend, so a lock seen while no command of the tenant runs is stale,
// except right after a restart, while a tofu of the previous process may
// still run: Recover stops that one first.
func (r *Runner) Lock(ctx context.Context, tenant string) (httpstate.LockInfo, bool, error) {
	return r.states.LockOf(ctx, tenant)
}

// ForceUnlock removes tenant's stale lock; id is the holder's, as Lock shows.
func (r *Runner) ForceUnlock(ctx context.Context, tenant, id string) error {
	return r.states.ForceUnlock(ctx, tenant, id)
}

func (r *Runner) tenantLock(name string) *sync.Mutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.locks[name]
	if m == nil {
		m = &sync.Mutex{}
		r.locks[name] = m
	}
	return m
}

// WorkspaceOptions are per-tenant settings.
type WorkspaceOptions struct {
	// Env is added to the Runner's Env (credentials of this tenant's cloud).
	Env map[string]string
	// Passphrase overrides the Runner's.
	Passphrase string
}

// Workspace is one tenant's work dir. Commands on the same tenant run one at
// a time (across all Workspace values of that tenant).
type Workspace struct {
	r          *Runner
	name       string
	dir        string
	env        map[string]string
	passphrase string
	mu         *sync.Mutex
	// applied are the outputs this workspace's last command, a successful
	// apply, reported in its event stream: Output returns them instead of
	// running `output -json` (a second state decryption) again. Any other
	// command clears them.
	applied map[string]*tfjson.StateOutput
}

// Workspace returns tenant's workspace, creating its work dir.
func (r *Runner) Workspace(tenant string, opts WorkspaceOptions) (*Workspace, error) {
	if !httpstate.ValidName(tenant) {
		return nil, fmt.Errorf("tofu: %w %q", httpstate.ErrInvalidName, tenant)
	}
	pass := opts.Passphrase
	if pass == "" {
		pass = r.cfg.Passphrase
	}
	if pass == "" {
		return nil, fmt.Errorf("tofu: workspace %s: no state passphrase", tenant)
	}
	if err := checkPassphrase(pass); err != nil {
		return nil, err
	}
	dir := filepath.Join(r.cfg.DataDir, "work", tenant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tofu: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tofu: %w", err)
	}
	env := map[string]string{}
	for k, v := range r.cfg.Env {
		env[k] = v
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	return &Workspace{r: r, name: tenant, dir: dir, env: env, passphrase: pass, mu: r.tenantLock(tenant)}, nil
}

// Dir is the work dir.
func (w *Workspace) Dir() string { return w.dir }

// Name is the tenant.
func (w *Workspace) Name() string { return w.name }

// WriteConfig writes a rendered document as main.tf.json, atomically and
// 0600, after adding backend, encryption and passphrase variable (see
// PrepareDocument).
func (w *Workspace) WriteConfig(doc []byte) error {
	out, err := PrepareDocument(doc)
	if err != nil {
		return fmt.Errorf("tofu: workspace %s: %w", w.name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return atomicfile.Write(filepath.Join(w.dir, ConfigFile), out, 0o600)
}

// environ builds the command environment from scratch: PATH, HOME, tofu's
// settings, the state backend, the passphrase and the caller's env. Ours
// come last so the caller cannot override them.
func (w *Workspace) environ() []string {
	r := w.r
	var env []string
	keys := make([]string, 0, len(w.env))
	for k := range w.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+w.env[k])
	}
	env = append(env,
		"PATH="+r.cfg.Path,
		"HOME="+filepath.Join(r.cfg.DataDir, "home"),
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		"TF_CLI_CONFIG_FILE="+r.cliConfig,
		"TF_PLUGIN_CACHE_DIR="+filepath.Join(r.cfg.DataDir, "plugin-cache"),
		"TF_VAR_"+PassphraseVariable+"="+w.passphrase,
	)
	env = append(env, r.server.Env(w.name)...)
	if r.file == nil {
		env = append(env, retryEnv...)
	}
	return env
}

// secrets are the strings an error message must never contain.
func (w *Workspace) secrets() []string {
	s := []string{w.passphrase, w.r.server.Password()}
	for _, v := range w.env {
		if len(v) >= 4 {
			s = append(s, v)
		}
	}
	return s
}

// RunOptions observe a command.
type RunOptions struct {
	// OnEvent gets every event of the -json stream, in order.
	OnEvent func(Event)
	// OnProgress gets apply progress: after each apply_start,
	// apply_complete and apply_errored.
	OnProgress func(Progress)
}

// Progress is how far an apply or destroy is.
type Progress struct {
	Completed int // resource changes done
	Planned   int // resource changes planned
	Event     Event
}

// Plan is the result of Workspace.Plan.
type Plan struct {
	// File is the (encrypted) plan file Apply applies.
	File        string
	Summary     ChangeSummary
	Changes     []PlannedChange
	Diagnostics []Diagnostic // warnings
}

// PlannedChange is one resource instance the plan changes.
type PlannedChange struct {
	Address string
	Action  string // create, update, replace, delete, read
	Reason  string
}

// HasChanges reports whether applying the plan would change anything.
func (p *Plan) HasChanges() bool { return !p.Summary.Empty() }

// Planned is the number of resource changes the apply reports as
// apply_complete (a replace is two).
func (p *Plan) Planned() int {
	n := 0
	for _, c := range p.Changes {
		n += changeWeight(c.Action)
	}
	if n == 0 {
		n = p.Summary.Add + p.Summary.Change + p.Summary.Remove
	}
	return n
}

func changeWeight(action string) int {
	switch action {
	case "create", "update", "delete":
		return 1
	case "replace", "create-then-delete", "delete-then-create":
		return 2
	}
	return 0 // read, noop, forget, import-only
}

// Result is what an apply or destroy did.
type Result struct {
	Summary     *ChangeSummary // nil when tofu ended without one (a failure)
	Outputs     map[string]OutputEvent
	Diagnostics []Diagnostic // warnings
}

// Init runs `tofu init` now, whatever the stamp says.
func (w *Workspace) Init(ctx context.Context, opts RunOptions) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.init(ctx, opts)
}

func (w *Workspace) init(ctx context.Context, opts RunOptions) error {
	doc, err := safefile.Read(filepath.Join(w.dir, ConfigFile), maxDocument)
	if err != nil {
		return fmt.Errorf("tofu init %s: no document: %w", w.name, err)
	}
	hash, err := initHash(doc, w.r.cliBytes, w.r.binary)
	if err != nil {
		return err
	}
	stamp := filepath.Join(w.dir, initStampFile)
	_ = os.Remove(stamp)
	w.r.inits.Add(1)
	var s stream
	if _, err := w.run(ctx, "init", []string{"init", "-input=false", "-json", "-reconfigure", "-upgrade"}, &s, opts); err != nil {
		return err
	}
	return atomicfile.Write(stamp, []byte(hash+"\n"), 0o600)
}

// needsInit reports whether the init stamp is missing or stale.
func (w *Workspace) needsInit() (bool, error) {
	doc, err := safefile.Read(filepath.Join(w.dir, ConfigFile), maxDocument)
	if err != nil {
		return false, fmt.Errorf("tofu %s: no document (WriteConfig first): %w", w.name, err)
	}
	hash, err := initHash(doc, w.r.cliBytes, w.r.binary)
	if err != nil {
		return false, err
	}
	old, err := safefile.Read(filepath.Join(w.dir, initStampFile), maxSmallFile)
	if err != nil {
		return true, nil
	}
	if _, err := os.Stat(filepath.Join(w.dir, ".terraform", "terraform.tfstate")); err != nil {
		return true, nil
	}
	return strings.TrimSpace(string(old)) != hash, nil
}

// maxDocument caps the tofu document read back from a workspace (what
// WriteConfig wrote: kilobytes per node); maxSmallFile the CLI config and
// the init stamp.
const (
	maxDocument  = 64 << 20
	maxSmallFile = 1 << 20
)

// ErroredStateFile is where tofu writes state it could not upload (the
// backend was gone, e.g. the add-on died mid-apply). It is encrypted like
// any state.
const ErroredStateFile = "errored.tfstate"

func (w *Workspace) ensureInit(ctx context.Context, op string, opts RunOptions) error {
	if err := w.recoverErroredState(ctx, op); err != nil {
		return err
	}
	need, err := w.needsInit()
	if err != nil {
		return err
	}
	if !need {
		return nil
	}
	return w.init(ctx, RunOptions{OnEvent: opts.OnEvent})
}

// Plan runs `plan -out` (initialising first when needed).
func (w *Workspace) Plan(ctx context.Context, opts RunOptions) (*Plan, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ensureInit(ctx, "plan", opts); err != nil {
		return nil, err
	}
	file := filepath.Join(w.dir, PlanFile)
	_ = os.Remove(file)
	var s stream
	if _, err := w.run(ctx, "plan", []string{"plan", "-input=false", "-json", "-out=" + PlanFile}, &s, opts); err != nil {
		return nil, err
	}
	_ = os.Chmod(file, 0o600)
	p := &Plan{File: file, Diagnostics: s.warnings}
	if s.summary != nil {
		p.Summary = *s.summary
	}
	for _, ev := range s.planned {
		c := PlannedChange{Action: ev.Action, Reason: ev.Reason}
		if ev.Resource != nil {
			c.Address = ev.Resource.Addr
		}
		p.Changes = append(p.Changes, c)
	}
	return p, nil
}

// Apply applies a plan from Plan: exactly what was planned. The plan file is
// removed afterwards (tofu refuses a plan once state has moved on).
func (w *Workspace) Apply(ctx context.Context, plan *Plan, opts RunOptions) (*Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if plan == nil || plan.File == "" {
		return nil, fmt.Errorf("tofu apply %s: no plan", w.name)
	}
	defer os.Remove(plan.File)
	if err := w.ensureInit(ctx, "apply", opts); err != nil {
		return nil, err
	}
	s := stream{initialPlanned: plan.Planned()}
	_, err := w.run(ctx, "apply", []string{"apply", "-input=false", "-json", "-auto-approve", plan.File}, &s, opts)
	if err == nil {
		w.applied = appliedOutputs(s.outputs)
	}
	return s.result(), err
}

// appliedOutputs are an apply's outputs event as `output -json` would give
// them, or nil when the event did not carry every value (a sensitive
// output has none in the stream, so Output must ask tofu).
func appliedOutputs(evs map[string]OutputEvent) map[string]*tfjson.StateOutput {
	if len(evs) == 0 {
		return nil
	}
	m := make(map[string]*tfjson.StateOutput, len(evs))
	for name, ev := range evs {
		if ev.Sensitive || len(ev.Value) == 0 {
			return nil
		}
		var v any
		if err := json.Unmarshal(ev.Value, &v); err != nil {
			return nil
		}
		m[name] = &tfjson.StateOutput{Value: v}
	}
	return m
}

// Destroy runs `destroy -auto-approve`. Confirming with the user is the
// caller's job.
func (w *Workspace) Destroy(ctx context.Context, opts RunOptions) (*Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ensureInit(ctx, "destroy", opts); err != nil {
		return nil, err
	}
	var s stream
	_, err := w.run(ctx, "destroy", []string{"destroy", "-input=false", "-json", "-auto-approve"}, &s, opts)
	return s.result(), err
}

// Output returns the root module's outputs (`output -json`; right after a
// successful apply of this workspace, what that apply reported). Sensitive
// values are included in clear text: keep them out of logs and MQTT.
func (w *Workspace) Output(ctx context.Context) (map[string]*tfjson.StateOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.applied != nil {
		return maps.Clone(w.applied), nil
	}
	if err := w.ensureInit(ctx, "output", RunOptions{}); err != nil {
		return nil, err
	}
	out, err := w.run(ctx, "output", []string{"output", "-json"}, nil, RunOptions{})
	if err != nil {
		return nil, err
	}
	m := map[string]*tfjson.StateOutput{}
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("tofu output %s: %w", w.name, err)
	}
	return m, nil
}

// Validate runs `validate -json` against the real provider schemas. A
// document with errors is not an error of Validate: check Valid and
// Diagnostics.
func (w *Workspace) Validate(ctx context.Context) (*tfjson.ValidateOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ensureInit(ctx, "validate", RunOptions{}); err != nil {
		return nil, err
	}
	out, err := w.run(ctx, "validate", []string{"validate", "-json"}, nil, RunOptions{})
	var v tfjson.ValidateOutput
	if jerr := json.Unmarshal(out, &v); jerr != nil {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("tofu validate %s: %w", w.name, jerr)
	}
	return &v, nil
}

// stream collects what a command's events say.
type stream struct {
	initialPlanned int
	streamPlanned  int
	sawPlanned     bool
	completed      int

	planned  []Event
	drift    []Event // resource_drift
	errors   []Diagnostic
	warnings []Diagnostic
	summary  *ChangeSummary
	outputs  map[string]OutputEvent
}

func (s *stream) total() int {
	n := s.initialPlanned
	if s.sawPlanned {
		n = s.streamPlanned
	}
	return max(n, s.completed)
}

func (s *stream) handle(ev Event, opts RunOptions) {
	switch ev.Type {
	case EventPlannedChange:
		s.planned = append(s.planned, ev)
		s.sawPlanned = true
		s.streamPlanned += changeWeight(ev.Action)
	case EventResourceDrift:
		s.drift = append(s.drift, ev)
	case EventLog:
		// tofu init -json prints its errors as untyped lines.
		if ev.Level == "error" {
			s.errors = append(s.errors, Diagnostic{Severity: "error", Summary: strings.TrimPrefix(ev.Message, "Error: ")})
		}
	case EventDiagnostic:
		if ev.Diagnostic.Severity == "error" {
			s.errors = append(s.errors, *ev.Diagnostic)
		} else {
			s.warnings = append(s.warnings, *ev.Diagnostic)
		}
	case EventChangeSummary:
		s.summary = ev.Changes
	case EventOutputs:
		s.outputs = ev.Outputs
	}
	if opts.OnEvent != nil {
		opts.OnEvent(ev)
	}
	switch ev.Type {
	case EventApplyStart, EventApplyComplete, EventApplyErrored:
		if ev.Action == "read" {
			return
		}
		if ev.Type == EventApplyComplete {
			s.completed++
		}
		if opts.OnProgress != nil {
			opts.OnProgress(Progress{Completed: s.completed, Planned: s.total(), Event: ev})
		}
	}
}

func (s *stream) result() *Result {
	return &Result{Summary: s.summary, Outputs: s.outputs, Diagnostics: s.warnings}
}

// run executes one tofu command in the work dir. With s set, stdout is the
// -json event stream; otherwise it is returned (output/validate documents).
func (w *Workspace) run(ctx context.Context, op string, args []string, s *stream, opts RunOptions) ([]byte, error) {
	w.applied = nil // whatever runs now may change the state
	r := w.r
	ctx, cancel := context.WithTimeoutCause(ctx, r.cfg.Timeout, fmt.Errorf("%w after %v", ErrTimeout, r.cfg.Timeout))
	defer cancel()
	if err := ctx.Err(); err != nil {
		return nil, w.newError(op, -1, nil, "", ctxCause(ctx))
	}
	if r.missing != nil {
		return nil, w.newError(op, -1, nil, "", r.missing)
	}

	cmd := exec.CommandContext(ctx, r.binary, args...)
	cmd.Dir = w.dir
	cmd.Env = w.environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Cancellation: SIGINT to the group, as Ctrl-C would; exec kills tofu
	// when it has not exited after the grace period (WaitDelay), and its
	// group is killed below.
	var interrupted atomic.Bool
	finished := make(chan struct{}) // closed when run returns
	defer close(finished)
	finish := time.Duration(0)
	if op == "apply" || op == "destroy" {
		finish = r.cfg.FinishGrace
	}
	cmd.Cancel = func() error {
		interrupted.Store(true)
		if finish > 0 && errors.Is(context.Cause(ctx), ErrShutdown) {
			r.log.Info("rezuscloud is stopping: letting tofu finish before it is interrupted", zap.String("tenant", w.name),
				zap.String("command", op), zap.Duration("finish", finish), zap.Duration("grace", r.cfg.GracePeriod))
			go func() {
				t := time.NewTimer(finish)
				defer t.Stop()
				select {
				case <-t.C:
					r.log.Info("interrupting tofu", zap.String("tenant", w.name), zap.String("command", op))
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
				case <-finished:
				}
			}()
			return nil
		}
		r.log.Info("interrupting tofu", zap.String("tenant", w.name), zap.String("command", op),
			zap.Duration("grace", r.cfg.GracePeriod), zap.Error(context.Cause(ctx)))
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	}
	cmd.WaitDelay = r.cfg.GracePeriod + finish

	// A streaming command writes into files in the work dir, not into pipes:
	// a tofu that outlives a killed add-on must not die of SIGPIPE (or block
	// on a full pipe) in the middle of an apply, but finish saving its state.
	var stdout limitedBuffer
	stdout.max = 64 << 20
	stderr := limitedBuffer{max: 64 << 10, keepTail: true}
	var lw *lineWriter
	var outs *outputFiles
	if s != nil {
		lw = &lineWriter{log: r.log.With(zap.String("tenant", w.name), zap.String("command", op)),
			fn: func(ev Event) { s.handle(ev, opts) }}
		var err error
		if outs, err = w.newOutputFiles(op); err != nil {
			return nil, w.newError(op, -1, nil, "", err)
		}
		defer outs.remove()
		cmd.Stdout, cmd.Stderr = outs.stdoutW, outs.stderrW
	} else {
		cmd.Stdout = &stdout
		cmd.Stderr = &stderr
	}

	start := time.Now()
	_ = r.server.TakeRefusal(w.name) // a refusal newError reports is this command's
	r.log.Debug("tofu", zap.String("tenant", w.name), zap.Strings("args", args))
	if err := cmd.Start(); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			err = fmt.Errorf("%w at %s", ErrTofuNotFound, r.binary)
		}
		return nil, w.newError(op, -1, nil, "", err)
	}
	if rec, err := newProcRecord(cmd.Process.Pid, op, args); err != nil {
		r.log.Warn("cannot identify the tofu process", zap.String("tenant", w.name), zap.Error(err))
	} else if err := w.writeProcRecord(rec); err != nil {
		r.log.Warn("cannot record the tofu process", zap.String("tenant", w.name), zap.Error(err))
	}
	exited := make(chan struct{})
	var followed chan struct{}
	if outs != nil {
		followed = make(chan struct{})
		go func() {
			defer close(followed)
			outs.follow(exited, lw, &stderr)
		}()
	}
	waitErr := cmd.Wait()
	close(exited)
	if followed != nil {
		<-followed
	}
	w.removeProcRecord()
	if lw != nil {
		lw.flush()
	}
	wasInterrupted := interrupted.Load()
	if wasInterrupted {
		// Provisioner children that ignored SIGINT must not outlive us.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	w.r.privatize(w.dir)
	flushed := slices.Contains(w.r.keepReserve(), w.name)
	var status syscall.WaitStatus
	if cmd.ProcessState != nil {
		status, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	wasKilled := wasInterrupted && status.Signaled() && status.Signal() == syscall.SIGKILL
	if wasKilled {
		r.log.Warn("killed tofu after the grace period", zap.String("tenant", w.name), zap.String("command", op))
	}
	if wasKilled || status.Signaled() {
		// Killed (by us after the grace period, or by anyone: the OOM
		// killer) tofu cannot have unlocked.
		w.releaseOwnLock(ctx, start)
	}

	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	var diags []Diagnostic
	if s != nil {
		diags = s.errors
	} else if code != 0 {
		diags = diagnosticsOf(stdout.Bytes())
	}
	if errors.Is(waitErr, exec.ErrWaitDelay) && code == 0 {
		// tofu succeeded but a child it left behind held stdout open past
		// WaitDelay.
		r.log.Warn("tofu left a process holding its output", zap.String("tenant", w.name), zap.String("command", op), zap.Error(waitErr))
	}
	var cause error
	switch {
	case wasKilled:
		cause = fmt.Errorf("%w (%w)", ErrKilled, ctxCause(ctx))
	case wasInterrupted && code != 0:
		cause = ctxCause(ctx)
	}
	if code != 0 || cause != nil {
		// validate exits 1 for an invalid document: that is its answer.
		if op == "validate" && code == 1 && cause == nil && json.Valid(stdout.Bytes()) {
			return stdout.Bytes(), nil
		}
		if flushed {
			// the full disk refused tofu's upload; the store kept the state
			// and wrote it once there was room
			cause = errors.Join(ErrDiskFilled, cause)
		}
		return stdout.Bytes(), w.newError(op, code, diags, stderr.String(), cause)
	}
	return stdout.Bytes(), nil
}

func ctxCause(ctx context.Context) error {
	c := context.Cause(ctx)
	if errors.Is(c, context.Canceled) {
		return ErrCanceled
	}
	if errors.Is(c, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return c
}

// releaseOwnLock clears a lock a killed tofu left: commands of a tenant run
// one at a time, so a lock taken since the command started was its.
func (w *Workspace) releaseOwnLock(ctx context.Context, start time.Time) {
	ctx, cancel := stateContext(ctx)
	defer cancel()
	li, ok, err := w.r.states.LockOf(ctx, w.name)
	if err != nil {
		w.r.log.Error("reading the lock of a killed tofu", zap.String("tenant", w.name), zap.Error(err))
		return
	}
	if !ok || li.Created.Before(start.Add(-time.Second)) {
		return
	}
	if err := w.r.states.ForceUnlock(ctx, w.name, li.ID); err != nil {
		w.r.log.Error("releasing the lock of a killed tofu", zap.String("tenant", w.name), zap.Error(err))
		return
	}
	w.r.log.Warn("released the state lock of a killed tofu", zap.String("tenant", w.name), zap.String("lock", li.ID))
}

// diagnosticsOf reads the diagnostics of a single-document JSON answer
// (validate -json).
func diagnosticsOf(out []byte) []Diagnostic {
	var doc struct {
		Diagnostics []Diagnostic `json:"diagnostics"`
	}
	if json.Unmarshal(out, &doc) != nil {
		// output -json and friends print errors as UI lines.
		var ds []Diagnostic
		_ = ParseStream(strings.NewReader(string(out)), nil, func(ev Event) {
			if ev.Diagnostic != nil && ev.Diagnostic.Severity == "error" {
				ds = append(ds, *ev.Diagnostic)
			}
		})
		return ds
	}
	var ds []Diagnostic
	for _, d := range doc.Diagnostics {
		if d.Severity == "error" {
			ds = append(ds, d)
		}
	}
	return ds
}

// limitedBuffer keeps the first (or, with keepTail, the last) max bytes.
type limitedBuffer struct {
	buf      []byte
	max      int
	keepTail bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		if b.keepTail {
			b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
		} else {
			b.buf = b.buf[:b.max]
		}
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte  { return b.buf }
func (b *limitedBuffer) String() string { return string(b.buf) }
