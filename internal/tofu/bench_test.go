package tofu

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
)

// The runner's plan+apply against raw `tofu plan -out && tofu apply` in the
// same work dir, with the same environment (backend, encryption), over 20
// terraform_data resources whose input changes every iteration.
//
//	go test -run '^$' -bench PlanApply -benchtime 3x -count 3 ./internal/tofu/
//
// The two sub-benchmarks alternate under -count, so load from elsewhere
// hits both alike.
const benchResources = 20

func benchWorkspace(b *testing.B) *Workspace {
	r := newRunner(b, "", nil)
	ws := workspace(b, r, "bench", dataDoc(benchResources, "init"))
	plan, err := ws.Plan(context.Background(), RunOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ws.Apply(context.Background(), plan, RunOptions{}); err != nil {
		b.Fatal(err)
	}
	return ws
}

func BenchmarkPlanApply(b *testing.B) {
	b.Run("runner", benchRunnerPlanApply)
	b.Run("raw", benchRawPlanApply)
}

func benchRunnerPlanApply(b *testing.B) {
	ws := benchWorkspace(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		if err := ws.WriteConfig(dataDoc(benchResources, fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		plan, err := ws.Plan(ctx, RunOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if plan.Summary.Change != benchResources {
			b.Fatalf("plan = %+v", plan.Summary)
		}
		if _, err := ws.Apply(ctx, plan, RunOptions{OnProgress: func(Progress) {}}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRawPlanApply(b *testing.B) {
	ws := benchWorkspace(b)
	env := ws.environ()
	run := func(args ...string) {
		cmd := exec.Command(ws.r.binary, args...)
		cmd.Dir, cmd.Env = ws.dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		if err := ws.WriteConfig(dataDoc(benchResources, fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		run("plan", "-input=false", "-out=tfplan")
		run("apply", "-input=false", "tfplan")
	}
}
