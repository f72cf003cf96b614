package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/health"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/state/postgres"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// errLeadershipLost is the cause lead's context ends with when this
// instance stops leading the shared store: running tofu commands are
// interrupted at once (their state could not be saved any more).
var errLeadershipLost = errors.New("this instance no longer leads the shared state store")

// sharedLead is this instance leading a shared state store.
type sharedLead struct {
	store  *postgres.Store
	l      *postgres.Leadership
	health *sharedHealth
}

// sharedHealth is the image's health check of an instance that may stand
// by: while it leads, lead's check (connected to MQTT, with the grace for
// running operations); while it stands by, whether the store answers. A
// standby is healthy: it must not be restarted for not leading.
type sharedHealth struct {
	store *postgres.Store
	mu    sync.Mutex
	check func() error
	busy  func() string
}

// lead sets the leader's check (nil, nil: standing by again).
func (h *sharedHealth) lead(check func() error, busy func() string) {
	h.mu.Lock()
	h.check, h.busy = check, busy
	h.mu.Unlock()
}

func (h *sharedHealth) current() (func() error, func() string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.check, h.busy
}

func (h *sharedHealth) Check() error {
	if check, _ := h.current(); check != nil {
		return check()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.store.Members(ctx); err != nil {
		return fmt.Errorf("standing by, but the state store does not answer: %w", err)
	}
	return nil
}

func (h *sharedHealth) Busy() string {
	if _, busy := h.current(); busy != nil {
		return busy()
	}
	return ""
}

// serveHealth serves the image's health check until ctx ends (add-on mode).
func (h *sharedHealth) serve(ctx context.Context, log *zap.Logger) {
	ln, err := net.Listen("tcp", health.DefaultAddr)
	if err != nil {
		log.Warn("health check endpoint not served", zap.Error(err))
		return
	}
	checker := health.NewChecker(h.Check, h.Busy, 10*time.Minute)
	go func() { _ = health.Serve(ctx, ln, checker) }()
}

// writer is what the engine writes through (nil without a shared store).
func (sh *sharedLead) writer() state.Writer {
	if sh == nil {
		return nil
	}
	return sh.l.Writer()
}

// states is tofu's state backend (nil without a shared store: the data
// folder's).
func (sh *sharedLead) states() httpstate.Backend {
	if sh == nil {
		return nil
	}
	return sh.l.Writer().States()
}

// instance is the bridge's Options.Instance ("" without a shared store).
func (sh *sharedLead) instance() string {
	if sh == nil {
		return ""
	}
	return sh.store.Instance()
}

// showStandbys keeps the Role sensor's standbys current until ctx ends.
func (sh *sharedLead) showStandbys(ctx context.Context, bridge *hass.Bridge, log *zap.Logger) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ms, err := sh.store.Members(qctx)
		cancel()
		if err == nil {
			var names []string
			for _, m := range ms {
				if !m.Leader && m.Instance != sh.store.Instance() {
					names = append(names, m.Instance)
				}
			}
			slices.Sort(names)
			bridge.SetStandbys(names)
		} else if ctx.Err() == nil {
			log.Warn("listing the instances of the state store", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// storeNotificationID is the persistent notification that says the state
// store cannot be reached at start.
const storeNotificationID = "rezuscloud_state_store"

// storeNotice shows Home Assistant, as a persistent notification through
// the WebSocket API (add-on mode, or [homeassistant] set), why rezuscloud
// does not come up while it cannot open its state store; MQTT stays
// untouched (another instance may lead). It is taken back once the store
// opened.
type storeNotice struct {
	c     *wsapi.Client
	mu    sync.Mutex
	msg   string // "" once the store opened
	final bool   // msg is the last: the start failed
	kick  chan struct{}
	done  chan struct{}
}

// newStoreNotice starts the notice's link to Home Assistant (nil: none
// configured; its methods then do nothing).
func newStoreNotice(ctx context.Context, cfg config.Config, log *zap.Logger) *storeNotice {
	o, err := wsapi.ResolveOptions(cfg.HomeAssistant.URL, cfg.HomeAssistant.Token.Reveal(), "")
	if err != nil || !o.Enabled() {
		return nil
	}
	n := &storeNotice{c: wsapi.New(o, log), kick: make(chan struct{}, 1), done: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	go func() { _ = n.c.Run(cctx) }()
	go func() { defer close(n.done); defer cancel(); n.run(cctx) }()
	return n
}

// fail shows why the start failed for good (a wrong password, a newer
// schema) and waits a little for Home Assistant to have it.
func (n *storeNotice) fail(err error) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.final = true
	n.mu.Unlock()
	n.set("rezuscloud stopped: " + err.Error())
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
	}
}

// set shows msg ("" takes the notification back and ends the notice).
func (n *storeNotice) set(msg string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.msg = msg
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *storeNotice) run(ctx context.Context) {
	shown := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		n.mu.Lock()
		msg, final := n.msg, n.final
		n.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if n.c.WaitConnected(wctx) == nil {
			switch {
			case msg != "":
				err := n.c.CallService(wctx, "persistent_notification", "create", map[string]any{
					"notification_id": storeNotificationID,
					"title":           "rezuscloud: the state store cannot be reached",
					"message": "rezuscloud keeps its state in PostgreSQL and cannot open it, so it does not start " +
						"(it keeps trying while the server cannot be reached).\n\n**Last error:** " + msg,
				})
				shown = shown || err == nil
			case shown:
				_ = n.c.CallService(wctx, "persistent_notification", "dismiss", map[string]any{"notification_id": storeNotificationID})
			}
		}
		cancel()
		if msg == "" || final {
			return
		}
	}
}

// serveShared runs rezuscloud on a state store in PostgreSQL that several
// instances may share: it stands by until it leads the store, makes the
// data folder the store's working copy, and leads (lead) until ctx ends or
// the leadership is lost; then, unless ctx ended, it stands by again. Only
// the leader connects to MQTT: to Home Assistant every instance is the
// same rezuscloud.
func serveShared(ctx context.Context, cfg config.Config, log *logging.Logger, pass config.Secret, problems []string, hooks serveHooks) error {
	slog := log.Named("state")
	instance := cfg.State.InstanceName()
	notice := newStoreNotice(ctx, cfg, log.Named("websocket"))
	store, err := postgres.Open(ctx, cfg.State.URL, cfg.State.Password.Reveal(), instance, pass.Reveal(), postgres.Options{
		OnRetry: func(attempt int, err error, wait time.Duration) {
			slog.Error("the state store cannot be reached; trying again", zap.Int("attempt", attempt),
				zap.Duration("next_in", wait), zap.Error(err))
			notice.set(err.Error())
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the store
		}
		notice.fail(err)
		return err
	}
	notice.set("")
	defer store.Close()
	hc := &sharedHealth{store: store}
	if cfg.AddonMode {
		hc.serve(ctx, slog)
	}
	slog.Info("state store opened", zap.String("store", store.Where()), zap.String("instance", instance), zap.String("id", store.ID()))
	for {
		if ms, err := store.Members(ctx); err == nil {
			for _, m := range ms {
				if m.Leader {
					slog.Info("standing by: another instance leads", zap.String("leader", m.Instance))
				}
			}
		}
		start := time.Now()
		l, err := store.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		slog.Info("leading the state store", zap.Int64("epoch", l.Epoch()), zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
		moved, err := state.Checkout(ctx, store, store.ID(), cfg.DataDir, time.Now())
		for _, m := range moved {
			slog.Warn("moved aside what the data folder held of a tenant the state store no longer has", zap.String("path", m))
		}
		if err != nil {
			_ = l.Resign(context.Background())
			return fmt.Errorf("state store: %w", err)
		}
		leadCtx, stop := context.WithCancelCause(ctx)
		go func() {
			select {
			case <-l.Lost():
				stop(errLeadershipLost)
			case <-leadCtx.Done():
			}
		}()
		err = lead(leadCtx, cfg, log, pass, problems, hooks, &sharedLead{store: store, l: l, health: hc})
		lost := errors.Is(context.Cause(leadCtx), errLeadershipLost)
		stop(nil)
		if ctx.Err() != nil || !lost {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Resign(rctx)
			cancel()
			return err
		}
		slog.Error("lost the leadership of the state store: standing by", zap.Int64("epoch", l.Epoch()), zap.NamedError("why", l.Err()))
	}
}
