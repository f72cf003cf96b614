package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// KubeVersion is the version of the pinned kube-apiserver and kube-scheduler
// that `make tools` builds (tools/kube).
const KubeVersion = "v1.37.2"

// kubeStartTimeout bounds the start of each control-plane process; a cold
// kube-apiserver on a loaded 2-core machine takes 10-30 s.
const kubeStartTimeout = 2 * time.Minute

// KubeBinaries are the control-plane binaries StartKube runs.
type KubeBinaries struct {
	APIServer, Scheduler, Etcd string
}

// FindKube returns the kube-apiserver, kube-scheduler and etcd binaries:
// those in $REZUSCLOUD_KUBE_BIN when set, else in the repository's
// .tools/bin (`make tools` builds them from tools/kube and tools/etcd).
// A missing binary fails the test, with the command that builds it: the
// Kubernetes tests never skip silently.
func FindKube(t testing.TB) KubeBinaries {
	t.Helper()
	dir := os.Getenv("REZUSCLOUD_KUBE_BIN")
	if dir == "" {
		root := repoRoot()
		if root == "" {
			t.Fatal("testenv: kube: cannot find the repository root (go.mod) and $REZUSCLOUD_KUBE_BIN is unset; run make tools")
			return KubeBinaries{}
		}
		dir = filepath.Join(root, ".tools", "bin")
	}
	b := KubeBinaries{
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Scheduler: filepath.Join(dir, "kube-scheduler"),
		Etcd:      filepath.Join(dir, "etcd"),
	}
	for _, p := range []string{b.APIServer, b.Scheduler, b.Etcd} {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			t.Fatal("testenv: kube: " + p + " not found; run make tools (it builds kube-apiserver, kube-scheduler and etcd into .tools/bin), or set REZUSCLOUD_KUBE_BIN to a directory holding them")
			return KubeBinaries{}
		}
	}
	return b
}

// KubeOptions tune the control plane a test starts. The zero value runs
// etcd, kube-apiserver and kube-scheduler.
type KubeOptions struct {
	// NoScheduler runs no kube-scheduler: pods stay Pending with no
	// PodScheduled condition.
	NoScheduler bool
}

// Kube is a real Kubernetes control plane for one test: etcd, kube-apiserver
// and (unless KubeOptions.NoScheduler) kube-scheduler, each on a free
// loopback port with its files in t.TempDir(). No controller-manager runs:
// nothing clears the not-ready taint of new Nodes, computes
// PodDisruptionBudget status, or creates the pods of Deployments, Jobs and
// DaemonSets (package kubesim plays the kubelets; tests create pods
// themselves). The ServiceAccount admission plugin is disabled, as there is
// no controller to create the default service accounts.
//
// It is stopped when the test ends.
type Kube struct {
	// URL is the API server's https://127.0.0.1:<port>.
	URL string
	// Kubeconfig is an admin kubeconfig for URL (bearer token of a
	// system:masters user, the server's CA), as a tenant's looks.
	Kubeconfig []byte
	// CA is the PEM of the certificates the API server's serving
	// certificate chains to, Token the admin bearer token.
	CA    []byte
	Token string
	// Dir holds the processes' files (etcd data, certificates, keys,
	// logs).
	Dir string

	t       testing.TB
	bins    KubeBinaries
	apiPort int
	apiArgs []string
	https   *http.Client

	mu    sync.Mutex
	procs map[string]*kubeProc
}

// StartKube starts a control plane for t and waits until each part is
// ready. A missing binary fails t (FindKube).
func StartKube(t testing.TB, opts ...KubeOptions) *Kube {
	t.Helper()
	var o KubeOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	bins := FindKube(t)
	dir := t.TempDir()
	k := &Kube{Dir: dir, t: t, bins: bins, procs: map[string]*kubeProc{}}
	t.Cleanup(k.Stop)
	if err := k.start(o); err != nil {
		t.Fatalf("testenv: kube: %v", err)
	}
	return k
}

func (k *Kube) start(o KubeOptions) error {
	// etcd
	etcdPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	data := filepath.Join(k.Dir, "etcd")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	if err := k.run("etcd", k.bins.Etcd, []string{
		"--name=testenv", "--data-dir=" + data,
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
	}, func(ctx context.Context) error {
		return k.get(ctx, http.DefaultClient, etcdURL+"/health", "", `"health":"true"`)
	}); err != nil {
		return err
	}

	// kube-apiserver: service-account key, token file, self-signed serving
	// certificate in its cert dir.
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	k.Token = hex.EncodeToString(token)
	saKey := filepath.Join(k.Dir, "sa.key")
	if err := writeECKey(saKey); err != nil {
		return err
	}
	tokens := filepath.Join(k.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(k.Token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	certDir := filepath.Join(k.Dir, "apiserver-certs")
	if k.apiPort, err = freePort(); err != nil {
		return err
	}
	k.URL = "https://127.0.0.1:" + strconv.Itoa(k.apiPort)
	k.apiArgs = []string{
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(k.apiPort), "--cert-dir=" + certDir,
		"--etcd-servers=" + etcdURL,
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + tokens, "--anonymous-auth=false",
		"--authorization-mode=AlwaysAllow",
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true", "--profiling=false",
	}
	if err := k.startAPIServer(); err != nil {
		return err
	}
	if k.Kubeconfig, err = k.kubeconfig(); err != nil {
		return err
	}
	if o.NoScheduler {
		return nil
	}

	// kube-scheduler, with an admin kubeconfig file; /readyz on its own
	// loopback port (always allowed) says when its informers synced.
	kc := filepath.Join(k.Dir, "scheduler.kubeconfig")
	if err := os.WriteFile(kc, k.Kubeconfig, 0o600); err != nil {
		return err
	}
	schedPort, err := freePort()
	if err != nil {
		return err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // its own self-signed loopback certificate
	return k.run("kube-scheduler", k.bins.Scheduler, []string{
		"--kubeconfig=" + kc, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(schedPort),
		"--cert-dir=" + filepath.Join(k.Dir, "scheduler-certs"),
		"--profiling=false",
	}, func(ctx context.Context) error {
		return k.get(ctx, insecure, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/readyz", "", "ok")
	})
}

func (k *Kube) startAPIServer() error {
	return k.run("kube-apiserver", k.bins.APIServer, k.apiArgs, func(ctx context.Context) error {
		if k.https == nil {
			ca, err := k.readCA()
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return fmt.Errorf("no certificate in %s", filepath.Join(k.Dir, "apiserver-certs"))
			}
			k.CA = ca
			k.https = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		}
		return k.get(ctx, k.https, k.URL+"/readyz", k.Token, "ok")
	})
}

// readCA reads the serving certificate the API server wrote into its cert
// dir (its own self-signed CA follows it in the file).
func (k *Kube) readCA() ([]byte, error) {
	return os.ReadFile(filepath.Join(k.Dir, "apiserver-certs", "apiserver.crt"))
}

func (k *Kube) kubeconfig() ([]byte, error) {
	if len(k.CA) == 0 {
		return nil, errors.New("no API server CA")
	}
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
current-context: testenv
`, k.URL, base64.StdEncoding.EncodeToString(k.CA), k.Token), nil
}

// StopAPIServer stops kube-apiserver (etcd and the scheduler keep running):
// clients then see the cluster API unreachable. StartAPIServer brings it
// back on the same port.
func (k *Kube) StopAPIServer() {
	k.stop("kube-apiserver")
}

// StartAPIServer starts a stopped kube-apiserver again with the same port,
// certificates and data, and waits until it is ready.
func (k *Kube) StartAPIServer() {
	k.t.Helper()
	if err := k.startAPIServer(); err != nil {
		k.t.Fatalf("testenv: kube: %v", err)
	}
}

// Stop stops the scheduler, the API server and etcd, in that order.
// Stopping twice does nothing.
func (k *Kube) Stop() {
	for _, name := range []string{"kube-scheduler", "kube-apiserver", "etcd"} {
		k.stop(name)
	}
}

// Log is what the named process ("etcd", "kube-apiserver",
// "kube-scheduler") logged last (its last 64 KiB).
func (k *Kube) Log(name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.procs[name]; p != nil {
		return p.log.String()
	}
	return ""
}

type kubeProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *tailBuffer
}

// run starts a process and waits until ready answers nil, the process
// exits (an error with its log) or kubeStartTimeout passes.
func (k *Kube) run(name, bin string, args []string, ready func(context.Context) error) error {
	logf, err := os.OpenFile(filepath.Join(k.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p := &kubeProc{done: make(chan struct{}), log: &tailBuffer{max: 64 << 10}}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = k.Dir
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + k.Dir}
	p.cmd.Stdout = io.MultiWriter(logf, p.log)
	p.cmd.Stderr = p.cmd.Stdout
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); _ = logf.Close(); close(p.done) }()
	k.mu.Lock()
	k.procs[name] = p
	k.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), kubeStartTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		last = ready(rctx)
		rcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v): %s", name, p.cmd.ProcessState, p.log.String())
		case <-ctx.Done():
			k.stop(name)
			return fmt.Errorf("%s not ready after %v (last check: %v): %s", name, kubeStartTimeout, last, p.log.String())
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after 10 s.
func (k *Kube) stop(name string) {
	k.mu.Lock()
	p := k.procs[name]
	k.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// get succeeds when url answers 200 with a body containing want.
func (k *Kube) get(ctx context.Context, c *http.Client, url, token, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}

func writeECKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
