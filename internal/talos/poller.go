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
	// Status reads a node. Default: a Reader of the poller's own, whose
	// connections the poller prunes and closes. A caller that reads nodes
	// itself too passes its own reader's Status (and Prune), so that both
	// read the same way.
	Status func(ctx context.Context, t Target, talosconfig []byte) (NodeState, error)
	// Prune, with Status, is told the endpoints the targets still use
	// after every SetTargets (and nil when Run ends), so that connections
	// no node needs any more are closed.
	Prune func(keep map[string]bool)
}

// Poller polls the status of a changing set of nodes, with bounded
// concurrency, a time limit per node and backoff for nodes that do not
// answer, and reports only changes. It never blocks its callers: Run does
// the work in its own goroutines, SetTargets and Trigger return at once.
// It keeps its connections between polls; Run closes them when it ends,
// Close after PollOnce.
type Poller struct {
	opts PollerOptions
	sem  chan struct{}
	wake chan struct{}
	emit sync.Mutex

	mu      sync.Mutex
	targets map[string]*pollTarget
}

type pollTarget struct {
	PollTarget
	next     time.Time
	failures int
	inFlight bool
	last     *NodeState
	// reports counts Reports; a poll that started before one is older
	// than what it reported and is dropped
	reports int
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
	if opts.Status == nil {
		r := NewReader()
		opts.Status, opts.Prune = r.Status, r.Prune
	}
	if opts.Prune == nil {
		opts.Prune = func(map[string]bool) {}
	}
	return &Poller{
		opts:    opts,
		sem:     make(chan struct{}, opts.Concurrency),
		wake:    make(chan struct{}, 1),
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
	p.opts.Prune(keep)
	p.poke()
}

// Close closes the poller's connections (after PollOnce; Run closes them
// itself when it ends). The poller may be used again: it then reconnects.
func (p *Poller) Close() { p.opts.Prune(nil) }

// Report takes a state of a node that someone else read (a flow acting on
// the node): it becomes the node's last state, reported through OnChange
// when it differs, as if the poller had read it, so that the poller stays
// the one source of what nodes report. The node's next poll is due one
// interval later.
func (p *Poller) Report(name string, st NodeState) {
	if st.Stage == "" {
		st = Unreachable
	}
	p.emit.Lock()
	defer p.emit.Unlock()
	p.mu.Lock()
	t := p.targets[name]
	if t == nil {
		p.mu.Unlock()
		return
	}
	changed := t.last == nil || !t.last.Equal(st)
	if changed {
		t.last = &st
	}
	t.reports++
	if st.Stage != Unreachable.Stage {
		t.failures = 0
		t.next = time.Now().Add(p.opts.Interval)
	}
	p.mu.Unlock()
	if changed {
		p.opts.OnChange(name, st)
	}
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
	p.mu.Lock()
	reports := t.reports
	p.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	st, _ := p.opts.Status(pctx, t.Target, t.Talosconfig)
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
	// the emit lock is held from the comparison to the report, so that a
	// Report of the same node cannot come in between
	p.emit.Lock()
	p.mu.Lock()
	if p.targets[name] != t || t.reports != reports { // removed or replaced meanwhile, or reported fresher
		t.inFlight = false
		p.mu.Unlock()
		p.emit.Unlock()
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
		p.opts.OnChange(name, st)
	}
	p.emit.Unlock()
	p.mu.Lock()
	t.inFlight = false
	p.mu.Unlock()
}
