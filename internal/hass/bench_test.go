package hass

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// fleet is 20 tenants × 10 nodes (1 control plane + 9 workers).
func fleet() []*tenant.Tenant {
	var ts []*tenant.Tenant
	for i := 0; i < 20; i++ {
		ts = append(ts, cloudTenant(fmt.Sprintf("t%02d", i), 9))
	}
	return ts
}

func benchOptions(url string) Options {
	o := fastOptions(url)
	o.CleanupWindow = -1
	return o
}

// BenchmarkAnnounceFleet: full republish (discovery + state of 1 bridge, 20
// tenants, 200 nodes = 442 retained QoS 1 messages) until every PUBACK.
func BenchmarkAnnounceFleet(b *testing.B) {
	m := broker(b)
	br := startBridge(b, benchOptions(m.URL), newFakeCmd(), fleet())
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.republishAll()
		if err := br.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	br.mu.Lock()
	n, bytes := 0, 0
	for _, p := range br.discovery {
		n++
		bytes += len(p)
	}
	for _, p := range br.states {
		n++
		bytes += len(p)
	}
	br.mu.Unlock()
	b.ReportMetric(float64(n), "msgs/op")
	b.ReportMetric(float64(bytes)/1024, "KiB/op")
}

// BenchmarkBuildFleet: computing every payload for the fleet (SetTenants).
func BenchmarkBuildFleet(b *testing.B) {
	br := New(Options{URL: "tcp://127.0.0.1:1"}, nil, nil)
	ts := fleet()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		br.SetTenants(views(ts...))
	}
}

// BenchmarkStateChange: one tenant's status changes and is published.
func BenchmarkStateChange(b *testing.B) {
	m := broker(b)
	br := startBridge(b, benchOptions(m.URL), newFakeCmd(), fleet())
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		setStatus(br, "t07", tenant.Status{Phase: tenant.PhaseProvisioning, Progress: i % 101, NodesTotal: i})
		if err := br.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestLatency: request published by a client → response
// received by it (broker round trips included).
func BenchmarkRequestLatency(b *testing.B) {
	for _, bc := range []struct {
		name  string
		nagle bool
		busy  bool // tenant states change all the time, as during an apply
	}{
		{"broker=default", true, false},
		{"broker=default/states_flowing", true, true},
		{"broker=nodelay", false, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := testenv.StartMosquitto(b, testenv.MosquittoOptions{Nagle: bc.nagle})
			br := startBridge(b, benchOptions(m.URL), newFakeCmd(), fleet())
			if bc.busy {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					for i := 0; ctx.Err() == nil; i++ {
						setStatus(br, "t07", tenant.Status{Phase: tenant.PhaseProvisioning, Progress: i % 101})
						_ = br.Sync(ctx)
					}
				}()
			}
			resp := make(chan []byte, 1)
			c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(m.URL).SetClientID("bench-req"))
			if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				b.Fatal(tok.Error())
			}
			defer c.Disconnect(50)
			if tok := c.Subscribe("rezuscloud/bridge/response/scale", 0, func(_ mqtt.Client, mm mqtt.Message) {
				resp <- append([]byte(nil), mm.Payload()...)
			}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				b.Fatal(tok.Error())
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr := strconv.Itoa(i)
				start := time.Now()
				// QoS 0, as Home Assistant's mqtt.publish sends by default
				c.Publish("rezuscloud/bridge/request/scale", 0, false,
					`{"tenant":"t03","group":"workers","count":5,"transaction":`+tr+`}`)
				select {
				case p := <-resp:
					if len(p) == 0 {
						b.Fatal("empty response")
					}
				case <-time.After(5 * time.Second):
					b.Fatal("no response")
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkStartAnnounce: a bridge starts over a broker that holds the
// retained discovery of the fleet (a restart) until every device of 20
// tenants × 10 nodes is announced and acknowledged.
func BenchmarkStartAnnounce(b *testing.B) {
	m := broker(b)
	opts := fastOptions(m.URL)
	opts.CleanupWindow = 3 * time.Second // the default: the marker ends the wait
	startBridge(b, opts, newFakeCmd(), fleet()).Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br := New(opts, newFakeCmd(), nil)
		br.SetTenants(views(fleet()...))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := br.Start(ctx); err != nil {
			b.Fatal(err)
		}
		if err := br.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StopTimer()
		br.Close()
		b.StartTimer()
	}
}

// BenchmarkHandleRequest: decode + validate + dispatch, no MQTT.
func BenchmarkHandleRequest(b *testing.B) {
	br := New(Options{URL: "tcp://127.0.0.1:1"}, newFakeCmd(), nil)
	br.SetTenants(views(fleet()...))
	payload := []byte(`{"tenant":"t03","group":"workers","count":5,"transaction":"abc"}`)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if r := br.HandleRaw(ctx, "scale", payload); !r.OK() {
			b.Fatal(r.Error)
		}
	}
}

// TestHeapAfterAnnounce reports the heap a bridge holds for the fleet.
func TestHeapAfterAnnounce(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	m := broker(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	br := startBridge(t, benchOptions(m.URL), newFakeCmd(), fleet())
	for i := 0; i < 20; i++ {
		setStatus(br, fmt.Sprintf("t%02d", i), tenant.Status{Phase: tenant.PhaseRunning, NodesReady: 10, NodesTotal: 10})
	}
	if err := br.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	d := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use for 20 tenants × 10 nodes after announcing: %.2f MiB (HeapInuse %0.2f → %0.2f MiB, HeapAlloc delta %.2f MiB)",
		float64(d)/(1<<20), float64(before.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20),
		(float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20))
	runtime.KeepAlive(br)
}
