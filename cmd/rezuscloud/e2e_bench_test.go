package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
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
