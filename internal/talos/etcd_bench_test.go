package talos_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos"
)

// BenchmarkEtcdSnapshot streams a simulated etcd snapshot from a control
// plane over gRPC+TLS on loopback, verifying its sha256 trailer (bytes/s
// is the snapshot size per second).
func BenchmarkEtcdSnapshot(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int64
	}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			o := fastDelays
			o.EtcdSnapshotSize = bc.size
			c := startCloud(b, 1, 0, o)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			tg := talos.Direct(c.cpEndpoints()[0])
			if err := talos.Bootstrap(ctx, tg, c.cfgs.Talosconfig); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bc.size + 32)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				n, err := talos.EtcdSnapshot(ctx, tg, c.cfgs.Talosconfig, io.Discard)
				if err != nil || n != bc.size+32 {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
		})
	}
}
