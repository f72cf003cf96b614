package web

import (
	"context"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web/webtest"
)

// The tenants of the tests: a metal lab (its comments must survive an
// adoption) and an OpenStack cloud.
const labFile = `# the lab cluster, by hand
display_name       = "Lab"
provider           = "metal"
talos_version      = "v1.13.0"
kubernetes_version = "1.35.0"
auto_apply         = false

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = "192.168.1.21"
  install_disk = "/dev/sda"

# workers: adopted from the panel
[[node_groups]]
name  = "workers"
role  = "worker"
count = 1   # raised by adopting
  [[node_groups.machines]]
  address      = "192.168.1.31"
  mac          = "aa:bb:cc:dd:ee:31"
  install_disk = "/dev/nvme0n1"
`

const cloudFile = `provider           = "openstack"
talos_version      = "v1.13.0"
kubernetes_version = "1.35.0"
auto_apply         = true
[openstack]
region  = "RegionOne"
network = "lan"
image   = "talos-v1.13.0"
[[node_groups]]
name   = "cp"
role   = "controlplane"
count  = 3
flavor = "m1.large"
[[node_groups]]
name   = "workers"
role   = "worker"
count  = 2
flavor = "m1.xlarge"
`

// Users of the stand-in Home Assistant.
var (
	adminUser = webtest.User{ID: "0a1d3b6f8e2c4b7d9f1e3a5c7b9d1f3e", Name: "alice", DisplayName: "Alice"}
	plainUser = webtest.User{ID: "7c5e3a1f9d7b5c3e1a9f7d5b3c1e9a7f", Name: "bob", DisplayName: "Bob"}
)

// harness is the panel with a fake engine behind the real command path,
// a real tenant store, Home Assistant's users from a stand-in of its
// WebSocket API, and an ingress in front (from 127.0.0.2, the only trusted
// peer).
type harness struct {
	t      testing.TB
	store  *tenant.Store
	eng    *fakeEngine
	bridge *hass.Bridge
	srv    *Server
	addr   string // the panel's host:port
	in     *webtest.Ingress
	ha     *fakeha.Server
	logs   *observer.ObservedLogs
}

// ingressFrom is the address the test ingress connects from: it stands in
// for the Supervisor's 172.30.32.2.
var ingressFrom = netip.MustParseAddr("127.0.0.2")

func newHarness(t testing.TB) *harness {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"lab": labFile, "cloud": cloudFile} {
		if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, store: &tenant.Store{Dir: dir}}
	h.eng = newFakeEngine(t, h.store)
	h.eng.machines = []talos.Machine{{
		Address: "192.168.1.50", MAC: "02:00:00:00:00:50", MACs: []string{"02:00:00:00:00:50"},
		Manufacturer: "ASRock", Model: "DeskMini X600", Serial: "M80-F1234", CPU: "AMD Ryzen 5 8600G", Cores: 6,
		MemoryBytes: 32 << 30, Fingerprint: "q7Xv3V4nq1mP0yJ0m3h7c2m6yJk2r8f5b1Zt9Wn4sQk=",
		Disks: []talos.Disk{
			{DevPath: "/dev/nvme0n1", Size: 1 << 40, Model: "Samsung 990 PRO", Transport: "nvme"},
			{DevPath: "/dev/sda", Size: 64 << 30, Model: "SanDisk Cruzer", Transport: "usb"},
		},
	}}
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	log := zap.New(core)

	h.ha = fakeha.New("ha-token")
	t.Cleanup(h.ha.Close)
	h.ha.AddUser(fakeha.User{ID: adminUser.ID, Username: adminUser.Name, Name: adminUser.DisplayName, IsActive: true,
		Groups: []string{fakeha.GroupAdmin}})
	h.ha.AddUser(fakeha.User{ID: plainUser.ID, Username: plainUser.Name, Name: plainUser.DisplayName, IsActive: true,
		Groups: []string{fakeha.GroupUsers}})
	ws := connectHA(t, h.ha.URL, "ha-token")

	h.bridge = hass.New(hass.Options{URL: "tcp://127.0.0.1:1"}, h.eng, nil)
	srv, err := New(Options{Source: h.eng, Command: h.bridge.HandleRequest, Files: h.store,
		Admins: NewHAUsers(ws.Call), Trusted: []netip.Prefix{netip.PrefixFrom(ingressFrom, 32)},
		Version: "test", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	sctx, scancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(sctx, ln, srv) }()
	t.Cleanup(func() {
		scancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	h.in = webtest.NewIngress(t, h.addr, ingressFrom, adminUser)
	return h
}

// connectHA connects a WebSocket API client to (a stand-in of) Home
// Assistant for the test.
func connectHA(t testing.TB, url, token string) *wsapi.Client {
	t.Helper()
	ws := wsapi.New(wsapi.Options{URL: url, Token: token}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ws.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := ws.WaitConnected(wctx); err != nil {
		t.Fatal(err)
	}
	return ws
}

// client is an HTTP client of the ingress with a session cookie.
func (h *harness) client() *http.Client {
	h.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(h.in.URL + "/session")
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return c
}
