// Package power switches metal machines on and off by whatever can: a
// Wake-on-LAN packet, a Home Assistant entity (a smart plug's switch, an
// ATX relay's or a BMC integration's button), a Redfish or an IPMI BMC. It parses a
// machine's `power` value and gives the engine one Controller per machine.
package power

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/machine"
	"github.com/rezuscloud/rezuscloud/internal/redfish"
)

// Kind is how a machine is powered (package machine, which the domain
// shares: the tenant files' power values are parsed there).
type Kind = machine.PowerKind

// Kinds of power.
const (
	KindWOL     = machine.KindWOL
	KindSwitch  = machine.KindSwitch
	KindButton  = machine.KindButton
	KindRedfish = machine.KindRedfish
	KindIPMI    = machine.KindIPMI
	KindNone    = machine.KindNone
)

// Spec is a parsed `power` value.
type Spec = machine.PowerSpec

// Parse reads a machine's `power` value (machine.ParsePower).
func Parse(value, mac string) (Spec, error) { return machine.ParsePower(value, mac) }

// State is a machine's power as far as its controller can tell.
type State string

// Power states.
const (
	StateOn      State = "on"
	StateOff     State = "off"
	StateUnknown State = "unknown" // the engine then goes by whether the node answers
)

// Controller powers one machine. On and Off are called by the engine when
// the machine is meant to change: On when the node does not answer, Off
// after Talos has shut it down (or reset it with a halt).
type Controller interface {
	On(ctx context.Context) error
	Off(ctx context.Context) error
	State(ctx context.Context) (State, error)
}

// HA is what entity power needs from Home Assistant's WebSocket API.
type HA interface {
	CallService(ctx context.Context, domain, service string, data any) error
	// GetState returns the entity's state; exists is false when Home
	// Assistant has no such entity.
	GetState(ctx context.Context, entityID string) (state string, exists bool, err error)
}

// Deps are what controllers are made with.
type Deps struct {
	// MAC and SendWOL (wol.Send with the broadcast address bound) for
	// Wake-on-LAN.
	MAC     string
	SendWOL func(ctx context.Context, mac string) error
	// HA for entity power; nil when there is no WebSocket link.
	HA HA
	// Redfish credentials and TLS; Insecure from the machine's
	// redfish_insecure.
	Redfish redfish.Options
	// IPMI credentials for KindIPMI.
	IPMI IPMICredentials
	// GracePeriod is how long Redfish and IPMI Off wait after the graceful
	// shutdown before forcing the power off; default 2 minutes.
	GracePeriod time.Duration
	// PollInterval is how often Redfish Off reads the power state while
	// waiting; default 2 s.
	PollInterval time.Duration
}

// New returns the controller for spec.
func New(spec Spec, d Deps) (Controller, error) {
	switch spec.Kind {
	case KindWOL:
		if d.MAC == "" || d.SendWOL == nil {
			return nil, errors.New(`power "wol": needs the machine's mac`)
		}
		return &WOL{MAC: d.MAC, Send: d.SendWOL}, nil
	case KindNone:
		return None{}, nil
	case KindSwitch, KindButton:
		if d.HA == nil {
			return nil, fmt.Errorf("power %q needs the Home Assistant WebSocket API, which is not configured", spec.Entity)
		}
		return &Entity{HA: d.HA, EntityID: spec.Entity}, nil
	case KindRedfish:
		c, err := redfish.New(spec.URL, d.Redfish)
		if err != nil {
			return nil, fmt.Errorf("power: %w", err)
		}
		return &Redfish{Client: c, GracePeriod: d.GracePeriod, PollInterval: d.PollInterval}, nil
	case KindIPMI:
		return newIPMI(spec, d)
	}
	return nil, fmt.Errorf("power: unknown kind %q", spec.Kind)
}

// ErrManual is returned by None.On: nothing can power the machine on.
var ErrManual = errors.New(`the machine has power "none": power it on by hand`)

// None is a machine nothing can switch.
type None struct{}

// On fails with ErrManual.
func (None) On(context.Context) error { return ErrManual }

// Off does nothing: the Talos shutdown powered the machine off.
func (None) Off(context.Context) error { return nil }

// State is unknown.
func (None) State(context.Context) (State, error) { return StateUnknown, nil }

// WOL wakes the machine with a magic packet.
type WOL struct {
	MAC  string
	Send func(ctx context.Context, mac string) error
}

// On sends the magic packet.
func (w *WOL) On(ctx context.Context) error {
	if err := w.Send(ctx, w.MAC); err != nil {
		return fmt.Errorf("power on %s: %w", w.MAC, err)
	}
	return nil
}

// Off does nothing: Wake-on-LAN cannot switch off, and the Talos shutdown
// already powered the machine off.
func (w *WOL) Off(context.Context) error { return nil }

// State is unknown: a packet tells nothing back.
func (w *WOL) State(context.Context) (State, error) { return StateUnknown, nil }

// Entity powers the machine through a Home Assistant switch or button.
// Home Assistant answers call_service for an entity that does not exist
// with success, so the entity is looked up before anything is switched.
type Entity struct {
	HA       HA
	EntityID string // switch.<id> or button.<id>
}

func (e *Entity) domain() string { d, _, _ := strings.Cut(e.EntityID, "."); return d }

// check looks the entity up; a missing or unavailable entity is an error.
func (e *Entity) check(ctx context.Context) (string, error) {
	st, ok, err := e.HA.GetState(ctx, e.EntityID)
	if err != nil {
		return "", fmt.Errorf("power %s: looking the entity up in Home Assistant: %w", e.EntityID, err)
	}
	if !ok {
		return "", fmt.Errorf("power %s: Home Assistant has no such entity (check the machine's power key)", e.EntityID)
	}
	if st == "unavailable" {
		return "", fmt.Errorf("power %s: the entity is unavailable in Home Assistant", e.EntityID)
	}
	return st, nil
}

func (e *Entity) call(ctx context.Context, service string) error {
	if err := e.HA.CallService(ctx, e.domain(), service, map[string]any{"entity_id": e.EntityID}); err != nil {
		return fmt.Errorf("power %s: %s.%s: %w", e.EntityID, e.domain(), service, err)
	}
	return nil
}

// On turns the switch on, or presses the button (a button toggles: the
// engine presses only when the node does not answer).
func (e *Entity) On(ctx context.Context) error {
	if _, err := e.check(ctx); err != nil {
		return err
	}
	if e.domain() == string(KindButton) {
		return e.call(ctx, "press")
	}
	return e.call(ctx, "turn_on")
}

// Off turns the switch off. A button is not pressed: after the Talos
// shutdown the machine is off, and a press would start it again.
func (e *Entity) Off(ctx context.Context) error {
	if _, err := e.check(ctx); err != nil {
		return err
	}
	if e.domain() == string(KindButton) {
		return nil
	}
	return e.call(ctx, "turn_off")
}

// State is the switch's state; a button's is unknown.
func (e *Entity) State(ctx context.Context) (State, error) {
	st, err := e.check(ctx)
	if err != nil {
		return StateUnknown, err
	}
	if e.domain() == string(KindButton) {
		return StateUnknown, nil
	}
	switch st {
	case "on":
		return StateOn, nil
	case "off":
		return StateOff, nil
	}
	return StateUnknown, nil
}

// Redfish powers the machine through its BMC.
type Redfish struct {
	Client       *redfish.Client
	GracePeriod  time.Duration // before ForceOff; default 2 min
	PollInterval time.Duration // default 2 s
}

// On sends ComputerSystem.Reset On unless the system is on.
func (r *Redfish) On(ctx context.Context) error {
	st, err := r.Client.PowerState(ctx)
	if err != nil {
		return err
	}
	if st == redfish.PowerOn || st == redfish.PowerPoweringOn {
		return nil
	}
	return r.Client.On(ctx)
}

// Off does nothing to a system that is off; otherwise it sends
// GracefulShutdown, waits up to GracePeriod for the system to be off, then
// sends ForceOff.
func (r *Redfish) Off(ctx context.Context) error {
	st, err := r.Client.PowerState(ctx)
	if err != nil {
		return err
	}
	if st == redfish.PowerOff {
		return nil
	}
	if err := r.Client.GracefulShutdown(ctx); err != nil {
		return err
	}
	grace, every := r.GracePeriod, r.PollInterval
	if grace <= 0 {
		grace = 2 * time.Minute
	}
	if every <= 0 {
		every = 2 * time.Second
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if st, err := r.Client.PowerState(ctx); err == nil && st == redfish.PowerOff {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redfish %s: waiting for the graceful shutdown: %w", r.Client.Host(), ctx.Err())
		case <-deadline.C:
			return r.Client.ForceOff(ctx)
		case <-tick.C:
		}
	}
}

// State maps the system's PowerState (transitions are unknown).
func (r *Redfish) State(ctx context.Context) (State, error) {
	st, err := r.Client.PowerState(ctx)
	if err != nil {
		return StateUnknown, err
	}
	switch st {
	case redfish.PowerOn:
		return StateOn, nil
	case redfish.PowerOff:
		return StateOff, nil
	}
	return StateUnknown, nil
}
