package hass

import (
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// refuse reports a refused entity command where the user can see it: an
// operation event "refused" with the reason on the bridge's event entity,
// and Options.OnRefused (a persistent notification through the WebSocket
// link). A button press on a dashboard has no answer channel, so without
// this a refusal would reach the add-on log only.
func (b *Bridge) refuse(rt route, err error) {
	name := rt.e.action
	switch {
	case rt.e.perGroup:
		name = ActionScale
	case name == "":
		name = rt.e.key
	}
	msg := err.Error()
	if rt.r.node != "" {
		msg = rt.r.node + ": " + msg
	}
	ev := tenant.OperationEvent{Tenant: rt.r.tenant, Name: name, Result: tenant.ResultRefused,
		Message: truncate(msg, 255), At: time.Now()}
	b.PublishOperation(ev)
	if b.opts.OnRefused != nil {
		b.opts.OnRefused(ev)
	}
}

// Connected reports whether the bridge is connected to the broker now (for
// the container's health check).
func (b *Bridge) Connected() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.connected && !b.closed
}
