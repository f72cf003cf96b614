package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// AssistAssistant is the assistant rezuscloud exposes entities to: Assist,
// Home Assistant's own conversation agent (also what local LLM agents use).
const AssistAssistant = "conversation"

// EventRegistryUpdated is fired by HA on every entity registry change.
const EventRegistryUpdated = "entity_registry_updated"

// AssistStateVersion is the version of the Assist state file.
const AssistStateVersion = 1

const assistRetry = 10 * time.Second // after a failed sync on a live connection

// maxAssistState caps the Assist state file: a few hundred bytes per
// entity, so this is far more than any installation writes.
const maxAssistState = 4 << 20

// AssistOptions configure an Assist.
type AssistOptions struct {
	// Enabled is the assist_expose option: on, the entities given to
	// SetEntities are exposed and aliased; off, what rezuscloud did before
	// is withdrawn.
	Enabled bool
	// StateFile remembers what rezuscloud exposed and which aliases it
	// added, so that turning the option off (even after a restart) takes
	// back exactly that. Written 0600; e.g. <data_dir>/assist.json.
	StateFile string
}

// Assist keeps Home Assistant's Assist exposure and entity aliases of
// rezuscloud's entities in step with the assist_expose option (docs/design.md
// §10.7). Entities are named by unique id; their entity ids (which users
// may rename) are looked up in HA's entity registry on every sync. It
// syncs when Run starts, when the entities change, on every (re)connection
// and when HA's entity registry gains, loses or renames an entity.
//
// It never takes back what the user did: an entity the user had exposed,
// or an alias the user had set, is not recorded as rezuscloud's and is left
// alone when the option goes off; an exposure or alias of rezuscloud's
// that the user withdraws is not forced back while the option stays on.
type Assist struct {
	c    *Client
	opts AssistOptions
	log  *zap.Logger

	mu    sync.Mutex
	want  map[string]string // unique id -> alias ("" none); nil until SetEntities
	kick  chan struct{}
	retry time.Duration

	onSync func(error) // tests: called after every sync
}

// NewAssist makes the Assist keeper on c; run it with Run. log may be nil.
func NewAssist(c *Client, opts AssistOptions, log *zap.Logger) *Assist {
	if log == nil {
		log = zap.NewNop()
	}
	return &Assist{c: c, opts: opts, log: log, kick: make(chan struct{}, 1), retry: assistRetry}
}

// SetEntities sets the entities to expose when the option is on: unique id
// -> alias to add ("" for none). Call it whenever the tenants change; it
// never blocks.
func (a *Assist) SetEntities(want map[string]string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	same := a.want != nil && maps.Equal(a.want, want)
	a.want = maps.Clone(want)
	if a.want == nil {
		a.want = map[string]string{}
	}
	a.mu.Unlock()
	if !same {
		a.poke()
	}
}

func (a *Assist) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Assist) snapshot() (map[string]string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.want), a.want != nil
}

// Run syncs until ctx is done, then returns nil. With the option off it
// returns once everything rezuscloud exposed is withdrawn (at once when
// nothing was). A state file it cannot read is an error, and then nothing
// is changed in Home Assistant.
func (a *Assist) Run(ctx context.Context) error {
	if a == nil || a.opts.StateFile == "" {
		return nil
	}
	st, err := loadAssistState(a.opts.StateFile)
	if err != nil {
		return err
	}
	if !a.opts.Enabled && len(st.Entities) == 0 {
		return nil
	}
	if a.c.Disabled() {
		if !a.opts.Enabled {
			a.log.Warn("Assist exposure (assist.expose) is off but there is no Home Assistant WebSocket link: "+
				"what rezuscloud exposed to Assist stays exposed until the link is configured",
				zap.Int("entities", len(st.Entities)), zap.String("state_file", a.opts.StateFile))
		}
		return nil
	}
	a.c.Subscribe(EventRegistryUpdated, a.onRegistry)
	for {
		if err := a.c.WaitConnected(ctx); err != nil {
			return nil
		}
		s := a.c.current()
		if s == nil {
			continue
		}
		select { // this sync covers every change so far
		case <-a.kick:
		default:
		}
		done, err := a.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if a.onSync != nil {
			a.onSync(err)
		}
		if errors.Is(err, errAssistState) {
			return err
		}
		var retry *time.Timer
		var retryC <-chan time.Time
		if err != nil {
			haErr := (*Error)(nil)
			refused := errors.As(err, &haErr)
			a.log.Warn("cannot sync Assist exposure with Home Assistant", zap.Error(err), zap.Bool("retry_on_change_only", refused))
			if !refused { // HA refusing it again helps nobody: wait for a change or a reconnect
				retry = time.NewTimer(a.retry)
				retryC = retry.C
			}
		} else if done {
			a.log.Info("Assist exposure (assist.expose) is off: everything rezuscloud exposed to Assist is withdrawn")
			return nil
		}
		select {
		case <-ctx.Done():
		case <-a.kick:
		case <-s.done: // HA restarted or the link broke: sync again on the next connection
		case <-retryC:
		}
		if retry != nil {
			retry.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// onRegistry runs on the client's dispatch goroutine: it only pokes. An
// entity created, removed or renamed may be one of ours; updates of other
// fields (our own alias and exposure changes among them) are not.
func (a *Assist) onRegistry(event json.RawMessage) {
	var ev struct {
		Data struct {
			Action      string `json:"action"`
			OldEntityID string `json:"old_entity_id"`
		} `json:"data"`
	}
	if json.Unmarshal(event, &ev) != nil {
		return
	}
	switch ev.Data.Action {
	case "create", "remove":
		a.poke()
	case "update":
		if ev.Data.OldEntityID != "" {
			a.poke()
		}
	}
}

var errAssistState = errors.New("assist state file")

// assistState is what rezuscloud did in Home Assistant, by unique id.
type assistState struct {
	Version  int                      `json:"version"`
	Entities map[string]*assistRecord `json:"entities"`
}

// assistRecord is what rezuscloud did to one entity. A pending flag is set
// before a call and cleared after it: after a crash in between, the next
// sync looks at HA to learn whether the call happened.
type assistRecord struct {
	EntityID       string `json:"entity_id,omitempty"` // as last seen (for people reading the file)
	Exposed        bool   `json:"exposed,omitempty"`   // rezuscloud exposed it to Assist
	ExposePending  bool   `json:"expose_pending,omitempty"`
	Alias          string `json:"alias,omitempty"` // the alias rezuscloud added
	AliasPending   bool   `json:"alias_pending,omitempty"`
	DeclinedExpose bool   `json:"declined_expose,omitempty"` // the user withdrew our exposure
	DeclinedAlias  string `json:"declined_alias,omitempty"`  // the user removed this alias of ours
}

func (r *assistRecord) empty() bool {
	return *r == assistRecord{EntityID: r.EntityID}
}

func loadAssistState(path string) (*assistState, error) {
	st := &assistState{Version: AssistStateVersion, Entities: map[string]*assistRecord{}}
	data, err := safefile.Read(path, maxAssistState)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", errAssistState, path, err)
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("%w %s: %v; fix it or remove it (removing it forgets what rezuscloud "+
			"exposed to Assist: withdraw that by hand in Settings → Voice assistants → Expose)", errAssistState, path, err)
	}
	if st.Version != AssistStateVersion {
		return nil, fmt.Errorf("%w %s: version %d, this rezuscloud reads version %d", errAssistState, path,
			st.Version, AssistStateVersion)
	}
	if st.Entities == nil {
		st.Entities = map[string]*assistRecord{}
	}
	for uid, r := range st.Entities {
		if r == nil {
			delete(st.Entities, uid)
		}
	}
	return st, nil
}

func (a *Assist) save(st *assistState) error {
	for uid, r := range st.Entities {
		if r.empty() {
			delete(st.Entities, uid)
		}
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(a.opts.StateFile, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving %s: %w", a.opts.StateFile, err)
	}
	return nil
}

// sync brings HA in step once. done reports that the option is off and
// nothing of rezuscloud's is left.
func (a *Assist) sync(ctx context.Context) (done bool, err error) {
	want, known := a.snapshot()
	if !a.opts.Enabled {
		want, known = nil, true
	}
	st, err := loadAssistState(a.opts.StateFile)
	if err != nil {
		return false, err
	}
	if !known || (want == nil && len(st.Entities) == 0) {
		return !a.opts.Enabled, nil
	}
	reg, err := a.registry(ctx)
	if err != nil {
		return false, err
	}
	exposed, err := a.exposed(ctx)
	if err != nil {
		return false, err
	}
	if err := a.withdraw(ctx, st, want, reg, exposed); err != nil {
		return false, err
	}
	if err := a.apply(ctx, st, want, reg, exposed); err != nil {
		return false, err
	}
	return !a.opts.Enabled && len(st.Entities) == 0, nil
}

// withdraw takes back what rezuscloud did to entities no longer wanted.
func (a *Assist) withdraw(ctx context.Context, st *assistState, want map[string]string,
	reg map[string]string, exposed map[string]bool) error {
	var unexpose []string
	var gone []string
	for _, uid := range slices.Sorted(maps.Keys(st.Entities)) {
		if _, ok := want[uid]; ok {
			continue
		}
		rec := st.Entities[uid]
		gone = append(gone, uid)
		eid, ok := reg[uid]
		if !ok {
			continue // not in HA any more, and its settings went with it
		}
		if rec.Alias != "" {
			if err := a.editAliases(ctx, eid, func(al []*string) []*string { return without(al, rec.Alias) }); err != nil {
				return err
			}
			rec.Alias, rec.AliasPending = "", false
			if err := a.save(st); err != nil {
				return err
			}
			a.log.Info("removed the Assist alias rezuscloud added", zap.String("entity_id", eid))
		}
		if rec.Exposed && exposed[eid] {
			unexpose = append(unexpose, eid)
		}
	}
	if len(unexpose) > 0 {
		if err := a.expose(ctx, unexpose, false); err != nil {
			return err
		}
		a.log.Info("withdrew rezuscloud's entities from Assist", zap.Strings("entity_ids", unexpose))
	}
	if len(gone) == 0 {
		return nil
	}
	for _, uid := range gone {
		delete(st.Entities, uid)
	}
	return a.save(st)
}

// apply exposes and aliases the wanted entities that HA knows.
func (a *Assist) apply(ctx context.Context, st *assistState, want map[string]string,
	reg map[string]string, exposed map[string]bool) error {
	var toExpose []string
	var toExposeUIDs []string
	for _, uid := range slices.Sorted(maps.Keys(want)) {
		eid, ok := reg[uid]
		if !ok {
			continue // not discovered yet: the registry's create event brings us back
		}
		rec := st.Entities[uid]
		if rec == nil {
			rec = &assistRecord{}
			st.Entities[uid] = rec
		}
		rec.EntityID = eid
		cur := exposed[eid]
		need := false
		switch {
		case rec.ExposePending: // did the last call happen?
			rec.ExposePending, rec.Exposed = false, cur
			need = !cur
		case rec.Exposed:
			if !cur { // the user withdrew it: their choice
				rec.Exposed, rec.DeclinedExpose = false, true
				a.log.Info("an entity rezuscloud exposed to Assist was withdrawn in Home Assistant; leaving it so",
					zap.String("entity_id", eid))
			}
		case !rec.DeclinedExpose && !cur:
			need = true
		}
		if need {
			rec.Exposed, rec.ExposePending = true, true
			toExpose = append(toExpose, eid)
			toExposeUIDs = append(toExposeUIDs, uid)
		}
	}
	if len(toExpose) > 0 {
		if err := a.save(st); err != nil {
			return err
		}
		if err := a.expose(ctx, toExpose, true); err != nil {
			return err
		}
		for _, uid := range toExposeUIDs {
			st.Entities[uid].ExposePending = false
		}
		if err := a.save(st); err != nil {
			return err
		}
		a.log.Info("exposed rezuscloud's entities to Assist", zap.Strings("entity_ids", toExpose))
	}

	for _, uid := range slices.Sorted(maps.Keys(want)) {
		eid, ok := reg[uid]
		rec := st.Entities[uid]
		if !ok || rec == nil || (want[uid] == "" && rec.Alias == "") {
			continue
		}
		if err := a.alias(ctx, st, rec, eid, want[uid]); err != nil {
			return err
		}
	}
	return a.save(st)
}

// alias brings one entity's aliases in step: the wanted alias added unless
// the user has it already or removed it, a former alias of ours removed.
func (a *Assist) alias(ctx context.Context, st *assistState, rec *assistRecord, eid, alias string) error {
	cur, err := a.aliases(ctx, eid)
	if err != nil {
		return err
	}
	next := slices.Clone(cur)
	if rec.AliasPending { // did the last call happen?
		rec.AliasPending = false
		if !hasAlias(cur, rec.Alias) {
			rec.Alias = ""
		}
	}
	if rec.Alias != "" && !strings.EqualFold(rec.Alias, alias) { // the display name changed
		next = without(next, rec.Alias)
		rec.Alias = ""
	} else if rec.Alias != "" && !hasAlias(cur, rec.Alias) { // the user removed it: their choice
		rec.DeclinedAlias, rec.Alias = rec.Alias, ""
		a.log.Info("an alias rezuscloud added was removed in Home Assistant; leaving it so", zap.String("entity_id", eid))
	}
	if rec.Alias == "" && alias != "" && !strings.EqualFold(rec.DeclinedAlias, alias) && !hasAlias(next, alias) {
		next = append(next, &alias)
		rec.Alias, rec.AliasPending = alias, true
	}
	if aliasesEqual(cur, next) {
		return nil
	}
	if err := a.save(st); err != nil {
		return err
	}
	if err := a.setAliases(ctx, eid, next); err != nil {
		return err
	}
	rec.AliasPending = false
	a.log.Info("set the Assist aliases of an entity", zap.String("entity_id", eid), zap.String("alias", rec.Alias))
	return a.save(st)
}

// registry maps the unique ids of MQTT entities to their entity ids.
func (a *Assist) registry(ctx context.Context) (map[string]string, error) {
	raw, err := a.call(ctx, map[string]any{"type": "config/entity_registry/list"})
	if err != nil {
		return nil, fmt.Errorf("listing the entity registry: %w", err)
	}
	var entries []struct {
		EntityID string `json:"entity_id"`
		UniqueID string `json:"unique_id"`
		Platform string `json:"platform"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("listing the entity registry: unexpected answer: %w", err)
	}
	out := make(map[string]string)
	for _, e := range entries {
		if e.Platform == "mqtt" && e.UniqueID != "" {
			out[e.UniqueID] = e.EntityID
		}
	}
	return out, nil
}

// exposed is which entities are exposed to Assist now.
func (a *Assist) exposed(ctx context.Context) (map[string]bool, error) {
	raw, err := a.call(ctx, map[string]any{"type": "homeassistant/expose_entity/list"})
	if err != nil {
		return nil, fmt.Errorf("listing exposed entities: %w", err)
	}
	var res struct {
		Exposed map[string]map[string]bool `json:"exposed_entities"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("listing exposed entities: unexpected answer: %w", err)
	}
	out := make(map[string]bool, len(res.Exposed))
	for eid, by := range res.Exposed {
		out[eid] = by[AssistAssistant]
	}
	return out, nil
}

func (a *Assist) expose(ctx context.Context, ids []string, should bool) error {
	_, err := a.call(ctx, map[string]any{"type": "homeassistant/expose_entity",
		"assistants": []string{AssistAssistant}, "entity_ids": ids, "should_expose": should})
	if err != nil {
		verb := "exposing"
		if !should {
			verb = "withdrawing"
		}
		return fmt.Errorf("%s %s: %w", verb, strings.Join(ids, ", "), err)
	}
	return nil
}

// aliases reads an entity's aliases (null items, the entity's own name in
// newer HA, are kept as nil).
func (a *Assist) aliases(ctx context.Context, eid string) ([]*string, error) {
	raw, err := a.call(ctx, map[string]any{"type": "config/entity_registry/get", "entity_id": eid})
	if err != nil {
		return nil, fmt.Errorf("reading the aliases of %s: %w", eid, err)
	}
	var e struct {
		Aliases []*string `json:"aliases"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, fmt.Errorf("reading the aliases of %s: unexpected answer: %w", eid, err)
	}
	return e.Aliases, nil
}

// setAliases replaces an entity's aliases (HA has no add: read, merge, set).
func (a *Assist) setAliases(ctx context.Context, eid string, aliases []*string) error {
	if aliases == nil {
		aliases = []*string{}
	}
	_, err := a.call(ctx, map[string]any{"type": "config/entity_registry/update", "entity_id": eid, "aliases": aliases})
	if err != nil {
		return fmt.Errorf("setting the aliases of %s: %w", eid, err)
	}
	return nil
}

func (a *Assist) editAliases(ctx context.Context, eid string, edit func([]*string) []*string) error {
	cur, err := a.aliases(ctx, eid)
	if err != nil {
		return err
	}
	next := edit(slices.Clone(cur))
	if aliasesEqual(cur, next) {
		return nil
	}
	return a.setAliases(ctx, eid, next)
}

func (a *Assist) call(ctx context.Context, msg map[string]any) (json.RawMessage, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return a.c.Call(cctx, msg)
}

func hasAlias(al []*string, s string) bool {
	return slices.ContainsFunc(al, func(p *string) bool { return p != nil && strings.EqualFold(strings.TrimSpace(*p), s) })
}

// without removes s (compared case-insensitively: HA matches aliases so).
func without(al []*string, s string) []*string {
	return slices.DeleteFunc(al, func(p *string) bool { return p != nil && strings.EqualFold(strings.TrimSpace(*p), s) })
}

func aliasesEqual(x, y []*string) bool {
	return slices.EqualFunc(x, y, func(p, q *string) bool {
		if p == nil || q == nil {
			return p == q
		}
		return *p == *q
	})
}
