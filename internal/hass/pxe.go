package hass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Network boot (docs/design.md §11.4) on the bridge device, shown only
// while the responder runs (SetNetworkBoot): the switch "Let new machines
// boot", the sensor "Boot assets" (the cached Talos versions) and the
// event entity "Network boot" (served, refused, local_boot; attributes
// mac, file, reason). Their state document is <base>/bridge/pxe (retained);
// the events go to <base>/bridge/pxe/event (not retained).

// Network-boot event types.
var netbootEventTypes = []string{"served", "refused", "local_boot"}

// BootAsset is one cached boot image, for the "Boot assets" sensor.
type BootAsset struct {
	Version   string    `json:"version"`
	Arch      string    `json:"arch"`
	Schematic string    `json:"schematic"`
	Checksum  string    `json:"checksum"` // "published" (the factory's) or "recorded" (ours only)
	Fetched   time.Time `json:"fetched"`
}

// NetworkBootEvent is one "Network boot" event.
type NetworkBootEvent struct {
	Type   string // served, refused, local_boot
	MAC    string
	File   string
	Reason string
	Step   string // dhcp, tftp, http
	At     time.Time
}

// pxeState is the bridge's network-boot state (Bridge.pxe). Guarded by b.mu.
type pxeState struct {
	setWindow func(open bool) // nil: no responder, no entities
	open      bool
	until     time.Time
	assets    []BootAsset
	problem   string
	events    [][]byte
}

type pxeDoc struct {
	Window        bool        `json:"window"`
	WindowUntil   *string     `json:"window_until"`
	Versions      string      `json:"versions"`
	Assets        []BootAsset `json:"assets"`
	AssetsProblem string      `json:"assets_problem"`
}

func (t topics) pxeState() string { return t.base + "/bridge/pxe" }
func (t topics) pxeEvent() string { return t.base + "/bridge/pxe/event" }

// pxeShown: the network-boot entities exist only with a responder.
func pxeShown(b *Bridge) bool { return b.pxe.setWindow != nil }

// SetNetworkBoot shows the network-boot entities; setWindow opens or
// closes "Let new machines boot" (the responder's SetWindow). Call it
// before Start.
func (b *Bridge) SetNetworkBoot(setWindow func(open bool)) {
	b.mu.Lock()
	b.pxe.setWindow = setWindow
	b.rebuildLocked()
	b.mu.Unlock()
	b.trigger()
}

// SetBootWindow shows whether new machines may boot, and until when.
func (b *Bridge) SetBootWindow(open bool, until time.Time) {
	b.mu.Lock()
	b.pxe.open, b.pxe.until = open, until
	b.pxeStatesLocked(b.states)
	b.mu.Unlock()
	b.trigger()
}

// SetBootAssets shows the cached boot images and the last fetch's problem.
func (b *Bridge) SetBootAssets(assets []BootAsset, problem string) {
	b.mu.Lock()
	b.pxe.assets, b.pxe.problem = append([]BootAsset(nil), assets...), problem
	b.pxeStatesLocked(b.states)
	b.mu.Unlock()
	b.trigger()
}

// pxeStatesLocked puts the network-boot state document into states (while
// the entities are shown). Callers hold b.mu.
func (b *Bridge) pxeStatesLocked(states map[string][]byte) {
	if !pxeShown(b) {
		delete(states, b.topics.pxeState())
		return
	}
	d := pxeDoc{Window: b.pxe.open, Assets: b.pxe.assets, AssetsProblem: b.pxe.problem}
	if d.Assets == nil {
		d.Assets = []BootAsset{}
	}
	if b.pxe.open && !b.pxe.until.IsZero() {
		u := isoTime(b.pxe.until)
		d.WindowUntil = &u
	}
	var vs []string
	for _, a := range b.pxe.assets {
		v := a.Version + " " + a.Arch
		if !strings.Contains(strings.Join(vs, ","), v) {
			vs = append(vs, v)
		}
	}
	d.Versions = truncate(strings.Join(vs, ", "), 250) // a state holds 255
	if d.Versions == "" {
		d.Versions = "none"
	}
	p, _ := json.Marshal(d)
	states[b.topics.pxeState()] = p
}

// PublishNetworkBoot fires the "Network boot" event entity (not retained;
// queued while the broker is away, the oldest dropped past a bound).
func (b *Bridge) PublishNetworkBoot(ev NetworkBootEvent) {
	known := false
	for _, t := range netbootEventTypes {
		known = known || t == ev.Type
	}
	if !known {
		b.log.Warn("network boot event with unknown type not published", zap.String("type", ev.Type))
		return
	}
	p, _ := json.Marshal(map[string]string{"event_type": ev.Type, "mac": ev.MAC, "file": ev.File,
		"reason": truncate(ev.Reason, 255), "step": ev.Step, "at": isoTime(ev.At)})
	b.mu.Lock()
	if !pxeShown(b) {
		b.mu.Unlock()
		return
	}
	if len(b.pxe.events) >= maxQueuedEvents {
		b.pxe.events = b.pxe.events[1:]
	}
	b.pxe.events = append(b.pxe.events, p)
	b.mu.Unlock()
	b.trigger()
}

// sendPXEEvents publishes the queued network-boot events in order.
func (b *Bridge) sendPXEEvents() error {
	b.mu.Lock()
	evs := b.pxe.events
	b.mu.Unlock()
	for i, p := range evs {
		if !b.client.IsConnectionOpen() {
			return errNotReady
		}
		tok := b.client.Publish(b.topics.pxeEvent(), 1, false, p)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.mu.Lock()
			b.pxe.events = b.pxe.events[i:]
			b.mu.Unlock()
			return errors.Join(errors.New("publish network boot event failed"), tok.Error())
		}
	}
	b.mu.Lock()
	b.pxe.events = b.pxe.events[len(evs):]
	b.mu.Unlock()
	return nil
}

// setBootWindow takes the "Let new machines boot" switch.
func setBootWindow(b *Bridge, _ context.Context, _ ref, p string) error {
	b.mu.Lock()
	set := b.pxe.setWindow
	b.mu.Unlock()
	if set == nil {
		return errors.New("network boot is off (pxe enabled = false)")
	}
	switch p {
	case "ON":
		set(true)
	case "OFF":
		set(false)
	default:
		return fmt.Errorf("unexpected payload %q (want ON or OFF)", truncate(p, 40))
	}
	return nil
}
