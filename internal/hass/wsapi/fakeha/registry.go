package fakeha

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// KnownAssistants are the assistants homeassistant/expose_entity accepts
// (HA's KNOWN_ASSISTANTS).
var KnownAssistants = []string{"cloud.alexa", "cloud.google_assistant", "conversation"}

// EventRegistryUpdated is the event HA fires on every registry change.
const EventRegistryUpdated = "entity_registry_updated"

// Entity is an entity registry entry as the fake keeps it: the fields the
// registry commands show. Aliases is HA's list, whose null items stand for
// the entity's own name; Options holds per-domain options, among them
// {"conversation": {"should_expose": true}} for an entity exposed to Assist.
type Entity struct {
	EntityID     string
	UniqueID     string
	Platform     string
	Name         *string // the user's name; nil: the original one
	OriginalName string
	Aliases      []*string
	Options      map[string]map[string]any
	ID           string // the registry's own id; set by AddEntity when empty
	// ConfigEntryID is the integration entry the entity belongs to
	// ("fakemqttentry" when empty).
	ConfigEntryID string
}

// Command is one registry or exposure command the fake received.
type Command struct {
	Type    string
	Message json.RawMessage // as sent, id included
}

type registry struct {
	order    []string // entity ids in creation order (HA lists in this order)
	entities map[string]*Entity
	legacy   map[string]map[string]bool // exposure of entities outside the registry
	seq      int
}

func newRegistry() registry {
	return registry{entities: map[string]*Entity{}, legacy: map[string]map[string]bool{}}
}

var entityIDRE = regexp.MustCompile(`^(?:[a-z0-9]+(?:_[a-z0-9]+)*)\.(?:[a-z0-9]+(?:_[a-z0-9]+)*)$`)

// AddEntity puts e in the registry (as MQTT discovery would) and fires
// entity_registry_updated with action create. An entry with the same
// entity id is replaced.
func (s *Server) AddEntity(e Entity) {
	e = cloneEntity(&e)
	s.mu.Lock()
	if e.ID == "" {
		s.registry.seq++
		e.ID = fmt.Sprintf("fakeentry%08d", s.registry.seq)
	}
	if e.Platform == "" {
		e.Platform = "mqtt"
	}
	if _, ok := s.registry.entities[e.EntityID]; !ok {
		s.registry.order = append(s.registry.order, e.EntityID)
	}
	s.registry.entities[e.EntityID] = &e
	s.cond.Broadcast()
	s.mu.Unlock()
	s.fireRegistry("create", e.EntityID, nil, "")
}

// RemoveEntity removes an entry (as a discovery removal would).
func (s *Server) RemoveEntity(entityID string) {
	s.mu.Lock()
	_, ok := s.registry.entities[entityID]
	delete(s.registry.entities, entityID)
	s.registry.order = slices.DeleteFunc(s.registry.order, func(id string) bool { return id == entityID })
	s.mu.Unlock()
	if ok {
		s.fireRegistry("remove", entityID, nil, "")
	}
}

// RenameEntity changes an entry's entity id, as a user may in the UI.
func (s *Server) RenameEntity(oldID, newID string) error {
	s.mu.Lock()
	e, ok := s.registry.entities[oldID]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("no entity %s", oldID)
	}
	if _, taken := s.registry.entities[newID]; taken {
		s.mu.Unlock()
		return fmt.Errorf("entity %s exists", newID)
	}
	s.renameLocked(e, newID)
	s.mu.Unlock()
	s.fireRegistry("update", newID, map[string]any{"entity_id": oldID}, oldID)
	return nil
}

// SetAliases sets an entry's aliases as a user does in the UI (nil items
// allowed: the entity's name).
func (s *Server) SetAliases(entityID string, aliases ...*string) error {
	s.mu.Lock()
	e, ok := s.registry.entities[entityID]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("no entity %s", entityID)
	}
	old := e.Aliases
	e.Aliases = slices.Clone(aliases)
	s.mu.Unlock()
	s.fireRegistry("update", entityID, map[string]any{"aliases": old}, "")
	return nil
}

// SetExposed exposes an entity to an assistant or withdraws it, as a user
// does in Settings → Voice assistants → Expose.
func (s *Server) SetExposed(entityID, assistant string, expose bool) {
	s.mu.Lock()
	s.exposeLocked(entityID, assistant, expose)
	_, inRegistry := s.registry.entities[entityID]
	s.mu.Unlock()
	if inRegistry {
		s.fireRegistry("update", entityID, map[string]any{"options": nil}, "")
	}
}

// Entity returns a copy of an entry.
func (s *Server) Entity(entityID string) (Entity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.registry.entities[entityID]
	if !ok {
		return Entity{}, false
	}
	return cloneEntity(e), true
}

// Exposed reports whether an entity is exposed to assistant.
func (s *Server) Exposed(entityID, assistant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exposedLocked(entityID)[assistant]
}

// AliasStrings is an entry's aliases with null items as "<name>".
func AliasStrings(e Entity) []string {
	out := make([]string, 0, len(e.Aliases))
	for _, a := range e.Aliases {
		if a == nil {
			out = append(out, "<name>")
			continue
		}
		out = append(out, *a)
	}
	return out
}

// Commands returns the registry and exposure commands received of type typ
// ("" = all), oldest first.
func (s *Server) Commands(typ string) []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Command
	for _, c := range s.commands {
		if typ == "" || c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// WaitCommands waits until at least n commands of type typ were received.
func (s *Server) WaitCommands(ctx context.Context, typ string, n int) error {
	return s.waitFor(ctx, func() bool {
		k := 0
		for _, c := range s.commands {
			if c.Type == typ {
				k++
			}
		}
		return k >= n
	})
}

// handleRegistry answers the registry and exposure commands; it reports
// whether typ is one of them.
func (s *Server) handleRegistry(c *conn, id int64, typ string, raw []byte) bool {
	switch typ {
	case "config/entity_registry/list", "config/entity_registry/get", "config/entity_registry/update",
		"homeassistant/expose_entity", "homeassistant/expose_entity/list":
	default:
		return false
	}
	s.mu.Lock()
	s.commands = append(s.commands, Command{Type: typ, Message: append(json.RawMessage(nil), raw...)})
	s.cond.Broadcast()
	s.mu.Unlock()

	var msg map[string]json.RawMessage
	_ = json.Unmarshal(raw, &msg)
	switch typ {
	case "config/entity_registry/list":
		s.mu.Lock()
		out := make([]map[string]any, 0, len(s.registry.order))
		for _, eid := range s.registry.order {
			out = append(out, partialDict(s.registry.entities[eid]))
		}
		s.mu.Unlock()
		c.ok(id, out)
	case "config/entity_registry/get":
		eid, ok := entityIDField(c, id, msg)
		if !ok {
			return true
		}
		s.mu.Lock()
		e := s.registry.entities[eid]
		var d map[string]any
		if e != nil {
			d = extendedDict(e)
		}
		s.mu.Unlock()
		if e == nil {
			c.fail(id, "not_found", "Entity not found")
			return true
		}
		c.ok(id, d)
	case "config/entity_registry/update":
		s.updateEntity(c, id, msg)
	case "homeassistant/expose_entity":
		s.exposeEntity(c, id, msg)
	case "homeassistant/expose_entity/list":
		s.mu.Lock()
		res := map[string]map[string]bool{}
		for eid := range s.registry.legacy {
			res[eid] = s.exposedLocked(eid)
		}
		for eid := range s.registry.entities {
			res[eid] = s.exposedLocked(eid)
		}
		s.mu.Unlock()
		c.ok(id, map[string]any{"exposed_entities": res})
	}
	return true
}

func entityIDField(c *conn, id int64, msg map[string]json.RawMessage) (string, bool) {
	raw, ok := msg["entity_id"]
	if !ok {
		c.fail(id, "invalid_format", "required key not provided @ data['entity_id']. Got None")
		return "", false
	}
	var eid string
	if json.Unmarshal(raw, &eid) != nil || !entityIDRE.MatchString(eid) {
		c.fail(id, "invalid_format", fmt.Sprintf("Entity ID %s is an invalid entity ID for dictionary value @ data['entity_id']", raw))
		return "", false
	}
	return eid, true
}

// updateEntity is config/entity_registry/update for the fields the fake
// keeps: name, new_entity_id, aliases, options_domain + options.
func (s *Server) updateEntity(c *conn, id int64, msg map[string]json.RawMessage) {
	eid, ok := entityIDField(c, id, msg)
	if !ok {
		return
	}
	var (
		aliases    []*string
		setAliases bool
		name       *string
		setName    bool
		newID      string
		optDomain  string
		opts       map[string]any
	)
	if raw, ok := msg["aliases"]; ok {
		if err := json.Unmarshal(raw, &aliases); err != nil || aliases == nil {
			c.fail(id, "invalid_format", "expected list for dictionary value @ data['aliases']")
			return
		}
		setAliases = true
	}
	if raw, ok := msg["name"]; ok {
		if err := json.Unmarshal(raw, &name); err != nil {
			c.fail(id, "invalid_format", "expected str for dictionary value @ data['name']")
			return
		}
		setName = true
	}
	if raw, ok := msg["new_entity_id"]; ok {
		if json.Unmarshal(raw, &newID) != nil {
			c.fail(id, "invalid_format", "expected str for dictionary value @ data['new_entity_id']")
			return
		}
	}
	_, hasDomain := msg["options_domain"]
	_, hasOpts := msg["options"]
	if hasDomain != hasOpts {
		c.fail(id, "invalid_format", "some but not all values in the same group of inclusion 'entity_option'")
		return
	}
	if hasDomain {
		if json.Unmarshal(msg["options_domain"], &optDomain) != nil || json.Unmarshal(msg["options"], &opts) != nil {
			c.fail(id, "invalid_format", "expected dict for dictionary value @ data['options']")
			return
		}
	}

	s.mu.Lock()
	e := s.registry.entities[eid]
	if e == nil {
		s.mu.Unlock()
		c.fail(id, "not_found", "Entity not found")
		return
	}
	changes := map[string]any{}
	if newID != "" && newID != eid {
		if !entityIDRE.MatchString(newID) || strings.SplitN(newID, ".", 2)[0] != strings.SplitN(eid, ".", 2)[0] {
			s.mu.Unlock()
			c.fail(id, "invalid_info", "New entity ID should be same domain")
			return
		}
		if _, taken := s.registry.entities[newID]; taken {
			s.mu.Unlock()
			c.fail(id, "invalid_info", "Entity with this ID is already registered")
			return
		}
		changes["entity_id"] = eid
		s.renameLocked(e, newID)
	}
	if setAliases {
		changes["aliases"] = e.Aliases
		e.Aliases = aliases
	}
	if setName {
		changes["name"] = e.Name
		e.Name = name
	}
	if hasDomain {
		changes["options"] = nil
		if e.Options == nil {
			e.Options = map[string]map[string]any{}
		}
		if opts == nil {
			delete(e.Options, optDomain)
		} else {
			e.Options[optDomain] = opts
		}
	}
	res := map[string]any{"entity_entry": extendedDict(e)}
	now := e.EntityID
	s.mu.Unlock()
	c.ok(id, res)
	if len(changes) > 0 {
		old := ""
		if now != eid {
			old = eid
		}
		s.fireRegistry("update", now, changes, old)
	}
}

func (s *Server) exposeEntity(c *conn, id int64, msg map[string]json.RawMessage) {
	var (
		assistants []string
		ids        []string
		should     *bool
	)
	for _, k := range []string{"assistants", "entity_ids", "should_expose"} {
		if _, ok := msg[k]; !ok {
			c.fail(id, "invalid_format", fmt.Sprintf("required key not provided @ data['%s']. Got None", k))
			return
		}
	}
	if json.Unmarshal(msg["assistants"], &assistants) != nil || assistants == nil {
		c.fail(id, "invalid_format", "expected list for dictionary value @ data['assistants']")
		return
	}
	for _, a := range assistants {
		if !slices.Contains(KnownAssistants, a) {
			c.fail(id, "invalid_format", fmt.Sprintf("value must be one of %v @ data['assistants'][0]", KnownAssistants))
			return
		}
	}
	if json.Unmarshal(msg["entity_ids"], &ids) != nil || ids == nil {
		c.fail(id, "invalid_format", "expected list for dictionary value @ data['entity_ids']")
		return
	}
	if json.Unmarshal(msg["should_expose"], &should) != nil || should == nil {
		c.fail(id, "invalid_format", "expected bool for dictionary value @ data['should_expose']")
		return
	}
	s.mu.Lock()
	var updated []string
	for _, eid := range ids {
		for _, a := range assistants {
			s.exposeLocked(eid, a, *should)
		}
		if _, ok := s.registry.entities[eid]; ok {
			updated = append(updated, eid)
		}
	}
	s.mu.Unlock()
	c.ok(id, nil)
	for _, eid := range updated {
		s.fireRegistry("update", eid, map[string]any{"options": nil}, "")
	}
}

// exposeLocked stores exposure where HA does: in the registry entry's
// options for a registered entity, else in the legacy table.
func (s *Server) exposeLocked(eid, assistant string, expose bool) {
	if e, ok := s.registry.entities[eid]; ok {
		if e.Options == nil {
			e.Options = map[string]map[string]any{}
		}
		o := map[string]any{}
		for k, v := range e.Options[assistant] {
			o[k] = v
		}
		o["should_expose"] = expose
		e.Options[assistant] = o
		s.cond.Broadcast()
		return
	}
	if s.registry.legacy[eid] == nil {
		s.registry.legacy[eid] = map[string]bool{}
	}
	s.registry.legacy[eid][assistant] = expose
	s.cond.Broadcast()
}

func (s *Server) exposedLocked(eid string) map[string]bool {
	out := map[string]bool{}
	if e, ok := s.registry.entities[eid]; ok {
		for a, o := range e.Options {
			if v, ok := o["should_expose"].(bool); ok && slices.Contains(KnownAssistants, a) {
				out[a] = v
			}
		}
		return out
	}
	for a, v := range s.registry.legacy[eid] {
		out[a] = v
	}
	return out
}

func (s *Server) renameLocked(e *Entity, newID string) {
	old := e.EntityID
	delete(s.registry.entities, old)
	e.EntityID = newID
	s.registry.entities[newID] = e
	for i, id := range s.registry.order {
		if id == old {
			s.registry.order[i] = newID
		}
	}
}

// fireRegistry fires entity_registry_updated as HA does.
func (s *Server) fireRegistry(action, entityID string, changes map[string]any, oldEntityID string) {
	data := map[string]any{"action": action, "entity_id": entityID}
	if action == "update" {
		if changes == nil {
			changes = map[string]any{}
		}
		data["changes"] = changes
		if oldEntityID != "" {
			data["old_entity_id"] = oldEntityID
		}
	}
	raw, _ := json.Marshal(data)
	s.fire(EventRegistryUpdated, raw)
}

// partialDict is one config/entity_registry/list element (HA's
// RegistryEntry.as_partial_dict).
func partialDict(e *Entity) map[string]any {
	opts := map[string]any{}
	for k, v := range e.Options {
		opts[k] = v
	}
	entry := e.ConfigEntryID
	if entry == "" {
		entry = "fakemqttentry"
	}
	return map[string]any{
		"area_id": nil, "categories": map[string]any{}, "config_entry_id": entry,
		"config_subentry_id": nil, "created_at": 0.0, "device_id": nil, "disabled_by": nil,
		"entity_category": nil, "entity_id": e.EntityID, "has_entity_name": true, "hidden_by": nil,
		"icon": nil, "id": e.ID, "labels": []string{}, "modified_at": 0.0, "name": e.Name,
		"options": opts, "original_name": e.OriginalName, "platform": e.Platform,
		"translation_key": nil, "unique_id": e.UniqueID,
	}
}

// extendedDict is the config/entity_registry/get answer (as_partial_dict
// plus aliases and the original attributes).
func extendedDict(e *Entity) map[string]any {
	d := partialDict(e)
	aliases := e.Aliases
	if aliases == nil {
		aliases = []*string{}
	}
	d["aliases"] = aliases
	d["capabilities"] = nil
	d["device_class"] = nil
	d["original_device_class"] = nil
	d["original_icon"] = nil
	return d
}

func cloneEntity(e *Entity) Entity {
	c := *e
	c.Aliases = slices.Clone(e.Aliases)
	if e.Name != nil {
		n := *e.Name
		c.Name = &n
	}
	if e.Options != nil {
		c.Options = map[string]map[string]any{}
		for k, v := range e.Options {
			o := map[string]any{}
			for kk, vv := range v {
				o[kk] = vv
			}
			c.Options[k] = o
		}
	}
	return c
}
