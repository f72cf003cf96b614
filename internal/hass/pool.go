package hass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Worker pools (docs/design.md §11.2): for each group with a pool, on the
// tenant device, the "<group> pool" select (mode), the "… pool min" and
// "… pool max" numbers, the "… pool decision" sensor (its attributes the
// reason, the inputs and next_possible), the "<group> pool" event entity,
// and the pool's power, energy and solar share sensors. Their state is the
// tenant state document's "pools" (poolDocs), from tenant.Status.Pools,
// which the engine fills; mode, min and max are the file's. Decision
// events go out on <base>/<tenant>/<group>/pool/event (not retained).

// ActionPool is the request that sets a pool's mode, min and max.
const ActionPool = "pool"

var (
	poolModeOptions = enumOptions(tenant.PoolModes)
	// poolDecisions are the decision sensor's states and the event
	// entity's event types (pool.Actions).
	poolDecisions = []string{"hold", "add", "remove", "blocked"}
)

// poolEntities are the entity rows of a pooled group (entities.go adds
// them to the table).
var poolEntities = []entity{
	{kind: kindTenant, key: "pool", platform: "select", name: "pool", perGroup: true, pooled: true,
		icon: "mdi:solar-power-variant", options: poolModeOptions, value: "value_json.pools[%q].mode",
		topicSuffix: "pool/set", request: poolModeRequest},
	{kind: kindTenant, key: "pool_min", platform: "number", name: "pool min", perGroup: true, pooled: true,
		category: "config", icon: "mdi:arrow-collapse-down", value: "value_json.pools[%q].min",
		topicSuffix: "pool_min/set", request: poolBoundRequest(false), bounds: poolNumberBounds},
	{kind: kindTenant, key: "pool_max", platform: "number", name: "pool max", perGroup: true, pooled: true,
		category: "config", icon: "mdi:arrow-collapse-up", value: "value_json.pools[%q].max",
		topicSuffix: "pool_max/set", request: poolBoundRequest(true), bounds: poolNumberBounds},
	{kind: kindTenant, key: "pool_decision", platform: "sensor", name: "pool decision", perGroup: true, pooled: true,
		class: "enum", options: poolDecisions, icon: "mdi:head-cog", value: "value_json.pools[%q].decision",
		attrs: "{'reason': value_json.pools[%q].reason, 'node': value_json.pools[%q].node, " +
			"'observe': value_json.pools[%q].observe, 'next_possible': value_json.pools[%q].next_possible, " +
			"'inputs': value_json.pools[%q].inputs} | tojson"},
	{kind: kindTenant, key: "pool_event", platform: "event", name: "pool", perGroup: true, pooled: true,
		icon: "mdi:solar-power-variant-outline", eventTypes: poolDecisions, poolEvents: true},
	{kind: kindTenant, key: "pool_power", platform: "sensor", name: "pool power", perGroup: true, pooled: true,
		class: "power", unit: "W", stateClass: "measurement", value: "value_json.pools[%q].power_w"},
	{kind: kindTenant, key: "pool_energy", platform: "sensor", name: "pool energy", perGroup: true, pooled: true,
		class: "energy", unit: "kWh", stateClass: "total_increasing", value: "value_json.pools[%q].energy_kwh"},
	{kind: kindTenant, key: "pool_solar_share", platform: "sensor", name: "pool solar share", perGroup: true, pooled: true,
		unit: "%", stateClass: "measurement", icon: "mdi:solar-power", value: "value_json.pools[%q].solar_share"},
}

// poolEvent is the topic of a pooled group's decision events.
func (t topics) poolEvent(r ref) string {
	return t.base + "/" + r.tenant + "/" + r.group + "/pool/event"
}

// poolNumberBounds are the min and max numbers' bounds (at least 0..1:
// HA needs min < max).
func poolNumberBounds(t *tenant.Tenant, g *tenant.NodeGroup) (lo, hi int) {
	lo, hi = t.PoolBounds(g)
	return lo, max(hi, lo+1)
}

// poolDoc is one pool in the tenant state document. Mode, min and max are
// the file's; the rest is the engine's last report, null before it (so
// the energy sensor shows unknown, never a 0 that HA would take for a
// meter reset).
type poolDoc struct {
	Mode         string         `json:"mode"`
	Min          int            `json:"min"`
	Max          int            `json:"max"`
	Decision     string         `json:"decision"`
	Node         *string        `json:"node"`
	Reason       string         `json:"reason"`
	Observe      bool           `json:"observe"`
	At           *string        `json:"at"`
	NextPossible *string        `json:"next_possible"`
	Inputs       map[string]any `json:"inputs"`
	PowerW       *float64       `json:"power_w"`
	EnergyKWh    *float64       `json:"energy_kwh"`
	SolarShare   *float64       `json:"solar_share"`
}

// poolDocs renders the pools of a tenant's pooled groups.
func poolDocs(t *tenant.Tenant, st tenant.Status) map[string]poolDoc {
	out := map[string]poolDoc{}
	for _, g := range t.PooledGroups() {
		c, _ := t.PoolConfig(g)
		d := poolDoc{Mode: string(c.Mode), Min: c.Min, Max: c.Max, Decision: "hold", Reason: "no decision yet",
			Inputs: map[string]any{}}
		if ps, ok := st.Pools[g]; ok {
			if slices.Contains(poolDecisions, ps.Decision) {
				d.Decision = ps.Decision
			}
			d.Node, d.Reason, d.Observe = strOrNil(ps.Node), ps.Reason, ps.Observe
			d.At, d.NextPossible = strOrNil(isoTime(ps.At)), strOrNil(isoTime(ps.NextPossible))
			if ps.Inputs != nil {
				d.Inputs = ps.Inputs
			}
			p, e, s := ps.PowerW, ps.EnergyKWh, ps.SolarShare
			d.PowerW, d.EnergyKWh, d.SolarShare = &p, &e, &s
		}
		out[g] = d
	}
	return out
}

// PublishPoolDecision fires the "<group> pool" event entity with a
// decision (not retained; queued while the broker is away, like the
// operation events). Call it when the decision changes (pool.Decision.Changed).
func (b *Bridge) PublishPoolDecision(tenantName, group string, st tenant.PoolStatus) {
	if !slices.Contains(poolDecisions, st.Decision) {
		b.log.Warn("pool decision with an unknown action not published", zap.String("decision", st.Decision))
		return
	}
	doc := map[string]any{"event_type": st.Decision, "node": st.Node, "reason": st.Reason, "observe": st.Observe,
		"at": isoTime(st.At), "next_possible": isoTime(st.NextPossible)}
	p, _ := json.Marshal(doc)
	b.mu.Lock()
	t := b.views[tenantName].Spec
	if t == nil || t.Group(group) == nil || t.Group(group).Pool == nil {
		b.mu.Unlock()
		b.log.Warn("pool decision for a group without a pool not published", zap.String("tenant", tenantName), zap.String("group", group))
		return
	}
	if len(b.poolEvents) >= maxQueuedEvents {
		b.poolEvents = b.poolEvents[1:]
	}
	b.poolEvents = append(b.poolEvents, pub{b.topics.poolEvent(ref{tenant: tenantName, group: group}), p})
	b.mu.Unlock()
	b.trigger()
}

// sendPoolEvents publishes the queued pool decision events in order; what
// the broker did not acknowledge stays queued.
func (b *Bridge) sendPoolEvents() error {
	b.mu.Lock()
	evs := b.poolEvents
	b.mu.Unlock()
	for i, e := range evs {
		if !b.client.IsConnectionOpen() {
			return errNotReady
		}
		tok := b.client.Publish(e.topic, 1, false, e.payload)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.mu.Lock()
			b.poolEvents = b.poolEvents[i:]
			b.mu.Unlock()
			return errors.Join(errors.New("publish pool event failed"), tok.Error())
		}
	}
	b.mu.Lock()
	b.poolEvents = b.poolEvents[len(evs):]
	b.mu.Unlock()
	return nil
}

// poolModeRequest is the request of the "<group> pool" select.
func poolModeRequest(_ *Bridge, r ref, p string) (Request, error) {
	return Request{Action: ActionPool, Tenant: r.tenant, Group: r.group, Mode: &p}, nil
}

// poolBoundRequest is the request of the "… pool min" and "… pool max"
// numbers.
func poolBoundRequest(isMax bool) func(*Bridge, ref, string) (Request, error) {
	return func(_ *Bridge, r ref, p string) (Request, error) {
		n, err := parseCount(p)
		if err != nil {
			return Request{}, err
		}
		req := Request{Action: ActionPool, Tenant: r.tenant, Group: r.group}
		if isMax {
			req.Max = &n
		} else {
			req.Min = &n
		}
		return req, nil
	}
}

// callPool runs a pool request.
func callPool(ctx context.Context, c Commander, r Request) (any, error) {
	if err := c.Pool(ctx, r.Tenant, r.Group, r.Mode, r.Min, r.Max); err != nil {
		return nil, err
	}
	data := map[string]any{"tenant": r.Tenant, "group": r.Group}
	if r.Mode != nil {
		data["mode"] = *r.Mode
	}
	if r.Min != nil {
		data["min"] = *r.Min
	}
	if r.Max != nil {
		data["max"] = *r.Max
	}
	return data, nil
}

// checkPoolFields checks a pool request's mode, min and max syntax (the
// engine checks them against the group).
func checkPoolFields(req Request) error {
	if req.Mode == nil && req.Min == nil && req.Max == nil {
		return errors.New(`action "pool" needs at least one of "mode", "min", "max"`)
	}
	if req.Mode != nil && !slices.Contains(poolModeOptions, *req.Mode) {
		return fmt.Errorf("mode %q is not one of %s", truncate(*req.Mode, 40), strings.Join(poolModeOptions, ", "))
	}
	for name, v := range map[string]*int{"min": req.Min, "max": req.Max} {
		if v != nil && *v < 0 {
			return fmt.Errorf("%s must be a whole number >= 0", name)
		}
	}
	if req.Min != nil && req.Max != nil && *req.Min > *req.Max {
		return fmt.Errorf("min %d is more than max %d", *req.Min, *req.Max)
	}
	return nil
}
