package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/cloudsim"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// BenchmarkApplyToRunning measures, through the real binary, the time from
// the Apply press (MQTT) to the tenant's state saying running with every
// node ready, for 3 and 20 simulated nodes (one control plane, the rest
// workers; simulated stage delays of zero, so the figure is rezuscloud's
// own work: tofu, the Talos API calls, polling and MQTT). It also reports
// the resident memory of the rezuscloud process, idle after the run.
func BenchmarkApplyToRunning(b *testing.B) {
	for _, n := range []int{3, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var rssKB, total float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e := newEnv(b, envOptions{tenant: "bench", machines: n, workers: n - 1, logLevel: "info"})
				e.start()
				applyTopic := commandTopic(b, e.discovery(e.tenantID()), "apply")
				mark := e.cap.mark()
				start := time.Now()
				b.StartTimer()
				e.publish(applyTopic, "PRESS")
				e.waitTenant(fmt.Sprintf("running, %d of %d ready", n, n), func(d tenantDoc) bool {
					return d.Phase == "running" && d.NodesReady == n
				})
				b.StopTimer()
				total += time.Since(start).Seconds()
				e.mustSucceed(mark, "apply")
				// idle: the operation is over (the event above) and the
				// bridge says so
				e.cap.wait(e.proc, phaseTimeout, "no running operation", func() bool {
					m, ok := e.cap.lastMsg(base + "/bridge/state")
					return ok && strings.Contains(string(m.Payload), `"operations":0`)
				})
				kb, err := vmRSS(e.proc.pid())
				if err != nil {
					b.Fatalf("VmRSS: %v", err)
				}
				rssKB += float64(kb)
				e.stop()
			}
			b.ReportMetric(total/float64(b.N), "s/apply")
			b.ReportMetric(rssKB/float64(b.N)/1024, "idle-RSS-MiB")
		})
	}
}

// BenchmarkFleetIdle: the binary with 20 cloud tenants of 10 nodes each (221
// devices) announced and idle; it reports the time from the process start
// to the last device's discovery and the resident memory once idle.
func BenchmarkFleetIdle(b *testing.B) {
	var rssKB, anonKB, pssKB, announce float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b, envOptions{tenant: "t00", machines: 1, workers: 0, logLevel: "info"})
		for t := 0; t < 20; t++ {
			name := fmt.Sprintf("t%02d", t)
			file := cloudsim.TenantFile(name, simnode.DefaultTalosVersion, 1, 9, false)
			if err := os.WriteFile(filepath.Join(e.tenantsDir, name+".toml"), []byte(file), 0o600); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		mark := e.start()
		last := e.discTopic(base + "_t19_workers-9")
		e.cap.wait(e.proc, startTimeout, "all 221 devices announced", func() bool {
			n := 0
			for _, m := range e.cap.since(mark) {
				if strings.HasPrefix(m.Topic, prefix+"/device/") && len(m.Payload) > 0 {
					n++
				}
			}
			_, ok := e.cap.lastMsg(last)
			return ok && n >= 221
		})
		announce += time.Since(start).Seconds()
		// idle: measured after the first node poll interval has passed
		// with nothing to do (a measurement window, not synchronisation)
		time.Sleep(5 * time.Second)
		kb, err := vmRSS(e.proc.pid())
		if err != nil {
			b.Fatalf("VmRSS: %v", err)
		}
		rssKB += float64(kb)
		a, _ := procStatus(e.proc.pid(), "RssAnon")
		anonKB += float64(a)
		p, _ := procField(e.proc.pid(), "smaps_rollup", "Pss")
		pssKB += float64(p)
		e.stop()
	}
	b.ReportMetric(announce/float64(b.N), "s-to-announced")
	b.ReportMetric(rssKB/float64(b.N)/1024, "idle-RSS-MiB")
	b.ReportMetric(anonKB/float64(b.N)/1024, "idle-anon-MiB")
	b.ReportMetric(pssKB/float64(b.N)/1024, "idle-PSS-MiB")
}
