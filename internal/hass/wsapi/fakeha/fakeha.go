// Package fakeha is a stand-in for Home Assistant's WebSocket API, for tests.
//
// It speaks the documented protocol on 127.0.0.1 (httptest): the auth
// handshake (auth_required, auth, auth_ok | auth_invalid), ping/pong,
// subscribe_events / unsubscribe_events with event delivery, fire_event
// (delivered to every matching subscriber, on every connection, and recorded),
// call_service (recorded; persistent_notification.create/dismiss also keep a
// notification table like HA's), the entity registry commands
// (config/entity_registry/list, get, update), Home Assistant's users
// (config/auth/list, users.go) and Assist exposure
// (homeassistant/expose_entity and its list) over an entity registry the
// test fills (registry.go), a state machine with attributes (get_states,
// subscribe_entities with HA's compressed states and diffs, state_changed
// events), energy/get_prefs, services that return responses
// (return_response), and result messages with HA's error codes
// (states.go).
// Beside the WebSocket API it serves the REST config API of scripts
// (scripts.go: GET, POST, DELETE /api/config/script/config/<key>).
//
// It checks the client: every message after auth must carry an integer id
// greater than the previous one on that connection. A violation is answered
// like HA does (error code id_reuse) and recorded; tests assert Violations()
// is empty. Knobs: DropConnections, SetRefuse, SetPong, FailService.
package fakeha

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// HAVersion is what the fake reports as its Home Assistant version.
const HAVersion = "2026.11.0"

// Event is one event the fake saw fired (by a client's fire_event or by Fire).
type Event struct {
	EventType string          `json:"event_type"`
	Data      json.RawMessage `json:"data"`
	Origin    string          `json:"origin"`
	TimeFired time.Time       `json:"time_fired"`
	Context   Context         `json:"context"`
}

// Context is HA's event/service context.
type Context struct {
	ID       string  `json:"id"`
	ParentID *string `json:"parent_id"`
	UserID   *string `json:"user_id"`
}

// ServiceCall is one call_service the fake received.
type ServiceCall struct {
	Domain      string          `json:"domain"`
	Service     string          `json:"service"`
	ServiceData json.RawMessage `json:"service_data"`
	Target      json.RawMessage `json:"target,omitempty"`
}

// Notification is a persistent notification as HA keeps it.
type Notification struct {
	ID      string
	Title   string
	Message string
}

// Server is the fake Home Assistant.
type Server struct {
	// URL is the WebSocket URL: ws://127.0.0.1:<port>/api/websocket.
	URL string

	token string
	hs    *httptest.Server

	mu            sync.Mutex
	cond          *sync.Cond
	conns         map[*conn]struct{}
	accepted      int // connections that passed auth
	authFailures  int
	dials         int // WebSocket upgrades (any outcome)
	refuse        bool
	pong          bool
	failing       map[string]*callError // "domain.service" -> error
	events        []Event
	services      []ServiceCall
	notifications map[string]Notification
	violations    []string
	listeners     map[int]listener
	nextListener  int
	ctxSeq        int

	registry registry
	commands []Command
	states   states  // get_states and service hooks (states.go)
	users    []User  // config/auth/list (users.go)
	scripts  scripts // scripts.yaml and its REST config API (scripts.go)
}

type listener struct {
	eventType string
	ch        chan Event
}

type callError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type conn struct {
	ws     *websocket.Conn
	wmu    sync.Mutex
	lastID int64
	subs   map[int64]string // subscription id -> event type ("" = all)
	// entitySubs are the subscribe_entities subscriptions: id -> the
	// entities followed (empty: all). They are in subs too (as
	// "subscribe_entities"), so unsubscribe_events ends them.
	entitySubs map[int64]map[string]bool
}

// New starts a fake Home Assistant that accepts token. Close it when done.
func New(token string) *Server {
	s := &Server{
		token:         token,
		conns:         map[*conn]struct{}{},
		pong:          true,
		failing:       map[string]*callError{},
		notifications: map[string]Notification{},
		listeners:     map[int]listener{},
		registry:      newRegistry(),
	}
	s.cond = sync.NewCond(&s.mu)
	mux := http.NewServeMux()
	mux.HandleFunc("/api/websocket", s.serveWS)
	mux.HandleFunc(scriptConfigPath, s.serveScriptConfig)
	s.hs = httptest.NewServer(mux) // binds 127.0.0.1
	s.URL = "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/api/websocket"
	return s
}

// Close drops every connection and stops the server.
func (s *Server) Close() {
	s.DropConnections()
	s.hs.Close()
}

// DropConnections closes every open connection abruptly (as when HA restarts).
func (s *Server) DropConnections() {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.ws.Close()
	}
}

// SetRefuse makes new WebSocket upgrades fail with 503 (HA down) while true.
func (s *Server) SetRefuse(refuse bool) {
	s.mu.Lock()
	s.refuse = refuse
	s.mu.Unlock()
}

// SetPong turns answering pings on or off (off: a hung HA).
func (s *Server) SetPong(on bool) {
	s.mu.Lock()
	s.pong = on
	s.mu.Unlock()
}

// FailService makes call_service of domain.service fail with code and
// message; an empty code makes it succeed again.
func (s *Server) FailService(domain, service, code, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		delete(s.failing, domain+"."+service)
		return
	}
	s.failing[domain+"."+service] = &callError{Code: code, Message: message}
}

// Fire fires an event inside HA (as an automation or script would): it is
// recorded and delivered to every matching subscriber.
func (s *Server) Fire(eventType string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	s.fire(eventType, raw)
	return nil
}

// FireRaw is Fire with data given as raw JSON (which may be any JSON value).
func (s *Server) FireRaw(eventType string, data json.RawMessage) {
	s.fire(eventType, data)
}

// Events returns the recorded events of eventType ("" = all), oldest first.
func (s *Server) Events(eventType string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events {
		if eventType == "" || e.EventType == eventType {
			out = append(out, e)
		}
	}
	return out
}

// WaitEvent waits until an event of eventType for which match returns true
// (match nil = any) has been recorded, and returns it.
func (s *Server) WaitEvent(ctx context.Context, eventType string, match func(Event) bool) (Event, error) {
	var found Event
	err := s.waitFor(ctx, func() bool {
		for _, e := range s.events {
			if e.EventType == eventType && (match == nil || match(e)) {
				found = e
				return true
			}
		}
		return false
	})
	return found, err
}

// Listen returns a channel that receives every event of eventType fired from
// now on ("" = all), until cancel is called. Events that do not fit the
// buffer are recorded as a violation rather than blocking the server.
func (s *Server) Listen(eventType string, buffer int) (events <-chan Event, cancel func()) {
	ch := make(chan Event, buffer)
	s.mu.Lock()
	id := s.nextListener
	s.nextListener++
	s.listeners[id] = listener{eventType: eventType, ch: ch}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.listeners, id)
		s.mu.Unlock()
	}
}

// ServiceCalls returns the recorded service calls, oldest first.
func (s *Server) ServiceCalls() []ServiceCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ServiceCall(nil), s.services...)
}

// Notifications returns the persistent notifications that exist now.
func (s *Server) Notifications() map[string]Notification {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Notification, len(s.notifications))
	for k, v := range s.notifications {
		out[k] = v
	}
	return out
}

// WaitNotifications waits until cond holds for the notification table.
func (s *Server) WaitNotifications(ctx context.Context, cond func(map[string]Notification) bool) error {
	return s.waitFor(ctx, func() bool { return cond(s.notifications) })
}

// Violations returns the protocol violations the fake detected.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Accepted is the number of connections that passed auth so far.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// AuthFailures is the number of refused auth attempts so far.
func (s *Server) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authFailures
}

// Dials is the number of WebSocket connection attempts so far.
func (s *Server) Dials() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}

// Subscribers is the number of live subscriptions that receive eventType.
func (s *Server) Subscribers(eventType string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subscribersLocked(eventType)
}

// WaitSubscribers waits until at least n live subscriptions receive eventType.
func (s *Server) WaitSubscribers(ctx context.Context, eventType string, n int) error {
	return s.waitFor(ctx, func() bool { return s.subscribersLocked(eventType) >= n })
}

// WaitAccepted waits until at least n connections have passed auth.
func (s *Server) WaitAccepted(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() bool { return s.accepted >= n })
}

func (s *Server) subscribersLocked(eventType string) int {
	n := 0
	for c := range s.conns {
		for _, et := range c.subs {
			if et == "" || et == eventType {
				n++
			}
		}
	}
	return n
}

// waitFor waits, with s.mu held while cond runs, until cond is true.
func (s *Server) waitFor(ctx context.Context, cond func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for !cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.dials++
	refuse := s.refuse
	s.mu.Unlock()
	if refuse {
		http.Error(w, "Home Assistant is starting", http.StatusServiceUnavailable)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	c := &conn{ws: ws, subs: map[int64]string{}}

	registered := s.auth(c)
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.cond.Broadcast()
		s.mu.Unlock()
	}()
	if !registered {
		return
	}

	for {
		_, raw, err := ws.ReadMessage()
		if err != nil {
			return
		}
		s.handle(c, raw)
	}
}

func (s *Server) auth(c *conn) bool {
	_ = c.send(map[string]any{"type": "auth_required", "ha_version": HAVersion})
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var msg struct {
		Type        string `json:"type"`
		AccessToken string `json:"access_token"`
	}
	if err := c.ws.ReadJSON(&msg); err != nil {
		return false
	}
	_ = c.ws.SetReadDeadline(time.Time{})
	if msg.Type != "auth" {
		s.violation("first message is %q, not auth", msg.Type)
		_ = c.send(map[string]any{"type": "auth_invalid", "message": "Auth message incorrectly formatted"})
		return false
	}
	if msg.AccessToken == "" || msg.AccessToken != s.token {
		s.mu.Lock()
		s.authFailures++
		s.cond.Broadcast()
		s.mu.Unlock()
		_ = c.send(map[string]any{"type": "auth_invalid", "message": "Invalid access token or password"})
		return false
	}
	// Count the connection before auth_ok goes out, so a client that has
	// seen auth_ok finds itself counted.
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.accepted++
	s.cond.Broadcast()
	s.mu.Unlock()
	return c.send(map[string]any{"type": "auth_ok", "ha_version": HAVersion}) == nil
}

func (s *Server) handle(c *conn, raw []byte) {
	var msg struct {
		ID           *json.Number    `json:"id"`
		Type         string          `json:"type"`
		EventType    string          `json:"event_type"`
		EventData    json.RawMessage `json:"event_data"`
		Subscription int64           `json:"subscription"`
		Domain       string          `json:"domain"`
		Service      string          `json:"service"`
		ServiceData  json.RawMessage `json:"service_data"`
		Target       json.RawMessage `json:"target"`
		Return       bool            `json:"return_response"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&msg); err != nil {
		s.violation("message is not a JSON object: %v", err)
		return
	}
	if msg.ID == nil {
		s.violation("message of type %q has no id", msg.Type)
		_ = c.send(map[string]any{"type": "result", "success": false,
			"error": callError{Code: "invalid_format", Message: "Message incorrectly formatted."}})
		return
	}
	id, err := msg.ID.Int64()
	if err != nil {
		s.violation("id %s is not an integer", msg.ID.String())
		return
	}
	if id <= c.lastID {
		s.violation("id %d does not increase (previous %d)", id, c.lastID)
		c.fail(id, "id_reuse", "Identifier values have to increase.")
		return
	}
	c.lastID = id

	switch msg.Type {
	case "ping":
		s.mu.Lock()
		pong := s.pong
		s.mu.Unlock()
		if pong {
			_ = c.send(map[string]any{"id": id, "type": "pong"})
		}
	case "subscribe_events":
		s.mu.Lock()
		c.subs[id] = msg.EventType
		s.cond.Broadcast()
		s.mu.Unlock()
		c.ok(id, nil)
	case "unsubscribe_events":
		s.mu.Lock()
		_, found := c.subs[msg.Subscription]
		delete(c.subs, msg.Subscription)
		delete(c.entitySubs, msg.Subscription)
		s.cond.Broadcast()
		s.mu.Unlock()
		if !found {
			c.fail(id, "not_found", "Subscription not found.")
			return
		}
		c.ok(id, nil)
	case "fire_event":
		if msg.EventType == "" {
			c.fail(id, "invalid_format", "required key not provided @ data['event_type']. Got None")
			return
		}
		data := msg.EventData
		if len(data) == 0 || string(data) == "null" {
			data = json.RawMessage("{}")
		} else if data[0] != '{' {
			c.fail(id, "invalid_format", "expected dict for dictionary value @ data['event_data']")
			return
		}
		ctx := s.fire(msg.EventType, data)
		c.ok(id, map[string]any{"context": ctx})
	case "call_service":
		s.callService(c, id, msg.Domain, msg.Service, msg.ServiceData, msg.Target, msg.Return)
	default:
		if !s.handleRegistry(c, id, msg.Type, raw) && !s.handleStates(c, id, msg.Type, raw) && !s.handleUsers(c, id, msg.Type) {
			c.fail(id, "unknown_command", "Unknown command.")
		}
	}
}

func (s *Server) callService(c *conn, id int64, domain, service string, data, target json.RawMessage, returnResponse bool) {
	if len(data) == 0 || string(data) == "null" {
		data = json.RawMessage("{}")
	}
	s.mu.Lock()
	s.services = append(s.services, ServiceCall{Domain: domain, Service: service, ServiceData: data, Target: target})
	fail := s.failing[domain+"."+service]
	s.cond.Broadcast()
	s.mu.Unlock()
	if fail != nil {
		c.fail(id, fail.Code, fail.Message)
		return
	}
	call := ServiceCall{Domain: domain, Service: service, ServiceData: data, Target: target}
	s.serviceEffect(call) // states.go
	if s.serviceResponse(c, id, call, returnResponse) {
		return
	}
	if domain == "persistent_notification" {
		var d struct {
			NotificationID string `json:"notification_id"`
			Title          string `json:"title"`
			Message        string `json:"message"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			c.fail(id, "invalid_format", err.Error())
			return
		}
		switch service {
		case "create":
			if d.Message == "" {
				c.fail(id, "invalid_format", "required key not provided @ data['message']")
				return
			}
			if d.NotificationID == "" {
				d.NotificationID = fmt.Sprintf("auto_%d", id)
			}
			s.mu.Lock()
			s.notifications[d.NotificationID] = Notification{ID: d.NotificationID, Title: d.Title, Message: d.Message}
			s.cond.Broadcast()
			s.mu.Unlock()
		case "dismiss":
			if d.NotificationID == "" {
				c.fail(id, "invalid_format", "required key not provided @ data['notification_id']")
				return
			}
			s.mu.Lock()
			delete(s.notifications, d.NotificationID) // HA: dismissing an unknown id is a no-op
			s.cond.Broadcast()
			s.mu.Unlock()
		default:
			c.fail(id, "not_found", fmt.Sprintf("Service %s.%s not found.", domain, service))
			return
		}
	}
	s.mu.Lock()
	ctx := s.newContextLocked()
	s.mu.Unlock()
	c.ok(id, map[string]any{"context": ctx, "response": nil})
}

// FireAs is Fire in the context of a Home Assistant user (as a script run
// by that user's conversation fires its events).
func (s *Server) FireAs(userID, eventType string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	s.fireAs(&userID, eventType, raw)
	return nil
}

// fire records an event and delivers it to subscribers and listeners.
func (s *Server) fire(eventType string, data json.RawMessage) Context {
	return s.fireAs(nil, eventType, data)
}

func (s *Server) fireAs(userID *string, eventType string, data json.RawMessage) Context {
	s.mu.Lock()
	ctx := s.newContextLocked()
	ctx.UserID = userID
	ev := Event{EventType: eventType, Data: append(json.RawMessage(nil), data...), Origin: "LOCAL",
		TimeFired: time.Now().UTC(), Context: ctx}
	s.events = append(s.events, ev)
	type target struct {
		c  *conn
		id int64
	}
	var targets []target
	for c := range s.conns {
		for sid, et := range c.subs {
			if et == "" || et == eventType {
				targets = append(targets, target{c, sid})
			}
		}
	}
	for _, l := range s.listeners {
		if l.eventType == "" || l.eventType == eventType {
			select {
			case l.ch <- ev:
			default:
				s.violations = append(s.violations, "listener buffer full: event "+eventType+" lost")
			}
		}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	for _, t := range targets {
		_ = t.c.send(map[string]any{"id": t.id, "type": "event", "event": ev})
	}
	return ev.Context
}

func (s *Server) newContextLocked() Context {
	s.ctxSeq++
	return Context{ID: fmt.Sprintf("01FAKECTX%017d", s.ctxSeq)}
}

func (s *Server) violation(format string, args ...any) {
	s.mu.Lock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (c *conn) send(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	err := c.ws.WriteJSON(v)
	if err != nil {
		_ = c.ws.Close()
	}
	return err
}

func (c *conn) ok(id int64, result any) {
	_ = c.send(map[string]any{"id": id, "type": "result", "success": true, "result": result})
}

func (c *conn) fail(id int64, code, message string) {
	_ = c.send(map[string]any{"id": id, "type": "result", "success": false,
		"error": callError{Code: code, Message: message}})
}
