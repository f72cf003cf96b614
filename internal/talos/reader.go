package talos

import (
	"context"
	"sync"
)

// Reader reads nodes' state over connections it keeps between reads (one
// per endpoint and credentials, shared by the nodes routed through it),
// and remembers for each target which endpoint answered last and whether
// the node answered in maintenance mode, so that the next read tries that
// first. The poller and the engine's flows read through one Reader, so a
// node is read the same way whoever asks.
type Reader struct {
	conns *pool
	mu    sync.Mutex
	hints map[string]statusHint // by Target.String()
}

// NewReader returns a Reader; Close it when done.
func NewReader() *Reader { return &Reader{conns: newPool(), hints: map[string]statusHint{}} }

// Status reads a node as Status does, over the kept connections.
func (r *Reader) Status(ctx context.Context, t Target, talosconfig []byte) (NodeState, error) {
	key := t.String()
	r.mu.Lock()
	h := r.hints[key]
	r.mu.Unlock()
	st, err := readStatus(ctx, r.conns, t, talosconfig, &h)
	r.mu.Lock()
	r.hints[key] = h
	r.mu.Unlock()
	return st, err
}

// Prune closes the connections to endpoints keep does not name and forgets
// the hints of targets that use none of those.
func (r *Reader) Prune(keep map[string]bool) {
	r.conns.prune(keep)
	r.mu.Lock()
	defer r.mu.Unlock()
	if keep == nil {
		clear(r.hints)
	}
}

// Close closes every connection. The Reader may be used again: it then
// reconnects.
func (r *Reader) Close() { r.Prune(nil) }
