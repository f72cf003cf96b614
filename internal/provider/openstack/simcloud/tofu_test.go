package simcloud_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

const password = "s3cret-Pa55word-not-in-output"

// lab is a tenant on the stand-in's pre-created network, image and pool.
func lab(cps, workers int) *tenant.Tenant {
	return &tenant.Tenant{
		Name: "lab", Provider: tenant.ProviderOpenStack,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		OpenStack: &tenant.OpenStack{Region: "RegionOne", Network: "private", Image: "talos", FloatingIPPool: "public"},
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: cps, Flavor: "m1.medium", VolumeGB: 30},
			{Name: "workers", Role: tenant.RoleWorker, Count: workers, Flavor: "m1.large"},
		},
	}
}

// userData is the stand-in machine config of a node.
func userData(node string, role tenant.Role) string {
	return fmt.Sprintf("version: v1alpha1\nmachine:\n  type: %s\n# node %s ${not.a.reference}\n", role, node)
}

func render(t testing.TB, ten *tenant.Tenant) []byte {
	t.Helper()
	cfg := map[string][]byte{}
	for _, n := range ten.Nodes() {
		cfg[n.Name] = []byte(userData(n.Name, n.Role))
	}
	doc, err := openstack.Renderer{}.Render(provider.Input{Tenant: ten, Stage: provider.StageFull, MachineConfigs: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// workspace is a tofu working directory with a rendered document, run
// against a stand-in cloud with the credentials in OS_* only.
type workspace struct {
	t             testing.TB
	bin, rc, dir  string
	cloud         *simcloud.Cloud
	password      string
	lastOut, last string
}

func newWorkspace(t testing.TB, cloud *simcloud.Cloud, doc []byte) *workspace {
	t.Helper()
	bin, rc := testenv.Tofu(t)
	if rc == "" {
		msg := "no tofu CLI config with a provider mirror (.tools/tofurc): run make tools"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	w := &workspace{t: t, bin: bin, rc: rc, dir: t.TempDir(), cloud: cloud, password: password}
	w.write(doc)
	if _, code := w.run("init", "-input=false", "-backend=false"); code != 0 {
		t.Fatal("tofu init failed")
	}
	return w
}

func (w *workspace) write(doc []byte) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf.json"), doc, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// run runs tofu with an environment built from scratch and returns its
// stdout and stderr together and its exit code.
func (w *workspace) run(args ...string) (string, int) {
	w.t.Helper()
	home := filepath.Join(w.dir, ".home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(w.bin, args...)
	cmd.Dir = w.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TF_CLI_CONFIG_FILE=" + w.rc, "TF_IN_AUTOMATION=1"}
	for k, v := range w.env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if l := os.Getenv("TF_LOG"); l != "" { // for debugging: go test with TF_LOG=WARN
		cmd.Env = append(cmd.Env, "TF_LOG="+l)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		w.t.Fatalf("tofu %v: %v", args, err)
	}
	if (code != 0 && (len(args) == 0 || args[0] != "plan")) || os.Getenv("TF_LOG") != "" {
		w.t.Logf("tofu %v: exit %d\n%s", args, code, out.String())
	}
	return out.String(), code
}

// env is the OS_* credentials, as the add-on gives them to tofu.
func (w *workspace) env() map[string]string {
	return map[string]string{
		"OS_AUTH_URL": w.cloud.AuthURL(), "OS_USERNAME": "admin", "OS_PASSWORD": w.password,
		"OS_PROJECT_NAME": "demo", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
	}
}

// errorLines are the "Error:" lines of tofu's output.
func errorLines(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Error:") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return strings.Join(lines, "\n")
}

func (w *workspace) apply() (string, int) {
	return w.run("apply", "-auto-approve", "-input=false", "-no-color")
}

func (w *workspace) destroy() {
	w.t.Helper()
	if _, code := w.run("destroy", "-auto-approve", "-input=false", "-no-color"); code != 0 {
		w.t.Fatal("tofu destroy failed")
	}
	if inv := w.cloud.Inventory(); inv != (simcloud.Inventory{}) {
		w.t.Errorf("after destroy the cloud holds %+v", inv)
	}
}

// planClean asserts that a plan right after apply has nothing to do.
func (w *workspace) planClean() {
	w.t.Helper()
	if out, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		w.t.Errorf("plan after apply: exit %d (0 = no changes):\n%s", code, out)
	}
}

// recorder records the hook calls.
type recorder struct {
	mu       sync.Mutex
	active   map[string]simcloud.Server
	floating map[string]string // fixed IP -> floating IP ("" after disassociation)
	deleted  []string
}

func (r *recorder) hooks() simcloud.Hooks {
	r.active, r.floating = map[string]simcloud.Server{}, map[string]string{}
	return simcloud.Hooks{
		ServerActive: func(s simcloud.Server) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.active[s.Name] = s
			return nil
		},
		FloatingIPAssociated: func(s simcloud.Server, ip string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.floating[s.FixedIP] = ip
		},
		ServerDeleted: func(s simcloud.Server) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.deleted = append(r.deleted, s.Name)
		},
	}
}

func start(t testing.TB, hooks simcloud.Hooks) *simcloud.Cloud {
	t.Helper()
	opts := simcloud.Options{Password: password, Image: "talos", Hooks: hooks}
	if os.Getenv("SIMCLOUD_LOG") != "" { // for debugging: one line per request
		opts.Logf = t.Logf
	}
	c, err := simcloud.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if u := c.Unhandled(); len(u) > 0 {
			t.Errorf("requests the stand-in does not implement: %v", u)
		}
	})
	return c
}

var (
	fixedNet    = netip.MustParsePrefix("127.77.0.0/24")
	floatingNet = netip.MustParsePrefix("127.78.0.0/24")
)

func inNet(p netip.Prefix, ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && p.Contains(a)
}

// TestApplyPlanDestroy drives the real provider through a whole tenant.
func TestApplyPlanDestroy(t *testing.T) {
	t.Parallel() // its own cloud on a free port, its own work dir
	var rec recorder
	cloud := start(t, rec.hooks())
	ten := lab(1, 2)
	w := newWorkspace(t, cloud, render(t, ten))
	if _, code := w.apply(); code != 0 {
		t.Fatal("tofu apply failed")
	}
	want := simcloud.Inventory{Servers: 3, Volumes: 3, Ports: 3, FloatingIPs: 1, SecurityGroups: 2}
	if inv := cloud.Inventory(); inv != want {
		t.Errorf("after apply the cloud holds %+v, want %+v", inv, want)
	}

	servers := cloud.Servers()
	rec.mu.Lock()
	for _, n := range ten.Nodes() {
		s, ok := rec.active[n.Name]
		if !ok {
			t.Errorf("ServerActive not called for %s", n.Name)
			continue
		}
		if string(s.UserData) != userData(n.Name, n.Role) {
			t.Errorf("%s: hook got user_data %q, want the machine config", n.Name, s.UserData)
		}
		if !inNet(fixedNet, s.FixedIP) || s.Metadata["rezuscloud_node"] != n.Name || s.ID == "" {
			t.Errorf("%s: hook got %+v", n.Name, s)
		}
	}
	var cpFloating string
	for _, s := range servers {
		if s.Status != "ACTIVE" || !slices.Contains(s.Tags, "rezuscloud_tenant=lab") {
			t.Errorf("server %+v", s)
		}
		switch {
		case s.Name == "lab-cp-1":
			cpFloating = s.FloatingIP
			if !inNet(floatingNet, s.FloatingIP) || rec.floating[s.FixedIP] != s.FloatingIP {
				t.Errorf("control plane floating IP %q, hook saw %q", s.FloatingIP, rec.floating[s.FixedIP])
			}
		case s.FloatingIP != "":
			t.Errorf("worker %s has floating IP %s", s.Name, s.FloatingIP)
		}
	}
	rec.mu.Unlock()

	out, code := w.run("output", "-json")
	if code != 0 {
		t.Fatal("tofu output failed")
	}
	var outputs struct {
		Endpoint struct{ Value string } `json:"endpoint_address"`
		Nodes    struct {
			Value map[string]struct {
				Address        string `json:"address"`
				PrivateAddress string `json:"private_address"`
			}
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &outputs); err != nil {
		t.Fatalf("output -json: %v: %s", err, out)
	}
	if outputs.Endpoint.Value != cpFloating || cpFloating == "" {
		t.Errorf("endpoint_address %q, want the control plane's floating IP %q", outputs.Endpoint.Value, cpFloating)
	}
	for _, s := range servers {
		if got := outputs.Nodes.Value[s.Name]; got.PrivateAddress != s.FixedIP {
			t.Errorf("nodes output for %s: %+v, server has %s", s.Name, got, s.FixedIP)
		}
	}

	w.planClean()
	w.destroy()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	slices.Sort(rec.deleted)
	if want := []string{"lab-cp-1", "lab-workers-1", "lab-workers-2"}; !slices.Equal(rec.deleted, want) {
		t.Errorf("ServerDeleted for %v, want %v", rec.deleted, want)
	}
	for fixed, fip := range rec.floating {
		if fip != "" {
			t.Errorf("floating IP %s on %s never disassociated", fip, fixed)
		}
	}
}

// TestQuotaRefusal: Nova's quota message reaches tofu's error, the servers
// that fit are kept, and an apply after the quota is raised converges.
func TestQuotaRefusal(t *testing.T) {
	t.Parallel() // its own cloud on a free port, its own work dir
	cloud := start(t, simcloud.Hooks{})
	cloud.SetInstanceQuota(2)
	w := newWorkspace(t, cloud, render(t, lab(1, 2)))
	out, code := w.apply()
	if code == 0 {
		t.Fatal("apply beyond the quota succeeded")
	}
	if want := "Quota exceeded for instances: Requested 1, but already used 2 of 2 instances"; !strings.Contains(out, want) {
		t.Errorf("tofu's error lacks Nova's reason %q:\n%s", want, out)
	}
	if inv := cloud.Inventory(); inv.Servers != 2 {
		t.Errorf("%d servers after the refusal, want the 2 that fit", inv.Servers)
	}
	cloud.SetInstanceQuota(-1)
	if _, code := w.apply(); code != 0 {
		t.Fatal("apply after raising the quota failed")
	}
	if inv := cloud.Inventory(); inv.Servers != 3 || inv.Ports != 3 || inv.Volumes != 3 {
		t.Errorf("after the second apply: %+v, want 3 servers, ports and volumes (no duplicates)", inv)
	}
	w.planClean()
	w.destroy()
}

// TestServerError: a server in ERROR fails the apply; the next apply
// replaces it. It also records what the provider prints for it.
func TestServerError(t *testing.T) {
	t.Parallel() // its own cloud on a free port, its own work dir
	cloud := start(t, simcloud.Hooks{})
	const fault = "No valid host was found. There are not enough hosts available."
	cloud.FailNextServers(1, fault)
	w := newWorkspace(t, cloud, render(t, lab(1, 0)))
	out, code := w.apply()
	if code == 0 {
		t.Fatal("apply with a server in ERROR succeeded")
	}
	if !strings.Contains(out, "ERROR") || strings.Contains(out, fault) {
		t.Errorf("tofu's error does not name the ERROR state, or has Nova's fault after all:\n%s", out)
	}
	t.Logf("the provider reports an ERROR server as: %s", errorLines(out))
	explained := openstack.Renderer{}.Explain(t.Context(), lab(1, 0), w.env(), out)
	if !strings.Contains(explained, "it went to ERROR: "+fault) || strings.Contains(explained, password) {
		t.Errorf("Explain does not add Nova's fault (or shows the password): %s", errorLines(explained))
	}
	if s := cloud.Servers(); len(s) != 1 || s[0].Status != "ERROR" {
		t.Fatalf("servers %+v, want one in ERROR", s)
	}
	if _, code := w.apply(); code != 0 {
		t.Fatal("apply after the failure did not replace the server")
	}
	if s := cloud.Servers(); len(s) != 1 || s[0].Status != "ACTIVE" {
		t.Errorf("servers %+v, want one ACTIVE", s)
	}
	w.destroy()
}

// TestHookErrorIsFault: ServerActive's error becomes the server's fault.
func TestHookErrorIsFault(t *testing.T) {
	t.Parallel() // its own cloud on a free port, its own work dir
	cloud := start(t, simcloud.Hooks{ServerActive: func(s simcloud.Server) error {
		return fmt.Errorf("simulated node %s did not boot", s.Name)
	}})
	w := newWorkspace(t, cloud, render(t, lab(1, 0)))
	if _, code := w.apply(); code == 0 {
		t.Fatal("apply succeeded although the node did not boot")
	}
	if s := cloud.Servers(); len(s) != 1 || s[0].Status != "ERROR" {
		t.Errorf("servers %+v, want one in ERROR", s)
	}
	w.destroy()
}

// TestWrongPassword: a clear error, no password in tofu's output, nothing
// created.
func TestWrongPassword(t *testing.T) {
	t.Parallel() // its own cloud on a free port, its own work dir
	cloud := start(t, simcloud.Hooks{})
	w := newWorkspace(t, cloud, render(t, lab(1, 0)))
	w.password = "wrong-" + password
	out, code := w.apply()
	if code == 0 {
		t.Fatal("apply with a wrong password succeeded")
	}
	if !strings.Contains(out, "Authentication failed") && !strings.Contains(out, "401") {
		t.Errorf("tofu's error does not say authentication failed:\n%s", out)
	}
	if strings.Contains(out, password) {
		t.Error("tofu's output contains the password")
	}
	t.Logf("with a wrong password: %s", errorLines(out))
	if inv := cloud.Inventory(); inv != (simcloud.Inventory{}) {
		t.Errorf("a failed authentication created %+v", inv)
	}
}

// TestAPIDown: connections refused give a clear error; the cloud comes
// back on the same address.
func TestAPIDown(t *testing.T) {
	t.Parallel() // its own cloud on a free port, its own work dir
	cloud := start(t, simcloud.Hooks{})
	w := newWorkspace(t, cloud, render(t, lab(1, 0)))
	if err := cloud.SetDown(true); err != nil {
		t.Fatal(err)
	}
	out, code := w.run("plan", "-input=false", "-no-color")
	if code == 0 {
		t.Fatal("plan against an API that is down succeeded")
	}
	if !strings.Contains(out, "connection refused") {
		t.Errorf("tofu's error does not say the connection was refused:\n%s", out)
	}
	t.Logf("with the API down: %s", errorLines(out))
	if err := cloud.SetDown(false); err != nil {
		t.Fatal(err)
	}
	if out, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 2 {
		t.Errorf("plan after the API is back: exit %d, want 2 (changes):\n%s", code, out)
	}
}

// BenchmarkTofuApply is raw tofu apply of the full document against the
// stand-in (destroy between iterations, untimed).
func BenchmarkTofuApply(b *testing.B) {
	for _, size := range []struct{ cps, workers int }{{1, 2}, {3, 5}} {
		b.Run(fmt.Sprintf("%d+%d", size.cps, size.workers), func(b *testing.B) {
			cloud := start(b, simcloud.Hooks{})
			w := newWorkspace(b, cloud, render(b, lab(size.cps, size.workers)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, code := w.apply(); code != 0 {
					b.Fatal("tofu apply failed")
				}
				b.StopTimer()
				w.destroy()
				b.StartTimer()
			}
		})
	}
}
