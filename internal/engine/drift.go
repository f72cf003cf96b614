package engine

import (
	"context"
	"time"
)

// driftLoop refreshes idle cloud tenants every DriftInterval to find what
// was changed outside rezuscloud (docs/design.md §11.7).
func (e *Engine) driftLoop(ctx context.Context) {
	if e.opts.DriftInterval < 0 {
		return
	}
	tick := time.NewTicker(e.opts.DriftInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
