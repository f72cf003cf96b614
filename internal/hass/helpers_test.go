package hass

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/rezuscloud/rezuscloud/internal/machine"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// fakeCmd is a Commander that records calls.
type fakeCmd struct {
	mu    sync.Mutex
	calls []string
	fail  error
	ch    chan string
	// bridge, when set, is shown a changed file the way the engine shows
	// it (SetAutoApply)
	bridge *Bridge
}

func newFakeCmd() *fakeCmd { return &fakeCmd{ch: make(chan string, 100)} }

func (f *fakeCmd) rec(format string, a ...any) error {
	s := fmt.Sprintf(format, a...)
	f.mu.Lock()
	f.calls = append(f.calls, s)
	err := f.fail
	f.mu.Unlock()
	select {
	case f.ch <- s:
	default:
	}
	return err
}

func (f *fakeCmd) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCmd) Apply(_ context.Context, t string) error  { return f.rec("apply %s", t) }
func (f *fakeCmd) Plan(_ context.Context, t string) error   { return f.rec("plan %s", t) }
func (f *fakeCmd) Cancel(_ context.Context, t string) error { return f.rec("cancel %s", t) }
func (f *fakeCmd) Destroy(_ context.Context, t, c string) error {
	return f.rec("destroy %s %s", t, c)
}
func (f *fakeCmd) Scale(_ context.Context, t, g string, n int) error {
	return f.rec("scale %s %s %d", t, g, n)
}
func (f *fakeCmd) Bootstrap(_ context.Context, t string) error { return f.rec("bootstrap %s", t) }
func (f *fakeCmd) Reboot(_ context.Context, t, n string) error {
	return f.rec("reboot %s %s", t, n)
}
func (f *fakeCmd) SetAutoApply(_ context.Context, t string, on bool) error {
	err := f.rec("auto_apply %s %v", t, on)
	f.mu.Lock()
	b := f.bridge
	f.mu.Unlock()
	if err == nil && b != nil {
		b.mu.Lock()
		v, ok := b.views[t]
		b.mu.Unlock()
		if ok {
			spec := *v.Spec
			spec.AutoApply = on
			v.Spec = &spec
			v.Status = statusOf(&spec, v.Status)
			b.SetTenant(v)
		}
	}
	return err
}
func (f *fakeCmd) Reload(context.Context) error { return f.rec("reload") }
func (f *fakeCmd) Upgrade(_ context.Context, t, c, v string) error {
	return f.rec("upgrade %s %s %s", t, c, v)
}
func (f *fakeCmd) Backup(_ context.Context, t string) error { return f.rec("backup %s", t) }
func (f *fakeCmd) SetLogLevel(l string) error               { return f.rec("log_level %s", l) }

// Discover answers one machine, so that the response's data is seen.
func (f *fakeCmd) Discover(context.Context) ([]machine.Machine, error) {
	if err := f.rec("discover"); err != nil {
		return nil, err
	}
	return []machine.Machine{{MAC: "02:00:00:00:00:09", Address: "127.0.0.9"}}, nil
}
func (f *fakeCmd) Adopt(_ context.Context, mac, t, g, d string) (tenant.Machine, error) {
	if err := f.rec("adopt %s %s %s %s", mac, t, g, d); err != nil {
		return tenant.Machine{}, err
	}
	return tenant.Machine{MAC: mac, Address: "127.0.0.9", InstallDisk: "/dev/sda"}, nil
}
func (f *fakeCmd) Forget(_ context.Context, t, n string, confirm bool) error {
	return f.rec("forget %s %s %v", t, n, confirm)
}
func (f *fakeCmd) Replace(_ context.Context, t, n, mac string) error {
	return f.rec("replace %s %s %s", t, n, mac)
}
func (f *fakeCmd) Power(_ context.Context, t, n, st string) error {
	return f.rec("power %s %s %s", t, n, st)
}

// waitCall waits for a call with the prefix.
func (f *fakeCmd) waitCall(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case c := <-f.ch:
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("call %q not made; calls: %q", want, f.Calls())
		}
	}
}

// noCall checks that no call arrives for a while.
func (f *fakeCmd) noCall(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case c := <-f.ch:
		t.Fatalf("unexpected call %q", c)
	case <-time.After(d):
	}
}

func labTenant() *tenant.Tenant {
	return &tenant.Tenant{
		Name: "lab", DisplayName: "Lab", Provider: tenant.ProviderMetal,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: "192.168.1.21", InstallDisk: "/dev/sda"}}},
			{Name: "workers", Role: tenant.RoleWorker, Count: 2, Machines: []tenant.Machine{
				{Address: "192.168.1.31", InstallDisk: "/dev/sda"}, {Address: "192.168.1.32", InstallDisk: "/dev/sda"},
				{Address: "192.168.1.33", InstallDisk: "/dev/sda"}}},
		},
	}
}

func cloudTenant(name string, workers int) *tenant.Tenant {
	return &tenant.Tenant{
		Name: name, Provider: tenant.ProviderOCI,
		TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		OCI: &tenant.OCI{CompartmentOCID: "ocid1.compartment.oc1..x", Region: "eu-frankfurt-1"},
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1},
			{Name: "workers", Role: tenant.RoleWorker, Count: workers},
		},
	}
}

func fastOptions(url string) Options {
	return Options{
		URL:                  url,
		BaseTopic:            "rezuscloud",
		Version:              "1.2.3",
		BirthDelay:           time.Millisecond,
		ArmTimeout:           400 * time.Millisecond,
		CleanupWindow:        300 * time.Millisecond,
		ConnectTimeout:       5 * time.Second,
		MaxReconnectInterval: 300 * time.Millisecond,
	}
}

// startBridge starts a bridge with tenants declared before Start.
func startBridge(t testing.TB, opts Options, cmd Commander, ts []*tenant.Tenant, tweak ...func(*Bridge)) *Bridge {
	t.Helper()
	var log *zap.Logger
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	} else {
		log = zap.NewNop()
	}
	b := New(opts, cmd, log)
	for _, f := range tweak {
		f(b)
	}
	b.SetTenants(views(ts...))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(b.Close)
	if err := b.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	return b
}

type msg struct {
	topic    string
	payload  []byte
	retained bool
	at       time.Time
}

// observer is an independent MQTT client that records everything.
type observer struct {
	c      mqtt.Client
	id     string
	mu     sync.Mutex
	last   map[string]msg // by topic: last message (retained or not)
	all    []msg
	ch     chan msg
	marks  chan string // sync markers of this observer, in arrival order
	nmarks atomic.Int64
}

// markerPrefix is where observers publish their sync markers; observers
// never record messages under it.
const markerPrefix = "rezuscloud-test/sync/"

func newObserver(t testing.TB, url string, filters ...string) *observer {
	t.Helper()
	o := &observer{last: map[string]msg{}, ch: make(chan msg, 10000), marks: make(chan string, 100),
		id: fmt.Sprintf("observer-%d-%d", time.Now().UnixNano(), observerSeq.Add(1))}
	opts := mqtt.NewClientOptions().AddBroker(url).SetClientID(o.id).
		SetAutoReconnect(false).SetOrderMatters(true)
	o.c = mqtt.NewClient(opts)
	if tok := o.c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("observer connect: %v", tok.Error())
	}
	if len(filters) == 0 {
		filters = []string{"#"}
	}
	m := map[string]byte{markerPrefix + o.id + "/#": 1}
	for _, f := range filters {
		m[f] = 1
	}
	tok := o.c.SubscribeMultiple(m, func(_ mqtt.Client, mm mqtt.Message) {
		if strings.HasPrefix(mm.Topic(), markerPrefix) {
			if strings.HasPrefix(mm.Topic(), markerPrefix+o.id+"/") {
				select {
				case o.marks <- mm.Topic():
				default:
				}
			}
			return // another observer's marker (seen through "#"), or ours: not recorded
		}
		x := msg{mm.Topic(), append([]byte(nil), mm.Payload()...), mm.Retained(), time.Now()}
		o.mu.Lock()
		o.last[x.topic] = x
		o.all = append(o.all, x)
		o.mu.Unlock()
		select {
		case o.ch <- x:
		default:
		}
	})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("observer subscribe: %v", tok.Error())
	}
	t.Cleanup(func() { o.c.Disconnect(50) })
	return o
}

var observerSeq atomic.Int64

// sync waits until the observer has received everything the broker had
// queued for it when sync was called: the retained copies sent when it
// subscribed, and every message the broker acknowledged to its publisher
// before (e.g. after (*Bridge).Sync returned). It publishes a marker on
// its own connection, which the broker queues behind those messages, and
// waits for the marker (handlers run in order: SetOrderMatters(true)).
func (o *observer) sync(t testing.TB) {
	t.Helper()
	want := fmt.Sprintf("%s%s/%d", markerPrefix, o.id, o.nmarks.Add(1))
	if tok := o.c.Publish(want, 1, false, []byte("marker")); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("observer marker publish: %v", tok.Error())
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case got := <-o.marks:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("observer marker %s not received", want)
		}
	}
}

func (o *observer) get(topic string) (msg, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m, ok := o.last[topic]
	return m, ok
}

func (o *observer) snapshot() map[string]msg {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]msg, len(o.last))
	for k, v := range o.last {
		out[k] = v
	}
	return out
}

func (o *observer) count(topic string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range o.all {
		if m.topic == topic {
			n++
		}
	}
	return n
}

// waitPayload waits until topic's last payload satisfies ok.
func (o *observer) waitPayload(t testing.TB, topic string, d time.Duration, ok func([]byte) bool) msg {
	t.Helper()
	var m msg
	testenv.WaitFor(t, d, "message on "+topic, func() bool {
		var has bool
		m, has = o.get(topic)
		return has && ok(m.payload)
	})
	return m
}

func publish(t testing.TB, url, topic string, payload []byte, retained bool) {
	t.Helper()
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("pub-%d", time.Now().UnixNano())))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	if tok := c.Publish(topic, 1, retained, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
}

// proxy is a TCP proxy in front of the broker whose connections a test
// can cut (RST both ways: the client gets an error, the broker sees a
// connection lost without DISCONNECT) and whose new connections it can
// refuse (the client stays dead).
type proxy struct {
	ln      net.Listener
	target  string
	refuse  atomic.Bool
	refused atomic.Int64 // connections refused while refuse is set
	mu      sync.Mutex
	conns   []net.Conn
}

func newProxy(t testing.TB, brokerURL string) *proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: u.Host}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	return p
}

func (p *proxy) URL() string { return "tcp://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = c.Close()
			p.refused.Add(1)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

// cut resets every proxied connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	p.conns = nil
}

func broker(t testing.TB) *testenv.Mosquitto { return testenv.StartMosquitto(t) }

func isDiscovery(topic string) bool { return strings.HasPrefix(topic, "homeassistant/device/") }

// mark returns the number of messages seen so far (for waitSequence).
func (o *observer) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.all)
}

// waitSequence waits until the payloads appear in order on topic among the
// messages seen after mark.
func (o *observer) waitSequence(t testing.TB, topic string, mark int, d time.Duration, payloads ...string) {
	t.Helper()
	testenv.WaitFor(t, d, fmt.Sprintf("%v on %s", payloads, topic), func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		i := 0
		for _, x := range o.all[mark:] {
			if x.topic == topic && i < len(payloads) && string(x.payload) == payloads[i] {
				i++
			}
		}
		return i == len(payloads)
	})
}

// viewOf is a tenant as the engine shows it before anything ran: phase
// absent, every declared node pending at its machine's address.
func viewOf(t *tenant.Tenant) tenant.View {
	v := tenant.View{Name: t.Name, Spec: t, Nodes: map[string]tenant.NodeStatus{}}
	v.Status = statusOf(t, tenant.Status{Phase: tenant.PhaseAbsent})
	for _, n := range t.Nodes() {
		ns := tenant.NodeStatus{Stage: tenant.StagePending, Role: n.Role, Group: n.Group, Power: "unknown"}
		if n.Machine != nil {
			ns.Address = n.Machine.Address
		}
		v.Nodes[n.Name] = ns
	}
	return v
}

// statusOf fills what the engine's view takes from the file into st.
func statusOf(t *tenant.Tenant, st tenant.Status) tenant.Status {
	if st.NodesTotal == 0 {
		st.NodesTotal = len(t.Nodes())
	}
	if st.TalosVersion == "" {
		st.TalosVersion = t.TalosVersion
	}
	if st.KubernetesVersion == "" {
		st.KubernetesVersion = t.KubernetesVersion
	}
	st.Provider, st.AutoApply = t.Provider, t.AutoApply
	st.Counts = map[string]int{}
	for _, g := range t.NodeGroups {
		st.Counts[g.Name] = g.Count
	}
	if st.Summary == "" {
		st.Summary = tenant.Summary(st)
	}
	return st
}

// views maps viewOf over ts.
func views(ts ...*tenant.Tenant) []tenant.View {
	out := make([]tenant.View, 0, len(ts))
	for _, t := range ts {
		out = append(out, viewOf(t))
	}
	return out
}

// setStatus hands the bridge a tenant's status, the rest of its view as
// it was.
func setStatus(b *Bridge, name string, st tenant.Status) {
	b.mu.Lock()
	v, ok := b.views[name]
	b.mu.Unlock()
	if !ok {
		return
	}
	v.Status = statusOf(v.Spec, st)
	b.SetTenant(v)
}

// setNode hands the bridge one node's state, the rest of its view as it was.
func setNode(b *Bridge, name, node string, ns tenant.NodeStatus) {
	b.mu.Lock()
	v, ok := b.views[name]
	b.mu.Unlock()
	if !ok {
		return
	}
	n, ok := v.Spec.Node(node)
	if !ok {
		return
	}
	if ns.Role == "" {
		ns.Role, ns.Group = n.Role, n.Group
	}
	if ns.Power == "" {
		ns.Power = "on"
		if ns.Stage == tenant.StageUnreachable {
			ns.Power = "off"
		}
	}
	nodes := make(map[string]tenant.NodeStatus, len(v.Nodes))
	for k, s := range v.Nodes {
		nodes[k] = s
	}
	nodes[node] = ns
	v.Nodes = nodes
	b.SetTenant(v)
}
