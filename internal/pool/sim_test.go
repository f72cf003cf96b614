package pool

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// The simulated day (issue 21): 24 hours under a fake clock, three metal
// workers of 60 W, a PV curve with cloud dips, an hourly price curve, a
// batch job at mid-morning that needs two workers and a nightly job. The
// same world is run under three policies (and, for comparison, the pool
// without energy sensors): always on; pods only (power on
// as many workers as the pending pods need, power an empty worker off
// after 10 minutes, no scale-down within 10 minutes of a scale-up: the
// cluster-autoscaler defaults); and this pool (Decide with the tenant
// file's defaults, mode on, min 0, max 3, no price ceiling).
//
// The world, simply and honestly:
//   - a worker boots in 3 minutes (it draws 60 W from power-on) and shuts
//     down in 1 minute after its drain (drawing 60 W until then);
//   - a worker runs 4 pods of one slot each; pending pods are bound in
//     arrival order to the first Ready, uncordoned worker with a free
//     slot, every 30 s step (the scheduler); a pod's wait is from creation
//     (or eviction) to binding;
//   - the batch job: 8 pods of 90 minutes at 10:00 (two workers' worth),
//     with a PodDisruptionBudget that allows no eviction; the nightly job:
//     3 pods of 45 minutes at 02:00, no budget;
//   - the house: 300 W, breakfast 07:00-08:00 +800 W, oven 12:00-12:30
//     +1500 W, cooking 18:00-21:00 +1200 W; the panels: 2.5 kW peak
//     between 06:00 and 21:00 with five cloud dips; no battery;
//   - energy a worker draws is surplus as far as the house (with the
//     workers) still exports, grid beyond that; cost = grid kWh at the
//     hour's price + surplus kWh at the 0.08 feed-in tariff it forgoes.

const (
	simStep     = 30 * time.Second
	simWatts    = 60.0
	simSlots    = 4
	simBoot     = 3 * time.Minute
	simShutdown = time.Minute
	simFeedIn   = 0.08
)

var simDay = time.Date(2026, 6, 21, 0, 0, 0, 0, time.UTC)

// hourly price (€/kWh): cheap nights, morning and evening peaks, a
// midday dip from everyone's solar
var simPrice = [24]float64{0.22, 0.20, 0.19, 0.18, 0.19, 0.21, 0.26, 0.31, 0.34, 0.30, 0.24, 0.20,
	0.16, 0.14, 0.15, 0.19, 0.23, 0.29, 0.36, 0.38, 0.35, 0.30, 0.27, 0.24}

type dip struct {
	from, to time.Duration
	depth    float64
}

var simDips = []dip{
	{9*time.Hour + 40*time.Minute, 9*time.Hour + 55*time.Minute, 0.70},
	{11*time.Hour + 20*time.Minute, 11*time.Hour + 28*time.Minute, 0.60},
	{13*time.Hour + 5*time.Minute, 13*time.Hour + 50*time.Minute, 0.80},
	{15*time.Hour + 30*time.Minute, 15*time.Hour + 36*time.Minute, 0.50},
	{17*time.Hour + 10*time.Minute, 17*time.Hour + 40*time.Minute, 0.75},
}

func simPV(t time.Time) float64 {
	h := t.Sub(simDay).Hours()
	if h <= 6 || h >= 21 {
		return 0
	}
	pv := 2500 * math.Pow(math.Sin(math.Pi*(h-6)/15), 1.5)
	off := t.Sub(simDay)
	for _, d := range simDips {
		if off >= d.from && off < d.to {
			pv *= 1 - d.depth
		}
	}
	return pv
}

func simHouse(t time.Time) float64 {
	h := t.Sub(simDay).Hours()
	w := 300.0
	switch {
	case h >= 7 && h < 8:
		w += 800
	case h >= 12 && h < 12.5:
		w += 1500
	case h >= 18 && h < 21:
		w += 1200
	}
	return w
}

type simPod struct {
	job      string
	waitFrom time.Time
	left     time.Duration
	pdb      bool
	node     *simNode
}

type simNode struct {
	name     string
	power    bool // drawing power
	ready    bool
	cordoned bool
	readyAt  time.Time
	offAt    time.Time
	since    time.Time // last power-on or power-off decision
	ons      []time.Time
	pods     []*simPod
}

func (n *simNode) free() int { return simSlots - len(n.pods) }

// simWorld is the cluster, the house and the tallies of one policy.
type simWorld struct {
	now     time.Time
	nodes   []*simNode
	pending []*simPod
	waits   []time.Duration
	blocked int // evictions a PodDisruptionBudget refused
	breaks  int // evictions that broke a budget (the sim's API refuses them: always 0)

	workerHours, surplusKWh, gridKWh, cost float64
}

func newSimWorld(allOn bool) *simWorld {
	w := &simWorld{now: simDay}
	for i := 1; i <= 3; i++ {
		n := &simNode{name: fmt.Sprintf("w%d", i), since: simDay.Add(-24 * time.Hour)}
		if allOn {
			n.power, n.ready = true, true
		}
		w.nodes = append(w.nodes, n)
	}
	return w
}

func (w *simWorld) powerOn(n *simNode) {
	n.power, n.ready, n.cordoned = true, false, false
	n.readyAt, n.since, n.offAt = w.now.Add(simBoot), w.now, time.Time{}
	n.ons = append(n.ons, w.now)
}

// drain cordons n and evicts its pods through the "Eviction API": a pod
// under a budget refuses, the node is uncordoned and stays on. Otherwise
// the pods go back to pending and n shuts down.
func (w *simWorld) drain(n *simNode) bool {
	n.cordoned = true
	for _, p := range n.pods {
		if p.pdb {
			w.blocked++
			n.cordoned = false
			return false
		}
	}
	for _, p := range n.pods {
		p.node, p.waitFrom = nil, w.now
		w.pending = append(w.pending, p)
	}
	n.pods = nil
	n.ready, n.offAt, n.since = false, w.now.Add(simShutdown), w.now
	return true
}

// step advances the world by one step: energy, boots and shutdowns, pod
// progress, arrivals, scheduling.
func (w *simWorld) step() {
	// energy over the step, with the state at its start
	poolW := 0.0
	for _, n := range w.nodes {
		if n.power {
			poolW += simWatts
		}
	}
	pv, house := simPV(w.now), simHouse(w.now)
	surplus := min(poolW, max(0, pv-house))
	h := simStep.Hours()
	w.workerHours += poolW / simWatts * h
	w.surplusKWh += surplus * h / 1000
	w.gridKWh += (poolW - surplus) * h / 1000
	w.cost += (poolW-surplus)*h/1000*simPrice[w.now.Hour()] + surplus*h/1000*simFeedIn

	w.now = w.now.Add(simStep)
	for _, n := range w.nodes {
		if n.power && !n.ready && !n.offAt.IsZero() && !w.now.Before(n.offAt) {
			n.power, n.offAt, n.cordoned = false, time.Time{}, false
		}
		if n.power && !n.ready && n.offAt.IsZero() && !w.now.Before(n.readyAt) {
			n.ready = true
		}
		n.pods = slices.DeleteFunc(n.pods, func(p *simPod) bool {
			p.left -= simStep
			return p.left <= 0
		})
	}
	switch w.now.Sub(simDay) {
	case 2 * time.Hour:
		for range 3 {
			w.pending = append(w.pending, &simPod{job: "nightly", waitFrom: w.now, left: 45 * time.Minute})
		}
	case 10 * time.Hour:
		for range 8 {
			w.pending = append(w.pending, &simPod{job: "batch", waitFrom: w.now, left: 90 * time.Minute, pdb: true})
		}
	}
	w.schedule()
}

func (w *simWorld) schedule() {
	var still []*simPod
	for _, p := range w.pending {
		var to *simNode
		for _, n := range w.nodes {
			if n.ready && !n.cordoned && n.free() > 0 {
				to = n
				break
			}
		}
		if to == nil {
			still = append(still, p)
			continue
		}
		p.node = to
		to.pods = append(to.pods, p)
		w.waits = append(w.waits, w.now.Sub(p.waitFrom))
	}
	w.pending = still
}

func (w *simWorld) oldestPending() time.Duration {
	var d time.Duration
	for _, p := range w.pending {
		d = max(d, w.now.Sub(p.waitFrom))
	}
	return d
}

// maxCycles is the most power-ons of one node in any 60-minute window.
func (w *simWorld) maxCycles() int {
	best := 0
	for _, n := range w.nodes {
		for i, at := range n.ons {
			c := 0
			for _, b := range n.ons[i:] {
				if b.Sub(at) < time.Hour {
					c++
				}
			}
			best = max(best, c)
		}
	}
	return best
}

// policies

type simPolicy interface{ act(w *simWorld) }

type alwaysOn struct{}

func (alwaysOn) act(*simWorld) {}

// podsOnly is cluster-autoscaler's behaviour with its defaults.
type podsOnly struct {
	lastUp     time.Time
	emptySince map[string]time.Time
}

func (p *podsOnly) act(w *simWorld) {
	if p.emptySince == nil {
		p.emptySince = map[string]time.Time{}
	}
	if len(w.pending) > 0 {
		slots := len(w.pending)
		for _, n := range w.nodes {
			if n.power && !n.ready && n.offAt.IsZero() {
				slots -= simSlots // booting capacity already on its way
			}
		}
		for _, n := range w.nodes {
			if slots <= 0 {
				break
			}
			if !n.power {
				w.powerOn(n)
				p.lastUp = w.now
				slots -= simSlots
			}
		}
	}
	for _, n := range w.nodes {
		if !n.ready || len(n.pods) > 0 {
			delete(p.emptySince, n.name)
			continue
		}
		if _, ok := p.emptySince[n.name]; !ok {
			p.emptySince[n.name] = w.now
		}
		if w.now.Sub(p.emptySince[n.name]) >= 10*time.Minute && w.now.Sub(p.lastUp) >= 10*time.Minute && len(w.pending) == 0 {
			w.drain(n)
			delete(p.emptySince, n.name)
		}
	}
}

// thePool runs Decide as the engine would.
type thePool struct {
	cfg       tenant.PoolConfig
	mem       Memory
	decisions map[Action]int
	noEnergy  bool // no Energy preferences: the pool sees pods only
}

func (p *thePool) act(w *simWorld) {
	poolW := 0.0
	var ws []Worker
	for _, n := range w.nodes {
		if n.power {
			poolW += simWatts
		}
		wk := Worker{Name: n.name, Power: PowerOff, Since: n.since, Empty: len(n.pods) == 0}
		if n.power && n.offAt.IsZero() {
			wk.Power, wk.Ready = PowerOn, n.ready
		}
		for _, at := range n.ons {
			if w.now.Sub(at) < time.Hour {
				wk.CyclesLastHour++
			}
		}
		if len(n.pods) > 0 {
			wk.Drainable = w.fitsElsewhere(n)
		}
		ws = append(ws, wk)
	}
	grid := simHouse(w.now) + poolW - simPV(w.now)
	in := Inputs{Now: w.now, Config: p.cfg, Workers: ws,
		Pods: Pods{Pending: len(w.pending), OldestPending: w.oldestPending()},
		Energy: Energy{Grid: Number("sensor.grid_power", fmt.Sprintf("%.1f", grid)),
			Solar: Number("sensor.pv_power", fmt.Sprintf("%.1f", simPV(w.now)))},
		Price: Price{Now: Number("sensor.price", fmt.Sprint(simPrice[w.now.Hour()]))},
	}
	if p.noEnergy {
		in.Energy = Energy{}
	}
	d, mem := Decide(in, p.mem)
	p.mem = mem
	p.decisions[d.Action]++
	if !d.Acts() {
		return
	}
	var n *simNode
	for _, x := range w.nodes {
		if x.name == d.Node {
			n = x
		}
	}
	switch d.Action {
	case Add:
		w.powerOn(n)
		p.mem = p.mem.Acted(d)
	case Remove:
		if w.drain(n) {
			p.mem = p.mem.Acted(d)
		} else {
			p.mem = p.mem.DrainRefused(n.name, w.now)
		}
	}
}

// fitsElsewhere: n's pods can all be evicted and fit on the other Ready
// workers.
func (w *simWorld) fitsElsewhere(n *simNode) bool {
	free := 0
	for _, o := range w.nodes {
		if o != n && o.ready && !o.cordoned {
			free += o.free()
		}
	}
	for _, p := range n.pods {
		if p.pdb {
			return false
		}
	}
	return len(n.pods) <= free
}

type simResult struct {
	name                                  string
	workerHours, surplusKWh, gridKWh, eur float64
	p50, p95                              time.Duration
	cycles, blocked, breaks, pods         int
}

func (r simResult) share() float64 {
	if r.surplusKWh+r.gridKWh == 0 {
		return 0
	}
	return 100 * r.surplusKWh / (r.surplusKWh + r.gridKWh)
}

func runSimDay(name string, allOn bool, p simPolicy) simResult {
	w := newSimWorld(allOn)
	for w.now.Before(simDay.Add(24 * time.Hour)) {
		p.act(w)
		w.step()
	}
	r := simResult{name: name, workerHours: w.workerHours, surplusKWh: w.surplusKWh, gridKWh: w.gridKWh, eur: w.cost,
		cycles: w.maxCycles(), blocked: w.blocked, breaks: w.breaks, pods: len(w.waits)}
	r.p50, r.p95 = percentile(w.waits, 50), percentile(w.waits, 95)
	return r
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(float64(p)/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func simDefaults() tenant.PoolConfig {
	return tenant.PoolConfig{Mode: tenant.PoolOn, Min: 0, Max: 3, Watts: simWatts,
		SurplusDelay: tenant.DefaultSurplusDelay, PendingDelay: tenant.DefaultPendingDelay,
		MinOn: tenant.DefaultMinOn, MinOff: tenant.DefaultMinOff, Cooldown: tenant.DefaultCooldown}
}

func simAll() []simResult {
	return []simResult{
		runSimDay("always on", true, alwaysOn{}),
		runSimDay("pods only", false, &podsOnly{}),
		runSimDay("pool", false, &thePool{cfg: simDefaults(), decisions: map[Action]int{}}),
		// for comparison, not a goal: the pool without energy sensors
		runSimDay("pool, no energy sensors", false, &thePool{cfg: simDefaults(), decisions: map[Action]int{}, noEnergy: true}),
	}
}

func simTable(rs []simResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| policy | worker-hours | kWh surplus | kWh grid | surplus share | cost € | pending p50 | pending p95 | max power-ons of a node in an hour | blocked evictions | PDB breaks |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %.2f | %.3f | %.3f | %.0f %% | %.3f | %s | %s | %d | %d | %d |\n", r.name, r.workerHours, r.surplusKWh,
			r.gridKWh, r.share(), r.eur, r.p50, r.p95, r.cycles, r.blocked, r.breaks)
	}
	return b.String()
}

// TestSimulatedDay runs the day and checks the goals: at least
// 80 % of the pool's energy from surplus, cost at most half of always on,
// pending p95 within 5 minutes of pods only, at most one power-on per node
// per hour, no eviction that breaks a budget.
func TestSimulatedDay(t *testing.T) {
	rs := simAll()
	t.Logf("simulated day (go test -run TestSimulatedDay -v ./internal/pool):\n%s", simTable(rs))
	always, pods, pool := rs[0], rs[1], rs[2]
	for _, r := range rs {
		if r.pods != 11 {
			t.Fatalf("%s: %d of 11 pods ran", r.name, r.pods)
		}
	}
	if pool.share() < 80 {
		t.Errorf("pool surplus share %.1f %% < 80 %%", pool.share())
	}
	if pool.eur > always.eur/2 {
		t.Errorf("pool cost %.3f > half of always on %.3f", pool.eur, always.eur)
	}
	if pool.p95 > pods.p95+5*time.Minute {
		t.Errorf("pool pending p95 %v > pods only %v + 5m", pool.p95, pods.p95)
	}
	if pool.cycles > 1 {
		t.Errorf("pool powered a node on %d times within an hour", pool.cycles)
	}
	if pool.breaks != 0 || pods.breaks != 0 {
		t.Errorf("budget breaks: pool %d, pods only %d", pool.breaks, pods.breaks)
	}
}

// BenchmarkSimulatedDay: go test -run '^$' -bench SimulatedDay ./internal/pool
// reports the table's figures per policy (and the time one day of three
// policies takes to simulate).
func BenchmarkSimulatedDay(b *testing.B) {
	var rs []simResult
	for b.Loop() {
		rs = simAll()
	}
	for _, r := range rs {
		k := strings.NewReplacer(", ", "_", " ", "_").Replace(r.name)
		b.ReportMetric(r.workerHours, k+"_worker-h")
		b.ReportMetric(r.surplusKWh, k+"_kWh-surplus")
		b.ReportMetric(r.gridKWh, k+"_kWh-grid")
		b.ReportMetric(r.share(), k+"_%surplus")
		b.ReportMetric(r.eur, k+"_EUR")
		b.ReportMetric(r.p50.Seconds(), k+"_p50-wait-s")
		b.ReportMetric(r.p95.Seconds(), k+"_p95-wait-s")
		b.ReportMetric(float64(r.cycles), k+"_max-ons/node/h")
		b.ReportMetric(float64(r.blocked), k+"_blocked-evictions")
	}
}
