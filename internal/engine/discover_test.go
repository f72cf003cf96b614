package engine

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
)

// machineRec is a Publisher that also records the machines shown.
type machineRec struct {
	*recorder
	mu    sync.Mutex
	shown [][]talos.Machine
	first chan struct{} // closed at the first SetMachines
	once  sync.Once
}

func (m *machineRec) SetMachines(ms []talos.Machine) {
	m.mu.Lock()
	m.shown = append(m.shown, ms)
	m.mu.Unlock()
	m.once.Do(func() { close(m.first) })
}

func (m *machineRec) last() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.shown) == 0 {
		return nil
	}
	var out []string
	for _, x := range m.shown[len(m.shown)-1] {
		out = append(out, x.MAC)
	}
	return out
}

// TestDiscoverAndAdopt: scans show the machines that answer (a fake probe
// stands for the maintenance API), keep one that misses two scans and
// drop it at the third; Adopt refuses bad input naming the machine, then
// writes it into the tenant file, after which it is no longer shown.
func TestDiscoverAndAdopt(t *testing.T) {
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	port := l1.Addr().(*net.TCPAddr).Port
	l2, err := net.Listen("tcp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Skipf("second loopback listener: %v", err)
	}
	probe := func(_ context.Context, endpoint string) (talos.Machine, error) {
		host, _, _ := net.SplitHostPort(endpoint)
		return talos.Machine{Address: host, MAC: "02:00:00:00:00:0" + host[len(host)-1:], Model: "NUC",
			Disks: []talos.Disk{{DevPath: "/dev/nvme0n1", Size: 500e9, Transport: "nvme"}, {DevPath: "/dev/sda", Size: 1000e9, Transport: "usb"}}}, nil
	}
	f := newFixture(t, 2, 1, false)
	f.stop()
	pub := &machineRec{recorder: f.rec, first: make(chan struct{})}
	f.tweak = func(o *Options) {
		o.Publisher = pub
		o.Discovery = DiscoveryOptions{CIDRs: []string{"127.0.0.0/30"}, Interval: time.Hour, Port: port, Timeout: time.Second, Probe: probe}
	}
	f.start()
	ctx := context.Background()
	scan := func(want string) {
		t.Helper()
		if _, err := f.eng.Discover(ctx); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(pub.last(), ","); got != want {
			t.Fatalf("shown %q, want %q", got, want)
		}
	}
	// the scan at start-up first (it would count as a scan below)
	select {
	case <-pub.first:
	case <-time.After(30 * time.Second):
		t.Fatal("no scan at start-up")
	}
	scan("02:00:00:00:00:01,02:00:00:00:00:02")
	l2.Close()
	scan("02:00:00:00:00:01,02:00:00:00:00:02") // one miss
	scan("02:00:00:00:00:01,02:00:00:00:00:02") // two
	scan("02:00:00:00:00:01")                   // three: gone

	before, _ := os.ReadFile(f.store.Path("lab"))
	for _, tc := range []struct{ mac, tenant, group, disk, want string }{
		{"02:00:00:00:00:01", "nope", "workers", "", "unknown tenant"},
		{"02:00:00:00:00:01", "lab", "cp", "", "odd"},
		{"02:00:00:00:00:01", "lab", "workers", "/dev/sda", "removable"},
		{"02:00:00:00:00:01", "lab", "workers", "/dev/vdz", "no disk"},
		{"02:00:00:00:00:02", "lab", "workers", "", "no scan found it"},
	} {
		if _, err := f.eng.Adopt(ctx, tc.mac, tc.tenant, tc.group, tc.disk); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.mac) {
			t.Errorf("adopt %v: %v, want an error naming the machine with %q", tc, err, tc.want)
		}
	}
	if after, _ := os.ReadFile(f.store.Path("lab")); string(after) != string(before) {
		t.Fatal("a refused adopt changed the file")
	}
	if _, err := f.eng.Adopt(ctx, "02:00:00:00:00:01", "lab", "workers", ""); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(f.store.Path("lab"))
	if !strings.Contains(string(after), "address      = \"127.0.0.1\"\n  mac          = \"02:00:00:00:00:01\"\n  install_disk = \"/dev/nvme0n1\"") ||
		!strings.Contains(string(after), "count = 2") {
		t.Fatalf("file after adopt:\n%s", after)
	}
	if got := pub.last(); len(got) != 0 {
		t.Fatalf("the adopted machine is still shown: %v", got)
	}
	if _, err := f.eng.Adopt(ctx, "02:00:00:00:00:01", "lab", "workers", ""); err == nil || !strings.Contains(err.Error(), "already declares") {
		t.Fatalf("adopting it again: %v", err)
	}
}
