package pxe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pxe/dhcp"
)

// BenchmarkAnswerDHCP is the responder's work per PXE DHCPDISCOVER: parse,
// classify, decide, build and marshal the proxy answer.
func BenchmarkAnswerDHCP(b *testing.B) {
	fx := newFixtureFactory(b, time.Now, false)
	pkt := pxePacket(b, known, dhcp.Discover, 0, "PXEClient:Arch:00000:UNDI:002001", true)
	b.ReportAllocs()
	for b.Loop() {
		rep, _, ok := fx.r.answerDHCP(pkt, 67)
		if !ok {
			b.Fatal("no answer")
		}
		if _, err := rep.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScript is one boot script request (an installed machine: no
// asset lookup).
func BenchmarkScript(b *testing.B) {
	fx := newFixtureFactory(b, time.Now, false)
	h := fx.r.Handler()
	req := httptest.NewRequest(http.MethodGet, "/ipxe/amd64/52-54-00-00-00-02/boot.ipxe", nil)
	b.ReportAllocs()
	for b.Loop() {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		if rr.Code != 200 {
			b.Fatal(rr.Code)
		}
	}
}

// BenchmarkIdle runs a responder on loopback (root only: ports 67, 69) and
// reports what it costs while no machine asks: heap and CPU per second,
// beside the same idle loop without a responder.
func BenchmarkIdle(b *testing.B) {
	b.Run("none", func(b *testing.B) { idle(b, false) })
	b.Run("responder", func(b *testing.B) { idle(b, true) })
}

func idle(b *testing.B, responder bool) {
	if os.Geteuid() != 0 {
		b.Skip("binding ports 67 and 69 needs root")
	}
	fx := newFixtureFactory(b, time.Now, false)
	fx.r.server.IP = netip.MustParseAddr("127.0.0.1")
	fx.r.server.HTTPPort = 0 // any free port
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if responder {
		go func() { done <- fx.r.Run(ctx) }()
		select {
		case <-fx.r.Ready():
		case err := <-done:
			b.Skipf("the responder cannot listen here: %v", err)
		}
	} else {
		done <- nil
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	b.ResetTimer()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond) // idle: nothing asks
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
		syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
	b.ReportMetric(float64(after.HeapInuse)-float64(before.HeapInuse), "heap-B")
	b.ReportMetric(float64(cpu.Microseconds())/time.Since(start).Seconds(), "cpu-µs/s")
	cancel()
	<-done
}
