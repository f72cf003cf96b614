package power

import (
	"context"
	"encoding/json"
	"fmt"
)

// WSCaller is the part of the WebSocket client (*wsapi.Client) entity power
// uses.
type WSCaller interface {
	Call(ctx context.Context, msg map[string]any) (json.RawMessage, error)
	CallService(ctx context.Context, domain, service string, data any) error
}

// FromWS adapts the WebSocket client to HA: CallService as it is, GetState
// through get_states (Home Assistant has no command for one entity's
// state).
func FromWS(c WSCaller) HA { return wsHA{c} }

type wsHA struct{ c WSCaller }

func (w wsHA) CallService(ctx context.Context, domain, service string, data any) error {
	return w.c.CallService(ctx, domain, service, data)
}

func (w wsHA) GetState(ctx context.Context, entityID string) (string, bool, error) {
	raw, err := w.c.Call(ctx, map[string]any{"type": "get_states"})
	if err != nil {
		return "", false, fmt.Errorf("get_states: %w", err)
	}
	var states []struct {
		EntityID string `json:"entity_id"`
		State    string `json:"state"`
	}
	if err := json.Unmarshal(raw, &states); err != nil {
		return "", false, fmt.Errorf("get_states: unexpected answer: %w", err)
	}
	for _, s := range states {
		if s.EntityID == entityID {
			return s.State, true, nil
		}
	}
	return "", false, nil
}
