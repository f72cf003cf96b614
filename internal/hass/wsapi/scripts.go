package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// Event types of the Assist scripts (contract: the scripts rezuscloud
// writes name them). A script fires rezuscloud_tool_call with
// {"tool","arguments","transaction"}; rezuscloud answers with
// rezuscloud_tool_result {"transaction","status":"ok"|"error","data","error"}.
const (
	EventToolCall   = "rezuscloud_tool_call"
	EventToolResult = "rezuscloud_tool_result"
)

// ScriptMarker is the script variable that marks a script as rezuscloud's:
// its value is the script's own object id. A script without it (the
// user's own, or one the user took over by removing it) is never changed
// or removed.
const ScriptMarker = "rezuscloud_managed"

// ScriptsStateVersion is the version of the scripts state file.
const ScriptsStateVersion = 1

const toolCallQueue = 32

// Script is one script rezuscloud keeps in Home Assistant: its object id
// (entity script.<id>) and its config as scripts.yaml holds it, without
// the marker (Scripts adds it).
type Script struct {
	ID     string
	Config map[string]any
}

// ScriptsOptions configure a Scripts keeper.
type ScriptsOptions struct {
	// Enabled is the assist_scripts option: on, the scripts given to
	// SetScripts are created and exposed to Assist; off, the ones
	// rezuscloud created are removed.
	Enabled bool
	// StateFile remembers which scripts rezuscloud created and exposed
	// (0600; e.g. <data_dir>/assist_scripts.json).
	StateFile string
}

// ToolHandler runs a tool for a script: user is the Home Assistant user
// behind the call ("" for an automation).
type ToolHandler func(ctx context.Context, user, tool string, args json.RawMessage) (any, error)

// Scripts keeps rezuscloud's Assist scripts in Home Assistant in step with
// the assist_scripts option, and answers their tool calls. It syncs when
// Run starts, when the scripts change, on every (re)connection and when a
// script entity is created or removed in the registry.
type Scripts struct {
	c      *Client
	api    *ScriptAPI
	opts   ScriptsOptions
	handle ToolHandler
	log    *zap.Logger

	mu     sync.Mutex
	want   []Script // nil until SetScripts
	kick   chan struct{}
	retry  time.Duration
	calls  chan json.RawMessage
	warned map[string]bool // user's scripts at our ids, warned about once

	onSync func(error) // tests: called after every sync
}

// NewScripts makes the keeper on c; handle runs the tool calls. Run it
// with Run. log may be nil.
func NewScripts(c *Client, opts ScriptsOptions, handle ToolHandler, log *zap.Logger) *Scripts {
	if log == nil {
		log = zap.NewNop()
	}
	return &Scripts{c: c, api: c.ScriptAPI(), opts: opts, handle: handle, log: log, kick: make(chan struct{}, 1),
		retry: assistRetry, calls: make(chan json.RawMessage, toolCallQueue), warned: map[string]bool{}}
}

// SetScripts sets the scripts to keep while the option is on. Call it
// whenever they change (tenants, the writes option); it never blocks.
func (s *Scripts) SetScripts(want []Script) {
	if s == nil {
		return
	}
	want = slices.Clone(want)
	if want == nil {
		want = []Script{}
	}
	s.mu.Lock()
	same := s.want != nil && reflect.DeepEqual(s.want, want)
	s.want = want
	s.mu.Unlock()
	if !same {
		s.poke()
	}
}

func (s *Scripts) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run syncs until ctx is done, then returns nil. With the option off it
// returns once every script rezuscloud created is removed (at once when
// there is none). A state file it cannot read is an error, and then
// nothing is changed in Home Assistant.
func (s *Scripts) Run(ctx context.Context) error {
	if s == nil || s.opts.StateFile == "" {
		return nil
	}
	st, err := loadScriptsState(s.opts.StateFile)
	if err != nil {
		return err
	}
	if !s.opts.Enabled && len(st.Scripts) == 0 {
		return nil
	}
	if s.c.Disabled() || s.api == nil {
		if s.opts.Enabled {
			s.log.Warn("assist_scripts is on but there is no Home Assistant link: no scripts are created")
		} else {
			s.log.Warn("assist_scripts is off but there is no Home Assistant link: the scripts rezuscloud created stay "+
				"until the link is configured", zap.Int("scripts", len(st.Scripts)), zap.String("state_file", s.opts.StateFile))
		}
		return nil
	}
	s.c.Subscribe(EventRegistryUpdated, s.onRegistry)
	if s.opts.Enabled {
		s.c.Subscribe(EventToolCall, s.onToolCall)
		go s.serveCalls(ctx)
	}
	for {
		if err := s.c.WaitConnected(ctx); err != nil {
			return nil
		}
		sess := s.c.current()
		if sess == nil {
			continue
		}
		select {
		case <-s.kick:
		default:
		}
		done, err := s.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if s.onSync != nil {
			s.onSync(err)
		}
		if errors.Is(err, errScriptsState) {
			return err
		}
		var retry *time.Timer
		var retryC <-chan time.Time
		if err != nil {
			s.log.Warn("cannot sync the Assist scripts with Home Assistant", zap.Error(err))
			retry = time.NewTimer(s.retry)
			retryC = retry.C
		} else if done {
			s.log.Info("assist_scripts is off: every script rezuscloud created is removed")
			return nil
		}
		select {
		case <-ctx.Done():
		case <-s.kick:
		case <-sess.done:
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

// onRegistry pokes when a script entity appears or goes (ours appear a
// moment after the POST, when HA has reloaded its scripts).
func (s *Scripts) onRegistry(event json.RawMessage) {
	var ev struct {
		Data struct {
			Action   string `json:"action"`
			EntityID string `json:"entity_id"`
		} `json:"data"`
	}
	if json.Unmarshal(event, &ev) != nil || !strings.HasPrefix(ev.Data.EntityID, "script.") {
		return
	}
	if ev.Data.Action == "create" || ev.Data.Action == "remove" || ev.Data.Action == "update" {
		s.poke()
	}
}

var errScriptsState = errors.New("assist scripts state file")

type scriptsState struct {
	Version int                      `json:"version"`
	Scripts map[string]*scriptRecord `json:"scripts"`
}

// scriptRecord is one script rezuscloud created (or was creating: Pending
// means the last write may or may not have happened; Home Assistant tells).
type scriptRecord struct {
	EntityID       string `json:"entity_id,omitempty"`
	Pending        bool   `json:"pending,omitempty"`
	Exposed        bool   `json:"exposed,omitempty"`
	ExposePending  bool   `json:"expose_pending,omitempty"`
	DeclinedExpose bool   `json:"declined_expose,omitempty"`
}

func loadScriptsState(path string) (*scriptsState, error) {
	st := &scriptsState{Version: ScriptsStateVersion, Scripts: map[string]*scriptRecord{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", errScriptsState, path, err)
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("%w %s: %v; fix it or remove it (removing it forgets which scripts rezuscloud "+
			"created: delete those by hand in Settings → Automations & scenes → Scripts)", errScriptsState, path, err)
	}
	if st.Version != ScriptsStateVersion {
		return nil, fmt.Errorf("%w %s: version %d, this rezuscloud reads version %d", errScriptsState, path,
			st.Version, ScriptsStateVersion)
	}
	if st.Scripts == nil {
		st.Scripts = map[string]*scriptRecord{}
	}
	for id, r := range st.Scripts {
		if r == nil || !objectIDRE.MatchString(id) {
			delete(st.Scripts, id)
		}
	}
	return st, nil
}

func (s *Scripts) save(st *scriptsState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.opts.StateFile, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving %s: %w", s.opts.StateFile, err)
	}
	return nil
}

// marked reports whether cfg carries the marker for id.
func marked(cfg map[string]any, id string) bool {
	vars, _ := cfg["variables"].(map[string]any)
	v, _ := vars[ScriptMarker].(string)
	return v == id
}

// withMarker is cfg with the marker added to its variables.
func withMarker(cfg map[string]any, id string) map[string]any {
	out := maps.Clone(cfg)
	vars := map[string]any{}
	if v, ok := cfg["variables"].(map[string]any); ok {
		vars = maps.Clone(v)
	}
	vars[ScriptMarker] = id
	out["variables"] = vars
	return out
}

// sameJSON compares two configs as JSON values.
func sameJSON(a, b map[string]any) bool {
	norm := func(m map[string]any) any {
		raw, _ := json.Marshal(m)
		var v any
		_ = json.Unmarshal(raw, &v)
		return v
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func (s *Scripts) snapshot() ([]Script, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.want), s.want != nil
}

// sync brings Home Assistant in step once. done reports that the option
// is off and nothing of rezuscloud's is left.
func (s *Scripts) sync(ctx context.Context) (done bool, err error) {
	want, known := s.snapshot()
	if !s.opts.Enabled {
		want, known = nil, true
	}
	st, err := loadScriptsState(s.opts.StateFile)
	if err != nil {
		return false, err
	}
	if !known {
		return false, nil
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.ID] = true
	}
	// remove ours that are no longer wanted
	for _, id := range slices.Sorted(maps.Keys(st.Scripts)) {
		if wanted[id] {
			continue
		}
		if err := s.remove(ctx, id); err != nil {
			return false, err
		}
		delete(st.Scripts, id)
		if err := s.save(st); err != nil {
			return false, err
		}
	}
	// create or update the wanted ones
	for _, w := range want {
		if err := s.put(ctx, st, w); err != nil {
			return false, err
		}
	}
	if err := s.exposeAll(ctx, st); err != nil {
		return false, err
	}
	return !s.opts.Enabled && len(st.Scripts) == 0, nil
}

// remove deletes a script of ours; one the user took over (no marker any
// more) is left alone.
func (s *Scripts) remove(ctx context.Context, id string) error {
	cfg, err := s.api.Get(ctx, id)
	switch {
	case errors.Is(err, ErrScriptNotFound):
		return nil
	case err != nil:
		return err
	case !marked(cfg, id):
		s.log.Info("script no longer carries rezuscloud's marker: left alone", zap.String("script", "script."+id))
		return nil
	}
	if err := s.api.Delete(ctx, id); err != nil && !errors.Is(err, ErrScriptNotFound) {
		return err
	}
	s.log.Info("removed rezuscloud's Assist script", zap.String("script", "script."+id))
	return nil
}

// put creates or updates one wanted script, unless a script of the user's
// holds its id.
func (s *Scripts) put(ctx context.Context, st *scriptsState, w Script) error {
	full := withMarker(w.Config, w.ID)
	cur, err := s.api.Get(ctx, w.ID)
	found := err == nil
	if err != nil && !errors.Is(err, ErrScriptNotFound) {
		return err
	}
	rec := st.Scripts[w.ID]
	if found && !marked(cur, w.ID) {
		if rec != nil { // ours once; the user took it over
			delete(st.Scripts, w.ID)
			if err := s.save(st); err != nil {
				return err
			}
		}
		if !s.warned[w.ID] {
			s.warned[w.ID] = true
			s.log.Warn("a script of your own has the id rezuscloud would use: it is left alone and this Assist "+
				"script is not created (rename yours to get it)", zap.String("script", "script."+w.ID))
		}
		return nil
	}
	if rec == nil {
		rec = &scriptRecord{}
		st.Scripts[w.ID] = rec
	}
	if found && sameJSON(cur, full) {
		if rec.Pending {
			rec.Pending = false
			return s.save(st)
		}
		return nil
	}
	rec.Pending = true
	if err := s.save(st); err != nil {
		return err
	}
	if err := s.api.Put(ctx, w.ID, full); err != nil {
		return fmt.Errorf("writing script %s: %w", w.ID, err)
	}
	rec.Pending = false
	verb := "created"
	if found {
		verb = "updated"
	}
	s.log.Info(verb+" rezuscloud's Assist script", zap.String("script", "script."+w.ID))
	return s.save(st)
}

// exposeAll exposes our scripts to Assist once HA has their entities; an
// exposure the user withdrew stays withdrawn.
func (s *Scripts) exposeAll(ctx context.Context, st *scriptsState) error {
	if len(st.Scripts) == 0 {
		return nil
	}
	reg, err := s.scriptEntities(ctx)
	if err != nil {
		return err
	}
	a := &Assist{c: s.c}
	exposed, err := a.exposed(ctx)
	if err != nil {
		return err
	}
	var ids []string
	var recs []*scriptRecord
	for _, id := range slices.Sorted(maps.Keys(st.Scripts)) {
		rec := st.Scripts[id]
		eid, ok := reg[id]
		if !ok || rec.Pending {
			continue // HA has not reloaded yet: its registry event brings us back
		}
		rec.EntityID = eid
		cur := exposed[eid]
		need := false
		switch {
		case rec.ExposePending:
			rec.ExposePending, rec.Exposed = false, cur
			need = !cur
		case rec.Exposed:
			if !cur {
				rec.Exposed, rec.DeclinedExpose = false, true
				s.log.Info("an Assist script of rezuscloud's was withdrawn from Assist in Home Assistant; leaving it so",
					zap.String("entity_id", eid))
			}
		case !rec.DeclinedExpose && !cur:
			need = true
		}
		if need {
			rec.Exposed, rec.ExposePending = true, true
			ids, recs = append(ids, eid), append(recs, rec)
		}
	}
	if len(ids) == 0 {
		return s.save(st)
	}
	if err := s.save(st); err != nil {
		return err
	}
	if err := a.expose(ctx, ids, true); err != nil {
		return err
	}
	for _, r := range recs {
		r.ExposePending = false
	}
	s.log.Info("exposed rezuscloud's Assist scripts", zap.Strings("entity_ids", ids))
	return s.save(st)
}

// scriptEntities maps script object ids (the unique ids of script
// entities) to their entity ids, which the user may have renamed.
func (s *Scripts) scriptEntities(ctx context.Context) (map[string]string, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	raw, err := s.c.Call(cctx, map[string]any{"type": "config/entity_registry/list"})
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
	out := map[string]string{}
	for _, e := range entries {
		if e.Platform == "script" && e.UniqueID != "" {
			out[e.UniqueID] = e.EntityID
		}
	}
	return out, nil
}

// onToolCall runs on the client's dispatch goroutine: it only queues.
func (s *Scripts) onToolCall(event json.RawMessage) {
	select {
	case s.calls <- append(json.RawMessage(nil), event...):
	default:
		s.log.Warn("too many Assist script tool calls queued; refusing one", zap.Int("queue", toolCallQueue))
		var ev struct {
			Data struct {
				Transaction any `json:"transaction"`
			} `json:"data"`
		}
		_ = json.Unmarshal(event, &ev)
		s.answer(context.Background(), ev.Data.Transaction, nil, errors.New("busy: too many calls queued; try again"))
	}
}

func (s *Scripts) serveCalls(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case event := <-s.calls:
			s.call(ctx, event)
		}
	}
}

// call runs one tool call and fires its result.
func (s *Scripts) call(ctx context.Context, event json.RawMessage) {
	var ev struct {
		Data struct {
			Tool        string          `json:"tool"`
			Arguments   json.RawMessage `json:"arguments"`
			Transaction any             `json:"transaction"`
		} `json:"data"`
		Context struct {
			UserID *string `json:"user_id"`
		} `json:"context"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		s.log.Warn("bad rezuscloud_tool_call event", zap.Error(err))
		return
	}
	user := ""
	if ev.Context.UserID != nil {
		user = *ev.Context.UserID
	}
	if ev.Data.Transaction == nil {
		s.log.Warn("rezuscloud_tool_call without a transaction: answered, but no script can match the answer",
			zap.String("tool", ev.Data.Tool))
	}
	var data any
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("Assist script tool call panicked", zap.Any("panic", r), zap.String("tool", ev.Data.Tool))
				err = errors.New("internal error while handling the call")
			}
		}()
		data, err = s.handle(ctx, user, ev.Data.Tool, ev.Data.Arguments)
	}()
	s.answer(ctx, ev.Data.Transaction, data, err)
}

func (s *Scripts) answer(ctx context.Context, transaction, data any, err error) {
	res := map[string]any{"transaction": transaction, "status": "ok", "data": data}
	if err != nil {
		res = map[string]any{"transaction": transaction, "status": "error", "data": map[string]any{}, "error": err.Error()}
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := s.c.FireEvent(cctx, EventToolResult, res); err != nil {
		s.log.Warn("cannot fire rezuscloud_tool_result", zap.Error(err))
	}
}
