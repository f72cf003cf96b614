package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// testScript is a script of the shape rezuscloud writes (mcp.AssistScripts
// makes the real ones; their configs are checked against the fake in
// package mcp).
func testScript(id, alias string) Script {
	return Script{ID: id, Config: map[string]any{
		"alias": alias, "description": "Says how a cluster is doing.", "mode": "parallel",
		"fields": map[string]any{"cluster": map[string]any{"name": "Cluster", "required": true,
			"description": "The cluster's name.", "selector": map[string]any{"select": map[string]any{"options": []any{"lab"}}}}},
		"sequence": []any{
			map[string]any{"event": EventToolCall, "event_data": map[string]any{"tool": "cluster_status",
				"arguments": map[string]any{"cluster": "{{ cluster }}"}, "transaction": "{{ context.id }}"}},
			map[string]any{"stop": "done"},
		},
	}}
}

// userScript is a script of the user's own (no marker).
var userScript = map[string]any{"alias": "My cluster status", "sequence": []any{
	map[string]any{"action": "notify.notify", "data": map[string]any{"message": "hi"}}}}

type scriptsRun struct {
	s     *Scripts
	syncs chan error
	errc  chan error
	stop  context.CancelFunc
	calls chan string // "user tool args"
}

// startScripts runs a Scripts keeper on c until stop or the end of the test.
func startScripts(t *testing.T, c *Client, enabled bool, stateFile string, want ...Script) *scriptsRun {
	t.Helper()
	r := &scriptsRun{syncs: make(chan error, 64), errc: make(chan error, 1), calls: make(chan string, 8)}
	r.s = NewScripts(c, ScriptsOptions{Enabled: enabled, StateFile: stateFile},
		func(_ context.Context, user, tool string, args json.RawMessage) (any, error) {
			r.calls <- user + " " + tool + " " + string(args)
			if tool == "scale_workers" {
				return nil, errors.New("refused: count 9 is out of range 0..3")
			}
			return map[string]any{"phase": "running"}, nil
		}, nil)
	r.s.onSync = func(err error) { r.syncs <- err }
	r.s.SetScripts(want)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.errc <- r.s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.errc
		r.errc <- nil
	})
	return r
}

func (r *scriptsRun) waitSync(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.syncs:
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
	case err := <-r.errc:
		r.errc <- err
		t.Fatalf("Run returned early: %v", err)
	case <-waitCtx(t).Done():
		t.Fatal("no sync")
	}
}

func (r *scriptsRun) shutdown() {
	r.stop()
	<-r.errc
	r.errc <- nil
}

func posts(fake *fakeha.Server) []string {
	var out []string
	for _, r := range fake.ScriptRequests() {
		if r.Method != "GET" {
			out = append(out, r.Method+" "+r.Key)
		}
	}
	return out
}

// TestScriptsLifecycle is the script path: created and exposed,
// the user's scripts untouched (one with a similar name, one at an id of
// ours), idempotent across restarts, a tool call answered, removed exactly
// when no longer wanted and when the option goes off.
func TestScriptsLifecycle(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	fake.SetScript("rezuscloud_cluster_status_mine", userScript) // a similar name
	fake.SetScript("rezuscloud_backup_etcd", userScript)         // the user's, at an id rezuscloud would use
	fake.SetExposed("script.rezuscloud_cluster_status_mine", AssistAssistant, false)
	state := filepath.Join(t.TempDir(), "assist_scripts.json")
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	want := []Script{testScript("rezuscloud_cluster_status", "Cluster status"),
		testScript("rezuscloud_scale_workers", "Scale workers"), testScript("rezuscloud_backup_etcd", "Back up etcd")}

	r := startScripts(t, c.Client, true, state, want...)
	for _, id := range []string{"rezuscloud_cluster_status", "rezuscloud_scale_workers"} {
		testenv.WaitFor(t, 5*time.Second, id+" created and exposed", func() bool {
			return fake.Exposed("script."+id, AssistAssistant)
		})
		cfg, _ := fake.Script(id)
		if !marked(cfg, id) || cfg["alias"] == nil {
			t.Errorf("%s: %v", id, cfg)
		}
	}
	if cfg, _ := fake.Script("rezuscloud_backup_etcd"); !reflect.DeepEqual(cfg, normalized(userScript)) {
		t.Errorf("the user's script at our id was changed: %v", cfg)
	}
	if cfg, _ := fake.Script("rezuscloud_cluster_status_mine"); !reflect.DeepEqual(cfg, normalized(userScript)) {
		t.Errorf("the user's similar script was changed: %v", cfg)
	}
	if fake.Exposed("script.rezuscloud_backup_etcd", AssistAssistant) || fake.Exposed("script.rezuscloud_cluster_status_mine", AssistAssistant) {
		t.Error("a user's script was exposed")
	}
	if got := posts(fake); !slices.Equal(got, []string{"POST rezuscloud_cluster_status", "POST rezuscloud_scale_workers"}) {
		t.Errorf("writes: %v", got)
	}

	// a tool call as the script fires it, in a user's conversation
	ev, cancel := fake.Listen(EventToolResult, 4)
	defer cancel()
	if err := fake.FireAs("user-1", EventToolCall, map[string]any{"tool": "cluster_status",
		"arguments": map[string]any{"cluster": "lab"}, "transaction": "01CTX"}); err != nil {
		t.Fatal(err)
	}
	if got := <-r.calls; got != `user-1 cluster_status {"cluster":"lab"}` {
		t.Errorf("handler got %q", got)
	}
	res := waitEvent(t, ev)
	if d := decode(t, res.Data); d["transaction"] != "01CTX" || d["status"] != "ok" || d["data"].(map[string]any)["phase"] != "running" {
		t.Errorf("result: %s", res.Data)
	}
	_ = fake.Fire(EventToolCall, map[string]any{"tool": "scale_workers", "arguments": map[string]any{"count": 9}, "transaction": "02CTX"})
	<-r.calls
	if d := decode(t, waitEvent(t, ev).Data); d["status"] != "error" || !strings.Contains(d["error"].(string), "out of range") ||
		d["transaction"] != "02CTX" {
		t.Errorf("refusal: %v", d)
	}

	// a restart with the same scripts writes nothing
	r.shutdown()
	before, exposes := len(posts(fake)), len(fake.Commands("homeassistant/expose_entity"))
	r = startScripts(t, c.Client, true, state, want...)
	r.waitSync(t)
	if len(posts(fake)) != before || len(fake.Commands("homeassistant/expose_entity")) != exposes {
		t.Errorf("restart wrote again: %v", posts(fake)[before:])
	}

	// one script no longer wanted (writes turned off): exactly it goes
	r.s.SetScripts(want[:1])
	testenv.WaitFor(t, 5*time.Second, "scale script removed", func() bool {
		_, ok := fake.Script("rezuscloud_scale_workers")
		return !ok
	})
	if _, ok := fake.Entity("script.rezuscloud_scale_workers"); ok {
		t.Error("the removed script's entity stayed")
	}

	// the option off after a restart: every script of rezuscloud's goes, the user's stay
	r.shutdown()
	r = startScripts(t, c.Client, false, state)
	select {
	case err := <-r.errc:
		r.errc <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-waitCtx(t).Done():
		t.Fatal("Run did not return with the option off")
	}
	if got := fake.ScriptKeys(); !slices.Equal(got, []string{"rezuscloud_backup_etcd", "rezuscloud_cluster_status_mine"}) {
		t.Errorf("scripts left: %v", got)
	}
	st, err := loadScriptsState(state)
	if err != nil || len(st.Scripts) != 0 {
		t.Errorf("state after off: %+v %v", st, err)
	}
	if got := posts(fake)[before:]; !slices.Equal(got, []string{"DELETE rezuscloud_scale_workers", "DELETE rezuscloud_cluster_status"}) {
		t.Errorf("deletes: %v", got)
	}
}

// TestScriptsRespectTheUser: a script the user took over (marker removed)
// is neither rewritten nor removed; an exposure the user withdrew is not
// forced back.
func TestScriptsRespectTheUser(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	state := filepath.Join(t.TempDir(), "s.json")
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	a, b := testScript("rezuscloud_a", "A"), testScript("rezuscloud_b", "B")
	r := startScripts(t, c.Client, true, state, a, b)
	testenv.WaitFor(t, 5*time.Second, "exposed", func() bool {
		return fake.Exposed("script.rezuscloud_a", AssistAssistant) && fake.Exposed("script.rezuscloud_b", AssistAssistant)
	})
	fake.SetScript("rezuscloud_a", userScript) // taken over
	fake.SetExposed("script.rezuscloud_b", AssistAssistant, false)
	r.s.SetScripts([]Script{a, b, testScript("rezuscloud_c", "C")})
	testenv.WaitFor(t, 5*time.Second, "c exposed", func() bool { return fake.Exposed("script.rezuscloud_c", AssistAssistant) })
	r.waitSync(t)
	if fake.Exposed("script.rezuscloud_b", AssistAssistant) {
		t.Error("the user's withdrawal of b was undone")
	}
	if cfg, _ := fake.Script("rezuscloud_a"); !reflect.DeepEqual(cfg, normalized(userScript)) {
		t.Errorf("the taken-over script was rewritten: %v", cfg)
	}
	r.shutdown()
	r = startScripts(t, c.Client, false, state)
	<-r.errc
	r.errc <- nil
	if got := fake.ScriptKeys(); !slices.Equal(got, []string{"rezuscloud_a"}) {
		t.Errorf("left: %v", got)
	}
}

// TestScriptsPendingWrite: a write recorded as pending whose POST never
// happened is found out from Home Assistant (nothing to delete).
func TestScriptsPendingWrite(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	state := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(state, []byte(`{"version":1,"scripts":{"rezuscloud_a":{"pending":true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	r := startScripts(t, c.Client, false, state)
	<-r.errc
	r.errc <- nil
	if got := posts(fake); len(got) != 0 {
		t.Errorf("wrote %v", got)
	}
	if err := os.WriteFile(state, []byte(`{"version":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadScriptsState(state); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("newer state file: %v", err)
	}
}

// TestScriptAPI: the REST config API as the fake serves it: the base URL
// from the WebSocket URL, HA's validation and auth errors.
func TestScriptAPI(t *testing.T) {
	for in, want := range map[string]string{
		"ws://supervisor/core/websocket":          "http://supervisor/core/api/",
		"ws://127.0.0.1:8123/api/websocket":       "http://127.0.0.1:8123/api/",
		"wss://ha.example:8443/api/websocket?x=1": "https://ha.example:8443/api/",
		"ws://127.0.0.1:8123/":                    "http://127.0.0.1:8123/api/",
	} {
		if got, err := restBase(in); err != nil || got != want {
			t.Errorf("restBase(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	fake := fakeha.New(testToken)
	defer fake.Close()
	ctx := waitCtx(t)
	api := New(testOptions(fake.URL, testToken), nil).ScriptAPI()
	if _, err := api.Get(ctx, "rezuscloud_a"); !errors.Is(err, ErrScriptNotFound) {
		t.Errorf("get absent: %v", err)
	}
	if err := api.Delete(ctx, "rezuscloud_a"); !errors.Is(err, ErrScriptNotFound) {
		t.Errorf("delete absent: %v", err)
	}
	bad := testScript("rezuscloud_a", "A").Config
	bad["fields"] = map[string]any{"x": map[string]any{"selector": map[string]any{"spinner": map[string]any{}}}}
	if err := api.Put(ctx, "rezuscloud_a", bad); err == nil || !strings.Contains(err.Error(), "Unknown selector type spinner") {
		t.Errorf("bad selector: %v", err)
	}
	if err := api.Put(ctx, "turn_on", testScript("turn_on", "x").Config); err == nil || !strings.Contains(err.Error(), "must not be one of") {
		t.Errorf("reserved id: %v", err)
	}
	if err := api.Put(ctx, "Bad-Id", testScript("x", "x").Config); err == nil || !strings.Contains(err.Error(), "not a valid object id") {
		t.Errorf("bad id: %v", err)
	}
	wrong := New(testOptions(fake.URL, "wrong-token"), nil).ScriptAPI()
	if _, err := wrong.Get(ctx, "rezuscloud_a"); err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("wrong token: %v", err)
	}
}

func waitEvent(t *testing.T, ch <-chan fakeha.Event) fakeha.Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-waitCtx(t).Done():
		t.Fatal("no event")
		return fakeha.Event{}
	}
}

func normalized(m map[string]any) map[string]any {
	raw, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}
