package hass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/zap"
)

// HandleRequest checks req's syntax and runs it through the action table.
// It is the request API's core, shared by every transport (MQTT requests,
// entity commands, WebSocket events). The engine checks what the values
// mean; its refusal comes back as the error response.
func (b *Bridge) HandleRequest(ctx context.Context, req Request) Response {
	if err := checkFields(req); err != nil {
		return ErrorResponse(req, err)
	}
	if b.cmd == nil {
		return ErrorResponse(req, errors.New("no engine attached"))
	}
	a := actions[req.Action]
	ctx, cancel := context.WithTimeout(ctx, b.opts.CommandTimeout)
	defer cancel()
	data, err := a.call(ctx, b.cmd, req)
	if err != nil {
		return ErrorResponse(req, err)
	}
	if a.after != nil {
		a.after(b, req)
	}
	return okResponse(req, data)
}

// reflectLogLevel shows an accepted log level at once.
func (b *Bridge) reflectLogLevel(req Request) {
	b.mu.Lock()
	b.logLevel = req.Level
	b.refreshStateLocked(kindBridge, ref{})
	b.mu.Unlock()
	b.trigger()
}

// HandleRaw decodes a request payload for action and handles it.
func (b *Bridge) HandleRaw(ctx context.Context, action string, payload []byte) Response {
	req, err := decodeRequest(action, payload)
	if err != nil {
		return ErrorResponse(req, err)
	}
	return b.HandleRequest(ctx, req)
}

// onMessage receives every message of our subscriptions.
func (b *Bridge) onMessage(_ mqtt.Client, m mqtt.Message) {
	topic := m.Topic()
	payload := append([]byte(nil), m.Payload()...)
	m.Ack()

	if strings.HasPrefix(topic, b.topics.prefix+"/device/") {
		b.mu.Lock()
		if b.scanning && m.Retained() {
			b.scanned[topic] = payload
			b.scanLast = time.Now()
		}
		b.mu.Unlock()
		return
	}
	if topic == b.topics.instance() {
		b.onInstance(payload)
		return
	}
	if topic == b.topics.scanMark(b.instance) {
		b.mu.Lock()
		if b.scanMark != nil {
			close(b.scanMark)
			b.scanMark = nil
		}
		b.mu.Unlock()
		return
	}
	if topic == b.topics.birth() {
		if string(payload) == "online" {
			b.onBirth()
		}
		return
	}
	if m.Retained() {
		// A retained command would fire again at every start: never act on it.
		b.log.Warn("ignoring retained message on a command topic", zap.String("topic", topic))
		return
	}
	select {
	case b.sem <- struct{}{}:
	case <-b.ctx.Done():
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.sem
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		defer func() { <-b.sem }()
		if action, ok := strings.CutPrefix(topic, b.topics.base+"/bridge/request/"); ok {
			b.handleRequestMessage(action, payload)
			return
		}
		b.handleCommand(topic, payload)
	}()
}

func (b *Bridge) handleRequestMessage(action string, payload []byte) {
	resp := b.HandleRaw(b.ctx, action, payload)
	if !resp.OK() {
		b.log.Warn("request refused", zap.String("action", truncate(action, 64)), zap.String("error", resp.Error))
	} else {
		b.log.Info("request done", zap.String("action", action))
	}
	p, err := json.Marshal(resp)
	if err != nil {
		resp = ErrorResponse(Request{Transaction: resp.Transaction}, fmt.Errorf("response not encodable: %v", err))
		p, _ = json.Marshal(resp)
	}
	if !utf8.ValidString(action) || strings.ContainsAny(action, "+#\x00") {
		return
	}
	// QoS 0: a QoS 1 response makes the broker answer with a PUBACK, and
	// a broker with Nagle's algorithm on (mosquitto's default, as Home
	// Assistant's add-on ships it) then holds the next request it forwards
	// to us until our delayed ACK of that PUBACK: ~40 ms per round trip.
	// Responses are not retained and a requester waits with a time-out.
	b.client.Publish(b.topics.response(action), 0, false, p)
}

// handleCommand routes an entity command by its topic.
func (b *Bridge) handleCommand(topic string, payload []byte) {
	b.mu.Lock()
	rt, ok := b.routes[topic]
	b.mu.Unlock()
	warn := func(msg string, err error) {
		b.log.Warn(msg, zap.String("topic", topic), zap.Error(err))
	}
	if !ok {
		warn("command for an unknown device or entity ignored", nil)
		return
	}
	if len(payload) > MaxPayload {
		err := fmt.Errorf("command payload too large (%d bytes)", len(payload))
		warn("command payload too large; ignored", err)
		b.refuse(rt, err)
		return
	}
	if !utf8.Valid(payload) {
		warn("command payload is not UTF-8; ignored", nil)
		b.refuse(rt, errors.New("command payload is not UTF-8"))
		return
	}
	p := strings.TrimSpace(string(payload))
	var err error
	switch {
	case rt.e.set != nil:
		err = rt.e.set(b, b.ctx, rt.r, p)
	case rt.e.request != nil:
		var req Request
		if req, err = rt.e.request(b, rt.r, p); err == nil {
			err = respErr(b.HandleRequest(b.ctx, req))
		}
	case rt.e.action != "":
		if p != "PRESS" {
			err = fmt.Errorf("unexpected payload %q (want PRESS)", truncate(p, 40))
			break
		}
		req := Request{Action: rt.e.action, Tenant: rt.r.tenant, Node: rt.r.node}
		if rt.e.kind == kindBridge {
			req.Tenant = ""
		}
		err = respErr(b.HandleRequest(b.ctx, req))
	default:
		err = errors.New("entity takes no commands")
	}
	if err != nil {
		warn("command refused", err)
		b.refuse(rt, err)
		return
	}
	b.log.Info("command done", zap.String("topic", topic))
}

func respErr(r Response) error {
	if r.OK() {
		return nil
	}
	return errors.New(r.Error)
}

// Entity command handlers (referenced from the entity table).

// Entity request builders: an entity command's payload as a request of
// the action table (the entity table's request column).

func logLevelRequest(_ *Bridge, _ ref, p string) (Request, error) {
	return Request{Action: ActionLogLevel, Level: p}, nil
}

func pressRepublish(b *Bridge, _ context.Context, _ ref, p string) error {
	if p != "PRESS" {
		return fmt.Errorf("unexpected payload %q (want PRESS)", truncate(p, 40))
	}
	b.republishAll()
	return nil
}

func countRequest(_ *Bridge, r ref, p string) (Request, error) {
	n, err := parseCount(p)
	if err != nil {
		return Request{}, err
	}
	return Request{Action: ActionScale, Tenant: r.tenant, Group: r.group, Count: &n}, nil
}

func parseOnOff(p string) (bool, error) {
	switch p {
	case "ON":
		return true, nil
	case "OFF":
		return false, nil
	}
	return false, fmt.Errorf("unexpected payload %q (want ON or OFF)", truncate(p, 40))
}

func autoApplyRequest(_ *Bridge, r ref, p string) (Request, error) {
	on, err := parseOnOff(p)
	if err != nil {
		return Request{}, err
	}
	return Request{Action: ActionAutoApply, Tenant: r.tenant, Enabled: &on}, nil
}

func setDestroyArmed(b *Bridge, _ context.Context, r ref, p string) error {
	on, err := parseOnOff(p)
	if err != nil {
		return err
	}
	if !on {
		b.disarm(r.tenant)
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.views[r.tenant]; !ok {
		return fmt.Errorf("unknown tenant %q", r.tenant)
	}
	if t := b.armed[r.tenant]; t != nil {
		t.Stop()
	}
	name := r.tenant
	var tm *time.Timer
	tm = time.AfterFunc(b.opts.ArmTimeout, func() {
		b.mu.Lock()
		if b.armed[name] != tm {
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.log.Info("destroy disarmed after timeout", zap.String("tenant", name))
		b.disarm(name)
	})
	b.armed[name] = tm
	b.refreshStateLocked(kindTenant, ref{tenant: name})
	b.trigger()
	b.log.Warn("destroy armed", zap.String("tenant", name), zap.Duration("for", b.opts.ArmTimeout))
	return nil
}

func (b *Bridge) disarm(name string) {
	b.mu.Lock()
	t := b.armed[name]
	if t == nil {
		b.mu.Unlock()
		return
	}
	t.Stop()
	delete(b.armed, name)
	b.refreshStateLocked(kindTenant, ref{tenant: name})
	b.mu.Unlock()
	b.trigger()
}

// Armed reports whether destroy is armed for the tenant.
func (b *Bridge) Armed(tenantName string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.armed[tenantName] != nil
}

func destroyRequest(b *Bridge, r ref, p string) (Request, error) {
	if p != "PRESS" {
		return Request{}, fmt.Errorf("unexpected payload %q (want PRESS)", truncate(p, 40))
	}
	if !b.Armed(r.tenant) {
		return Request{}, fmt.Errorf("destroy of %q refused: turn on \"Allow destroy\" first", r.tenant)
	}
	return Request{Action: ActionDestroy, Tenant: r.tenant, Confirm: r.tenant}, nil
}

// scanStale reads the retained discovery for CleanupWindow and marks every
// device of ours that no longer exists for clearing (with its state topic).
// A device is ours only if its id starts with "<base>_" and it lists our
// availability topic: another program's (or another base's) retained
// discovery is never touched.
func (b *Bridge) scanStale(ctx context.Context) error {
	b.mu.Lock()
	b.scanMark = make(chan struct{})
	b.mu.Unlock()
	filter := b.topics.prefix + "/device/+/config"
	b.mu.Lock()
	b.scanning = true
	b.scanned = map[string][]byte{}
	b.filters[filter] = true
	b.filters[b.topics.scanMark(b.instance)] = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.scanning = false
		delete(b.filters, filter)
		delete(b.filters, b.topics.scanMark(b.instance))
		b.mu.Unlock()
		_ = b.syncSubscriptions()
	}()
	if err := b.syncSubscriptions(); err != nil {
		return err
	}
	if err := b.awaitRetained(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	stale := 0
	for topic, p := range b.scanned {
		if len(p) == 0 {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(topic, b.topics.prefix+"/device/"), "/config")
		if !strings.HasPrefix(id, b.topics.base+"_") || strings.Contains(id, "/") {
			continue
		}
		stateTopics, ours := b.ownedTopics(p)
		if !ours {
			continue
		}
		// Known: remember what the broker holds so an unchanged payload is
		// not published again. Unknown: sync clears it (not desired).
		b.published[topic] = p
		if _, want := b.discovery[topic]; want {
			continue
		}
		stale++
		for _, st := range stateTopics {
			if _, want := b.states[st]; !want {
				b.published[st] = []byte{0}
			}
		}
	}
	if stale > 0 {
		b.log.Info("clearing stale devices from Home Assistant", zap.Int("devices", stale))
	}
	return nil
}

// ownedTopics checks that a discovery payload is ours (every component with
// an availability topic uses ours, at least one does) and returns the state
// topics under our base that its components read.
func (b *Bridge) ownedTopics(p []byte) ([]string, bool) {
	var d struct {
		Components map[string]map[string]any `json:"components"`
		Cmps       map[string]map[string]any `json:"cmps"`
	}
	if json.Unmarshal(p, &d) != nil {
		return nil, false
	}
	cs := d.Components
	if cs == nil {
		cs = d.Cmps
	}
	avail := b.topics.availability()
	seen, ours := map[string]bool{}, false
	var states []string
	for _, c := range cs {
		for _, k := range []string{"availability_topic", "avty_t"} {
			if v, ok := c[k].(string); ok {
				if v != avail {
					return nil, false
				}
				ours = true
			}
		}
		for _, k := range []string{"state_topic", "stat_t", "json_attributes_topic", "json_attr_t"} {
			v, ok := c[k].(string)
			if !ok || !strings.HasPrefix(v, b.topics.base+"/") || !strings.HasSuffix(v, "/state") || seen[v] {
				continue
			}
			seen[v] = true
			states = append(states, v)
		}
	}
	return states, ours
}

// awaitRetained waits until the broker has sent the retained discovery of
// the scan's subscription: it delivers retained messages right after the
// SUBACK, before anything published later, so a marker published now and
// received back means they are all in. Handlers run concurrently, so a
// short quiet time follows. CleanupWindow bounds the whole wait (a broker
// that drops the marker costs that long, nothing more).
func (b *Bridge) awaitRetained(ctx context.Context) error {
	deadline := time.NewTimer(b.opts.CleanupWindow)
	defer deadline.Stop()
	b.mu.Lock()
	mark := b.scanMark
	b.mu.Unlock()
	tok := b.client.Publish(b.topics.scanMark(b.instance), 1, false, "scan")
	select {
	case <-mark:
	case <-deadline.C:
		b.log.Debug("start-up scan: no marker back in time", zap.Error(tok.Error()))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	const quiet = 25 * time.Millisecond
	for {
		b.mu.Lock()
		since := time.Since(b.scanLast)
		b.mu.Unlock()
		if since >= quiet {
			return nil
		}
		select {
		case <-time.After(quiet - since):
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
