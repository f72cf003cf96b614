package fakeha

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"
)

// states is the fake's state machine: entities with a state and
// attributes (get_states, subscribe_entities, state_changed events), the
// Energy preferences, the service responses, and a hook run on every
// service call, as a smart plug would react.
type states struct {
	// order serialises state changes and new subscribe_entities
	// subscriptions, as HA's event loop does: every subscriber sees the
	// changes of an entity in order, after its initial state.
	order     sync.Mutex
	byID      map[string]*entityState
	hook      func(ServiceCall)
	prefs     json.RawMessage                                    // energy/get_prefs; nil: "No prefs"
	responses map[string]func(data json.RawMessage) (any, error) // "domain.service"
}

// entityState is HA's State: last_changed moves with the state,
// last_updated with the state or the attributes.
type entityState struct {
	state       string
	attrs       map[string]any
	lastChanged time.Time
	lastUpdated time.Time
	ctx         Context
}

// dict is the state as get_states and state_changed events carry it.
func (e *entityState) dict(id string) map[string]any {
	return map[string]any{"entity_id": id, "state": e.state, "attributes": e.attrs,
		"last_changed": e.lastChanged.Format(time.RFC3339Nano), "last_reported": e.lastUpdated.Format(time.RFC3339Nano),
		"last_updated": e.lastUpdated.Format(time.RFC3339Nano), "context": e.ctx}
}

// compressed is State.as_compressed_state: s, a, c (the context id), lc,
// and lu only when it differs from lc.
func (e *entityState) compressed() map[string]any {
	m := map[string]any{"s": e.state, "a": e.attrs, "c": e.ctx.ID, "lc": unix(e.lastChanged)}
	if !e.lastUpdated.Equal(e.lastChanged) {
		m["lu"] = unix(e.lastUpdated)
	}
	return m
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// SetState creates or changes an entity's state ("on", "off",
// "unavailable", "412.5"), keeping its attributes.
func (s *Server) SetState(entityID, state string) {
	s.setState(entityID, state, nil, false)
}

// SetStateAttrs creates or changes an entity's state and replaces its
// attributes (unit_of_measurement, a price forecast, …).
func (s *Server) SetStateAttrs(entityID, state string, attrs map[string]any) {
	s.setState(entityID, state, attrs, true)
}

// setState changes the state machine as HA's async_set does: nothing
// happens when neither the state nor the attributes change; otherwise
// state_changed fires (subscribers of state_changed get the full old and
// new states, subscribe_entities subscribers the compressed diff).
func (s *Server) setState(entityID, state string, attrs map[string]any, replace bool) {
	s.states.order.Lock()
	defer s.states.order.Unlock()
	s.mu.Lock()
	if s.states.byID == nil {
		s.states.byID = map[string]*entityState{}
	}
	old := s.states.byID[entityID]
	now := time.Now().UTC()
	ne := &entityState{state: state, attrs: map[string]any{}, lastChanged: now, lastUpdated: now, ctx: s.newContextLocked()}
	switch {
	case replace:
		ne.attrs = cloneAttrs(attrs)
	case old != nil:
		ne.attrs = cloneAttrs(old.attrs)
	}
	if old != nil {
		if old.state == state && reflect.DeepEqual(old.attrs, ne.attrs) {
			s.mu.Unlock()
			return
		}
		if old.state == state {
			ne.lastChanged = old.lastChanged
		}
	}
	s.states.byID[entityID] = ne
	s.cond.Broadcast()
	s.mu.Unlock()
	s.stateChanged(entityID, old, ne)
}

// RemoveState removes an entity from the state machine (state_changed
// with new_state null).
func (s *Server) RemoveState(entityID string) {
	s.states.order.Lock()
	defer s.states.order.Unlock()
	s.mu.Lock()
	old := s.states.byID[entityID]
	delete(s.states.byID, entityID)
	s.mu.Unlock()
	if old != nil {
		s.stateChanged(entityID, old, nil)
	}
}

// State is an entity's state; ok is false when there is no such entity.
func (s *Server) State(entityID string) (state string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.states.byID[entityID]
	if !ok {
		return "", false
	}
	return e.state, true
}

// OnService sets a hook called (outside the fake's lock, before the call
// is answered) with every service call; e.g. switch.turn_on powering a
// simulated machine on.
func (s *Server) OnService(fn func(ServiceCall)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states.hook = fn
}

// SetEnergyPrefs sets what energy/get_prefs answers: the preferences as
// HA stores them (any of its shapes); nil: never saved (HA then answers
// not_found "No prefs").
func (s *Server) SetEnergyPrefs(prefs json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states.prefs = append(json.RawMessage(nil), prefs...)
	if prefs == nil {
		s.states.prefs = nil
	}
}

// RespondService makes domain.service a service that returns a response
// (SupportsResponse.ONLY, like nordpool.get_prices_for_date): fn gets the
// service data and gives the response or an error (answered as HA's
// service_validation_error). Such a service called without
// return_response fails, as in HA; a service without a responder called
// with return_response fails too.
func (s *Server) RespondService(domain, service string, fn func(data json.RawMessage) (any, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.states.responses == nil {
		s.states.responses = map[string]func(json.RawMessage) (any, error){}
	}
	s.states.responses[domain+"."+service] = fn
}

// handleStates answers get_states, subscribe_entities and
// energy/get_prefs; it reports whether typ was its.
func (s *Server) handleStates(c *conn, id int64, typ string, raw []byte) bool {
	switch typ {
	case "get_states":
		s.mu.Lock()
		out := make([]map[string]any, 0, len(s.states.byID))
		for _, e := range slices.Sorted(maps.Keys(s.states.byID)) {
			out = append(out, s.states.byID[e].dict(e))
		}
		s.mu.Unlock()
		c.ok(id, out)
	case "subscribe_entities":
		var msg struct {
			EntityIDs any `json:"entity_ids"`
		}
		_ = json.Unmarshal(raw, &msg)
		ids, ok := entityIDList(msg.EntityIDs)
		if !ok {
			c.fail(id, "invalid_format", "Entity IDs should be a list of strings or a comma-separated string @ data['entity_ids']")
			return true
		}
		// like HA: the subscription and the current states are taken in
		// one step (nothing missed between), the result comes first
		s.states.order.Lock()
		defer s.states.order.Unlock()
		s.mu.Lock()
		c.subs[id] = "subscribe_entities"
		if c.entitySubs == nil {
			c.entitySubs = map[int64]map[string]bool{}
		}
		want := map[string]bool{}
		for _, e := range ids {
			want[e] = true
		}
		c.entitySubs[id] = want
		add := map[string]any{}
		for e, st := range s.states.byID {
			if len(want) == 0 || want[e] {
				add[e] = st.compressed()
			}
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		c.ok(id, nil)
		_ = c.send(map[string]any{"id": id, "type": "event", "event": map[string]any{"a": add}})
	case "energy/get_prefs":
		s.mu.Lock()
		prefs := s.states.prefs
		s.mu.Unlock()
		if prefs == nil {
			c.fail(id, "not_found", "No prefs")
			return true
		}
		c.ok(id, json.RawMessage(prefs))
	default:
		return false
	}
	return true
}

// stateChanged delivers one change: a state_changed event (recorded and
// sent to its subscribers) and the compressed form to every
// subscribe_entities subscription that follows the entity. Deliveries of
// one change are sent under the connection's lock, in order.
func (s *Server) stateChanged(id string, old, ne *entityState) {
	data := map[string]any{"entity_id": id, "old_state": nil, "new_state": nil}
	if old != nil {
		data["old_state"] = old.dict(id)
	}
	if ne != nil {
		data["new_state"] = ne.dict(id)
	}
	raw, _ := json.Marshal(data)
	var diff map[string]any
	switch {
	case ne == nil:
		diff = map[string]any{"r": []string{id}}
	case old == nil:
		diff = map[string]any{"a": map[string]any{id: ne.compressed()}}
	default:
		plus := map[string]any{}
		if old.state != ne.state {
			plus["s"] = ne.state
		}
		if !old.lastChanged.Equal(ne.lastChanged) {
			plus["lc"] = unix(ne.lastChanged)
		} else if !old.lastUpdated.Equal(ne.lastUpdated) {
			plus["lu"] = unix(ne.lastUpdated)
		}
		plus["c"] = ne.ctx.ID
		changed := map[string]any{}
		for k, v := range ne.attrs {
			if ov, ok := old.attrs[k]; !ok || !reflect.DeepEqual(ov, v) {
				changed[k] = v
			}
		}
		if len(changed) > 0 {
			plus["a"] = changed
		}
		d := map[string]any{"+": plus}
		var removed []string
		for k := range old.attrs {
			if _, ok := ne.attrs[k]; !ok {
				removed = append(removed, k)
			}
		}
		if len(removed) > 0 {
			d["-"] = map[string]any{"a": removed}
		}
		diff = map[string]any{"c": map[string]any{id: d}}
	}
	s.mu.Lock()
	type target struct {
		c   *conn
		sid int64
	}
	var targets []target
	for c := range s.conns {
		for sid, want := range c.entitySubs {
			if len(want) == 0 || want[id] {
				targets = append(targets, target{c, sid})
			}
		}
	}
	s.mu.Unlock()
	for _, t := range targets {
		_ = t.c.send(map[string]any{"id": t.sid, "type": "event", "event": diff})
	}
	s.fire("state_changed", raw)
}

// serviceResponse answers a call_service's return_response as HA does;
// handled reports whether it answered (with the response or an error).
func (s *Server) serviceResponse(c *conn, id int64, call ServiceCall, returnResponse bool) (handled bool) {
	s.mu.Lock()
	fn := s.states.responses[call.Domain+"."+call.Service]
	s.mu.Unlock()
	switch {
	case fn == nil && !returnResponse:
		return false
	case fn == nil:
		c.fail(id, "service_validation_error",
			"Validation error: An action which does not return responses can't be called with return_response=True")
		return true
	case !returnResponse:
		c.fail(id, "service_validation_error",
			"Validation error: The action requires responses and must be called with return_response=True")
		return true
	}
	resp, err := fn(call.ServiceData)
	if err != nil {
		c.fail(id, "service_validation_error", fmt.Sprintf("Validation error: %v", err))
		return true
	}
	s.mu.Lock()
	ctx := s.newContextLocked()
	s.mu.Unlock()
	c.ok(id, map[string]any{"context": ctx, "response": resp})
	return true
}

// entityIDList reads subscribe_entities' entity_ids (cv.entity_ids: a
// list or a comma-separated string); absent means every entity.
func entityIDList(v any) ([]string, bool) {
	switch x := v.(type) {
	case nil:
		return nil, true
	case string:
		var out []string
		for _, p := range splitComma(x) {
			if !entityIDRE.MatchString(p) {
				return nil, false
			}
			out = append(out, p)
		}
		return out, true
	case []any:
		var out []string
		for _, e := range x {
			id, ok := e.(string)
			if !ok || !entityIDRE.MatchString(id) {
				return nil, false
			}
			out = append(out, id)
		}
		return out, true
	}
	return nil, false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if p := trimSpace(s[start:i]); p != "" {
				out = append(out, p)
			}
			start = i + 1
		}
	}
	return out
}

func trimSpace(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

func cloneAttrs(a map[string]any) map[string]any {
	if a == nil {
		return map[string]any{}
	}
	b, _ := json.Marshal(a) // deep copy of JSON-like values
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// serviceEffect applies a call as Home Assistant would: switch.turn_on and
// turn_off change an existing switch's state (a call for an entity that
// does not exist succeeds and does nothing); then the hook runs.
func (s *Server) serviceEffect(call ServiceCall) {
	var d struct {
		EntityID any `json:"entity_id"`
	}
	_ = json.Unmarshal(call.ServiceData, &d)
	if d.EntityID == nil && len(call.Target) > 0 {
		_ = json.Unmarshal(call.Target, &d)
	}
	var ids []string
	switch v := d.EntityID.(type) {
	case string:
		ids = []string{v}
	case []any:
		for _, x := range v {
			if e, ok := x.(string); ok {
				ids = append(ids, e)
			}
		}
	}
	var change []string
	s.mu.Lock()
	if call.Domain == "switch" && (call.Service == "turn_on" || call.Service == "turn_off") {
		for _, e := range ids {
			if _, ok := s.states.byID[e]; ok {
				change = append(change, e)
			}
		}
	}
	hook := s.states.hook
	s.mu.Unlock()
	for _, e := range change {
		s.SetState(e, map[string]string{"turn_on": "on", "turn_off": "off"}[call.Service])
	}
	if hook != nil {
		hook(call)
	}
}
