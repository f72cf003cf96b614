// Package supervisortest is a stand-in for the part of Home Assistant's
// Supervisor an add-on's options and MQTT credentials go through, for
// tests (the real Supervisor cannot run here). It follows supervisor/apps
// and supervisor/api (commit 090ef31): the options it keeps for the add-on
// (persist), merged over config.yaml's defaults (deepmerge: sections merge,
// values replace) for GET /addons/self/info, validated by AppOptions before
// it keeps them (POST /addons/self/options) and before it writes
// /data/options.json at each start, which drops the options the schema does
// not have; GET /services/mqtt. The validation is addoncheck's
// transcription of AppOptions. Every answer is {"result","data","message"}
// and every call needs the add-on's token.
package supervisortest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/internal/addoncheck"
)

// Token is the add-on's SUPERVISOR_TOKEN the stand-in accepts.
const Token = "supervisortest-token-0123"

// Supervisor is one stand-in, serving on loopback until the test ends.
type Supervisor struct {
	Slug    string
	Ingress bool

	t        testing.TB
	schema   map[string]*yaml.Node
	defaults map[string]any
	srv      *httptest.Server

	mu      sync.Mutex
	persist map[string]any
	mqtt    map[string]any
	refuse  bool
	posts   int
}

// New starts a stand-in for the add-on whose manifest is at manifestPath,
// keeping persist as the user's stored options (nil: none saved yet).
func New(t testing.TB, manifestPath string, persist map[string]any) *Supervisor {
	t.Helper()
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	man, errs := addoncheck.CheckConfig(filepath.Base(manifestPath), b)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", manifestPath, errs)
	}
	defs, err := man.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	if persist == nil {
		persist = map[string]any{}
	}
	s := &Supervisor{Slug: "a0d7b954_rezuscloud", t: t, schema: man.Schema, defaults: defs, persist: persist}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the stand-in's address (config.Supervisor's URL).
func (s *Supervisor) URL() string { return s.srv.URL }

// Client is the HTTP client for URL.
func (s *Supervisor) Client() *http.Client { return s.srv.Client() }

// SetMQTT makes /services/mqtt describe a broker.
func (s *Supervisor) SetMQTT(host string, port int, username, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mqtt = map[string]any{"addon": "core_mosquitto", "host": host, "port": port, "ssl": false,
		"username": username, "password": password, "protocol": "3.1.1"}
}

// Refuse makes POST /addons/self/options fail.
func (s *Supervisor) Refuse(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

// Persist is a copy of the options the stand-in keeps.
func (s *Supervisor) Persist() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyMap(s.persist)
}

// SetPersist replaces the options the stand-in keeps (a user saving the
// form, validated as the Supervisor does; it fails the test when they do
// not validate).
func (s *Supervisor) SetPersist(m map[string]any) {
	s.t.Helper()
	kept, _, errs := addoncheck.ValidateOptions(s.schema, m)
	if len(errs) > 0 {
		s.t.Fatalf("the Supervisor refuses to save these options: %v", errs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.persist = kept
}

// Posts counts the POST /addons/self/options calls.
func (s *Supervisor) Posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}

// Start is what the Supervisor does at an add-on start (write_options):
// the merged options, validated (unknown ones dropped), written as
// options.json in a new folder; it returns the file. It fails the test when
// the Supervisor would not start the add-on.
func (s *Supervisor) Start() string {
	s.t.Helper()
	s.mu.Lock()
	kept, _, errs := addoncheck.ValidateOptions(s.schema, Merge(s.defaults, s.persist))
	s.mu.Unlock()
	if len(errs) > 0 {
		s.t.Fatalf("the Supervisor would not start the add-on: %v", errs)
	}
	b, _ := json.Marshal(kept)
	p := filepath.Join(s.t.TempDir(), "options.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *Supervisor) answer(w http.ResponseWriter, status int, data any, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	res := "ok"
	if status != http.StatusOK {
		res = "error"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"result": res, "data": data, "message": msg})
}

func (s *Supervisor) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+Token {
		s.answer(w, http.StatusUnauthorized, nil, "Unauthorized")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "GET /addons/self/info":
		s.answer(w, 200, map[string]any{"slug": s.Slug, "ingress": s.Ingress,
			"options": Merge(s.defaults, s.persist)}, "")
	case "POST /addons/self/options":
		var body struct {
			Options map[string]any `json:"options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.answer(w, 400, nil, err.Error())
			return
		}
		s.posts++
		kept, _, errs := addoncheck.ValidateOptions(s.schema, body.Options)
		if s.refuse {
			errs = append(errs, fmt.Errorf("refused by the test"))
		}
		if len(errs) > 0 {
			s.answer(w, 400, nil, fmt.Sprintf("App %s has invalid options: %v", s.Slug, errs))
			return
		}
		s.persist = kept
		s.answer(w, 200, nil, "")
	case "GET /services/mqtt":
		if s.mqtt == nil {
			s.answer(w, 400, nil, "No service mqtt")
			return
		}
		s.answer(w, 200, s.mqtt, "")
	default:
		s.answer(w, 404, nil, "not found")
	}
}

// Merge is deepmerge's Merger([(dict, ["merge"])], ["override"],
// ["override"]), as the Supervisor merges stored options over defaults.
func Merge(base, next map[string]any) map[string]any {
	out := copyMap(base)
	for k, v := range next {
		if bm, ok := out[k].(map[string]any); ok {
			if nm, ok := v.(map[string]any); ok {
				out[k] = Merge(bm, nm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = copyMap(sub)
		}
		out[k] = v
	}
	return out
}
