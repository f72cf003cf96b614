package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/command"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Event types on Home Assistant's event bus (contract: the docs and users'
// automations name them).
const (
	EventRequest   = "rezuscloud_request"   // HA -> add-on: a request, as on MQTT
	EventResponse  = "rezuscloud_response"  // add-on -> HA: its answer, with the request's transaction
	EventOperation = "rezuscloud_operation" // add-on -> HA: an operation started, succeeded, failed or was cancelled
)

// NotificationID is the persistent notification id of a tenant's failures:
// one per tenant, replaced by the next failure, dismissed on a success.
func NotificationID(tenantName string) string {
	if tenantName == "" {
		return "rezuscloud"
	}
	return "rezuscloud_" + tenantName
}

const (
	requestQueue  = 64  // request events waiting for the handler
	outQueue      = 256 // outgoing events and notifications
	callTimeout   = 10 * time.Second
	staleAfter    = 5 * time.Minute // queued outgoing items older than this are dropped
	retryInterval = 2 * time.Second
)

// Link is the rezuscloud glue on a Client: request events in, response and
// operation events and notifications out. Its methods never block the caller
// for long: work goes through bounded queues, and what does not fit is
// dropped with a warning. A Link on a disabled client (or a nil *Link) does
// nothing.
type Link struct {
	c      *Client
	handle func(ctx context.Context, data json.RawMessage) command.Response
	log    *zap.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	requests chan json.RawMessage
	out      chan outItem

	// dismissed holds tenants whose notification is known to be gone; only
	// the out worker touches it.
	dismissed map[string]bool
}

type outItem struct {
	what   string
	queued time.Time
	do     func(ctx context.Context, l *Link) error
}

// NewLink subscribes to rezuscloud_request on c and starts the link's
// workers; Close stops them. handle gets each request event's data (a JSON
// object, the same request as the MQTT request API, with an "action" key)
// and returns the response to fire as rezuscloud_response; it runs for one
// request at a time, in order. log may be nil.
func NewLink(c *Client, handle func(ctx context.Context, data json.RawMessage) command.Response, log *zap.Logger) *Link {
	if log == nil {
		log = zap.NewNop()
	}
	l := &Link{c: c, handle: handle, log: log, dismissed: map[string]bool{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if c.Disabled() {
		return l
	}
	l.requests = make(chan json.RawMessage, requestQueue)
	l.out = make(chan outItem, outQueue)
	l.wg.Add(2)
	go l.serveRequests()
	go l.serveOut()
	c.Subscribe(EventRequest, l.onRequest)
	return l
}

// Close stops the workers; queued items are dropped. The subscription stays
// with the client (events that arrive later are ignored).
func (l *Link) Close() {
	if l == nil {
		return
	}
	l.cancel()
	l.wg.Wait()
}

func (l *Link) active() bool {
	return l != nil && !l.c.Disabled() && l.ctx.Err() == nil
}

// onRequest runs on the client's dispatch goroutine: it only queues.
func (l *Link) onRequest(event json.RawMessage) {
	if !l.active() {
		return
	}
	var ev struct {
		Data    json.RawMessage `json:"data"`
		Context struct {
			UserID *string `json:"user_id"`
		} `json:"context"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		l.log.Warn("bad rezuscloud_request event from home assistant", zap.Error(err))
		return
	}
	select {
	case l.requests <- ev.Data:
	default:
		l.log.Warn("too many rezuscloud_request events queued; refusing one", zap.Int("queue", requestQueue))
		resp := command.Error(transactionOf(ev.Data), errors.New("busy: too many requests queued; try again later"))
		l.enqueue(outItem{what: EventResponse, do: fireEvent(EventResponse, resp)})
	}
}

func (l *Link) serveRequests() {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case data := <-l.requests:
			start := time.Now()
			resp := l.respond(data)
			ctx, cancel := context.WithTimeout(l.ctx, callTimeout)
			err := l.c.FireEvent(ctx, EventResponse, resp)
			cancel()
			if err != nil {
				if l.ctx.Err() != nil {
					return
				}
				// HA just sent the request, so it is most likely a dropped
				// connection: retry through the out queue.
				l.log.Warn("cannot fire rezuscloud_response; will retry", zap.Error(err))
				l.enqueue(outItem{what: EventResponse, do: fireEvent(EventResponse, resp)})
				continue
			}
			l.log.Debug("answered rezuscloud_request", zap.Duration("took", time.Since(start)))
		}
	}
}

// respond validates the envelope and runs the handler.
func (l *Link) respond(data json.RawMessage) (resp command.Response) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		got := "nothing"
		if len(trimmed) > 0 {
			got = jsonKind(trimmed)
		}
		l.log.Warn("rezuscloud_request data is not a JSON object", zap.String("got", got))
		return command.Error(nil, errors.New("request data must be a JSON object with an action, "+
			`e.g. {"action":"scale","tenant":"lab","group":"workers","count":3,"transaction":"t1"}; got `+got))
	}
	defer func() {
		if r := recover(); r != nil {
			l.log.Error("rezuscloud_request handler panicked", zap.Any("panic", r))
			resp = command.Error(transactionOf(trimmed), errors.New("internal error while handling the request"))
		}
	}()
	resp = l.handle(l.ctx, trimmed)
	if resp.Status == "" {
		resp = command.Error(transactionOf(trimmed), errors.New("internal error: the request produced no response"))
	}
	return resp
}

// Operation reports an operation event: it fires rezuscloud_operation and,
// for a failure, creates (replaces) the tenant's persistent notification; a
// success dismisses it. A refused command (result refused) gets a
// notification of its own (RefusedNotificationID). It never blocks: when the queue is full the event is
// dropped with a warning. Items wait for a connection for up to 5 minutes.
func (l *Link) Operation(ev tenant.OperationEvent) {
	if !l.active() {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	data := map[string]any{
		"tenant":    ev.Tenant,
		"operation": ev.Name,
		"result":    string(ev.Result),
		"message":   ev.Message,
		"duration":  math.Round(ev.Duration.Seconds()*1000) / 1000,
		"at":        ev.At.Format(time.RFC3339),
	}
	items := []outItem{{what: EventOperation, do: fireEvent(EventOperation, data)}}
	switch ev.Result {
	case tenant.ResultFailed:
		items = append(items, outItem{what: "persistent_notification.create", do: createNotification(ev)})
	case tenant.ResultSucceeded:
		items = append(items, outItem{what: "persistent_notification.dismiss", do: dismissNotification(ev.Tenant)})
	case tenant.ResultRefused:
		items = append(items, outItem{what: "persistent_notification.create", do: refusedNotification(ev)})
	}
	for _, it := range items {
		l.enqueue(it)
	}
}

func (l *Link) enqueue(it outItem) {
	it.queued = time.Now()
	select {
	case l.out <- it:
	default:
		l.log.Warn("home assistant event queue full; dropping", zap.String("what", it.what), zap.Int("queue", outQueue))
	}
}

// serveOut delivers queued items in order, waiting for a connection and
// retrying connection failures until the item is stale.
func (l *Link) serveOut() {
	defer l.wg.Done()
	for {
		var it outItem
		select {
		case <-l.ctx.Done():
			return
		case it = <-l.out:
		}
		for {
			left := staleAfter - time.Since(it.queued)
			if left <= 0 {
				l.log.Warn("home assistant unreachable; dropping a stale item", zap.String("what", it.what),
					zap.Duration("age", time.Since(it.queued)))
				break
			}
			wctx, cancel := context.WithTimeout(l.ctx, left)
			err := l.c.WaitConnected(wctx)
			cancel()
			if err != nil {
				if l.ctx.Err() != nil {
					return
				}
				continue // stale now
			}
			ctx, cancel := context.WithTimeout(l.ctx, callTimeout)
			err = it.do(ctx, l)
			cancel()
			if err == nil {
				break
			}
			if l.ctx.Err() != nil {
				return
			}
			if haErr := (*Error)(nil); errors.As(err, &haErr) { // HA refused it: retrying will not help
				l.log.Warn("home assistant refused a call", zap.String("what", it.what), zap.Error(err))
				break
			}
			l.log.Debug("home assistant call failed; retrying", zap.String("what", it.what), zap.Error(err))
			if backoff.Sleep(l.ctx, retryInterval) != nil {
				return
			}
		}
	}
}

func fireEvent(eventType string, data any) func(context.Context, *Link) error {
	return func(ctx context.Context, l *Link) error { return l.c.FireEvent(ctx, eventType, data) }
}

func createNotification(ev tenant.OperationEvent) func(context.Context, *Link) error {
	data := map[string]any{
		"notification_id": NotificationID(ev.Tenant),
		"title":           notificationTitle(ev),
		"message":         notificationMessage(ev),
	}
	return func(ctx context.Context, l *Link) error {
		if err := l.c.CallService(ctx, "persistent_notification", "create", data); err != nil {
			return err
		}
		delete(l.dismissed, ev.Tenant)
		return nil
	}
}

// RefusedNotificationID is the persistent notification id of a tenant's
// refused commands: one per tenant, replaced by the next refusal; the
// failure notification (NotificationID) is left alone.
func RefusedNotificationID(tenantName string) string {
	return NotificationID(tenantName) + "_refused"
}

// refusedNotification tells the user why a dashboard or automation command
// did nothing (a button press has no other answer channel).
func refusedNotification(ev tenant.OperationEvent) func(context.Context, *Link) error {
	what := "**" + orUnknown(ev.Name) + "**"
	title := fmt.Sprintf("rezuscloud: %s refused", orUnknown(ev.Name))
	if ev.Tenant != "" {
		what += " of cluster **" + ev.Tenant + "**"
		title = fmt.Sprintf("rezuscloud: %s of cluster %s refused", orUnknown(ev.Name), ev.Tenant)
	}
	msg := fmt.Sprintf("The command %s was refused at %s and nothing was done.", what, ev.At.Format("2006-01-02 15:04:05 MST"))
	if reason := strings.TrimSpace(ev.Message); reason != "" {
		msg += "\n\n**Reason:** " + reason
	}
	data := map[string]any{
		"notification_id": RefusedNotificationID(ev.Tenant),
		"title":           title,
		"message":         msg,
	}
	return func(ctx context.Context, l *Link) error {
		return l.c.CallService(ctx, "persistent_notification", "create", data)
	}
}

func dismissNotification(tenantName string) func(context.Context, *Link) error {
	return func(ctx context.Context, l *Link) error {
		if l.dismissed[tenantName] {
			return nil // already gone; spare HA a call per success
		}
		err := l.c.CallService(ctx, "persistent_notification", "dismiss",
			map[string]any{"notification_id": NotificationID(tenantName)})
		if err == nil {
			l.dismissed[tenantName] = true
		}
		return err
	}
}

func notificationTitle(ev tenant.OperationEvent) string {
	if ev.Tenant == "" {
		return fmt.Sprintf("rezuscloud: %s failed", orUnknown(ev.Name))
	}
	return fmt.Sprintf("rezuscloud: %s of cluster %s failed", orUnknown(ev.Name), ev.Tenant)
}

func notificationMessage(ev tenant.OperationEvent) string {
	var b strings.Builder
	what := "The operation **" + orUnknown(ev.Name) + "**"
	if ev.Tenant != "" {
		what += " of cluster **" + ev.Tenant + "**"
	}
	fmt.Fprintf(&b, "%s failed at %s", what, ev.At.Format("2006-01-02 15:04:05 MST"))
	if ev.Duration > 0 {
		fmt.Fprintf(&b, " after %s", ev.Duration.Round(time.Second))
	}
	b.WriteString(".\n\n")
	if msg := strings.TrimSpace(ev.Message); msg != "" {
		b.WriteString("**Error:** " + msg + "\n\n")
	}
	b.WriteString("**What to do:** " + hint(ev) + "\n\n")
	b.WriteString("This notification is replaced by the next failure of this cluster and " +
		"disappears by itself when an operation of this cluster succeeds.")
	return b.String()
}

func hint(ev tenant.OperationEvent) string {
	file := "the tenant file"
	if ev.Tenant != "" {
		file = "the tenant file `" + ev.Tenant + ".toml`"
	}
	logs := "Read the add-on log (Settings → Apps → rezuscloud → Log) for the details"
	switch strings.ToLower(ev.Name) {
	case "destroy":
		return logs + ". Part of the cluster may already be gone: fix the cause " +
			"(cloud credentials, quota, machines that cannot be reached), then run **Destroy** again " +
			"(turn on *Allow destroy* first). Nothing is removed until you do."
	case "plan":
		return logs + ". A failed plan changes nothing: fix " + file + " or the credentials it names, " +
			"then press **Plan** again."
	case "reboot", "bootstrap":
		return logs + ". Check that the node is powered on and reachable from the add-on, then try " +
			"**" + capitalize(ev.Name) + "** again."
	case "reload":
		return logs + ". Fix the tenant file it names (each error names file, line and field), " +
			"then press **Reload clusters**."
	}
	return logs + ". Fix the cause (" + file + ", cloud credentials or quota, machines that " +
		"cannot be reached), press **Plan** to see what is left to do, then **Apply**. " +
		"Already provisioned nodes are kept."
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func orUnknown(s string) string {
	if s == "" {
		return "operation"
	}
	return s
}

// transactionOf extracts the transaction of a request, if it has one.
func transactionOf(data json.RawMessage) json.RawMessage {
	var env struct {
		Transaction json.RawMessage `json:"transaction"`
	}
	if json.Unmarshal(data, &env) != nil {
		return nil
	}
	return env.Transaction
}

func jsonKind(raw []byte) string {
	if !json.Valid(raw) {
		return "invalid JSON"
	}
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}
