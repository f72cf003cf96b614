package wsapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// EntityState is one entity's state as subscribe_entities gives it.
type EntityState struct {
	State       string
	Attributes  map[string]any
	LastChanged time.Time
	LastUpdated time.Time
}

// EntityStates are the states of the entities a subscribe_entities
// subscription follows, by entity id.
type EntityStates map[string]EntityState

// compressed is HA's compressed state (State.as_compressed_state): s, a,
// c (a context id or object), lc, and lu when it differs from lc.
type compressed struct {
	S  *string         `json:"s"`
	A  map[string]any  `json:"a"`
	C  json.RawMessage `json:"c"`
	LC *float64        `json:"lc"`
	LU *float64        `json:"lu"`
}

// Apply applies one subscribe_entities event to the states:
// {"a": {id: compressed}} adds (or replaces) entities, {"c": {id: {"+":
// compressed additions, "-": {"a": [removed attribute names]}}}} changes
// them, {"r": [id]} removes them. One event may carry all three (HA
// batches changes since 2026).
func (es EntityStates) Apply(event json.RawMessage) error {
	var ev struct {
		A map[string]compressed `json:"a"`
		C map[string]struct {
			Plus  compressed `json:"+"`
			Minus struct {
				A []string `json:"a"`
			} `json:"-,"` // the key "-" (a bare "-" would skip the field)
		} `json:"c"`
		R []string `json:"r"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		return fmt.Errorf("subscribe_entities event: %w", err)
	}
	for id, c := range ev.A {
		st := EntityState{Attributes: c.A}
		if c.S != nil {
			st.State = *c.S
		}
		if st.Attributes == nil {
			st.Attributes = map[string]any{}
		}
		if c.LC != nil {
			st.LastChanged = unixTime(*c.LC)
			st.LastUpdated = st.LastChanged
		}
		if c.LU != nil {
			st.LastUpdated = unixTime(*c.LU)
		}
		es[id] = st
	}
	for id, d := range ev.C {
		st, ok := es[id]
		if !ok {
			continue // a change of an entity we never saw added: wait for the next full state
		}
		st.Attributes = maps.Clone(st.Attributes)
		if st.Attributes == nil {
			st.Attributes = map[string]any{}
		}
		if d.Plus.S != nil {
			st.State = *d.Plus.S
		}
		maps.Copy(st.Attributes, d.Plus.A)
		for _, k := range d.Minus.A {
			delete(st.Attributes, k)
		}
		if d.Plus.LC != nil {
			st.LastChanged = unixTime(*d.Plus.LC)
			st.LastUpdated = st.LastChanged
		}
		if d.Plus.LU != nil {
			st.LastUpdated = unixTime(*d.Plus.LU)
		}
		es[id] = st
	}
	for _, id := range ev.R {
		delete(es, id)
	}
	return nil
}

func unixTime(f float64) time.Time {
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC()
}
