package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseCIDR(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the prefix, or "" when refused
		errPart string
	}{
		{"192.168.1.0/24", "192.168.1.0/24", ""},
		{"192.168.1.77/24", "192.168.1.0/24", ""},
		{" 10.20.0.0/22 ", "10.20.0.0/22", ""},
		{"172.16.4.0/23", "172.16.4.0/23", ""},
		{"172.31.255.0/24", "172.31.255.0/24", ""},
		{"169.254.3.0/24", "169.254.3.0/24", ""},
		{"127.91.5.0/24", "127.91.5.0/24", ""},
		{"192.168.1.10", "192.168.1.10/32", ""},
		{"fd00:1::/120", "fd00:1::/120", ""},
		{"fe80::/118", "fe80::/118", ""},
		{"10.0.0.0/21", "", "too large"},
		{"10.0.0.0/8", "", "too large"},
		{"fd00::/64", "", "too large"},
		{"8.8.8.0/24", "", "not a private"},
		{"172.32.0.0/24", "", "not a private"},
		{"192.169.0.0/24", "", "not a private"},
		{"0.0.0.0/0", "", "not a private"},
		{"2001:db8::/120", "", "not a private"},
		{"::ffff:10.0.0.0/120", "", "IPv4 form"},
		{"192.168.1.0/33", "", "not a CIDR"},
		{"lan", "", "not a CIDR"},
		{"", "", "not a CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParseCIDR(tt.in)
			if tt.want != "" {
				if err != nil || p.String() != tt.want {
					t.Fatalf("ParseCIDR(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseCIDR(%q) = %v; want an error", tt.in, p)
			}
			if !strings.Contains(err.Error(), tt.errPart) || !strings.Contains(err.Error(), fmt.Sprintf("%q", strings.TrimSpace(tt.in))) {
				t.Fatalf("error %q should name the cidr and say %q", err, tt.errPart)
			}
		})
	}
}

func TestHosts(t *testing.T) {
	tests := []struct {
		cidr        string
		n           int
		first, last string
	}{
		{"192.168.1.0/24", 254, "192.168.1.1", "192.168.1.254"},
		{"10.0.0.0/22", 1022, "10.0.0.1", "10.0.3.254"},
		{"10.0.0.4/30", 2, "10.0.0.5", "10.0.0.6"},
		{"10.0.0.4/31", 2, "10.0.0.4", "10.0.0.5"},
		{"10.0.0.9/32", 1, "10.0.0.9", "10.0.0.9"},
		{"fd00::/126", 3, "fd00::1", "fd00::3"},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			h := Hosts(netip.MustParsePrefix(tt.cidr))
			if len(h) != tt.n || h[0].String() != tt.first || h[len(h)-1].String() != tt.last {
				t.Fatalf("Hosts(%s): %d addresses %v..%v; want %d %s..%s", tt.cidr, len(h), h[0], h[len(h)-1], tt.n, tt.first, tt.last)
			}
		})
	}
}

func TestScanRefusesBadInputBeforeDialling(t *testing.T) {
	tests := []struct {
		name  string
		cidrs []string
		opts  Options[string]
		want  string
	}{
		{"public range", []string{"192.168.1.0/24", "1.1.1.0/24"}, Options[string]{}, `"1.1.1.0/24"`},
		{"too large", []string{"10.0.0.0/16"}, Options[string]{}, "too large"},
		{"concurrency over the bound", []string{"10.0.0.0/24"}, Options[string]{Concurrency: 65}, "concurrency 65"},
		{"negative concurrency", []string{"10.0.0.0/24"}, Options[string]{Concurrency: -1}, "concurrency -1"},
		{"bad port", []string{"10.0.0.0/24"}, Options[string]{Port: 70000}, "port 70000"},
		{"negative timeout", []string{"10.0.0.0/24"}, Options[string]{Timeout: -time.Second}, "timeouts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dials atomic.Int32
			tt.opts.Dial = func(context.Context, string, string) (net.Conn, error) {
				dials.Add(1)
				return nil, errors.New("refused")
			}
			_, err := Scan(context.Background(), tt.cidrs, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Scan: %v; want an error containing %s", err, tt.want)
			}
			if dials.Load() != 0 {
				t.Fatalf("%d dials after bad input", dials.Load())
			}
		})
	}
}

// gatedDialer counts concurrent dials and records every address; dials
// block until the gate opens. Addresses in answer get a connection.
type gatedDialer struct {
	gate     chan struct{}
	inflight atomic.Int32
	peak     atomic.Int32
	mu       sync.Mutex
	dialled  map[string]int
	answer   map[string]bool
}

func (d *gatedDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	n := d.inflight.Add(1)
	defer d.inflight.Add(-1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	d.mu.Lock()
	d.dialled[address]++
	d.mu.Unlock()
	select {
	case <-d.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if network != "tcp" {
		return nil, fmt.Errorf("network %s", network)
	}
	if d.answer[address] {
		a, b := net.Pipe()
		_ = b.Close()
		return a, nil
	}
	return nil, errors.New("connection refused")
}

func TestScanBoundsConcurrencyAndStaysInRange(t *testing.T) {
	for _, limit := range []int{0, 8, 1} {
		t.Run(fmt.Sprint("concurrency ", limit), func(t *testing.T) {
			want := limit
			if want == 0 {
				want = MaxConcurrency
			}
			d := &gatedDialer{gate: make(chan struct{}), dialled: map[string]int{},
				answer: map[string]bool{"10.9.8.7:50000": true, "10.9.9.1:50000": true, "10.9.8.0:50000": true}}
			type result struct {
				rep Report[string]
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := Scan(context.Background(), []string{"10.9.8.0/24", "10.9.9.0/30"}, Options[string]{
					Concurrency: limit, Dial: d.dial, Timeout: time.Minute,
					Probe: func(_ context.Context, ep string) (string, error) { return "m@" + ep, nil },
				})
				done <- result{rep, err}
			}()
			// Wait until every slot is taken, then let the dials go.
			deadline := time.Now().Add(10 * time.Second)
			for d.inflight.Load() < int32(want) {
				if time.Now().After(deadline) {
					t.Fatalf("only %d dials in flight; want %d", d.inflight.Load(), want)
				}
				time.Sleep(time.Millisecond)
			}
			close(d.gate)
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if p := d.peak.Load(); p != int32(want) {
				t.Fatalf("peak concurrent dials %d; want exactly %d", p, want)
			}
			inRange := []netip.Prefix{netip.MustParsePrefix("10.9.8.0/24"), netip.MustParsePrefix("10.9.9.0/30")}
			for addr, n := range d.dialled {
				ap := netip.MustParseAddrPort(addr)
				ok := false
				for _, p := range inRange {
					ok = ok || p.Contains(ap.Addr())
				}
				if !ok || n != 1 || ap.Port() != DefaultPort {
					t.Fatalf("dialled %s %d times (in range: %v)", addr, n, ok)
				}
				if ap.Addr().String() == "10.9.8.0" || ap.Addr().String() == "10.9.8.255" || ap.Addr().String() == "10.9.9.0" || ap.Addr().String() == "10.9.9.3" {
					t.Fatalf("dialled network or broadcast address %s", addr)
				}
			}
			if len(d.dialled) != 254+2 || r.rep.Scanned != 256 {
				t.Fatalf("dialled %d addresses, scanned %d; want 256", len(d.dialled), r.rep.Scanned)
			}
			got := r.rep.Machines()
			if len(got) != 2 || got[0] != "m@10.9.8.7:50000" || got[1] != "m@10.9.9.1:50000" {
				t.Fatalf("machines %v", got)
			}
		})
	}
}

// loopbackNet is a 127.91.x.0/24 distinct per process, so that parallel test
// runs do not see each other's listeners.
func loopbackNet() string { return fmt.Sprintf("127.91.%d", os.Getpid()%250+1) }

// listenAll listens on the same free port on each host of net (".10" etc.).
func listenAll(t testing.TB, netPrefix string, hosts ...int) int {
	t.Helper()
	var port int
	for _, h := range hosts {
		l, err := net.Listen("tcp", fmt.Sprintf("%s.%d:%d", netPrefix, h, port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		port = l.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
	}
	return port
}

func TestScanLoopback(t *testing.T) {
	pfx := loopbackNet()
	port := listenAll(t, pfx, 30, 10, 20)
	broken := fmt.Sprintf("%s.20:%d", pfx, port)
	rep, err := Scan(context.Background(), []string{pfx + ".0/24"}, Options[string]{
		Port: port, Concurrency: 16, Timeout: 2 * time.Second,
		Probe: func(_ context.Context, ep string) (string, error) {
			if ep == broken {
				return "", errors.New("not a Talos node")
			}
			return ep, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scanned != 254 || len(rep.Found) != 3 {
		t.Fatalf("scanned %d, found %v", rep.Scanned, rep.Found)
	}
	for i, h := range []int{10, 20, 30} {
		f := rep.Found[i]
		if f.Address.String() != fmt.Sprintf("%s.%d", pfx, h) {
			t.Fatalf("found[%d] = %s; want .%d (sorted)", i, f.Address, h)
		}
	}
	if e := rep.Found[1].Err; e == nil || !strings.Contains(e.Error(), broken) || !strings.Contains(e.Error(), "not a Talos node") {
		t.Fatalf("probe error kept: %v", e)
	}
	if m := rep.Machines(); len(m) != 2 || m[0] != fmt.Sprintf("%s.10:%d", pfx, port) {
		t.Fatalf("machines %v", m)
	}
}

func TestScanStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var dials atomic.Int32
	rep, err := Scan(ctx, []string{"10.1.0.0/22"}, Options[string]{
		Concurrency: 4,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			if dials.Add(1) == 10 {
				cancel()
			}
			return nil, errors.New("refused")
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v; want context.Canceled", err)
	}
	if n := dials.Load(); n >= 1022 || rep.Scanned != int(n) {
		t.Fatalf("%d dials, %d scanned after cancel", n, rep.Scanned)
	}
}
