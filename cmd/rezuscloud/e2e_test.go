package main

// End-to-end tests (issue 7): the real rezuscloud binary, built once per
// test run, runs as a subprocess against a real mosquitto (testenv), the
// real tofu (testenv.Tofu) and simulated Talos nodes (simnode) listening on
// random loopback addresses at the Talos API port. Everything the binary
// publishes is recorded by mosquitto_sub (MQTT 5, retain-as-published, so
// the retain flag of every live message is known) and the tests wait for
// events on that record, never for time to pass.
//
// This file holds the harness; e2e_flows_test.go the tests and
// e2e_bench_test.go the benchmark.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/internal/hass/hasstest"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// Deadlines are generous: the machine has two cores shared with others.
const (
	phaseTimeout = 3 * time.Minute // one phase of a flow (apply, scale, destroy)
	startTimeout = 2 * time.Minute // the binary up and publishing
	stopTimeout  = 3 * time.Minute // SIGTERM to exit (tofu may get its grace)
	talosPort    = 50000           // the Talos API port of `rezuscloud run`
	base         = "rezuscloud"
	prefix       = "homeassistant"
)

var (
	e2eBinDir string
	buildOnce sync.Once
	buildErr  error
)

// TestMain owns the directory the binary is built into. The build itself
// happens once, on the first test or benchmark that needs the binary, so
// that the package's quick tests do not pay for it.
func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "rezuscloud-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	e2eBinDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// rezuscloudBinary builds the binaries once: the add-on's (go build -o
// <tmp>/rezuscloud .) and the demo's, which alone links the simulators
// (-tags demo, <tmp>/rezuscloud-demo). It returns the add-on's.
func rezuscloudBinary(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("end-to-end test: skipped with -short")
	}
	path := filepath.Join(e2eBinDir, "rezuscloud")
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		for _, args := range [][]string{{"build", "-o", path, "."}, {"build", "-tags", "demo", "-o", path + "-demo", "."}} {
			if out, err := exec.Command(goBin, args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return path
}

// ---------------------------------------------------------------------------
// the rezuscloud process

// notifyBuf is a goroutine-safe buffer that signals every write.
type notifyBuf struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newNotifyBuf() *notifyBuf { return &notifyBuf{changed: make(chan struct{})} }

func (b *notifyBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

func (b *notifyBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// snapshot returns the contents and a channel closed at the next write.
func (b *notifyBuf) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

// proc is one run of the binary.
type proc struct {
	tb     testing.TB
	name   string
	cmd    *exec.Cmd
	stdout *notifyBuf
	stderr *notifyBuf
	done   chan struct{}
	code   int
}

// startProc starts the binary with args; it is killed (with its process
// group: tofu) at the end of the test if still running, and its log is
// printed when the test failed.
func startProc(tb testing.TB, name string, env []string, args ...string) *proc {
	tb.Helper()
	bin := rezuscloudBinary(tb)
	if len(args) > 0 && args[0] == "demo" {
		bin += "-demo"
	}
	p := &proc{tb: tb, name: name, stdout: newNotifyBuf(), stderr: newNotifyBuf(), done: make(chan struct{}), code: -1}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: start: %v", name, err)
	}
	p.cmd = cmd
	go func() {
		_ = cmd.Wait()
		if cmd.ProcessState != nil {
			p.code = cmd.ProcessState.ExitCode()
		}
		close(p.done)
	}()
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if tb.Failed() {
			tb.Logf("---- %s (pid %d) stdout:\n%s", name, cmd.Process.Pid, tail(p.stdout.String(), 100))
			tb.Logf("---- %s (pid %d) log (stderr):\n%s", name, cmd.Process.Pid, tail(p.stderr.String(), 400))
		}
	})
	return p
}

func tail(s string, lines int) string {
	ls := strings.SplitAfter(s, "\n")
	if len(ls) > lines {
		return fmt.Sprintf("[... %d lines cut ...]\n", len(ls)-lines) + strings.Join(ls[len(ls)-lines:], "")
	}
	return s
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM to the process (not its group: rezuscloud must
// pass the stop on to tofu itself) and waits for the exit. It returns the
// exit code and how long the exit took.
func (p *proc) terminate(d time.Duration) (int, time.Duration) {
	p.tb.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.exited() {
		p.tb.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(d):
		p.tb.Fatalf("%s did not exit within %v of SIGTERM", p.name, d)
	}
	return p.code, time.Since(start)
}

// waitStdout waits until stdout matches (returns the match's submatch).
func (p *proc) waitStdout(d time.Duration, what string, find func(string) (string, bool)) string {
	p.tb.Helper()
	deadline := time.After(d)
	for {
		s, ch := p.stdout.snapshot()
		if v, ok := find(s); ok {
			return v
		}
		select {
		case <-ch:
		case <-p.done:
			s := p.stdout.String()
			if v, ok := find(s); ok {
				return v
			}
			p.tb.Fatalf("%s exited (code %d) before %s", p.name, p.code, what)
		case <-deadline:
			p.tb.Fatalf("timed out after %v waiting for %s on %s's stdout", d, what, p.name)
		}
	}
}

// vmRSS reads the resident set size of the process in kB.
func vmRSS(pid int) (int, error) { return procStatus(pid, "VmRSS") }

// procStatus reads one kB field of /proc/<pid>/status (VmRSS, RssAnon,
// RssFile).
func procStatus(pid int, field string) (int, error) { return procField(pid, "status", field) }

// procField reads one kB field of /proc/<pid>/<file> (status, or
// smaps_rollup for Pss).
func procField(pid int, file, field string) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, errors.New("no " + field)
}

// childrenNamed lists the pids of processes whose parent is ppid and whose
// command name is name.
func childrenNamed(ppid int, name string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(st)
		l, r := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if l < 0 || r < l {
			continue
		}
		f := strings.Fields(s[r+1:])
		if len(f) < 2 || s[l+1:r] != name {
			continue
		}
		if pp, _ := strconv.Atoi(f[1]); pp == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(st)
	r := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[r+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// ---------------------------------------------------------------------------
// recording everything on the broker

type mqttMsg struct {
	Topic    string
	Payload  []byte
	Retained bool
}

// capture records every message on a broker with mosquitto_sub (MQTT 5,
// retain-as-published, QoS 1).
type capture struct {
	tb      testing.TB
	mu      sync.Mutex
	msgs    []mqttMsg
	last    map[string]int
	changed chan struct{}
	done    chan struct{}
	stderr  *notifyBuf
}

func startCapture(tb testing.TB, brokerURL string) *capture {
	tb.Helper()
	subBin, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("mosquitto_sub not available (make test installs mosquitto-clients): %v", err)
		}
		tb.Skipf("mosquitto_sub not available (apt-get install mosquitto-clients): %v", err)
	}
	u, err := url.Parse(brokerURL)
	if err != nil {
		tb.Fatal(err)
	}
	c := &capture{tb: tb, last: map[string]int{}, changed: make(chan struct{}), done: make(chan struct{}), stderr: newNotifyBuf()}
	cmd := exec.Command(subBin, "-h", u.Hostname(), "-p", u.Port(), "-V", "mqttv5", "--retain-as-published",
		"-q", "1", "-t", "#", "-F", "%r %t %x", "-i", fmt.Sprintf("e2e-capture-%d", rand.Int64()))
	cmd.Stderr = c.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("mosquitto_sub: %v", err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			if len(f) != 3 {
				continue
			}
			payload, err := hex.DecodeString(f[2])
			if err != nil {
				continue
			}
			c.add(mqttMsg{Topic: f[1], Payload: payload, Retained: f[0] == "1"})
		}
		_ = cmd.Wait()
		c.mu.Lock()
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	// the subscription is active once our own probe comes back
	probe := fmt.Sprintf("e2e/probe/%d", rand.Int64())
	pub := mqttClient(tb, brokerURL)
	if tok := pub.Publish(probe, 1, false, "probe"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("probe publish: %v", tok.Error())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := c.lastMsg(probe); ok {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("mosquitto_sub did not receive the probe: %s", c.stderr.String())
		}
		// the probe was published before the subscription was active: again
		select {
		case <-c.done:
			tb.Fatalf("mosquitto_sub exited: %s", c.stderr.String())
		case <-c.wake():
		case <-time.After(200 * time.Millisecond):
			pub.Publish(probe, 1, false, "probe")
		}
	}
	return c
}

func (c *capture) add(m mqttMsg) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.last[m.Topic] = len(c.msgs) - 1
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *capture) wake() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// mark is the number of messages recorded so far.
func (c *capture) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *capture) lastMsg(topic string) (mqttMsg, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.last[topic]
	if !ok {
		return mqttMsg{}, false
	}
	return c.msgs[i], true
}

// since returns the messages recorded after mark.
func (c *capture) since(mark int) []mqttMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs[mark:])
}

func (c *capture) all() []mqttMsg { return c.since(0) }

// wait re-evaluates cond at every new message until it holds; it fails the
// test at the deadline, or when p (if not nil) exits first. describe, when
// set, adds context to the failure.
func (c *capture) wait(p *proc, d time.Duration, what string, cond func() bool, describe ...func() string) {
	c.tb.Helper()
	deadline := time.After(d)
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	fail := func(format string, a ...any) {
		c.tb.Helper()
		msg := fmt.Sprintf(format, a...)
		for _, f := range describe {
			msg += "\n" + f()
		}
		c.tb.Fatal(msg)
	}
	for {
		ch := c.wake()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			fail("timed out after %v waiting for %s", d, what)
		case <-exited:
			if cond() {
				return
			}
			fail("%s exited (code %d) while waiting for %s", p.name, p.code, what)
			exited = nil
		case <-c.done:
			fail("mosquitto_sub stopped while waiting for %s: %s", what, c.stderr.String())
		}
	}
}

// mqttClient connects a plain client for commands and requests.
func mqttClient(tb testing.TB, brokerURL string) mqtt.Client {
	tb.Helper()
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(brokerURL).
		SetClientID(fmt.Sprintf("e2e-%d", rand.Int64())).SetAutoReconnect(true).SetOrderMatters(true))
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		tb.Fatalf("mqtt connect %s: %v", brokerURL, tok.Error())
	}
	tb.Cleanup(func() { c.Disconnect(100) })
	return c
}

// ---------------------------------------------------------------------------
// documents (docs/design.md §4)

type pendingDoc struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

type lastOpDoc struct {
	Name    string `json:"name"`
	Result  string `json:"result"`
	At      string `json:"at"`
	Message string `json:"message"`
}

type tenantDoc struct {
	Phase         string             `json:"phase"`
	NodesReady    int                `json:"nodes_ready"`
	NodesTotal    int                `json:"nodes_total"`
	Progress      int                `json:"progress"`
	Pending       pendingDoc         `json:"pending"`
	Operation     *string            `json:"operation"`
	LastOperation *lastOpDoc         `json:"last_operation"`
	Problem       bool               `json:"problem"`
	Problems      []string           `json:"problems"`
	Activity      string             `json:"activity"`
	Counts        map[string]int     `json:"counts"`
	Pools         map[string]poolDoc `json:"pools"`
}

// poolDoc is a worker pool in the tenant state document.
type poolDoc struct {
	Mode       string         `json:"mode"`
	Decision   string         `json:"decision"`
	Node       *string        `json:"node"`
	Reason     string         `json:"reason"`
	Observe    bool           `json:"observe"`
	At         *string        `json:"at"`
	Inputs     map[string]any `json:"inputs"`
	PowerW     *float64       `json:"power_w"`
	EnergyKWh  *float64       `json:"energy_kwh"`
	SolarShare *float64       `json:"solar_share"`
}

func (d tenantDoc) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}

type nodeDoc struct {
	Stage   string  `json:"stage"`
	Ready   bool    `json:"ready"`
	Address *string `json:"address"`
	Role    string  `json:"role"`
	Group   string  `json:"group"`
	// Forgettable: unreachable past unreachable_after (Forget machine)
	Forgettable bool `json:"forgettable"`
}

type eventDoc struct {
	EventType string `json:"event_type"`
	Tenant    string `json:"tenant"`
	Operation string `json:"operation"`
	Message   string `json:"message"`
}

type responseDoc struct {
	Status      string          `json:"status"`
	Data        json.RawMessage `json:"data"`
	Error       string          `json:"error"`
	Transaction json.RawMessage `json:"transaction"`
}

// ---------------------------------------------------------------------------
// one installation: broker, recorder, simulated machines, config, binary

type machine struct {
	node *simnode.Node
	addr string // IP
}

type envOptions struct {
	tenant   string
	machines int // the first is the control plane, the rest the workers' pool
	workers  int // declared worker count
	delays   simnode.Options
	logLevel string
}

type env struct {
	tb         testing.TB
	opts       envOptions
	dir        string
	mosq       *testenv.Mosquitto
	cap        *capture
	pub        mqtt.Client
	world      *simnode.World
	machines   []machine
	cfgPath    string
	dataDir    string
	tenantsDir string
	tenantFile string
	passphrase string
	proc       *proc
}

func newEnv(tb testing.TB, o envOptions) *env {
	tb.Helper()
	rezuscloudBinary(tb) // skip early with -short, build once
	if o.tenant == "" {
		o.tenant = "lab"
	}
	if o.logLevel == "" {
		o.logLevel = "debug"
	}
	tofuBin, rc := testenv.Tofu(tb)
	e := &env{tb: tb, opts: o, dir: tb.TempDir()}
	e.mosq = testenv.StartMosquitto(tb)
	e.cap = startCapture(tb, e.mosq.URL)
	e.pub = mqttClient(tb, e.mosq.URL)
	e.machines, e.world = startMachines(tb, o.machines, o.delays)
	e.dataDir = filepath.Join(e.dir, "data")
	e.tenantsDir = filepath.Join(e.dir, "tenants")
	if err := os.MkdirAll(e.tenantsDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	e.passphrase = "e2e-pass-" + strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	cfg := fmt.Sprintf(`data_dir    = %q
tenants_dir = %q
log_level   = %q
[mqtt]
url              = %q
discovery_prefix = %q
base_topic       = %q
[tofu]
binary           = %q
cli_config       = %q
state_passphrase = %q
`, e.dataDir, e.tenantsDir, o.logLevel, e.mosq.URL, prefix, base, tofuBin, rc, e.passphrase)
	e.cfgPath = filepath.Join(e.dir, "rezuscloud.toml")
	if err := os.WriteFile(e.cfgPath, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	e.tenantFile = filepath.Join(e.tenantsDir, o.tenant+".toml")
	if err := os.WriteFile(e.tenantFile, []byte(e.tenantTOML()), 0o644); err != nil {
		tb.Fatal(err)
	}
	return e
}

// startMachines starts n simulated nodes of one World on <net>.10.. at the
// Talos port, on a random free loopback /24.
func startMachines(tb testing.TB, n int, delays simnode.Options) ([]machine, *simnode.World) {
	tb.Helper()
	c, err := simnode.StartOnLoopback(context.Background(), n, "", talosPort, delays)
	if err != nil {
		tb.Fatalf("starting %d simulated nodes: %v", n, err)
	}
	tb.Cleanup(c.Close)
	ms := make([]machine, len(c.Nodes))
	for i, node := range c.Nodes {
		ms[i] = machine{node: node, addr: node.Host()}
	}
	return ms, c.World
}

// freeLoopbackPort returns a port free on 127.0.0.1 now.
func freeLoopbackPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// appendConfig appends TOML to the binary's configuration.
func (e *env) appendConfig(text string) {
	e.tb.Helper()
	f, err := os.OpenFile(e.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		e.tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		e.tb.Fatal(err)
	}
}

// tenantTOML declares a metal tenant: one control plane on machine 0, the
// other machines as the workers' pool, opts.workers of them in use.
func (e *env) tenantTOML() string { return e.tenantTOMLWith(nil, "") }

// tenantTOMLWith is tenantTOML with more keys for the i-th worker machine
// (lines of "  key = value\n"; nil: none) and a tail for the workers'
// group (its [node_groups.pool], say).
func (e *env) tenantTOMLWith(machineKeys func(i int) string, workersTail string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# written by the end-to-end test; Home Assistant changes the counts
display_name       = "Lab"
provider           = "metal"
talos_version      = %q
kubernetes_version = "1.35.0"
auto_apply         = true

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = %q
  install_disk = "/dev/sda"

# the workers draw from a pool of %d machines
[[node_groups]]
name  = "workers"
role  = "worker"
count = %d   # set from Home Assistant
`, simnode.DefaultTalosVersion, e.machines[0].addr, len(e.machines)-1, e.opts.workers)
	for i, m := range e.machines[1:] {
		fmt.Fprintf(&b, "  [[node_groups.machines]]\n  address      = %q\n  install_disk = \"/dev/sda\"\n", m.addr)
		if machineKeys != nil {
			b.WriteString(machineKeys(i))
		}
	}
	b.WriteString(workersTail)
	return b.String()
}

// start runs `rezuscloud run --config` and waits until it has published
// its availability, the tenant's discovery and state. It returns the mark
// of the capture from before the start.
func (e *env) start() int {
	e.tb.Helper()
	mark := e.cap.mark()
	e.proc = startProc(e.tb, "rezuscloud run", nil, "run", "--config", e.cfgPath)
	avail, disc, st := base+"/bridge/availability", e.discTopic(e.tenantID()), e.tenantStateTopic()
	e.cap.wait(e.proc, startTimeout, "rezuscloud online with the tenant's discovery and state", func() bool {
		var on, d, s bool
		for _, m := range e.cap.since(mark) {
			switch m.Topic {
			case avail:
				on = string(m.Payload) == "online"
			case disc:
				d = len(m.Payload) > 0
			case st:
				s = len(m.Payload) > 0
			}
		}
		return on && d && s
	})
	return mark
}

// checkNoDeviceCleared fails when the retained discovery of a declared
// device was cleared after mark: Home Assistant would delete the device
// and its entities (with the user's names, areas and history links) and
// create them anew.
func (e *env) checkNoDeviceCleared(mark int, nodes ...string) {
	e.tb.Helper()
	ids := []string{e.tenantID()}
	for _, n := range nodes {
		ids = append(ids, e.nodeID(n))
	}
	for _, id := range ids {
		for _, m := range e.cap.since(mark) {
			if m.Topic == e.discTopic(id) && len(m.Payload) == 0 {
				e.tb.Errorf("the start cleared the retained discovery of the declared device %s "+
					"(Home Assistant deletes the device and its entities, then creates them anew)", id)
				break
			}
		}
	}
}

// stop sends SIGTERM and checks a clean exit that leaves availability offline.
func (e *env) stop() {
	e.tb.Helper()
	code, took := e.proc.terminate(stopTimeout)
	if code != 0 {
		e.tb.Fatalf("rezuscloud exited with code %d after SIGTERM (took %v)", code, took)
	}
	e.cap.wait(nil, 30*time.Second, "availability offline (retained) after the exit", func() bool {
		m, ok := e.cap.lastMsg(base + "/bridge/availability")
		return ok && m.Retained && string(m.Payload) == "offline"
	})
}

func (e *env) tenantID() string { return base + "_" + e.opts.tenant }
func (e *env) nodeID(node string) string {
	return base + "_" + e.opts.tenant + "_" + strings.TrimPrefix(node, e.opts.tenant+"-")
}
func (e *env) discTopic(id string) string {
	return prefix + "/device/" + id + "/config"
}
func (e *env) tenantStateTopic() string       { return base + "/" + e.opts.tenant + "/state" }
func (e *env) nodeStateTopic(n string) string { return base + "/" + e.opts.tenant + "/" + n + "/state" }
func (e *env) node(group string, i int) string {
	return fmt.Sprintf("%s-%s-%d", e.opts.tenant, group, i)
}

func (e *env) tenantState() (tenantDoc, bool) {
	var d tenantDoc
	m, ok := e.cap.lastMsg(e.tenantStateTopic())
	if !ok || len(m.Payload) == 0 {
		return d, false
	}
	if err := json.Unmarshal(m.Payload, &d); err != nil {
		e.tb.Fatalf("tenant state is not JSON: %v: %s", err, m.Payload)
	}
	return d, true
}

func (e *env) nodeState(n string) (nodeDoc, bool) {
	var d nodeDoc
	m, ok := e.cap.lastMsg(e.nodeStateTopic(n))
	if !ok || len(m.Payload) == 0 {
		return d, false
	}
	if err := json.Unmarshal(m.Payload, &d); err != nil {
		e.tb.Fatalf("node state is not JSON: %v: %s", err, m.Payload)
	}
	return d, true
}

func (e *env) describeTenant() string {
	d, ok := e.tenantState()
	if !ok {
		return "tenant state: none"
	}
	return "tenant state: " + d.String()
}

// waitTenant waits until the tenant's state document satisfies cond.
func (e *env) waitTenant(what string, cond func(tenantDoc) bool) tenantDoc {
	e.tb.Helper()
	var d tenantDoc
	e.cap.wait(e.proc, phaseTimeout, "tenant state: "+what, func() bool {
		var ok bool
		d, ok = e.tenantState()
		return ok && cond(d)
	}, e.describeTenant)
	return d
}

// waitNode waits until the node's state document satisfies cond.
func (e *env) waitNode(n, what string, cond func(nodeDoc) bool) nodeDoc {
	e.tb.Helper()
	var d nodeDoc
	e.cap.wait(e.proc, phaseTimeout, fmt.Sprintf("node %s: %s", n, what), func() bool {
		var ok bool
		d, ok = e.nodeState(n)
		return ok && cond(d)
	}, func() string {
		m, _ := e.cap.lastMsg(e.nodeStateTopic(n))
		return fmt.Sprintf("node state: %s", m.Payload)
	})
	return d
}

// waitOp waits for the end (succeeded, failed or cancelled) of the
// tenant's operation op among the events after mark.
func (e *env) waitOp(mark int, op string) eventDoc {
	e.tb.Helper()
	var ev eventDoc
	e.cap.wait(e.proc, phaseTimeout, "the end of operation "+op, func() bool {
		for _, m := range e.cap.since(mark) {
			if m.Topic != base+"/bridge/event" {
				continue
			}
			var d eventDoc
			if json.Unmarshal(m.Payload, &d) == nil && d.Tenant == e.opts.tenant && d.Operation == op && d.EventType != "started" {
				ev = d
				return true
			}
		}
		return false
	}, e.describeTenant)
	return ev
}

// mustSucceed waits for op to end and fails the test unless it succeeded.
func (e *env) mustSucceed(mark int, op string) {
	e.tb.Helper()
	if ev := e.waitOp(mark, op); ev.EventType != "succeeded" {
		e.tb.Fatalf("%s %s: %s", op, ev.EventType, ev.Message)
	}
}

// events returns the tenant's operation events after mark.
func (e *env) events(mark int) []eventDoc {
	var out []eventDoc
	for _, m := range e.cap.since(mark) {
		var d eventDoc
		if m.Topic == base+"/bridge/event" && json.Unmarshal(m.Payload, &d) == nil && d.Tenant == e.opts.tenant {
			out = append(out, d)
		}
	}
	return out
}

// opsBetween lists the operations the tenant ran between two marks, as
// its state documents (operation) and the operation events show them (the
// events of an operation that started before the bridge connected are not
// published; its state still shows it).
func (e *env) opsBetween(from, to int) []string {
	var out []string
	add := func(op string) {
		if !slices.Contains(out, op) {
			out = append(out, op)
		}
	}
	msgs := e.cap.since(from)
	if to >= from && to-from < len(msgs) {
		msgs = msgs[:to-from]
	}
	for _, m := range msgs {
		switch m.Topic {
		case e.tenantStateTopic():
			var d tenantDoc
			if json.Unmarshal(m.Payload, &d) == nil && d.Operation != nil {
				add(*d.Operation)
			}
		case base + "/bridge/event":
			var d eventDoc
			if json.Unmarshal(m.Payload, &d) == nil && d.Tenant == e.opts.tenant {
				add(d.Operation)
			}
		}
	}
	return out
}

func (e *env) publish(topic, payload string) {
	e.tb.Helper()
	if tok := e.pub.Publish(topic, 1, false, payload); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		e.tb.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// request sends a request API message and waits for its response.
func (e *env) request(action string, body map[string]any) responseDoc {
	e.tb.Helper()
	tr := fmt.Sprintf("e2e-%d", rand.Int64())
	body["transaction"] = tr
	p, _ := json.Marshal(body)
	mark := e.cap.mark()
	e.publish(base+"/bridge/request/"+action, string(p))
	var r responseDoc
	e.cap.wait(e.proc, phaseTimeout, "the response to "+string(p), func() bool {
		for _, m := range e.cap.since(mark) {
			if m.Topic != base+"/bridge/response/"+action {
				continue
			}
			var d responseDoc
			if json.Unmarshal(m.Payload, &d) == nil && string(d.Transaction) == strconv.Quote(tr) {
				r = d
				return true
			}
		}
		return false
	})
	return r
}

// discovery returns the retained discovery payload of a device, decoded.
func (e *env) discovery(id string) map[string]any {
	e.tb.Helper()
	m, ok := e.cap.lastMsg(e.discTopic(id))
	if !ok || len(m.Payload) == 0 {
		e.tb.Fatalf("no discovery for device %s", id)
	}
	var d map[string]any
	if err := json.Unmarshal(m.Payload, &d); err != nil {
		e.tb.Fatalf("discovery of %s is not JSON: %v", id, err)
	}
	return d
}

// commandTopic reads a component's command topic from a device discovery
// payload (full or abbreviated keys, "~" expanded).
func commandTopic(tb testing.TB, disc map[string]any, comp string) string {
	tb.Helper()
	cmps, _ := disc["components"].(map[string]any)
	if cmps == nil {
		cmps, _ = disc["cmps"].(map[string]any)
	}
	c, _ := cmps[comp].(map[string]any)
	if c == nil {
		tb.Fatalf("discovery has no component %q (has %v)", comp, keys(cmps))
	}
	t, _ := c["command_topic"].(string)
	if t == "" {
		t, _ = c["cmd_t"].(string)
	}
	if t == "" {
		tb.Fatalf("component %q has no command topic", comp)
	}
	if tilde, ok := c["~"].(string); ok {
		if strings.HasPrefix(t, "~") {
			t = tilde + t[1:]
		} else if strings.HasSuffix(t, "~") {
			t = t[:len(t)-1] + tilde
		}
	}
	return t
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ---------------------------------------------------------------------------
// issue 7 check 2: conformance and secrets of everything published

// checkDiscovery runs every discovery message recorded through one
// hasstest checker (in order, with its retain flag).
func checkDiscovery(tb testing.TB, msgs []mqttMsg) int {
	tb.Helper()
	chk := hasstest.NewChecker()
	n := 0
	seen := map[string]bool{}
	for _, m := range msgs {
		if !strings.HasPrefix(m.Topic, prefix+"/") || !strings.HasSuffix(m.Topic, "/config") {
			continue
		}
		n++
		for _, err := range chk.Check(m.Topic, m.Payload, m.Retained) {
			if !seen[err.Error()] {
				seen[err.Error()] = true
				tb.Errorf("discovery does not conform: %v", err)
			}
		}
	}
	if n == 0 {
		tb.Errorf("no discovery message was recorded")
	}
	return n
}

// tenantSecrets collects the secret values of a tenant's secrets bundle
// (every value except the public certificates), in the forms they could
// leak in: as stored (base64 of PEM for keys), decoded, and a piece of
// the key material itself.
func tenantSecrets(tb testing.TB, path string) []string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("secrets bundle: %v", err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		tb.Fatalf("secrets bundle %s: %v", path, err)
	}
	var out []string
	add := func(s string) {
		if len(s) >= 12 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(k, c)
			}
		case []any:
			for _, c := range x {
				walk(key, c)
			}
		case string:
			if key == "crt" || key == "id" {
				return // public certificates, the cluster id
			}
			add(x)
			if dec, err := base64.StdEncoding.DecodeString(x); err == nil {
				if s := string(dec); strings.Contains(s, "-----BEGIN") {
					add(s)
					// a line of the key material
					for _, l := range strings.Split(s, "\n") {
						if len(l) >= 40 && !strings.HasPrefix(l, "-----") {
							add(l[:40])
							break
						}
					}
				}
			}
		}
	}
	walk("", doc)
	if len(out) < 4 {
		tb.Fatalf("secrets bundle %s: only %d secret values found", path, len(out))
	}
	return out
}

// checkNoSecrets fails for any recorded payload that contains a known
// secret, a PEM block, or what hasstest.ScanSecrets recognises.
func checkNoSecrets(tb testing.TB, msgs []mqttMsg, known []string) {
	tb.Helper()
	reported := 0
	for _, m := range msgs {
		if strings.HasPrefix(m.Topic, "e2e/") {
			continue // the test's own probe
		}
		var found []string
		if bytes.Contains(m.Payload, []byte("-----BEGIN")) {
			found = append(found, "-----BEGIN")
		}
		for _, k := range known {
			if k != "" && bytes.Contains(m.Payload, []byte(k)) {
				found = append(found, fmt.Sprintf("known secret %.6q…", k))
			}
		}
		found = append(found, hasstest.ScanSecrets(m.Payload)...)
		if len(found) > 0 {
			reported++
			if reported <= 20 {
				tb.Errorf("secret on MQTT topic %s: %v", m.Topic, found)
			}
		}
	}
	if reported > 20 {
		tb.Errorf("... %d payloads with secrets in all", reported)
	}
}

// checkLogNoSecrets fails when the log holds a known secret or a PEM block.
func checkLogNoSecrets(tb testing.TB, log string, known []string) {
	tb.Helper()
	if strings.Contains(log, "-----BEGIN") {
		tb.Errorf("the log holds a PEM block")
	}
	for _, k := range known {
		if k != "" && strings.Contains(log, k) {
			tb.Errorf("the log holds a secret (%.6q…)", k)
		}
	}
}
