package tofu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

const (
	testPass = "correct-horse-battery-staple-123"
	marker   = "plaintext-marker-5d1e7c"
)

func newRunner(t testing.TB, dataDir string, mod func(*Config)) *Runner {
	t.Helper()
	bin, rc := testenv.Tofu(t)
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	cfg := Config{Binary: bin, DataDir: dataDir, CLIConfigFile: rc, Passphrase: testPass,
		GracePeriod: 30 * time.Second, Timeout: 2 * time.Minute}
	if tt, ok := t.(*testing.T); ok {
		cfg.Logger = zaptest.NewLogger(tt)
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// lockOf is who holds name's state lock in r.
func lockOf(t testing.TB, r *Runner, name string) (httpstate.LockInfo, bool) {
	t.Helper()
	li, ok, err := r.Lock(context.Background(), name)
	if err != nil {
		t.Fatalf("lock of %s: %v", name, err)
	}
	return li, ok
}

// dataDoc renders n terraform_data resources whose input carries marker and
// tag, plus an output.
func dataDoc(n int, tag string) []byte {
	res := map[string]any{}
	for i := range n {
		res[fmt.Sprintf("r%02d", i)] = map[string]any{"input": map[string]any{"secret": marker, "tag": tag, "i": i}}
	}
	doc := map[string]any{
		"resource": map[string]any{"terraform_data": res},
		"output":   map[string]any{"tag": map[string]any{"value": "${terraform_data.r00.output.tag}"}},
	}
	b, _ := json.Marshal(doc)
	return b
}

func workspace(t testing.TB, r *Runner, name string, doc []byte) *Workspace {
	t.Helper()
	ws, err := r.Workspace(name, WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteConfig(doc); err != nil {
		t.Fatal(err)
	}
	return ws
}

// grepDir reports the files under dir that contain s.
func grepDir(t *testing.T, dir, s string) []string {
	var hits []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(s)) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	return hits
}

func TestCycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := t.TempDir()
	r := newRunner(t, dataDir, nil)
	ws := workspace(t, r, "lab", dataDoc(3, "one"))

	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Summary.Add != 3 || plan.Summary.Change != 0 || plan.Summary.Remove != 0 || plan.Planned() != 3 || len(plan.Changes) != 3 {
		t.Fatalf("plan = %+v", plan)
	}
	if fi, err := os.Stat(plan.File); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("plan file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(plan.File); bytes.Contains(b, []byte(marker)) || !bytes.Contains(b, []byte("encrypted_data")) {
		t.Error("plan file is not encrypted")
	}

	var prog []Progress
	res, err := ws.Apply(ctx, plan, RunOptions{OnProgress: func(p Progress) { prog = append(prog, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if last := prog[len(prog)-1]; last.Completed != 3 || last.Planned != 3 {
		t.Errorf("progress = %+v", prog)
	}
	if res.Summary == nil || res.Summary.Add != 3 || string(res.Outputs["tag"].Value) != `"one"` {
		t.Errorf("apply = %+v", res)
	}
	if _, err := os.Stat(plan.File); !os.IsNotExist(err) {
		t.Error("plan file left behind")
	}

	// Encrypted at rest: no plaintext in the state store or anywhere but
	// the document itself.
	if hits := grepDir(t, filepath.Join(dataDir, "state"), marker); len(hits) > 0 {
		t.Errorf("plaintext in state: %v", hits)
	}
	if hits := grepDir(t, dataDir, marker); len(hits) != 1 || filepath.Base(hits[0]) != ConfigFile {
		t.Errorf("plaintext found in %v", hits)
	}
	if hits := grepDir(t, dataDir, testPass); len(hits) > 0 {
		t.Errorf("passphrase written to %v", hits)
	}
	if hits := grepDir(t, dataDir, r.server.Password()); len(hits) > 0 {
		t.Errorf("backend password written to %v", hits)
	}
	st, ok, _ := r.Store().Get("lab")
	if !ok || !bytes.Contains(st, []byte(`"encrypted_data"`)) {
		t.Errorf("state = %.200s", st)
	}
	if fi, _ := os.Stat(ws.Dir()); fi.Mode().Perm() != 0o700 {
		t.Errorf("work dir mode %v", fi.Mode())
	}

	out, err := ws.Output(ctx)
	if err != nil || out["tag"] == nil || out["tag"].Value != "one" {
		t.Fatalf("output = %+v %v", out, err)
	}

	// A new process (new port, new password) on the same data dir: no new
	// init, no changes.
	r.Close(ctx)
	r2 := newRunner(t, dataDir, nil)
	ws2 := workspace(t, r2, "lab", dataDoc(3, "one"))
	plan2, err := ws2.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan2.HasChanges() {
		t.Errorf("re-plan = %+v", plan2.Summary)
	}
	if n := r.inits.Load() + r2.inits.Load(); n != 1 {
		t.Errorf("init ran %d times, want 1", n)
	}

	var dprog []Progress
	dres, err := ws2.Destroy(ctx, RunOptions{OnProgress: func(p Progress) { dprog = append(dprog, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if dres.Summary == nil || dres.Summary.Remove != 3 || dres.Summary.Operation != "destroy" {
		t.Errorf("destroy = %+v", dres.Summary)
	}
	if last := dprog[len(dprog)-1]; last.Completed != 3 || last.Planned != 3 {
		t.Errorf("destroy progress = %+v", dprog)
	}
	if _, ok := lockOf(t, r2, "lab"); ok {
		t.Error("lock left after destroy")
	}
	vs, _ := r2.Store().Versions("lab")
	if len(vs) < 2 {
		t.Errorf("versions = %+v", vs)
	}
}

// slowDoc: a fast resource, then a slow one (local-exec sleep).
func slowDoc(sleep int) []byte {
	return []byte(fmt.Sprintf(`{
  "resource": {"terraform_data": {
    "fast": {"input": "fast"},
    "slow": {"input": "slow", "depends_on": ["terraform_data.fast"],
             "provisioner": [{"local-exec": {"command": "sleep %d"}}]}
  }}
}`, sleep))
}

func TestCancelApply(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, "", nil)
	ws := workspace(t, r, "lab", slowDoc(30))
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var canceledAt time.Time
	_, err = ws.Apply(cctx, plan, RunOptions{OnEvent: func(ev Event) {
		if ev.Type == EventApplyStart && ev.Resource.Addr == "terraform_data.slow" {
			canceledAt = time.Now()
			cancel()
		}
	}})
	if !errors.Is(err, ErrCanceled) {
		t.Fatalf("err = %v", err)
	}
	if canceledAt.IsZero() || time.Since(canceledAt) > 15*time.Second {
		t.Fatalf("apply returned %v after the cancel", time.Since(canceledAt))
	}
	t.Logf("cancelled apply: %v (after %v)", err, time.Since(canceledAt).Round(time.Millisecond))
	if li, ok := lockOf(t, r, "lab"); ok {
		t.Fatalf("lock left: %+v", li)
	}

	// The state kept "fast" and the interrupted "slow" (tainted): the next
	// plan only replaces "slow", and then converges.
	if err := ws.WriteConfig(slowDoc(0)); err != nil {
		t.Fatal(err)
	}
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Summary.Add != 1 || plan.Summary.Remove > 1 {
		t.Errorf("plan after cancel = %+v %+v", plan.Summary, plan.Changes)
	}
	if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil || plan.HasChanges() {
		t.Fatalf("not converged: %+v %v", plan, err)
	}
}

// With no grace the group is killed at once; the lock the killed tofu left
// is released by the runner and the state from before survives.
func TestKillAfterGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRunner(t, "", func(c *Config) { c.GracePeriod = time.Millisecond })
	ws := workspace(t, r, "lab", dataDoc(2, "x"))
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _, _ := r.Store().Get("lab")
	if err := ws.WriteConfig([]byte(`{"resource":{"terraform_data":{
		"r00":{"input":{"secret":"` + marker + `","tag":"x","i":0}},
		"r01":{"input":{"secret":"` + marker + `","tag":"x","i":1}},
		"slow":{"provisioner":[{"local-exec":{"command":"sleep 30"}}]}}}}`)); err != nil {
		t.Fatal(err)
	}
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil || plan.Summary.Add != 1 {
		t.Fatalf("plan = %+v %v", plan, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = ws.Apply(cctx, plan, RunOptions{OnEvent: func(ev Event) {
		if ev.Type == EventApplyStart {
			cancel()
		}
	}})
	if !errors.Is(err, ErrKilled) || !errors.Is(err, ErrCanceled) {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
	if li, ok := lockOf(t, r, "lab"); ok {
		t.Fatalf("lock left: %+v", li)
	}
	// SIGKILL follows SIGINT after 1 ms; on a busy machine tofu may still
	// have saved state between the two (with slow tainted). Either way the
	// state is consistent: only the interrupted resource is left to do.
	after, _, _ := r.Store().Get("lab")
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil || plan.Summary.Add != 1 {
		t.Fatalf("plan after kill = %+v %v", plan, err)
	}
	for _, c := range plan.Changes {
		if c.Address != "terraform_data.slow" {
			t.Fatalf("plan after kill touches %s: %+v", c.Address, plan)
		}
	}
	if bytes.Equal(before, after) && plan.Summary.Remove != 0 {
		t.Fatalf("state unchanged but plan removes: %+v", plan)
	}
}

func TestWrongPassphrase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRunner(t, "", nil)
	ws := workspace(t, r, "lab", dataDoc(1, "x"))
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	bad, err := r.Workspace("lab", WorkspaceOptions{Passphrase: "another-passphrase-0123456"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Plan(ctx, RunOptions{})
	if !errors.Is(err, ErrDecrypt) || !strings.Contains(err.Error(), "wrong passphrase") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "another-passphrase-0123456") {
		t.Error("passphrase in the error")
	}
	t.Log(err)
	if _, ok := lockOf(t, r, "lab"); ok {
		t.Error("lock left")
	}
}

func TestMissingProvider(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	rc := filepath.Join(t.TempDir(), "tofurc")
	os.WriteFile(rc, []byte(fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", empty)), 0o600)
	r := newRunner(t, "", func(c *Config) { c.CLIConfigFile = rc })
	ws := workspace(t, r, "lab", []byte(`{"terraform":{"required_providers":{"nope":{"source":"example/nope","version":"1.0.0"}}}}`))
	_, err := ws.Plan(context.Background(), RunOptions{})
	if !errors.Is(err, ErrProvider) || !strings.Contains(err.Error(), "example/nope") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

func TestLockedState(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	ws := workspace(t, r, "lab", dataDoc(1, "x"))
	if err := r.Store().Lock("lab", httpstate.LockInfo{ID: "held-elsewhere-42", Operation: "OperationTypeApply",
		Who: "someone@otherhost", Created: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	_, err := ws.Plan(context.Background(), RunOptions{})
	var te *Error
	if !errors.Is(err, ErrStateLocked) || !errors.As(err, &te) || te.Lock == nil || te.Lock.ID != "held-elsewhere-42" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "someone@otherhost") {
		t.Errorf("holder not named: %v", err)
	}
	t.Log(err)
	if err := r.ForceUnlock(context.Background(), "lab", "held-elsewhere-42"); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Plan(context.Background(), RunOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestTofuMissing(t *testing.T) {
	_, err := New(Config{Binary: "/nonexistent/tofu", DataDir: t.TempDir(), Passphrase: testPass})
	if !errors.Is(err, ErrTofuNotFound) || !strings.Contains(err.Error(), "/nonexistent/tofu") {
		t.Fatalf("err = %v", err)
	}
	_, err = New(Config{Binary: "tofu-not-here", Path: t.TempDir(), DataDir: t.TempDir(), Passphrase: testPass})
	if !errors.Is(err, ErrTofuNotFound) {
		t.Fatalf("err = %v", err)
	}

	// Gone after New.
	bin, _ := testenv.Tofu(t)
	link := filepath.Join(t.TempDir(), "tofu")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, "", func(c *Config) { c.Binary = link })
	ws := workspace(t, r, "lab", dataDoc(1, "x"))
	os.Remove(link)
	_, err = ws.Plan(context.Background(), RunOptions{})
	if !errors.Is(err, ErrTofuNotFound) || !strings.Contains(err.Error(), link) {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

func TestPassphraseTooShort(t *testing.T) {
	_, err := New(Config{Binary: "/bin/true", DataDir: t.TempDir(), Passphrase: "short"})
	if !errors.Is(err, ErrPassphraseTooShort) {
		t.Fatalf("err = %v", err)
	}
	r, err := New(Config{Binary: "/bin/true", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.Workspace("lab", WorkspaceOptions{Passphrase: "0123456789abcde"}); !errors.Is(err, ErrPassphraseTooShort) {
		t.Fatalf("err = %v", err)
	}
	if _, err := r.Workspace("../x", WorkspaceOptions{Passphrase: testPass}); err == nil {
		t.Fatal("bad name accepted")
	}
}

// A failed command's error carries the diagnostics and never a secret from
// the environment, even when tofu prints it.
func TestErrorRedactsEnvironment(t *testing.T) {
	t.Parallel()
	const secret = "OS-secret-value-91a2"
	r := newRunner(t, "", func(c *Config) { c.Env = map[string]string{"OS_PASSWORD": secret} })
	ws := workspace(t, r, "lab", []byte(`{"resource":{"terraform_data":{"fail":{"provisioner":[{"local-exec":{"command":"echo pw=$OS_PASSWORD; exit 3"}}]}}}}`))
	plan, err := ws.Plan(context.Background(), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ws.Apply(context.Background(), plan, RunOptions{})
	if err == nil {
		t.Fatal("apply succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, secret) || !strings.Contains(msg, "pw=[redacted]") {
		t.Errorf("err = %v", msg)
	}
	if !strings.Contains(msg, "local-exec provisioner error") || !strings.Contains(msg, "exit status 3") {
		t.Errorf("err lacks the diagnostic: %v", msg)
	}
	if res.Summary != nil {
		t.Errorf("failed apply has a summary: %+v", res.Summary)
	}
	t.Log(msg)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	ws := workspace(t, r, "lab", []byte(`{"resource":{"terraform_data":{"x":{"inputt":"a"}}}}`))
	v, err := ws.Validate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid || v.ErrorCount != 1 || !strings.Contains(v.Diagnostics[0].Detail, `"inputt"`) {
		t.Fatalf("validate = %+v", v)
	}
	ws = workspace(t, r, "lab", dataDoc(1, "x"))
	if v, err := ws.Validate(context.Background()); err != nil || !v.Valid {
		t.Fatalf("validate = %+v %v", v, err)
	}
}

func TestPrepareDocument(t *testing.T) {
	out, err := PrepareDocument([]byte(`{"resource":{"terraform_data":{"x":{"input":"<a&b>","n":12345678901234567890}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"method": "method.aes_gcm.main"`, `"enforced": true`, `"http": {}`, `"state_passphrase"`, `"<a&b>"`, `12345678901234567890`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("missing %s in\n%s", want, out)
		}
	}
	for _, bad := range []string{`{"terraform":{"backend":{"local":{}}}}`, `{"terraform":{"encryption":{}}}`, `{"variable":{"state_passphrase":{}}}`, `[]`, `{"terraform":[]}`, `{} {}`} {
		if _, err := PrepareDocument([]byte(bad)); !errors.Is(err, ErrDocument) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
	again, _ := PrepareDocument([]byte(`{"resource":{"terraform_data":{"x":{"n":12345678901234567890,"input":"<a&b>"}}}}`))
	if !bytes.Equal(out, again) {
		t.Error("not deterministic")
	}
}

func TestCommandTimeout(t *testing.T) {
	r := newRunner(t, "", func(c *Config) { c.Timeout = 8 * time.Second })
	ws := workspace(t, r, "lab", slowDoc(60))
	plan, err := ws.Plan(context.Background(), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = ws.Apply(context.Background(), plan, RunOptions{})
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 30*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
	if _, ok := lockOf(t, r, "lab"); ok {
		t.Error("lock left")
	}
	t.Log(err)
}

// Validate against the real OpenStack provider schema from the mirror.
func TestValidateOpenStack(t *testing.T) {
	t.Parallel()
	if _, rc := testenv.Tofu(t); rc == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no CLI config with a provider mirror; run make tools")
		}
		t.Skip("no CLI config with a provider mirror; run make tools")
	}
	r := newRunner(t, "", nil)
	doc := `{
  "terraform": {"required_providers": {"openstack": {"source": "terraform-provider-openstack/openstack", "version": "3.4.0"}}},
  "resource": {"openstack_networking_port_v2": {"p": {"network_id": "n", "admin_state_up": "maybe", "flavour": 1}}}
}`
	ws := workspace(t, r, "os", []byte(doc))
	v, err := ws.Validate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid || v.ErrorCount < 2 {
		t.Fatalf("validate = %+v", v)
	}
	for _, d := range v.Diagnostics {
		t.Logf("%s: %s", d.Summary, d.Detail)
	}
}

// The backend vanishing mid-apply (what tofu sees when the add-on dies):
// tofu saves what it could not upload as errored.tfstate and leaves the
// lock. The next process shows the stale lock, and once it is cleared
// imports that state, so nothing tofu created is forgotten.
func TestBackendGoneMidApply(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	r := newRunner(t, dataDir, nil)
	ws := workspace(t, r, "lab", slowDoc(5))
	plan, err := ws.Plan(context.Background(), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ws.Apply(context.Background(), plan, RunOptions{OnEvent: func(ev Event) {
		if ev.Type == EventApplyStart && ev.Resource.ResourceName == "slow" {
			go r.server.Close(context.Background())
		}
	}})
	if err == nil {
		t.Fatal("apply succeeded without a backend")
	}
	if b, err := os.ReadFile(filepath.Join(ws.Dir(), ErroredStateFile)); err != nil || bytes.Contains(b, []byte(`"slow"`)) {
		t.Fatalf("errored state: %v (plaintext: %v)", err, bytes.Contains(b, []byte(`"slow"`)))
	}

	r2 := newRunner(t, dataDir, nil)
	li, ok := lockOf(t, r2, "lab")
	if !ok {
		t.Fatal("no stale lock after the backend vanished")
	}
	ws2 := workspace(t, r2, "lab", slowDoc(5))
	_, err = ws2.Plan(context.Background(), RunOptions{})
	if !errors.Is(err, ErrStateLocked) || !strings.Contains(err.Error(), ErroredStateFile) {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
	if err := r2.ForceUnlock(context.Background(), "lab", li.ID); err != nil {
		t.Fatal(err)
	}
	plan, err = ws2.Plan(context.Background(), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.HasChanges() {
		t.Errorf("state lost: plan = %+v %+v", plan.Summary, plan.Changes)
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), ErroredStateFile)); !os.IsNotExist(err) {
		t.Error("errored.tfstate not moved away")
	}
}

// TestOutputAfterApply: right after an apply, Output gives what the apply
// reported, the same as `tofu output -json` (a map of objects, a string);
// with a sensitive output, whose value the apply's stream does not carry,
// Output asks tofu and the value is there.
func TestOutputAfterApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, sensitive := range []bool{false, true} {
		r := newRunner(t, t.TempDir(), nil)
		doc := []byte(fmt.Sprintf(`{"resource":{"terraform_data":{"a":{"input":"x"}}},
			"output":{
				"nodes":{"value":{"n1":{"address":"127.0.0.1","id":"1"},"n2":{"address":"127.0.0.2","id":"2"}}},
				"endpoint":{"value":"127.0.0.1","sensitive":%t}}}`, sensitive))
		ws := workspace(t, r, "lab", doc)
		plan, err := ws.Plan(ctx, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := ws.Output(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fresh := workspace(t, r, "lab", doc) // no apply of its own: runs tofu output
		want, err := fresh.Output(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || len(want) != 2 {
			t.Fatalf("sensitive %v: outputs %v, tofu's %v", sensitive, got, want)
		}
		for name := range want {
			if got[name] == nil || !reflect.DeepEqual(got[name].Value, want[name].Value) {
				t.Errorf("sensitive %v: output %s = %#v, tofu output -json says %#v", sensitive, name, got[name], want[name].Value)
			}
		}
	}
}
