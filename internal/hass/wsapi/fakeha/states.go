package fakeha

import (
	"encoding/json"
	"slices"
)

// states is the fake's state machine: entities with a state (get_states)
// and a hook run on every service call, as a smart plug would react.
type states struct {
	byID map[string]string
	hook func(ServiceCall)
}

// SetState creates or changes an entity's state ("on", "off",
// "unavailable"), as get_states lists it.
func (s *Server) SetState(entityID, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.states.byID == nil {
		s.states.byID = map[string]string{}
	}
	s.states.byID[entityID] = state
	s.cond.Broadcast()
}

// RemoveState removes an entity from get_states.
func (s *Server) RemoveState(entityID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.states.byID, entityID)
}

// State is an entity's state; ok is false when there is no such entity.
func (s *Server) State(entityID string) (state string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	state, ok = s.states.byID[entityID]
	return state, ok
}

// OnService sets a hook called (outside the fake's lock, before the call
// is answered) with every service call; e.g. switch.turn_on powering a
// simulated machine on.
func (s *Server) OnService(fn func(ServiceCall)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states.hook = fn
}

// handleStates answers get_states; it reports whether typ was its.
func (s *Server) handleStates(c *conn, id int64, typ string) bool {
	if typ != "get_states" {
		return false
	}
	s.mu.Lock()
	ids := make([]string, 0, len(s.states.byID))
	for e := range s.states.byID {
		ids = append(ids, e)
	}
	slices.Sort(ids)
	out := make([]map[string]any, 0, len(ids))
	for _, e := range ids {
		out = append(out, map[string]any{"entity_id": e, "state": s.states.byID[e], "attributes": map[string]any{},
			"context": s.newContextLocked()})
	}
	s.mu.Unlock()
	c.ok(id, out)
	return true
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
	s.mu.Lock()
	if call.Domain == "switch" && (call.Service == "turn_on" || call.Service == "turn_off") {
		for _, e := range ids {
			if _, ok := s.states.byID[e]; ok {
				s.states.byID[e] = map[string]string{"turn_on": "on", "turn_off": "off"}[call.Service]
			}
		}
	}
	hook := s.states.hook
	s.mu.Unlock()
	if hook != nil {
		hook(call)
	}
}
