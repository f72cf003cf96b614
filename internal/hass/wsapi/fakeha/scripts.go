package fakeha

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Home Assistant's REST config API for scripts, as
// homeassistant/components/config/script.py and view.py serve it:
//
//   - GET    /api/config/script/config/<key>: 200 with the script's config
//     as scripts.yaml holds it, 404 {"message":"Resource not found"}.
//   - POST   /api/config/script/config/<key>: the key must be a slug and
//     not reload/turn_on/turn_off/toggle (400 "Key malformed: …" or
//     "Message malformed: …"); the body is validated (400 "Message
//     malformed: …"); the whole script is replaced (data[key] = value),
//     {"result":"ok"} is answered, then scripts are reloaded (a new script
//     gets its entity, platform script, unique id = key).
//   - DELETE /api/config/script/config/<key>: 400 {"message":"Resource not
//     found"} when absent; else removed, and its entity registry entry too.
//
// Every view requires an administrator's token (401 without one).

const scriptConfigPath = "/api/config/script/config/"

var (
	slugRE            = regexp.MustCompile(`^[a-z0-9]+(?:_[a-z0-9]+)*$`)
	scriptReserved    = []string{"reload", "toggle", "turn_off", "turn_on"}
	scriptTopKeys     = []string{"alias", "description", "fields", "icon", "max", "max_exceeded", "mode", "sequence", "trace", "variables"}
	scriptFieldKeys   = []string{"advanced", "default", "description", "example", "name", "required", "selector"}
	scriptModes       = []string{"single", "restart", "queued", "parallel"}
	scriptActionKeys  = []string{"action", "choose", "condition", "delay", "device_id", "event", "if", "parallel", "repeat", "scene", "sequence", "service", "set_conversation_response", "stop", "variables", "wait_for_trigger", "wait_template"}
	knownSelectorKeys = []string{"action", "addon", "area", "attribute", "boolean", "color_rgb", "color_temp", "condition", "config_entry", "constant", "conversation_agent", "country", "date", "datetime", "device", "duration", "entity", "file", "floor", "icon", "label", "language", "location", "media", "number", "object", "qr_code", "select", "state", "target", "template", "text", "theme", "time", "trigger", "ui_action", "ui_color"}
)

// ScriptRequest is one REST request to the script config API.
type ScriptRequest struct {
	Method string
	Key    string
	Status int
}

// scripts is scripts.yaml: object id -> config.
type scripts struct {
	configs  map[string]json.RawMessage
	requests []ScriptRequest
}

// SetScript puts a script into scripts.yaml and reloads, as a user does in
// the script editor.
func (s *Server) SetScript(key string, config map[string]any) {
	raw, _ := json.Marshal(config)
	s.mu.Lock()
	if s.scripts.configs == nil {
		s.scripts.configs = map[string]json.RawMessage{}
	}
	s.scripts.configs[key] = raw
	s.mu.Unlock()
	s.reloadScripts()
}

// Script returns a script's config as stored.
func (s *Server) Script(key string) (map[string]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := s.scripts.configs[key]
	if !ok {
		return nil, false
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m, true
}

// ScriptKeys lists the scripts in scripts.yaml, sorted.
func (s *Server) ScriptKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.scripts.configs))
}

// ScriptRequests returns the REST requests to the script config API.
func (s *Server) ScriptRequests() []ScriptRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.scripts.requests)
}

func (s *Server) serveScriptConfig(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, scriptConfigPath)
	status := s.scriptConfig(w, r, key)
	s.mu.Lock()
	s.scripts.requests = append(s.scripts.requests, ScriptRequest{Method: r.Method, Key: key, Status: status})
	s.cond.Broadcast()
	s.mu.Unlock()
}

func jsonMessage(w http.ResponseWriter, status int, msg string) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	return status
}

func (s *Server) scriptConfig(w http.ResponseWriter, r *http.Request, key string) int {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || tok != s.token || tok == "" {
		http.Error(w, "401: Unauthorized", http.StatusUnauthorized)
		return http.StatusUnauthorized
	}
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		raw, ok := s.scripts.configs[key]
		s.mu.Unlock()
		if !ok {
			return jsonMessage(w, http.StatusNotFound, "Resource not found")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
		return http.StatusOK
	case http.MethodPost:
		var body any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return jsonMessage(w, http.StatusBadRequest, "Invalid JSON specified")
		}
		if !slugRE.MatchString(key) {
			return jsonMessage(w, http.StatusBadRequest, fmt.Sprintf("Key malformed: invalid slug %s (try %s)", key,
				strings.Trim(strings.ToLower(key), "_")))
		}
		cfg, ok := body.(map[string]any)
		if !ok {
			return jsonMessage(w, http.StatusBadRequest, "Message malformed: expected a dictionary")
		}
		if err := validateScript(key, cfg); err != "" {
			return jsonMessage(w, http.StatusBadRequest, "Message malformed: "+err)
		}
		raw, _ := json.Marshal(cfg)
		s.mu.Lock()
		if s.scripts.configs == nil {
			s.scripts.configs = map[string]json.RawMessage{}
		}
		s.scripts.configs[key] = raw // EditScriptConfigView: data[key] = new_value
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"result":"ok"}`))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		s.reloadScripts() // the post-write hook: script.reload
		return http.StatusOK
	case http.MethodDelete:
		s.mu.Lock()
		_, ok := s.scripts.configs[key]
		delete(s.scripts.configs, key)
		var eid string
		for id, e := range s.registry.entities {
			if e.Platform == "script" && e.UniqueID == key {
				eid = id
			}
		}
		s.mu.Unlock()
		if !ok {
			return jsonMessage(w, http.StatusBadRequest, "Resource not found")
		}
		if eid != "" {
			s.RemoveEntity(eid) // the hook: ent_reg.async_remove
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"result":"ok"}`))
		return http.StatusOK
	}
	http.Error(w, "405: Method Not Allowed", http.StatusMethodNotAllowed)
	return http.StatusMethodNotAllowed
}

// validateScript checks what SCRIPT_ENTITY_SCHEMA checks that the fake can
// know; it returns HA's message, "" when valid.
func validateScript(key string, cfg map[string]any) string {
	if slices.Contains(scriptReserved, key) {
		return "A script's object_id must not be one of " + strings.Join(scriptReserved, ", ")
	}
	for k := range cfg {
		if !slices.Contains(scriptTopKeys, k) {
			return fmt.Sprintf("extra keys not allowed @ data['%s']", k)
		}
	}
	seq, ok := cfg["sequence"]
	if !ok {
		return "required key not provided @ data['sequence']"
	}
	steps, ok := seq.([]any)
	if !ok {
		steps = []any{seq}
	}
	for i, st := range steps {
		m, ok := st.(map[string]any)
		if !ok || !slices.ContainsFunc(scriptActionKeys, func(k string) bool { _, has := m[k]; return has }) {
			return fmt.Sprintf("Unable to determine action @ data['sequence'][%d]", i)
		}
	}
	for _, k := range []string{"alias", "description", "icon"} {
		if v, ok := cfg[k]; ok {
			if _, isStr := v.(string); !isStr {
				return fmt.Sprintf("expected str for dictionary value @ data['%s']", k)
			}
		}
	}
	if m, ok := cfg["mode"]; ok && !slices.Contains(scriptModes, fmt.Sprint(m)) {
		return fmt.Sprintf("value must be one of %v for dictionary value @ data['mode']", scriptModes)
	}
	if v, ok := cfg["variables"]; ok {
		if _, isMap := v.(map[string]any); !isMap {
			return "expected dict for dictionary value @ data['variables']"
		}
	}
	if f, ok := cfg["fields"]; ok {
		fields, isMap := f.(map[string]any)
		if !isMap {
			return "expected dict for dictionary value @ data['fields']"
		}
		for name, fv := range fields {
			fm, isMap := fv.(map[string]any)
			if !isMap {
				return fmt.Sprintf("expected dict for dictionary value @ data['fields']['%s']", name)
			}
			for k := range fm {
				if !slices.Contains(scriptFieldKeys, k) {
					return fmt.Sprintf("extra keys not allowed @ data['fields']['%s']['%s']", name, k)
				}
			}
			if sel, ok := fm["selector"]; ok {
				sm, isMap := sel.(map[string]any)
				if !isMap || len(sm) != 1 {
					return fmt.Sprintf("Expected a dictionary with one key @ data['fields']['%s']['selector']", name)
				}
				for typ := range sm {
					if !slices.Contains(knownSelectorKeys, typ) {
						return fmt.Sprintf("Unknown selector type %s found @ data['fields']['%s']['selector']", typ, name)
					}
				}
			}
		}
	}
	return ""
}

// reloadScripts gives every script in scripts.yaml its registry entry
// (platform script, unique id = object id), as script.reload does.
func (s *Server) reloadScripts() {
	s.mu.Lock()
	keys := slices.Sorted(maps.Keys(s.scripts.configs))
	have := map[string]bool{}
	for _, e := range s.registry.entities {
		if e.Platform == "script" {
			have[e.UniqueID] = true
		}
	}
	var add []Entity
	for _, k := range keys {
		if have[k] {
			continue
		}
		var cfg struct {
			Alias string `json:"alias"`
		}
		_ = json.Unmarshal(s.scripts.configs[k], &cfg)
		eid := "script." + k
		for n := 2; s.registry.entities[eid] != nil; n++ {
			eid = fmt.Sprintf("script.%s_%d", k, n)
		}
		add = append(add, Entity{EntityID: eid, UniqueID: k, Platform: "script", OriginalName: cfg.Alias})
	}
	s.mu.Unlock()
	for _, e := range add {
		s.AddEntity(e)
	}
}
