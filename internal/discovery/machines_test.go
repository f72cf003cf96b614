package discovery

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// startMachines starts simulated Talos nodes in maintenance mode on
// <netPrefix>.<host> for each host, all on one port (as real nodes share
// 50000), and returns the port.
func startMachines(tb testing.TB, netPrefix string, hosts ...int) (int, []*simnode.Node) {
	tb.Helper()
	port := 0
	var nodes []*simnode.Node
	for _, h := range hosts {
		n, err := simnode.Start(context.Background(), simnode.Options{Addr: fmt.Sprintf("%s.%d:%d", netPrefix, h, port)})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(n.Close)
		_, p, _ := net.SplitHostPort(n.Addr())
		port, _ = strconv.Atoi(p)
		nodes = append(nodes, n)
	}
	return port, nodes
}

// TestScanFindsMaintenanceNodes is the whole path on loopback: simulated
// machines on a /24, found by the scan and read through the maintenance
// API.
func TestScanFindsMaintenanceNodes(t *testing.T) {
	pfx := fmt.Sprintf("127.93.%d", os.Getpid()%250+1)
	port, nodes := startMachines(t, pfx, 77, 12, 200)
	rep, err := Scan(t.Context(), []string{pfx + ".0/24"}, Options[talos.Machine]{Port: port, Probe: talos.ReadHardware})
	if err != nil {
		t.Fatal(err)
	}
	ms := rep.Machines()
	if len(rep.Found) != 3 || len(ms) != 3 {
		t.Fatalf("found %+v", rep.Found)
	}
	order := []*simnode.Node{nodes[1], nodes[0], nodes[2]} // by address: .12, .77, .200
	for i, m := range ms {
		hw := order[i].Hardware()
		d, err := talos.InstallDisk(m.Disks)
		if m.Address != order[i].Host() || m.MAC != hw.MAC || m.Model != hw.Model || len(m.Disks) != 3 ||
			err != nil || d.DevPath != hw.InstallDisk || m.Fingerprint == "" {
			t.Fatalf("machine %d: %+v (install disk %v, %v); want %s %s %s", i, m, d, err, order[i].Host(), hw.MAC, hw.Model)
		}
	}
}

// BenchmarkScan24FiveMachines scans a loopback /24 on which five simulated
// machines in maintenance mode answer, reading each one's hardware: the
// time until every machine is known.
func BenchmarkScan24FiveMachines(b *testing.B) {
	pfx := fmt.Sprintf("127.94.%d", os.Getpid()%250+1)
	port, _ := startMachines(b, pfx, 10, 60, 110, 160, 210)
	opts := Options[talos.Machine]{Port: port, Probe: talos.ReadHardware}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		rep, err := Scan(context.Background(), []string{pfx + ".0/24"}, opts)
		if err != nil || len(rep.Machines()) != 5 {
			b.Fatalf("scan: %v, %+v", err, rep.Found)
		}
	}
}

// BenchmarkScan22Empty scans a loopback /22 where nothing answers (1022
// refused dials).
func BenchmarkScan22Empty(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cidr := fmt.Sprintf("127.95.%d.0/22", os.Getpid()%60*4)
	opts := Options[talos.Machine]{Port: port, Probe: talos.ReadHardware}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		rep, err := Scan(context.Background(), []string{cidr}, opts)
		if err != nil || rep.Scanned != 1022 || len(rep.Found) != 0 {
			b.Fatalf("scan: %v, scanned %d, found %+v", err, rep.Scanned, rep.Found)
		}
	}
}

// reportCPU reports the process's CPU time (user+system) per scan; with
// simulated machines in the same process it includes theirs.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
}
