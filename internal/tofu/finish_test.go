package tofu

import (
	"context"
	"testing"
	"time"
)

// An apply stopped by a shutdown (ErrShutdown) gets FinishGrace to finish
// what it is doing: it completes, every resource in the state, nothing
// interrupted. A user's cancel still interrupts at once (TestCancelApply).
func TestShutdownLetsApplyFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRunner(t, "", func(c *Config) { c.FinishGrace = time.Minute })
	ws := workspace(t, r, "lab", slowDoc(2))
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if _, err := ws.Apply(sctx, plan, RunOptions{OnEvent: func(ev Event) {
		if ev.Type == EventApplyStart && ev.Resource.Addr == "terraform_data.slow" {
			stop(ErrShutdown)
		}
	}}); err != nil {
		t.Fatalf("an apply stopped by a shutdown did not finish: %v", err)
	}
	if sctx.Err() == nil {
		t.Fatal("the shutdown never happened during the apply")
	}
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.HasChanges() {
		t.Fatalf("the apply did not finish: the next plan changes %+v", plan.Summary)
	}
}
