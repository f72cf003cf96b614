// Package wsapi is a client of Home Assistant's WebSocket API and the
// rezuscloud glue on top of it (Link): request events in, response and
// operation events out, persistent notifications on failures.
//
// In add-on mode the client talks to ws://supervisor/core/websocket with the
// SUPERVISOR_TOKEN (config.yaml needs homeassistant_api: true); standalone it
// talks to ws://<host>:8123/api/websocket with a long-lived access token.
// The token is never logged and never part of an error.
package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// SupervisorURL is Home Assistant's WebSocket API as the Supervisor proxies it
// to add-ons.
const SupervisorURL = "ws://supervisor/core/websocket"

// Defaults for the zero values of Options.
const (
	DefaultPingInterval = 30 * time.Second
	DefaultPongTimeout  = 10 * time.Second
	DefaultBackoffMin   = 1 * time.Second
	DefaultBackoffMax   = 60 * time.Second
	DefaultAuthTimeout  = 10 * time.Second
	writeTimeout        = 10 * time.Second
	eventBuffer         = 256
)

// Errors.
var (
	// ErrAuthInvalid: Home Assistant refused the token. Run returns it (wrapped,
	// with HA's message) and stops: retrying a refused token helps nobody and
	// may get the address banned (HA's ip_ban after failed logins).
	ErrAuthInvalid = errors.New("home assistant refused the access token (auth_invalid): " +
		"check [homeassistant] token (a long-lived access token from your HA profile page), " +
		"or in add-on mode that config.yaml has homeassistant_api: true")
	// ErrNotConnected: there is no authenticated connection right now.
	ErrNotConnected = errors.New("home assistant websocket: not connected")
	// ErrConnectionLost: the connection broke before the result arrived.
	ErrConnectionLost = errors.New("home assistant websocket: connection lost before the result arrived")
	// ErrDisabled: the client has no URL or token; the link is off.
	ErrDisabled = errors.New("home assistant websocket: disabled (no url or token configured)")
)

// Error is a result with success:false: HA's error code and message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("home assistant: %s: %s", e.Code, e.Message)
}

// Options configure a Client. The zero Options is a disabled client.
type Options struct {
	URL   string // ws:// or wss://; SupervisorURL in add-on mode
	Token string // SUPERVISOR_TOKEN or a long-lived access token; never logged

	Dialer       *websocket.Dialer // nil: a copy of websocket.DefaultDialer
	PingInterval time.Duration     // heartbeat; 0: DefaultPingInterval
	PongTimeout  time.Duration     // no pong within this closes the connection; 0: DefaultPongTimeout
	BackoffMin   time.Duration     // first reconnect delay; 0: DefaultBackoffMin
	BackoffMax   time.Duration     // reconnect delay cap; 0: DefaultBackoffMax
	AuthTimeout  time.Duration     // handshake (dial + auth) limit; 0: DefaultAuthTimeout
}

// Enabled reports whether the options name a URL and a token.
func (o Options) Enabled() bool { return o.URL != "" && o.Token != "" }

// String shows the options with the token redacted.
func (o Options) String() string {
	tok := "<none>"
	if o.Token != "" {
		tok = "<redacted>"
	}
	return fmt.Sprintf("{URL:%s Token:%s}", o.URL, tok)
}

// MarshalLogObject keeps the token out of zap output (zap.Object("ha", opts)).
func (o Options) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("url", o.URL)
	enc.AddBool("token_set", o.Token != "")
	return nil
}

// ResolveOptions picks the link's options from the [homeassistant] config keys
// and the add-on environment:
//   - url and token set: standalone, that URL and token;
//   - neither set and supervisorToken set (add-on mode): SupervisorURL with it;
//   - neither set and no supervisor token: disabled (zero Options, no error);
//   - only one of url and token: an error naming the missing key.
//
// url may also be given as http(s)://host:8123; it becomes
// ws(s)://host:8123/api/websocket.
func ResolveOptions(rawURL, token, supervisorToken string) (Options, error) {
	rawURL, token = strings.TrimSpace(rawURL), strings.TrimSpace(token)
	switch {
	case rawURL == "" && token == "":
		if supervisorToken == "" {
			return Options{}, nil
		}
		return Options{URL: SupervisorURL, Token: supervisorToken}, nil
	case rawURL == "":
		return Options{}, errors.New("homeassistant.url is required when homeassistant.token is set " +
			"(e.g. ws://homeassistant.local:8123/api/websocket)")
	case token == "":
		return Options{}, errors.New("homeassistant.token is required when homeassistant.url is set " +
			"(create a long-lived access token on your Home Assistant profile page)")
	}
	u, err := normalizeURL(rawURL)
	if err != nil {
		return Options{}, err
	}
	return Options{URL: u, Token: token}, nil
}

// normalizeURL checks a WebSocket API URL. http(s) becomes ws(s), and a URL
// without a path gets /api/websocket.
func normalizeURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("homeassistant.url is not a valid URL (e.g. ws://homeassistant.local:8123/api/websocket)")
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("homeassistant.url %q: scheme must be ws://, wss://, http:// or https://", u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("homeassistant.url %q: no host", u.Redacted())
	}
	if u.User != nil {
		return "", fmt.Errorf("homeassistant.url: must not carry credentials; use homeassistant.token")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/api/websocket"
	}
	return u.String(), nil
}

// Client is a Home Assistant WebSocket API client. Create it with New, run
// Run in a goroutine, and use Call, FireEvent, CallService and Subscribe from
// any goroutine.
type Client struct {
	opts Options
	log  *zap.Logger

	nextID  atomic.Int64
	running atomic.Bool

	mu        sync.Mutex
	sess      *session // authenticated connection, nil when down
	connected bool     // sess set and subscriptions restored
	up        chan struct{}
	subs      []*subscription
	haVersion string

	events chan delivery
}

type subscription struct {
	eventType string         // for logs: the event type, or the command
	msg       map[string]any // the subscribe command (without id)
	fn        func(json.RawMessage)
	cancelled atomic.Bool // unsubscribed: late events are dropped
}

type delivery struct {
	sub   *subscription
	event json.RawMessage
}

type reply struct {
	ok     bool
	result json.RawMessage
	err    *Error
}

type session struct {
	conn *websocket.Conn
	wmu  sync.Mutex // one writer at a time; ids are taken under it so they increase on the wire
	done chan struct{}

	mu      sync.Mutex
	pending map[int64]chan reply
	subs    map[int64]*subscription
}

// New makes a client. Options without URL or token make a disabled client:
// Run returns nil at once, calls return ErrDisabled, and a Link on it does
// nothing. log may be nil.
func New(opts Options, log *zap.Logger) *Client {
	if log == nil {
		log = zap.NewNop()
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = DefaultPingInterval
	}
	if opts.PongTimeout <= 0 {
		opts.PongTimeout = DefaultPongTimeout
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = opts.BackoffMin
	}
	if opts.AuthTimeout <= 0 {
		opts.AuthTimeout = DefaultAuthTimeout
	}
	return &Client{
		opts:   opts,
		log:    log.With(zap.String("url", opts.URL)),
		up:     make(chan struct{}),
		events: make(chan delivery, eventBuffer),
	}
}

// Disabled reports whether the client has no URL or token (or is nil).
func (c *Client) Disabled() bool { return c == nil || !c.opts.Enabled() }

// Connected reports whether the client is authenticated and its
// subscriptions are in place.
func (c *Client) Connected() bool {
	if c.Disabled() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

// HAVersion is the Home Assistant version of the last successful connection.
func (c *Client) HAVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.haVersion
}

// WaitConnected waits until the client is connected or ctx is done.
func (c *Client) WaitConnected(ctx context.Context) error {
	if c.Disabled() {
		return ErrDisabled
	}
	for {
		c.mu.Lock()
		ok, up := c.connected, c.up
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run connects, authenticates, restores subscriptions and keeps the
// connection alive (ping), reconnecting with exponential backoff, until ctx
// is done; then it returns nil. A refused token (auth_invalid, or HTTP
// 401/403 on the upgrade) is terminal: Run returns an error wrapping
// ErrAuthInvalid. A disabled client returns nil at once.
func (c *Client) Run(ctx context.Context) error {
	if c.Disabled() {
		c.log.Info("home assistant websocket link disabled: no url or token")
		return nil
	}
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("home assistant websocket: Run called twice")
	}
	defer c.running.Store(false)

	dctx, stopDispatch := context.WithCancel(ctx)
	dispatchDone := make(chan struct{})
	go func() {
		defer close(dispatchDone)
		c.dispatch(dctx)
	}()
	defer func() {
		stopDispatch()
		<-dispatchDone
	}()

	sched := backoff.Policy{Initial: c.opts.BackoffMin, Max: c.opts.BackoffMax, Jitter: 0.5}
	step := 0 // position in the reconnect schedule
	attempt := 0
	for {
		attempt++
		s, err := c.connect(ctx)
		if ctx.Err() != nil {
			if s != nil {
				_ = s.conn.Close()
			}
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrAuthInvalid) {
				c.log.Error("home assistant refused the token; websocket link stopped", zap.Error(err))
				return err
			}
			wait := sched.Next(step)
			step++
			c.log.Warn("cannot connect to home assistant websocket", zap.Error(err),
				zap.Int("attempt", attempt), zap.Duration("retry_in", wait))
			if backoff.Sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		attempt = 0
		started := time.Now()
		c.serve(ctx, s)
		if ctx.Err() != nil {
			return nil
		}
		// A connection that stayed up a while resets the backoff; one that
		// breaks right after auth keeps growing it, so a flapping HA is not
		// hammered.
		if time.Since(started) >= min(time.Minute, 2*c.opts.BackoffMax) {
			step = 0
		}
		wait := sched.Next(step)
		step++
		c.log.Warn("home assistant websocket connection lost; reconnecting", zap.Duration("retry_in", wait))
		if backoff.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// connect dials and authenticates.
func (c *Client) connect(ctx context.Context) (*session, error) {
	d := websocket.DefaultDialer
	if c.opts.Dialer != nil {
		d = c.opts.Dialer
	}
	hctx, cancel := context.WithTimeout(ctx, c.opts.AuthTimeout)
	defer cancel()
	conn, resp, err := d.DialContext(hctx, c.opts.URL, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return nil, fmt.Errorf("%w (HTTP %d on upgrade)", ErrAuthInvalid, resp.StatusCode)
		}
		return nil, fmt.Errorf("dial: %w", err)
	}
	stop := context.AfterFunc(hctx, func() { _ = conn.Close() })
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(c.opts.AuthTimeout))

	var m struct {
		Type      string `json:"type"`
		HAVersion string `json:"ha_version"`
		Message   string `json:"message"`
	}
	if err := conn.ReadJSON(&m); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("waiting for auth_required: %w", err)
	}
	if m.Type != "auth_required" {
		_ = conn.Close()
		return nil, fmt.Errorf("expected auth_required, got %q", m.Type)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := conn.WriteJSON(map[string]string{"type": "auth", "access_token": c.opts.Token}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("sending auth: %w", err)
	}
	m.Type, m.Message = "", ""
	if err := conn.ReadJSON(&m); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("waiting for auth_ok: %w", err)
	}
	switch m.Type {
	case "auth_ok":
	case "auth_invalid":
		_ = conn.Close()
		return nil, fmt.Errorf("%w (home assistant says: %s)", ErrAuthInvalid, redact(m.Message, c.opts.Token))
	default:
		_ = conn.Close()
		return nil, fmt.Errorf("expected auth_ok or auth_invalid, got %q", m.Type)
	}
	_ = conn.SetReadDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Time{})
	if !stop() { // the handshake deadline fired while we finished
		return nil, fmt.Errorf("auth: %w", hctx.Err())
	}
	c.mu.Lock()
	c.haVersion = m.HAVersion
	c.mu.Unlock()
	return &session{
		conn:    conn,
		done:    make(chan struct{}),
		pending: map[int64]chan reply{},
		subs:    map[int64]*subscription{},
	}, nil
}

// serve runs one authenticated connection until it breaks or ctx is done.
func (c *Client) serve(ctx context.Context, s *session) {
	c.mu.Lock()
	c.sess = s // before the reader starts: its exit must find and clear it
	subs := append([]*subscription(nil), c.subs...)
	c.mu.Unlock()

	go c.read(ctx, s)
	stop := context.AfterFunc(ctx, func() { _ = s.conn.Close() })
	defer stop()

	for _, sub := range subs {
		sctx, cancel := context.WithTimeout(ctx, c.opts.AuthTimeout)
		err := c.subscribeOn(sctx, s, sub)
		cancel()
		if err != nil {
			c.log.Warn("cannot subscribe to home assistant events", zap.String("event_type", sub.eventType), zap.Error(err))
			if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrNotConnected) {
				break
			}
		}
	}

	c.mu.Lock()
	select {
	case <-s.done:
	default:
		c.connected = true
		close(c.up)
	}
	c.mu.Unlock()
	c.log.Info("connected to home assistant websocket api", zap.String("ha_version", c.HAVersion()),
		zap.Int("subscriptions", len(subs)))

	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		c.heartbeat(ctx, s)
	}()
	<-s.done
	<-pingDone
}

// heartbeat pings every PingInterval and drops the connection when no pong
// comes back in PongTimeout.
func (c *Client) heartbeat(ctx context.Context, s *session) {
	t := time.NewTicker(c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.opts.PongTimeout)
		_, err := c.roundTrip(pctx, s, map[string]any{"type": "ping"})
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrConnectionLost) {
				c.log.Warn("home assistant did not answer ping; reconnecting", zap.Error(err))
				_ = s.conn.Close()
			}
			return
		}
	}
}

// read reads messages until the connection breaks, then tears the session down.
func (c *Client) read(ctx context.Context, s *session) {
	defer func() {
		_ = s.conn.Close()
		c.mu.Lock()
		if c.sess == s {
			c.sess = nil
			if c.connected {
				c.connected = false
				c.up = make(chan struct{})
			}
		}
		close(s.done)
		c.mu.Unlock()
	}()
	for {
		_, raw, err := s.conn.ReadMessage()
		if err != nil {
			if ctx.Err() == nil {
				c.log.Debug("home assistant websocket read ended", zap.Error(err))
			}
			return
		}
		raw = []byte(strings.TrimSpace(string(raw)))
		if len(raw) > 0 && raw[0] == '[' { // coalesced messages
			var many []json.RawMessage
			if err := json.Unmarshal(raw, &many); err != nil {
				c.log.Warn("bad message from home assistant", zap.Error(err))
				continue
			}
			for _, m := range many {
				c.handleMessage(ctx, s, m)
			}
			continue
		}
		c.handleMessage(ctx, s, raw)
	}
}

func (c *Client) handleMessage(ctx context.Context, s *session, raw json.RawMessage) {
	var m struct {
		ID      int64           `json:"id"`
		Type    string          `json:"type"`
		Success bool            `json:"success"`
		Result  json.RawMessage `json:"result"`
		Error   *Error          `json:"error"`
		Event   json.RawMessage `json:"event"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		c.log.Warn("bad message from home assistant", zap.Error(err))
		return
	}
	switch m.Type {
	case "result", "pong":
		r := reply{ok: m.Type == "pong" || m.Success, result: m.Result, err: m.Error}
		if !r.ok && r.err == nil {
			r.err = &Error{Code: "unknown_error", Message: "success:false without an error"}
		}
		s.mu.Lock()
		ch := s.pending[m.ID]
		delete(s.pending, m.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- r // buffered 1
		}
	case "event":
		s.mu.Lock()
		sub := s.subs[m.ID]
		s.mu.Unlock()
		if sub == nil {
			return
		}
		select {
		case c.events <- delivery{sub: sub, event: m.Event}:
		case <-s.done:
		case <-ctx.Done():
		}
	default:
		c.log.Debug("unhandled home assistant message", zap.String("type", m.Type))
	}
}

// dispatch hands events to subscribers one at a time, in order, off the read
// loop (a subscriber may Call without deadlocking the reader).
func (c *Client) dispatch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-c.events:
			func() {
				defer func() {
					if r := recover(); r != nil {
						c.log.Error("home assistant event subscriber panicked", zap.String("event_type", d.sub.eventType),
							zap.Any("panic", r))
					}
				}()
				if !d.sub.cancelled.Load() {
					d.sub.fn(d.event)
				}
			}()
		}
	}
}

// current is the authenticated session, or nil.
func (c *Client) current() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// Call sends msg (a command without id; the client assigns one) and waits for
// its result. success:false becomes an *Error with HA's code and message.
// Without a connection it fails at once with ErrNotConnected. msg is not
// modified.
func (c *Client) Call(ctx context.Context, msg map[string]any) (json.RawMessage, error) {
	if c.Disabled() {
		return nil, ErrDisabled
	}
	s := c.current()
	if s == nil {
		return nil, ErrNotConnected
	}
	m := make(map[string]any, len(msg)+1)
	for k, v := range msg {
		m[k] = v
	}
	return c.roundTrip(ctx, s, m)
}

// send assigns the next id to m, registers the reply channel (and, for
// subscribe_events, the subscription, so an event that follows the result at
// once is not missed) and writes the message. Ids are taken under the write
// lock, so they strictly increase on the wire.
func (c *Client) send(s *session, m map[string]any, sub *subscription) (int64, chan reply, error) {
	ch := make(chan reply, 1)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	select {
	case <-s.done:
		return 0, nil, ErrConnectionLost
	default:
	}
	id := c.nextID.Add(1)
	m["id"] = id
	b, err := json.Marshal(m)
	if err != nil { // the id is skipped, which keeps ids increasing
		return 0, nil, fmt.Errorf("encoding message: %w", err)
	}
	s.mu.Lock()
	s.pending[id] = ch
	if sub != nil {
		s.subs[id] = sub
	}
	s.mu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := s.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		s.forget(id)
		_ = s.conn.Close()
		return 0, nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	return id, ch, nil
}

func (s *session) forget(id int64) {
	s.mu.Lock()
	delete(s.pending, id)
	delete(s.subs, id)
	s.mu.Unlock()
}

// roundTrip sends m and waits for its result (or pong).
func (c *Client) roundTrip(ctx context.Context, s *session, m map[string]any) (json.RawMessage, error) {
	return c.exchange(ctx, s, m, nil)
}

func (c *Client) exchange(ctx context.Context, s *session, m map[string]any, sub *subscription) (json.RawMessage, error) {
	id, ch, err := c.send(s, m, sub)
	if err != nil {
		return nil, err
	}
	var r reply
	select {
	case r = <-ch:
	case <-s.done:
		select { // the result may have raced the close
		case r = <-ch:
		default:
			s.forget(id)
			return nil, ErrConnectionLost
		}
	case <-ctx.Done():
		s.forget(id)
		return nil, ctx.Err()
	}
	if !r.ok {
		if sub != nil {
			s.forget(id)
		}
		return nil, r.err
	}
	return r.result, nil
}

// Subscribe registers fn for events of eventType ("" = all events). fn gets
// the event object as HA sends it: {"event_type","data","origin",
// "time_fired","context"}. Subscriptions are (re)made on every connection.
// fn runs on the client's single dispatch goroutine: it must return quickly
// (hand work to a goroutine or queue); events are delivered in order.
func (c *Client) Subscribe(eventType string, fn func(json.RawMessage)) {
	if c.Disabled() {
		return
	}
	m := map[string]any{"type": "subscribe_events"}
	if eventType != "" {
		m["event_type"] = eventType
	}
	c.subscribe(&subscription{eventType: eventType, msg: m, fn: fn})
}

// subscribe adds sub and makes it on the current connection, if any.
func (c *Client) subscribe(sub *subscription) {
	c.mu.Lock()
	c.subs = append(c.subs, sub)
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return // made on the next connection
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.AuthTimeout)
		defer cancel()
		if err := c.subscribeOn(ctx, s, sub); err != nil && !errors.Is(err, ErrConnectionLost) {
			c.log.Warn("cannot subscribe to home assistant events", zap.String("event_type", sub.eventType), zap.Error(err))
		}
	}()
}

func (c *Client) subscribeOn(ctx context.Context, s *session, sub *subscription) error {
	m := make(map[string]any, len(sub.msg)+1)
	for k, v := range sub.msg {
		m[k] = v
	}
	if _, err := c.exchange(ctx, s, m, sub); err != nil {
		return err
	}
	c.log.Debug("subscribed to home assistant events", zap.String("event_type", sub.eventType))
	return nil
}

// SubscribeEntities follows the states of entityIDs with Home Assistant's
// subscribe_entities: fn gets each event as HA sends it, first the
// current states ({"a": {entity_id: compressed state}}), then every
// change ({"c": …}, {"a": …} for a new entity, {"r": […]} for a removed
// one); EntityStates.Apply reads them. Like Subscribe, it is made again
// on every connection (with the current states again) and fn runs on the
// dispatch goroutine. cancel ends it (unsubscribe_events).
//
// subscribe_entities, rather than subscribe_trigger or state_changed
// events: one command gives the current states and then the changes with
// nothing missed in between (HA sends both from one event-loop callback),
// only for the entities asked for, compressed, and it needs no admin
// rights (the frontend's own subscription).
func (c *Client) SubscribeEntities(entityIDs []string, fn func(json.RawMessage)) (cancel func()) {
	if c.Disabled() {
		return func() {}
	}
	ids := append([]string(nil), entityIDs...)
	sub := &subscription{eventType: "subscribe_entities", msg: map[string]any{"type": "subscribe_entities", "entity_ids": ids}, fn: fn}
	c.subscribe(sub)
	return func() { c.unsubscribe(sub) }
}

// unsubscribe drops sub for good and ends it on the current connection.
func (c *Client) unsubscribe(sub *subscription) {
	sub.cancelled.Store(true)
	c.mu.Lock()
	c.subs = slices.DeleteFunc(c.subs, func(x *subscription) bool { return x == sub })
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	var id int64
	for i, x := range s.subs {
		if x == sub {
			id = i
			delete(s.subs, i)
		}
	}
	s.mu.Unlock()
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.AuthTimeout)
	defer cancel()
	if _, err := c.roundTrip(ctx, s, map[string]any{"type": "unsubscribe_events", "subscription": id}); err != nil &&
		!errors.Is(err, ErrConnectionLost) {
		c.log.Debug("unsubscribe from home assistant", zap.Error(err))
	}
}

// FireEvent fires eventType with data (a JSON object, or nil) in Home Assistant.
func (c *Client) FireEvent(ctx context.Context, eventType string, data any) error {
	m := map[string]any{"type": "fire_event", "event_type": eventType}
	if data != nil {
		m["event_data"] = data
	}
	_, err := c.Call(ctx, m)
	return err
}

// CallService calls domain.service with data as service_data (nil: none).
func (c *Client) CallService(ctx context.Context, domain, service string, data any) error {
	m := map[string]any{"type": "call_service", "domain": domain, "service": service}
	if data != nil {
		m["service_data"] = data
	}
	_, err := c.Call(ctx, m)
	return err
}

// CallServiceResponse calls domain.service with data and
// return_response, and gives the service's response (the "response" of
// the result).
func (c *Client) CallServiceResponse(ctx context.Context, domain, service string, data any) (json.RawMessage, error) {
	m := map[string]any{"type": "call_service", "domain": domain, "service": service, "return_response": true}
	if data != nil {
		m["service_data"] = data
	}
	raw, err := c.Call(ctx, m)
	if err != nil {
		return nil, err
	}
	var res struct {
		Response json.RawMessage `json:"response"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("call_service %s.%s: unexpected result: %w", domain, service, err)
	}
	return res.Response, nil
}

// redact removes the token from text that may echo it.
func redact(text, token string) string {
	if token == "" {
		return text
	}
	return strings.ReplaceAll(text, token, "<redacted>")
}
