package tofu

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPlanApply compares the runner's Plan+Apply with raw
// `tofu plan -out=tfplan && tofu apply tfplan` in the same work dir with the
// same environment (state backend, encryption), over 20 terraform_data
// resources whose input changes before every plan (so each apply updates
// all 20). Each iteration runs both, alternately, so that load from elsewhere
// on the machine hits both alike; it reports wall time (runner-s/op,
// raw-s/op, ratio) and, as wall time is noisy on a loaded machine, the CPU
// time of the tofu processes (runner-cpu-s/op, raw-cpu-s/op, cpu-ratio).
//
//	go test -run '^$' -bench PlanApply -benchtime 5x ./internal/tofu/
func BenchmarkPlanApply(b *testing.B) {
	const n = 20
	r := newRunner(b, "", nil)
	ws := workspace(b, r, "bench", dataDoc(n, "init"))
	ctx := context.Background()
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
		b.Fatal(err)
	}
	env := ws.environ()
	raw := func(args ...string) {
		cmd := exec.Command(ws.r.binary, args...)
		cmd.Dir, cmd.Env = ws.dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	var runnerTime, rawTime, runnerCPU, rawCPU time.Duration
	i := 0
	for b.Loop() {
		i++
		if err := ws.WriteConfig(dataDoc(n, fmt.Sprint("runner", i))); err != nil {
			b.Fatal(err)
		}
		start, cpu := time.Now(), childCPU()
		plan, err := ws.Plan(ctx, RunOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if plan.Summary.Change != n {
			b.Fatalf("plan = %+v", plan.Summary)
		}
		if _, err := ws.Apply(ctx, plan, RunOptions{OnProgress: func(Progress) {}}); err != nil {
			b.Fatal(err)
		}
		runnerTime += time.Since(start)
		runnerCPU += childCPU() - cpu

		if err := ws.WriteConfig(dataDoc(n, fmt.Sprint("raw", i))); err != nil {
			b.Fatal(err)
		}
		start, cpu = time.Now(), childCPU()
		raw("plan", "-input=false", "-out=tfplan")
		raw("apply", "-input=false", "tfplan")
		rawTime += time.Since(start)
		rawCPU += childCPU() - cpu
	}
	b.ReportMetric(runnerTime.Seconds()/float64(b.N), "runner-s/op")
	b.ReportMetric(rawTime.Seconds()/float64(b.N), "raw-s/op")
	b.ReportMetric(runnerTime.Seconds()/rawTime.Seconds(), "ratio")
	b.ReportMetric(runnerCPU.Seconds()/float64(b.N), "runner-cpu-s/op")
	b.ReportMetric(rawCPU.Seconds()/float64(b.N), "raw-cpu-s/op")
	b.ReportMetric(runnerCPU.Seconds()/rawCPU.Seconds(), "cpu-ratio")
}

// childCPU is the user+system time of the waited-for child processes.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
