package hass

import (
	"context"
	"encoding/json"
)

// HandleEvent answers a request that arrives as the data of a Home
// Assistant event (rezuscloud_request): the same request as the MQTT
// request API with the action inside, {"action":"scale","tenant":…}. It is
// decoded, validated and dispatched exactly like an MQTT request.
func (b *Bridge) HandleEvent(ctx context.Context, data []byte) Response {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		// let the decoder produce its usual error (and echo what it can)
		return b.HandleRaw(ctx, "", data)
	}
	var action string
	if a, ok := raw["action"]; ok {
		if err := json.Unmarshal(a, &action); err != nil {
			action = "" // not a string: unknown action
		}
		delete(raw, "action")
	}
	rest, err := json.Marshal(raw)
	if err != nil {
		return b.HandleRaw(ctx, "", data)
	}
	return b.HandleRaw(ctx, action, rest)
}
