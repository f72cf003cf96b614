package pool

// State is everything a pool keeps between runs: the policy's memory, the
// energy meter and the last decision. The caller persists it per pooled
// group (it is plain data for JSON) so that the timers, the guarantees'
// history and the energy total survive a restart.
type State struct {
	Memory Memory `json:"memory"`
	Meter  Meter  `json:"meter"`
	// Last is the last decision (nil before the first).
	Last *Decision `json:"last,omitempty"`
}

// Step makes one decision and samples the meter (the pool's power and
// its surplus part, from the same inputs). changed reports whether the
// decision differs from the last one in what it does: then fire the
// "<group> pool" event. Step does not record an action: after carrying
// out d (d.Acts()), set next.Memory = next.Memory.Acted(d), or
// DrainRefused when a PodDisruptionBudget refused the drain.
func (s State) Step(in Inputs) (d Decision, next State, changed bool) {
	d, mem := Decide(in, s.Memory)
	p := PoolPower(in.Workers, in.Config.Watts)
	next = State{Memory: mem, Meter: s.Meter.Sample(in.Now, p, SurplusPower(in.Energy, p))}
	changed = s.Last == nil || d.Changed(*s.Last)
	next.Last = &d
	return d, next, changed
}
