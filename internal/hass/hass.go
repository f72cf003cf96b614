// Package hass connects rezuscloud to Home Assistant over MQTT
// (docs/design.md §4): device-based discovery for the bridge, every tenant and
// every node, one retained JSON state document per device, availability with
// a last will, republishing on Home Assistant's birth message and on every
// reconnect, clean-up of stale retained discovery, entity commands and the
// JSON request API. Everything a device shows or accepts is derived from one
// entity table (entities.go).
package hass

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/machine"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/topic"
)

// Options configure the bridge. Zero values take the defaults noted.
type Options struct {
	// URL of the broker: tcp://host:1883 or ssl://host:8883 (TLS with the
	// system roots unless TLSConfig is set).
	URL                string
	Username, Password string
	// ClientID defaults to "rezuscloud-<base topic>", unique per base.
	ClientID string
	// DiscoveryPrefix defaults to "homeassistant".
	DiscoveryPrefix string
	// BaseTopic defaults to "rezuscloud"; letters, digits, '_' and '-'.
	BaseTopic string
	// Version is the add-on version (origin sw_version, bridge state).
	Version string
	// SupportURL is the origin's support_url.
	SupportURL string
	// ConfigurationURL is every device's configuration_url, the device
	// page's "Visit" link ("" = none).
	ConfigurationURL string
	// LogLevel is the initial value of the log level select (default info).
	LogLevel string
	// BirthDelay is the upper bound of the random delay before republishing
	// after Home Assistant's birth message (default 5 s; < 0: none).
	BirthDelay time.Duration
	// ArmTimeout is how long "Allow destroy" stays on (default 60 s).
	ArmTimeout time.Duration
	// CleanupWindow is how long start-up reads retained discovery to find
	// stale devices (default 3 s; < 0: no start-up clean-up).
	CleanupWindow time.Duration
	// ConnectTimeout bounds Start's wait for the first connection (default 30 s).
	ConnectTimeout time.Duration
	// MaxReconnectInterval caps the reconnect backoff (default 2 s, so a
	// restarted broker has discovery and state back within 5 s).
	MaxReconnectInterval time.Duration
	// CommandTimeout bounds one Commander call (default 30 s).
	CommandTimeout time.Duration
	// KeepAlive is the MQTT keep-alive (default 30 s).
	KeepAlive time.Duration
	// TLSConfig overrides the TLS settings for ssl:// URLs.
	TLSConfig *tls.Config
	// Instance, when set, is this instance's name among those sharing one
	// state store (PostgreSQL); the bridge then has the Role sensor, naming
	// this instance as the leader and the standbys (SetStandbys).
	Instance string
	// OnRefused, when set, also gets the "refused" operation event of every
	// refused entity command (the WebSocket link turns it into a persistent
	// notification). It must not block.
	OnRefused func(tenant.OperationEvent)
}

func (o *Options) defaults() error {
	if o.DiscoveryPrefix == "" {
		o.DiscoveryPrefix = "homeassistant"
	}
	if o.BaseTopic == "" {
		o.BaseTopic = "rezuscloud"
	}
	if o.ClientID == "" {
		// unique per process: two instances on one broker must not knock
		// each other off with the same client id (they are told apart on
		// <base>/bridge/instance and the conflict is logged)
		o.ClientID = "rezuscloud-" + o.BaseTopic + "-" + randomID()
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.SupportURL == "" {
		o.SupportURL = "https://github.com/rezuscloud/rezuscloud"
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.BirthDelay, 5*time.Second)
	def(&o.ArmTimeout, 60*time.Second)
	def(&o.CleanupWindow, 3*time.Second)
	def(&o.ConnectTimeout, 30*time.Second)
	def(&o.MaxReconnectInterval, 2*time.Second)
	def(&o.CommandTimeout, 30*time.Second)
	def(&o.KeepAlive, 30*time.Second)
	if err := topic.CheckBase(o.BaseTopic); err != nil {
		return fmt.Errorf("mqtt base topic: %w", err)
	}
	if err := topic.CheckPrefix(o.DiscoveryPrefix); err != nil {
		return fmt.Errorf("discovery prefix: %w", err)
	}
	u, err := url.Parse(o.URL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("mqtt url %q: want tcp://host:port or ssl://host:port", o.URL)
	}
	switch u.Scheme {
	case "tcp", "ssl", "tls", "mqtt", "mqtts", "ws", "wss":
	default:
		return fmt.Errorf("mqtt url %q: unsupported scheme %q", o.URL, u.Scheme)
	}
	return nil
}

// Bridge is the MQTT side of rezuscloud. Create it with New, then Start.
// All methods are safe for concurrent use.
type Bridge struct {
	opts Options
	cmd  Commander
	log  *zap.Logger
	err  error // from New (bad options), returned by Start

	topics topics

	client mqtt.Client
	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	// firstConn is closed when the first connection is up.
	firstConn chan struct{}
	firstOnce sync.Once
	flushq    chan chan error
	wg        sync.WaitGroup
	sem       chan struct{}

	mu        sync.Mutex
	started   bool
	ready     bool // start-up clean-up done; sync may run
	connected bool
	closed    bool
	force     bool // next sync republishes everything
	scanning  bool
	scanned   map[string][]byte // retained discovery found at start-up
	// views are the tenants' documents as the engine handed them over
	// (SetTenants, SetTenant): the bridge renders them, it keeps no status
	// of its own
	views        map[string]tenant.View
	order        []string
	machines     map[string]machine.Machine // found on the LAN, by MAC without colons (machine.go)
	machineOrder []string
	machineGroup map[string]string // the "Cluster group" chosen per machine
	armed        map[string]*time.Timer
	operations   int
	problem      string   // what keeps the add-on from working ("" when nothing)
	standbys     []string // the instances waiting to lead (Options.Instance)
	logLevel     string
	discovery    map[string][]byte // desired retained discovery by topic
	states       map[string][]byte // desired retained state by topic
	published    map[string][]byte // what the broker holds (as far as we know)
	routes       map[string]route  // command topic -> entity row and device
	filters      map[string]bool   // subscription filters wanted
	subscribed   map[string]bool   // subscription filters active on this connection
	birthTimer   *time.Timer
	events       [][]byte // operation events not yet sent (the broker may be away)
	poolEvents   []pub    // pool decision events not yet sent (pool.go)
	pxe          pxeState // network boot (pxe.go)
	// instance is this process's id on <base>/bridge/instance; another id
	// seen there is a second rezuscloud on the same base topic.
	instance     string
	otherSeen    time.Time     // last time another instance was reported
	scanMark     chan struct{} // closed when the start-up scan's marker is back
	scanLast     time.Time     // when the scan last got a retained message
	instanceSent time.Time     // last time ours was sent in answer
}

type route struct {
	e *entity
	r ref
}

// New makes a bridge. Bad options are reported by Start.
func New(opts Options, cmd Commander, log *zap.Logger) *Bridge {
	if log == nil {
		log = zap.NewNop()
	}
	err := opts.defaults()
	b := &Bridge{
		opts:       opts,
		cmd:        cmd,
		log:        log.Named("hass"),
		err:        err,
		topics:     topics{base: opts.BaseTopic, prefix: opts.DiscoveryPrefix},
		kick:       make(chan struct{}, 1),
		firstConn:  make(chan struct{}),
		flushq:     make(chan chan error),
		sem:        make(chan struct{}, 16),
		views:      map[string]tenant.View{},
		armed:      map[string]*time.Timer{},
		logLevel:   opts.LogLevel,
		discovery:  map[string][]byte{},
		states:     map[string][]byte{},
		published:  map[string][]byte{},
		routes:     map[string]route{},
		filters:    map[string]bool{},
		subscribed: map[string]bool{},
		instance:   randomID(),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.mu.Lock()
	b.rebuildLocked()
	b.mu.Unlock()
	return b
}

// Start connects, waits for the first connection (bounded by ctx and
// ConnectTimeout), reads retained discovery to find stale devices, then
// publishes discovery and state. Afterwards the bridge reconnects on its own
// until Close.
func (b *Bridge) Start(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return errors.New("hass: already started")
	}
	b.started = true
	b.mu.Unlock()

	o := mqtt.NewClientOptions().
		AddBroker(b.opts.URL).
		SetClientID(b.opts.ClientID).
		SetUsername(b.opts.Username).
		SetPassword(b.opts.Password).
		SetCleanSession(true).
		SetStore(newCopyStore()).
		SetResumeSubs(false).
		SetOrderMatters(false).
		SetKeepAlive(b.opts.KeepAlive).
		SetPingTimeout(10*time.Second).
		SetConnectTimeout(10*time.Second).
		SetAutoReconnect(true).
		SetMaxReconnectInterval(b.opts.MaxReconnectInterval).
		SetConnectRetry(false). // connectFirst retries, reporting why
		SetWriteTimeout(10*time.Second).
		SetBinaryWill(b.topics.availability(), []byte("offline"), 1, true).
		SetDefaultPublishHandler(b.onMessage).
		SetOnConnectHandler(func(mqtt.Client) { go b.onConnect() }).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { b.onConnectionLost(err) })
	if b.opts.TLSConfig != nil {
		o.SetTLSConfig(b.opts.TLSConfig)
	} else {
		o.SetTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	b.client = mqtt.NewClient(o)

	b.wg.Add(1)
	go b.publisher()

	if err := b.connectFirst(ctx); err != nil {
		b.Close()
		return err
	}

	if b.opts.CleanupWindow > 0 {
		if err := b.scanStale(ctx); err != nil {
			b.log.Warn("start-up clean-up skipped", zap.Error(err))
		}
	}
	b.mu.Lock()
	b.ready = true
	b.force = true
	b.mu.Unlock()
	b.trigger()
	b.log.Info("connected to mqtt", zap.String("url", redactURL(b.opts.URL)), zap.String("base", b.opts.BaseTopic))
	return nil
}

// connectFirst connects, retrying with backoff until ConnectTimeout or ctx,
// and waits until the connection is set up (online, subscriptions).
func (b *Bridge) connectFirst(ctx context.Context) error {
	deadline := time.NewTimer(b.opts.ConnectTimeout)
	defer deadline.Stop()
	sched := backoff.Policy{Initial: 250 * time.Millisecond, Max: b.opts.MaxReconnectInterval}
	var lastErr error
	for attempt := 0; ; attempt++ {
		tok := b.client.Connect()
		select {
		case <-tok.Done():
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("hass: connect to %s: timed out", redactURL(b.opts.URL))
		}
		if lastErr = tok.Error(); lastErr == nil {
			break
		}
		b.log.Warn("mqtt connect failed; retrying", zap.String("url", redactURL(b.opts.URL)), zap.Error(lastErr))
		select {
		case <-time.After(sched.Next(attempt)):
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("hass: connect to %s: %w", redactURL(b.opts.URL), lastErr)
		}
	}
	select {
	case <-b.firstConn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-deadline.C:
		return fmt.Errorf("hass: connect to %s: connected but could not subscribe", redactURL(b.opts.URL))
	}
}

// Close publishes offline, disconnects and stops the bridge's goroutines.
func (b *Bridge) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	for _, t := range b.armed {
		t.Stop()
	}
	if b.birthTimer != nil {
		b.birthTimer.Stop()
	}
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	if b.client != nil {
		if b.client.IsConnectionOpen() {
			tok := b.client.Publish(b.topics.availability(), 1, true, "offline")
			tok.WaitTimeout(2 * time.Second)
		}
		b.client.Disconnect(250)
	}
}

// onConnectionLost marks the bridge disconnected. paho runs this handler in
// a goroutine of its own: it can arrive after the reconnection that
// followed (under load), and must not then mark a live connection down, or
// every later sync, a birth's republish included, would wait for a
// reconnect that never comes.
func (b *Bridge) onConnectionLost(err error) {
	b.mu.Lock()
	if b.client != nil && b.client.IsConnectionOpen() && b.connected {
		b.mu.Unlock()
		b.log.Info("mqtt: a late connection-lost notice for a connection already replaced", zap.Error(err))
		return
	}
	b.connected = false
	b.subscribed = map[string]bool{}
	b.mu.Unlock()
	b.log.Warn("mqtt connection lost; reconnecting", zap.Error(err))
}

// onInstance handles a message on <base>/bridge/instance: another id there
// is a second rezuscloud using the same base topic, which makes both
// publish over each other's devices. It is logged (once a minute) and
// answered with our id (at most every 10 s) so the other one logs it too.
func (b *Bridge) onInstance(payload []byte) {
	var doc struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(payload, &doc) != nil || doc.ID == "" {
		return
	}
	b.mu.Lock()
	if doc.ID == b.instance || b.closed {
		b.mu.Unlock()
		return
	}
	now := time.Now()
	logIt := now.Sub(b.otherSeen) >= time.Minute
	if logIt {
		b.otherSeen = now
	}
	answer := now.Sub(b.instanceSent) >= 10*time.Second
	if answer {
		b.instanceSent = now
	}
	b.mu.Unlock()
	if logIt {
		b.log.Error("another rezuscloud uses the same MQTT base topic: each instance needs its own base topic (mqtt.base_topic), or they overwrite each other's devices",
			zap.String("base", b.opts.BaseTopic), zap.String("other_instance", doc.ID), zap.String("this_instance", b.instance))
	}
	if answer {
		b.announceInstance()
	}
}

// announceInstance publishes this process's instance id (not retained).
func (b *Bridge) announceInstance() {
	p, _ := json.Marshal(map[string]string{"id": b.instance})
	b.client.Publish(b.topics.instance(), 0, false, p)
}

// randomID is 8 random hex digits.
func randomID() string {
	var r [4]byte
	_, _ = crand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// onConnect runs after every (re)connection: subscriptions, online, and a
// full republish (the broker may have lost its retained messages). The
// commands are subscribed before online is said, so that a command sent
// as soon as the bridge is seen online is not lost.
func (b *Bridge) onConnect() {
	c := b.client
	b.mu.Lock()
	b.subscribed = map[string]bool{}
	b.mu.Unlock()
	if err := b.syncSubscriptions(); err != nil {
		b.log.Warn("subscribe failed", zap.Error(err))
	}
	tok := c.Publish(b.topics.availability(), 1, true, "online")
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.log.Warn("publish online failed", zap.Error(tok.Error()))
	}
	b.mu.Lock()
	b.connected = true
	b.force = true
	b.mu.Unlock()
	b.log.Info("mqtt connected")
	b.announceInstance()
	b.firstOnce.Do(func() { close(b.firstConn) })
	b.trigger()
}

// syncSubscriptions subscribes wanted filters and drops unwanted ones.
func (b *Bridge) syncSubscriptions() error {
	b.mu.Lock()
	var add, drop []string
	for f := range b.filters {
		if !b.subscribed[f] {
			add = append(add, f)
		}
	}
	for f := range b.subscribed {
		if !b.filters[f] {
			drop = append(drop, f)
		}
	}
	b.mu.Unlock()
	if len(add) > 0 {
		m := make(map[string]byte, len(add))
		for _, f := range add {
			m[f] = 1
		}
		tok := b.client.SubscribeMultiple(m, nil)
		if !tok.WaitTimeout(10 * time.Second) {
			return errors.New("subscribe timed out")
		}
		if err := tok.Error(); err != nil {
			return err
		}
		b.mu.Lock()
		for _, f := range add {
			b.subscribed[f] = true
		}
		b.mu.Unlock()
	}
	if len(drop) > 0 {
		tok := b.client.Unsubscribe(drop...)
		if tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			b.mu.Lock()
			for _, f := range drop {
				delete(b.subscribed, f)
			}
			b.mu.Unlock()
		}
	}
	return nil
}

// trigger asks the publisher to sync soon.
func (b *Bridge) trigger() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Sync publishes what changed now and waits for the broker's
// acknowledgements (or ctx). Without a connection it returns an error; the
// changes are published after the next connect anyway.
func (b *Bridge) Sync(ctx context.Context) error {
	ch := make(chan error, 1)
	select {
	case b.flushq <- ch:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return errors.New("hass: closed")
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Bridge) publisher() {
	defer b.wg.Done()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		var reply chan error
		select {
		case <-b.ctx.Done():
			return
		case <-b.kick:
		case reply = <-b.flushq:
		case <-retry.C:
		}
		err := b.syncOnce()
		if reply != nil {
			reply <- err
		}
		if err != nil && !errors.Is(err, errNotReady) {
			b.log.Debug("sync incomplete; retrying", zap.Error(err))
			retry.Reset(2 * time.Second)
		}
	}
}

var errNotReady = errors.New("hass: not connected")

type pub struct {
	topic   string
	payload []byte
}

// syncOnce publishes the difference between what is wanted (discovery and
// state of the current devices) and what the broker holds: changed or new
// messages, and empty retained payloads for what is gone.
func (b *Bridge) syncOnce() error {
	if err := b.syncSubscriptionsIfConnected(); err != nil {
		return err
	}
	b.mu.Lock()
	if !b.connected || !b.ready {
		b.mu.Unlock()
		return errNotReady
	}
	force := b.force
	b.force = false
	var disc, state, clear []pub
	for t, p := range b.discovery {
		if old, ok := b.published[t]; force || !ok || string(old) != string(p) {
			disc = append(disc, pub{t, p})
		}
	}
	for t, p := range b.states {
		if old, ok := b.published[t]; force || !ok || string(old) != string(p) {
			state = append(state, pub{t, p})
		}
	}
	for t := range b.published {
		if _, ok := b.discovery[t]; ok {
			continue
		}
		if _, ok := b.states[t]; ok {
			continue
		}
		clear = append(clear, pub{t, nil})
	}
	b.mu.Unlock()

	// Order: removals' discovery first (so no entity reads a cleared state),
	// then new discovery, then states.
	sortPubs(clear, b.topics.prefix+"/")
	var firstErr error
	send := func(ps []pub) {
		// Publishing while paho reconnects stores the message and resends
		// it on the new connection; it is republished by onConnect anyway.
		if !b.client.IsConnectionOpen() {
			if firstErr == nil {
				firstErr = errNotReady
			}
			if force {
				b.mu.Lock()
				b.force = true
				b.mu.Unlock()
			}
			return
		}
		toks := make([]mqtt.Token, len(ps))
		for i, p := range ps {
			toks[i] = b.client.Publish(p.topic, 1, true, p.payload)
		}
		for i, tok := range toks {
			ok := tok.WaitTimeout(10 * time.Second)
			err := tok.Error()
			if !ok && err == nil {
				err = errors.New("publish timed out")
			}
			b.mu.Lock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				if force {
					b.force = true
				}
			} else if ps[i].payload == nil {
				delete(b.published, ps[i].topic)
			} else {
				b.published[ps[i].topic] = ps[i].payload
			}
			b.mu.Unlock()
		}
	}
	if force && b.client.IsConnectionOpen() {
		// The broker may have lost it too (restart without persistence).
		tok := b.client.Publish(b.topics.availability(), 1, true, "online")
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			firstErr = errors.Join(errors.New("publish online failed"), tok.Error())
		}
	}
	send(clear)
	send(disc)
	send(state)
	if err := b.sendEvents(); err != nil && firstErr == nil {
		firstErr = err
	}
	if err := b.sendPoolEvents(); err != nil && firstErr == nil {
		firstErr = err
	}
	if err := b.sendPXEEvents(); err != nil && firstErr == nil {
		firstErr = err
	}
	if len(clear)+len(disc)+len(state) > 0 {
		b.log.Debug("mqtt sync", zap.Int("cleared", len(clear)), zap.Int("discovery", len(disc)),
			zap.Int("state", len(state)), zap.Bool("full", force))
	}
	return firstErr
}

func (b *Bridge) syncSubscriptionsIfConnected() error {
	b.mu.Lock()
	c := b.connected
	b.mu.Unlock()
	if !c {
		return errNotReady
	}
	return b.syncSubscriptions()
}

// sortPubs puts topics with the prefix (discovery) first.
func sortPubs(ps []pub, prefix string) {
	i := 0
	for j := range ps {
		if strings.HasPrefix(ps[j].topic, prefix) {
			ps[i], ps[j] = ps[j], ps[i]
			i++
		}
	}
}

// republishAll republishes discovery and every state.
func (b *Bridge) republishAll() {
	b.mu.Lock()
	b.force = true
	b.mu.Unlock()
	b.trigger()
}

// onBirth schedules a republish after Home Assistant (re)started.
func (b *Bridge) onBirth() {
	d := time.Duration(0)
	if b.opts.BirthDelay > 0 {
		d = time.Duration(rand.Int64N(int64(b.opts.BirthDelay) + 1))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.birthTimer != nil {
		b.birthTimer.Stop()
	}
	b.log.Info("home assistant online; republishing", zap.Duration("after", d))
	b.birthTimer = time.AfterFunc(d, b.republishAll)
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<invalid url>"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	return u.String()
}
