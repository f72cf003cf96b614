package hass

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func TestRequestRoundTrip(t *testing.T) {
	m := broker(t)
	cmd := newFakeCmd()
	startBridge(t, fastOptions(m.URL), cmd, []*tenant.Tenant{labTenant(), cloudTenant("prod", 2)})
	obs := newObserver(t, m.URL, "rezuscloud/bridge/response/#")

	type resp struct {
		Status      string          `json:"status"`
		Data        json.RawMessage `json:"data"`
		Error       string          `json:"error"`
		Transaction json.RawMessage `json:"transaction"`
	}
	n := 0
	ask := func(action, payload string) resp {
		t.Helper()
		n++
		topic := "rezuscloud/bridge/response/" + action
		before := obs.count(topic)
		publish(t, m.URL, "rezuscloud/bridge/request/"+action, []byte(payload), false)
		testenv.WaitFor(t, 5*time.Second, "response on "+topic, func() bool { return obs.count(topic) > before })
		mm, _ := obs.get(topic)
		if mm.retained {
			t.Errorf("response retained")
		}
		var r resp
		if err := json.Unmarshal(mm.payload, &r); err != nil {
			t.Fatalf("response %q: %v", mm.payload, err)
		}
		return r
	}

	ok := []struct{ action, payload, call string }{
		{"apply", `{"tenant":"lab","transaction":"t-1"}`, "apply lab"},
		{"plan", `{"tenant":"prod"}`, "plan prod"},
		{"cancel", `{"tenant":"lab"}`, "cancel lab"},
		{"bootstrap", `{"tenant":"lab"}`, "bootstrap lab"},
		{"destroy", `{"tenant":"prod","confirm":"prod"}`, "destroy prod prod"},
		{"scale", `{"tenant":"lab","group":"workers","count":3,"transaction":{"id":5}}`, "scale lab workers 3"},
		{"scale", `{"tenant":"prod","group":"cp","count":3}`, "scale prod cp 3"},
		{"reboot", `{"tenant":"lab","node":"lab-workers-2"}`, "reboot lab lab-workers-2"},
		{"reload", ``, "reload"},
		{"reload", `{"transaction":42}`, "reload"},
		{"auto_apply", `{"tenant":"lab","enabled":true}`, "auto_apply lab true"},
		{"log_level", `{"level":"debug"}`, "log_level debug"},
	}
	for _, c := range ok {
		r := ask(c.action, c.payload)
		if r.Status != "ok" || r.Error != "" {
			t.Errorf("%s %s: %+v", c.action, c.payload, r)
			continue
		}
		cmd.waitCall(t, c.call)
		// the data is the action table's, a contract (docs/reference.md)
		want := map[string]string{"apply": `{"queued":true}`, "plan": `{"queued":true}`, "bootstrap": `{"queued":true}`,
			"destroy": `{"queued":true}`, "reboot": `{"queued":true}`, "cancel": `{"done":true}`, "scale": `{"done":true}`,
			"reload": `{"done":true}`, "auto_apply": `{"done":true}`, "log_level": `{"log_level":"debug"}`}[c.action]
		if string(r.Data) != want {
			t.Errorf("%s: data %s, want %s", c.action, r.Data, want)
		}
		var req map[string]json.RawMessage
		_ = json.Unmarshal([]byte(c.payload), &req)
		if tr, has := req["transaction"]; has && string(r.Transaction) != string(tr) {
			t.Errorf("%s: transaction %s, want %s", c.action, r.Transaction, tr)
		} else if !has && r.Transaction != nil {
			t.Errorf("%s: transaction %s without one in the request", c.action, r.Transaction)
		}
	}

	big := `{"tenant":"lab","transaction":"` + strings.Repeat("x", MaxPayload) + `"}`
	bad := []struct{ action, payload, want string }{
		{"apply", `{"tenant":"lab"`, "malformed JSON"},
		{"apply", `[1,2]`, "JSON object"},
		{"apply", `"lab"`, "JSON object"},
		{"apply", `null`, "JSON object"},
		{"apply", `{"tenant":"lab"} {}`, "malformed JSON"},
		{"explode", `{"tenant":"lab","transaction":1}`, "unknown action"},
		{"apply", `{"tenant":"Lab!"}`, "not a valid tenant name"},
		{"apply", `{}`, `needs field "tenant"`},
		{"apply", `{"tenant":"lab","tenantx":1}`, "unknown field"},
		{"apply", `{"tenant":"lab","count":1}`, "does not apply"},
		{"scale", `{"tenant":"lab","group":"workers","count":-1}`, "out of range"},
		{"scale", `{"tenant":"lab","group":"workers","count":2e6,"transaction":2}`, "out of range"},
		{"reboot", `{"tenant":"lab","node":"Lab_1"}`, "not a valid node name"},
		{"adopt", `{"mac":"nope","tenant":"lab","group":"workers"}`, "not a MAC address"},
		{"power", `{"tenant":"lab","node":"lab-workers-1","state":"up"}`, "on"},
		{"scale", `{"tenant":"lab","group":"workers","count":1.5}`, "whole number"},
		{"scale", `{"tenant":"lab","group":"workers","count":"many"}`, "not a number"},
		{"scale", `{"tenant":"lab","group":"workers"}`, `needs field "count"`},
		{"destroy", `{"tenant":"lab","confirm":""}`, "confirm"},
		{"destroy", `{"tenant":"lab"}`, `needs field "confirm"`},
		{"log_level", `{"level":"loud"}`, "not one of"},
		{"auto_apply", `{"tenant":"lab","enabled":"yes"}`, "bad request"},
		{"apply", big, "limit"},
		{"apply", "{\"tenant\":\"lab\xff\"}", "UTF-8"},
	}
	for _, c := range bad {
		r := ask(c.action, c.payload)
		if r.Status != "error" || !strings.Contains(r.Error, c.want) {
			t.Errorf("%s %.60s: got %+v, want error containing %q", c.action, c.payload, r, c.want)
		}
		if string(r.Data) != "{}" {
			t.Errorf("error data %s", r.Data)
		}
		var req map[string]json.RawMessage
		if json.Unmarshal([]byte(c.payload), &req) == nil && len(c.payload) < MaxPayload {
			if tr, has := req["transaction"]; has && string(r.Transaction) != string(tr) {
				t.Errorf("%s: transaction %s not echoed (want %s)", c.action, r.Transaction, tr)
			}
		}
	}
	cmd.noCall(t, 200*time.Millisecond)

	// Commander errors come back as error responses.
	cmd.mu.Lock()
	cmd.fail = errTest
	cmd.mu.Unlock()
	r := ask("apply", `{"tenant":"lab","transaction":9}`)
	if r.Status != "error" || r.Error != errTest.Error() || string(r.Transaction) != "9" {
		t.Errorf("commander error: %+v", r)
	}
}

type testErr string

func (e testErr) Error() string { return string(e) }

const errTest = testErr("engine busy")

func TestEntityCommands(t *testing.T) {
	m := broker(t)
	cmd := newFakeCmd()
	px := newProxy(t, m.URL)
	// Warnings are also recorded, to see the bridge ignore a retained press.
	warnCore, warnings := zapobserver.New(zap.WarnLevel)
	b := startBridge(t, fastOptions(px.URL()), cmd, []*tenant.Tenant{labTenant()}, func(b *Bridge) {
		b.log = b.log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, warnCore) }))
	})
	cmd.mu.Lock()
	cmd.bridge = b
	cmd.mu.Unlock()
	obs := newObserver(t, m.URL, "rezuscloud/#")
	press := func(topic, payload string) { publish(t, m.URL, topic, []byte(payload), false) }

	press("rezuscloud/lab/apply", "PRESS")
	cmd.waitCall(t, "apply lab")
	press("rezuscloud/lab/plan", "PRESS")
	cmd.waitCall(t, "plan lab")
	press("rezuscloud/lab/cancel", "PRESS")
	cmd.waitCall(t, "cancel lab")
	press("rezuscloud/lab/lab-workers-1/reboot", "PRESS")
	cmd.waitCall(t, "reboot lab lab-workers-1")
	press("rezuscloud/bridge/reload", "PRESS")
	cmd.waitCall(t, "reload")
	press("rezuscloud/lab/workers/count/set", "3.0")
	cmd.waitCall(t, "scale lab workers 3")
	press("rezuscloud/lab/auto_apply/set", "ON")
	cmd.waitCall(t, "auto_apply lab true")
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return bytes.Contains(p, []byte(`"auto_apply":true`)) })
	press("rezuscloud/bridge/log_level/set", "debug")
	cmd.waitCall(t, "log_level debug")
	obs.waitPayload(t, "rezuscloud/bridge/state", 5*time.Second, func(p []byte) bool { return bytes.Contains(p, []byte(`"log_level":"debug"`)) })

	// A count's bounds are the engine's check (engine.TestCommandsCheckInput):
	// a syntactically valid count reaches it.
	press("rezuscloud/lab/workers/count/set", "200")
	cmd.waitCall(t, "scale lab workers 200")

	// Bad syntax: a warning, nothing called.
	for _, c := range [][2]string{
		{"rezuscloud/lab/destroy", "PRESS"}, // not armed
		{"rezuscloud/lab/apply", "press"},
		{"rezuscloud/lab/apply", "PRESS\xff"},
		{"rezuscloud/lab/workers/count/set", "2.5"},
		{"rezuscloud/lab/workers/count/set", "abc"},
		{"rezuscloud/lab/gpu/count/set", "1"},
		{"rezuscloud/nope/apply", "PRESS"},
		{"rezuscloud/lab/lab-workers-7/reboot", "PRESS"},
		{"rezuscloud/lab/auto_apply/set", "maybe"},
		{"rezuscloud/bridge/log_level/set", "loud"},
		{"rezuscloud/lab/apply", strings.Repeat("P", MaxPayload+1)},
	} {
		press(c[0], c[1])
	}
	cmd.noCall(t, 500*time.Millisecond)

	// A retained press acts once when it is sent, but not again when the
	// broker replays it after a reconnect (it would fire at every start).
	publish(t, m.URL, "rezuscloud/lab/plan", []byte("PRESS"), true)
	cmd.waitCall(t, "plan lab")
	mk := obs.mark()
	px.cut()
	obs.waitSequence(t, "rezuscloud/bridge/availability", mk, 5*time.Second, "offline", "online")
	// Subscriptions are made after online: wait until the broker has replayed
	// the retained press to the bridge and the bridge has ignored it.
	testenv.WaitFor(t, 5*time.Second, "retained press replayed and ignored", func() bool {
		return warnings.FilterMessage("ignoring retained message on a command topic").
			FilterField(zap.String("topic", "rezuscloud/lab/plan")).Len() > 0
	})
	cmd.noCall(t, 500*time.Millisecond)
	publish(t, m.URL, "rezuscloud/lab/plan", nil, true)

	// Arm, then destroy acts once; the switch is off again afterwards.
	press("rezuscloud/lab/destroy_armed/set", "ON")
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return bytes.Contains(p, []byte(`"destroy_armed":true`)) })
	press("rezuscloud/lab/destroy", "PRESS")
	cmd.waitCall(t, "destroy lab lab")
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return bytes.Contains(p, []byte(`"destroy_armed":false`)) })
	press("rezuscloud/lab/destroy", "PRESS")
	cmd.noCall(t, 300*time.Millisecond)

	// Arm, wait out the timeout: disarmed by itself, destroy refused.
	press("rezuscloud/lab/destroy_armed/set", "ON")
	testenv.WaitFor(t, 5*time.Second, "armed", func() bool { return b.Armed("lab") })
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return bytes.Contains(p, []byte(`"destroy_armed":true`)) })
	armedAt := time.Now()
	obs.waitPayload(t, "rezuscloud/lab/state", 5*time.Second, func(p []byte) bool { return bytes.Contains(p, []byte(`"destroy_armed":false`)) })
	if b.Armed("lab") {
		t.Fatal("still armed after the timeout")
	}
	if d := time.Since(armedAt); d < 200*time.Millisecond {
		t.Errorf("disarmed after %v, before the 400 ms timeout", d)
	}
	press("rezuscloud/lab/destroy", "PRESS")
	cmd.noCall(t, 300*time.Millisecond)

	// Arm and disarm by hand.
	press("rezuscloud/lab/destroy_armed/set", "ON")
	testenv.WaitFor(t, 5*time.Second, "armed", func() bool { return b.Armed("lab") })
	press("rezuscloud/lab/destroy_armed/set", "OFF")
	testenv.WaitFor(t, 5*time.Second, "disarmed", func() bool { return !b.Armed("lab") })

	// Republish button: every discovery message goes out again.
	disc := newObserver(t, m.URL, "homeassistant/device/#")
	disc.sync(t) // the retained copies have arrived
	before := disc.count("homeassistant/device/rezuscloud_lab/config")
	press("rezuscloud/bridge/republish", "PRESS")
	testenv.WaitFor(t, 5*time.Second, "republish", func() bool { return disc.count("homeassistant/device/rezuscloud_lab/config") > before })
}

func TestHandleRequestDirect(t *testing.T) {
	cmd := newFakeCmd()
	b := New(Options{URL: "tcp://127.0.0.1:1"}, cmd, nil)
	b.SetTenants(views(labTenant()))
	ctx := context.Background()
	r := b.HandleRaw(ctx, "scale", []byte(`{"tenant":"lab","group":"workers","count":1,"transaction":[1,"a"]}`))
	if !r.OK() || string(r.Transaction) != `[1,"a"]` {
		t.Fatalf("%+v", r)
	}
	p, _ := json.Marshal(r)
	if !strings.Contains(string(p), `"status":"ok"`) || strings.Contains(string(p), `"error"`) {
		t.Errorf("ok response JSON %s", p)
	}
	// The data of the actions that answer with data of their own is built
	// here from the engine's typed result (docs/reference.md).
	for _, c := range []struct{ action, payload, want string }{
		{"discover", `{}`, `{"machines":[{"address":"127.0.0.9","certificate_fingerprint":"","cores":0,"cpu":"","disks":null,"mac":"02:00:00:00:00:09","memory_bytes":0,"model":""}]}`},
		{"adopt", `{"mac":"02:00:00:00:00:09","tenant":"lab","group":"workers"}`, `{"address":"127.0.0.9","adopted":"02:00:00:00:00:09","group":"workers","install_disk":"/dev/sda","tenant":"lab"}`},
		{"upgrade", `{"tenant":"lab","component":"talos"}`, `{"queued":true}`},
		{"power", `{"tenant":"lab","node":"lab-workers-1","state":"off"}`, `{"queued":true}`},
		{"backup", `{"tenant":"lab"}`, `{"queued":true}`},
	} {
		r := b.HandleRaw(ctx, c.action, []byte(c.payload))
		if p, _ := json.Marshal(r.Data); !r.OK() || string(p) != c.want {
			t.Errorf("%s: %+v, data %s, want %s", c.action, r, p, c.want)
		}
	}
	// Built by hand without a count: an error, not a panic.
	if r := b.HandleRequest(ctx, Request{Action: ActionScale, Tenant: "lab", Group: "workers"}); r.OK() {
		t.Error("scale without count accepted")
	}
	if r := b.HandleRequest(ctx, Request{Action: "nope"}); r.OK() {
		t.Error("unknown action accepted")
	}
	p, _ = json.Marshal(ErrorResponse(Request{}, errTest))
	if string(p) != `{"status":"error","data":{},"error":"engine busy"}` {
		t.Errorf("error response JSON %s", p)
	}
}

func FuzzRequest(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"tenant":"lab"}`, `{"tenant":"lab","group":"workers","count":3,"transaction":1}`,
		`{"tenant":"lab","confirm":"lab"}`, `{"count":"3.0"}`, `[`, `{"transaction":{"a":[1,2,{"b":null}]}}`,
		`{"tenant":"lab","node":"lab-workers-1"}`, `{"level":"debug"}`, `{"enabled":true,"tenant":"x"}`, "\xff"} {
		for _, a := range []string{"apply", "scale", "destroy", "reboot", "log_level", "auto_apply", "reload", "x"} {
			f.Add(a, []byte(s))
		}
	}
	cmd := newFakeCmd()
	b := New(Options{URL: "tcp://127.0.0.1:1"}, cmd, nil)
	b.SetTenants(views(labTenant()))
	f.Fuzz(func(t *testing.T, action string, payload []byte) {
		req, err := decodeRequest(action, payload)
		if err != nil {
			r := ErrorResponse(req, err)
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("error response not encodable: %v", err)
			}
			return
		}
		if _, ok := actions[req.Action]; !ok {
			t.Fatalf("accepted unknown action %q", action)
		}
		before := len(cmd.Calls())
		r := b.HandleRequest(context.Background(), req)
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("response not encodable: %v", err)
		}
		// a decoded request is syntactically valid: it reaches the engine,
		// which checks what it means
		if !r.OK() || len(cmd.Calls()) != before+1 {
			t.Fatalf("decoded request %+v not passed to the engine: %+v", req, r)
		}
	})
}
