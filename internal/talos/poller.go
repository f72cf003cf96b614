package talos

import (
	"context"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// PollTarget is a node the poller watches.
type PollTarget struct {
	Target             // how the node is reached (Direct or Route)
	Talosconfig []byte // the tenant's talosconfig
}

// PollerOptions configure a Poller. Zero values take the defaults.
type PollerOptions struct {
	// Interval between polls of a node that answers (default 5 s).
	Interval time.Duration
	// Timeout of one poll of one node (default 3 s).
	Timeout time.Duration
	// Concurrency is the number of polls in flight at most (default 8).
	Concurrency int
	// MaxBackoff caps the delay between polls of a node that does not
	// answer; it doubles from Interval with each failed poll (default 1 m).
	MaxBackoff time.Duration
	// OnChange is called when a node's state differs from the last one
	// reported (and the first time it is known). Calls are serialized; keep
	// it quick (hand the state over to a channel or a lock-protected map).
	OnChange func(name string, st NodeState)
	// Status reads a node; tests may wrap Status with it. Default: Status
	// over the poller's own connections (one per endpoint and credentials,
	// kept between polls and shared by the nodes routed through it).
	Status func(ctx context.Context, t Target, talosconfig []byte) (NodeState, error)
}

// Poller polls the status of a changing set of nodes, with bounded
// concurrency, a time limit per node and backoff for nodes that do not
// answer, and reports only changes. It never blocks its callers: Run does
// the work in its own goroutines, SetTargets and Trigger return at once.
// It keeps its connections between polls; Run closes them when it ends,
// Close after PollOnce.
type Poller struct {
	opts  PollerOptions
	sem   chan struct{}
	wake  chan struct{}
	emit  sync.Mutex
	conns *pool

	mu      sync.Mutex
	targets map[string]*pollTarget
}

type pollTarget struct {
	PollTarget
	hint     statusHint // read and written by the target's one poll in flight
	next     time.Time
	failures int
	inFlight bool
	last     *NodeState
}

// NewPoller returns a poller; start it with Run.
func NewPoller(opts PollerOptions) *Poller {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Minute
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.Interval)
	if opts.OnChange == nil {
		opts.OnChange = func(string, NodeState) {}
	}
	return &Poller{
		opts:    opts,
		sem:     make(chan struct{}, opts.Concurrency),
		wake:    make(chan struct{}, 1),
		conns:   newPool(),
		targets: map[string]*pollTarget{},
	}
}

// SetTargets replaces the set of nodes. New nodes, and nodes whose target
// or talosconfig changed, are polled at once; removed ones are forgotten,
// and connections no node uses any more are closed.
func (p *Poller) SetTargets(targets map[string]PollTarget) {
	p.mu.Lock()
	for name := range p.targets {
		if _, ok := targets[name]; !ok {
			delete(p.targets, name)
		}
	}
	for name, t := range targets {
		old := p.targets[name]
		if old != nil && old.Target.Equal(t.Target) && string(old.Talosconfig) == string(t.Talosconfig) {
			continue
		}
		nt := &pollTarget{PollTarget: t}
		if old != nil {
			nt.last = old.last // report only real changes
		}
		p.targets[name] = nt
	}
	keep := map[string]bool{}
	for _, t := range p.targets {
		for _, ep := range t.Endpoints {
			keep[ep] = true
		}
	}
	p.mu.Unlock()
	p.conns.prune(keep)
	p.poke()
}

// Close closes the poller's connections (after PollOnce; Run closes them
// itself when it ends). The poller may be used again: it then reconnects.
func (p *Poller) Close() { p.conns.prune(nil) }

// status reads one node with the configured Status or over the pool.
func (p *Poller) status(ctx context.Context, t *pollTarget) (NodeState, error) {
	if p.opts.Status != nil {
		return p.opts.Status(ctx, t.Target, t.Talosconfig)
	}
	return readStatus(ctx, p.conns, t.Target, t.Talosconfig, &t.hint)
}

// Trigger polls a node soon (after an operation on it), resetting its
// backoff.
func (p *Poller) Trigger(name string) {
	p.mu.Lock()
	if t := p.targets[name]; t != nil {
		t.next, t.failures = time.Time{}, 0
	}
	p.mu.Unlock()
	p.poke()
}

// State returns the last state reported for a node.
func (p *Poller) State(name string) (NodeState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.targets[name]; t != nil && t.last != nil {
		return *t.last, true
	}
	return NodeState{}, false
}

func (p *Poller) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run polls until ctx ends, then waits for the polls in flight and closes
// its connections.
func (p *Poller) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer p.Close()
	defer wg.Wait()
	for {
		now := time.Now()
		var due []string
		next := now.Add(p.opts.Interval)
		p.mu.Lock()
		for name, t := range p.targets {
			if t.inFlight {
				continue
			}
			if !t.next.After(now) {
				due = append(due, name)
			} else if t.next.Before(next) {
				next = t.next
			}
		}
		p.mu.Unlock()
		for _, name := range due {
			if !p.start(ctx, &wg, name, p.poke) {
				return
			}
		}
		if len(due) > 0 {
			continue // rescan: polls may have finished while we waited
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// PollOnce polls every node now (bounded by Concurrency) and returns when
// all are done. It is for tests, benchmarks and one-shot status reads; it
// must not run together with Run.
func (p *Poller) PollOnce(ctx context.Context) {
	p.mu.Lock()
	names := make([]string, 0, len(p.targets))
	for name := range p.targets {
		names = append(names, name)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range names {
		if !p.start(ctx, &wg, name, nil) {
			break
		}
	}
	wg.Wait()
}

// start waits for a free slot and polls name in a goroutine of wg, then
// calls after (if any). It returns false when ctx ended first.
func (p *Poller) start(ctx context.Context, wg *sync.WaitGroup, name string, after func()) bool {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	t := p.claim(name)
	if t == nil {
		<-p.sem
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { <-p.sem }()
		p.pollOne(ctx, name, t)
		if after != nil {
			after()
		}
	}()
	return true
}

// claim marks a target in flight and returns a copy of what to poll.
func (p *Poller) claim(name string) *pollTarget {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.targets[name]
	if t == nil || t.inFlight {
		return nil
	}
	t.inFlight = true
	return t
}

func (p *Poller) pollOne(ctx context.Context, name string, t *pollTarget) {
	pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	st, _ := p.status(pctx, t)
	cancel()
	if ctx.Err() != nil {
		p.mu.Lock()
		t.inFlight = false
		p.mu.Unlock()
		return
	}
	if st.Stage == "" {
		st = Unreachable
	}
	p.mu.Lock()
	if p.targets[name] != t { // removed or replaced meanwhile
		t.inFlight = false
		p.mu.Unlock()
		return
	}
	if st.Stage == Unreachable.Stage {
		sched := backoff.Policy{Initial: p.opts.Interval, Max: p.opts.MaxBackoff}
		t.next = time.Now().Add(sched.Next(t.failures))
		t.failures++
	} else {
		t.failures = 0
		t.next = time.Now().Add(p.opts.Interval)
	}
	changed := t.last == nil || !t.last.Equal(st)
	if changed {
		t.last = &st
	}
	p.mu.Unlock()
	// The target stays in flight while its change is reported, so that the
	// changes of one node are reported in order.
	if changed {
		p.emit.Lock()
		p.opts.OnChange(name, st)
		p.emit.Unlock()
	}
	p.mu.Lock()
	t.inFlight = false
	p.mu.Unlock()
}
