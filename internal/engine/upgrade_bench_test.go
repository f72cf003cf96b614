package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// BenchmarkTalosRollout rolls 3 control planes and 3 workers on simulated
// nodes with their stage delays off to a new Talos patch per iteration,
// and reports the most nodes down at once (must be 1), the gap between one
// node ready and the next one started, and the etcd snapshot's time and
// size.
func BenchmarkTalosRollout(b *testing.B) {
	bin, _ := testenv.Tofu(b)
	nl := &nodeLog{}
	f := &fixture{t: b, dir: b.TempDir(), rec: newRecorder(), tofuBin: bin}
	c, err := simnode.StartOnLoopback(context.Background(), 6, "", 50000, simnode.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	f.sims = c.Nodes
	var sb strings.Builder
	fmt.Fprintf(&sb, "provider = \"metal\"\ntalos_version = \"v1.13.0\"\nkubernetes_version = \"1.35.0\"\n")
	for gi, g := range []struct{ name, role string }{{"cp", "controlplane"}, {"workers", "worker"}} {
		fmt.Fprintf(&sb, "[[node_groups]]\nname = %q\nrole = %q\ncount = 3\n", g.name, g.role)
		for _, s := range f.sims[gi*3 : gi*3+3] {
			fmt.Fprintf(&sb, "  [[node_groups.machines]]\n  address = %q\n  install_disk = \"/dev/sda\"\n", s.Host())
		}
	}
	tenants := filepath.Join(f.dir, "tenants")
	os.MkdirAll(tenants, 0o700)
	if err := os.WriteFile(filepath.Join(tenants, "lab.toml"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	f.store = &tenant.Store{Dir: tenants}
	f.tweak = func(o *Options) { o.Publisher = logged{o.Publisher.(*recorder), nl}; o.NodeTimeout = time.Minute }
	f.start()
	if err := f.eng.Apply(context.Background(), "lab"); err != nil {
		b.Fatal(err)
	}
	f.rec.wait(b, "running", long, phaseIs(tenant.PhaseRunning))

	var maxDown int
	var gaps []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := fmt.Sprintf("v1.13.%d", i+1)
		nl.reset()
		if err := f.eng.Upgrade(context.Background(), "lab", "talos", v); err != nil {
			b.Fatal(err)
		}
		f.rec.wait(b, "rollout to "+v, long, func(r *recorder) bool {
			ev, ok := r.lastEvent("upgrade")
			return ok && ev.Result == tenant.ResultSucceeded && r.status["lab"].TalosVersionRunning == v
		})
		order, start, end := nl.spans(func(s tenant.NodeStatus) bool {
			return s.Stage == tenant.StageRunning && s.Ready && s.TalosVersion == v
		})
		if len(order) != 6 {
			b.Fatalf("%d nodes upgraded: %v", len(order), order)
		}
		for _, n := range order {
			down := 0
			for _, o := range order {
				if !start[o].After(start[n]) && (end[o].IsZero() || end[o].After(start[n])) {
					down++
				}
			}
			maxDown = max(maxDown, down)
		}
		for j := 1; j < len(order); j++ {
			gaps = append(gaps, start[order[j]].Sub(end[order[j-1]]))
		}
	}
	b.StopTimer()
	slices.Sort(gaps)
	b.ReportMetric(float64(maxDown), "max-nodes-down")
	b.ReportMetric(float64(gaps[len(gaps)/2].Milliseconds()), "ms-gap-ready-to-next-p50")
	b.ReportMetric(float64(gaps[len(gaps)-1].Milliseconds()), "ms-gap-ready-to-next-max")
	if maxDown != 1 {
		b.Fatalf("%d nodes down at once", maxDown)
	}

	ts, _ := f.eng.lookup("lab")
	tc, _ := os.ReadFile(f.eng.talosconfigPath("lab"))
	start := time.Now()
	info, err := ts.snapshotEtcd(context.Background(), tc)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-snapshot")
	b.ReportMetric(float64(info.Size)/(1<<20), "MiB-snapshot")
}
