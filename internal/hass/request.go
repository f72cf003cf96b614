package hass

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rezuscloud/rezuscloud/internal/command"
	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/machine"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// MaxPayload is the largest command or request payload accepted (64 KiB).
const MaxPayload = 64 << 10

// Request actions (docs/design.md §4, §10.2–§10.5, §11.2, §11.7, contract;
// auto_apply and log_level are additions that mirror the switch and the
// select).
const (
	ActionApply     = "apply"
	ActionPlan      = "plan"
	ActionCancel    = "cancel"
	ActionDestroy   = "destroy"
	ActionScale     = "scale"
	ActionBootstrap = "bootstrap"
	ActionReboot    = "reboot"
	ActionReload    = "reload"
	ActionAutoApply = "auto_apply"
	ActionLogLevel  = "log_level"
	ActionUpgrade   = "upgrade"
	ActionBackup    = "backup"
	ActionDiscover  = "discover" // machine.go
	ActionAdopt     = "adopt"
	ActionPower     = "power"
	ActionForget    = "forget"  // a dead machine, out of the record and the file (docs/design.md §11.7)
	ActionReplace   = "replace" // a dead machine's place, to a discovered one
	// ActionPool is in pool.go.
)

// field bits: which request fields an action takes.
const (
	fTenant = 1 << iota
	fGroup
	fCount
	fNode
	fConfirm
	fEnabled
	fLevel
	fComponent
	fVersion
	fMAC
	fDisk // install_disk
	fState
	fMode // pool.go: mode, min, max
	fMin
	fMax
)

// action is one row of the action table: the fields a request of the
// action takes (syntax checked here, in hass, once), and the Commander call
// it makes. Every transport (MQTT requests, entity commands, WebSocket
// events) goes through this table; the meaning of the values (tenant, group
// and node exist, count within bounds, destroy confirmed) is checked once,
// by the engine, whose error text is shown to the user.
type action struct {
	fields   int // the fields the action takes
	optional int // of those, the ones it may leave out
	// call runs the action; its result is the response's data.
	call func(ctx context.Context, c Commander, r Request) (any, error)
	// after, when set, reflects an accepted request in the bridge at once.
	after func(b *Bridge, r Request)
}

// Response data of the commands that answer with no data of their own
// (docs/reference.md, contract).
var (
	dataQueued = map[string]any{"queued": true}
	dataDone   = map[string]any{"done": true}
)

// queued answers {"queued":true}: the command queued an operation.
func queued(f func(context.Context, Commander, Request) error) func(context.Context, Commander, Request) (any, error) {
	return func(ctx context.Context, c Commander, r Request) (any, error) {
		if err := f(ctx, c, r); err != nil {
			return nil, err
		}
		return dataQueued, nil
	}
}

// done answers {"done":true}: the command finished at once.
func done(f func(context.Context, Commander, Request) error) func(context.Context, Commander, Request) (any, error) {
	return func(ctx context.Context, c Commander, r Request) (any, error) {
		if err := f(ctx, c, r); err != nil {
			return nil, err
		}
		return dataDone, nil
	}
}

// actions is the action table (docs/design.md §4 and the later sections
// that add actions).
var actions = map[string]action{
	ActionApply: {fields: fTenant, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Apply(ctx, r.Tenant)
	})},
	ActionPlan: {fields: fTenant, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Plan(ctx, r.Tenant)
	})},
	ActionCancel: {fields: fTenant, call: done(func(ctx context.Context, c Commander, r Request) error {
		return c.Cancel(ctx, r.Tenant)
	})},
	ActionDestroy: {fields: fTenant | fConfirm, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Destroy(ctx, r.Tenant, r.Confirm)
	}), after: func(b *Bridge, r Request) { b.disarm(r.Tenant) }},
	ActionScale: {fields: fTenant | fGroup | fCount, call: done(func(ctx context.Context, c Commander, r Request) error {
		return c.Scale(ctx, r.Tenant, r.Group, *r.Count)
	})},
	ActionBootstrap: {fields: fTenant, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Bootstrap(ctx, r.Tenant)
	})},
	ActionReboot: {fields: fTenant | fNode, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Reboot(ctx, r.Tenant, r.Node)
	})},
	ActionReload: {call: done(func(ctx context.Context, c Commander, _ Request) error {
		return c.Reload(ctx)
	})},
	ActionAutoApply: {fields: fTenant | fEnabled, call: done(func(ctx context.Context, c Commander, r Request) error {
		return c.SetAutoApply(ctx, r.Tenant, *r.Enabled) // the engine shows the changed file at once
	})},
	ActionLogLevel: {fields: fLevel, call: func(_ context.Context, c Commander, r Request) (any, error) {
		if err := c.SetLogLevel(r.Level); err != nil {
			return nil, err
		}
		return map[string]string{"log_level": r.Level}, nil
	}, after: (*Bridge).reflectLogLevel},
	ActionUpgrade: {fields: fTenant | fComponent | fVersion, optional: fVersion,
		call: queued(func(ctx context.Context, c Commander, r Request) error {
			return c.Upgrade(ctx, r.Tenant, r.Component, r.Version)
		})},
	ActionBackup: {fields: fTenant, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Backup(ctx, r.Tenant)
	})},
	ActionDiscover: {call: func(ctx context.Context, c Commander, _ Request) (any, error) {
		ms, err := c.Discover(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]any{"machines": machinesData(ms)}, nil // machine.go
	}},
	ActionAdopt: {fields: fMAC | fTenant | fGroup | fDisk, optional: fDisk,
		call: func(ctx context.Context, c Commander, r Request) (any, error) {
			m, err := c.Adopt(ctx, r.MAC, r.Tenant, r.Group, r.InstallDisk)
			if err != nil {
				return nil, err
			}
			return map[string]any{"adopted": m.MAC, "address": m.Address, "tenant": r.Tenant, "group": r.Group,
				"install_disk": m.InstallDisk}, nil
		}},
	ActionPower: {fields: fTenant | fNode | fState, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Power(ctx, r.Tenant, r.Node, r.State)
	})},
	ActionForget: {fields: fTenant | fNode | fConfirm, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Forget(ctx, r.Tenant, r.Node, r.Confirm == "true")
	})},
	ActionReplace: {fields: fTenant | fNode | fMAC, call: queued(func(ctx context.Context, c Commander, r Request) error {
		return c.Replace(ctx, r.Tenant, r.Node, r.MAC)
	})},
	ActionPool: {fields: fTenant | fGroup | fMode | fMin | fMax, optional: fMode | fMin | fMax, call: callPool},
}

// Actions lists the request actions, sorted.
func Actions() []string {
	out := make([]string, 0, len(actions))
	for a := range actions {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Commander is what the bridge needs from the engine. The bridge checks a
// request's syntax only; the engine checks what the values mean (tenant,
// group and node exist, count within bounds, destroy confirmed) and may
// refuse for its own reasons: the error text is shown to the user. The
// response's data is the action table's, not the engine's.
type Commander interface {
	Apply(ctx context.Context, tenant string) error
	Plan(ctx context.Context, tenant string) error
	Cancel(ctx context.Context, tenant string) error
	Destroy(ctx context.Context, tenant, confirm string) error
	Scale(ctx context.Context, tenant, group string, count int) error
	Bootstrap(ctx context.Context, tenant string) error
	Reboot(ctx context.Context, tenant, node string) error
	SetAutoApply(ctx context.Context, tenant string, enabled bool) error
	Reload(ctx context.Context) error
	SetLogLevel(level string) error
	// Upgrade rolls a tenant to a Talos or Kubernetes version ("" = the
	// file's); Backup takes an etcd snapshot.
	Upgrade(ctx context.Context, tenant, component, version string) error
	Backup(ctx context.Context, tenant string) error
	// Discover scans for machines now and returns the ones no tenant
	// declares; Adopt adds one to a metal group and returns it as declared;
	// Power switches a metal node "on" or "off" (machine.go).
	Discover(ctx context.Context) ([]machine.Machine, error)
	Adopt(ctx context.Context, mac, tenant, group, installDisk string) (tenant.Machine, error)
	Power(ctx context.Context, tenant, node, state string) error
	// Forget removes a dead metal machine from the record and the file
	// without touching it (confirm must be true); Replace puts a machine a
	// scan found in a dead node's place.
	Forget(ctx context.Context, tenant, node string, confirm bool) error
	Replace(ctx context.Context, tenant, node, mac string) error
	// Pool writes a pooled group's mode, min and max (nil: unchanged) into
	// its [node_groups.pool] table in place, refusing what the file would
	// not validate (pool.go).
	Pool(ctx context.Context, tenant, group string, mode *string, min, max *int) error
}

// Request is a decoded, syntactically valid request (package command:
// every transport shares it).
type Request = command.Request

// Response is the answer to a request.
type Response = command.Response

// ErrorResponse is the error answer to req (whose Transaction is echoed).
func ErrorResponse(req Request, err error) Response { return command.Error(req.Transaction, err) }

func okResponse(req Request, data any) Response {
	if data == nil {
		data = struct{}{}
	}
	return Response{Status: "ok", Data: data, Transaction: req.Transaction}
}

var (
	errNull = errors.New("null")
)

// decodeRequest decodes and checks the payload of request action. It checks
// everything that does not depend on the current tenants: size, UTF-8, JSON
// object shape, known action, known and applicable fields, required fields,
// field syntax. An empty payload is an empty object. Even on error, the
// returned Request carries the transaction when one could be read, so that
// the error response can echo it.
func decodeRequest(action string, payload []byte) (Request, error) {
	req := Request{Action: action}
	if len(payload) > MaxPayload {
		return req, fmt.Errorf("payload is %d bytes, more than the limit of %d", len(payload), MaxPayload)
	}
	if !utf8.Valid(payload) {
		return req, errors.New("payload is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	// Best effort: find the transaction first so errors can echo it.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		if bytes.HasPrefix(trimmed, []byte("{")) {
			return req, fmt.Errorf("malformed JSON: %v", err)
		}
		return req, errors.New("payload must be a JSON object")
	}
	if raw == nil {
		return req, errors.New("payload must be a JSON object")
	}
	if tr, ok := raw["transaction"]; ok && len(tr) > 0 && !bytes.Equal(tr, []byte("null")) {
		req.Transaction = append(json.RawMessage(nil), tr...)
	}
	a, ok := actions[action]
	if !ok {
		return req, fmt.Errorf("unknown action %q (known: %s)", action, strings.Join(Actions(), ", "))
	}
	fields := a.fields
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	var body struct {
		Tenant      *string         `json:"tenant"`
		Group       *string         `json:"group"`
		Count       json.RawMessage `json:"count"`
		Node        *string         `json:"node"`
		Confirm     json.RawMessage `json:"confirm"`
		Enabled     *bool           `json:"enabled"`
		Level       *string         `json:"level"`
		Component   *string         `json:"component"`
		Version     *string         `json:"version"`
		MAC         *string         `json:"mac"`
		InstallDisk *string         `json:"install_disk"`
		State       *string         `json:"state"`
		Mode        *string         `json:"mode"`
		Min         json.RawMessage `json:"min"`
		Max         json.RawMessage `json:"max"`
		Transaction json.RawMessage `json:"transaction"`
	}
	if err := dec.Decode(&body); err != nil {
		return req, fmt.Errorf("bad request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("bad request: data after the JSON object")
	}
	present := func(bit int, set bool, name string) error {
		switch {
		case set && fields&bit == 0:
			return fmt.Errorf("field %q does not apply to action %q", name, action)
		case !set && fields&bit != 0 && a.optional&bit == 0:
			return fmt.Errorf("action %q needs field %q", action, name)
		}
		return nil
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	for _, c := range []struct {
		bit  int
		set  bool
		name string
	}{
		{fTenant, body.Tenant != nil, "tenant"},
		{fGroup, body.Group != nil, "group"},
		{fCount, len(body.Count) > 0, "count"},
		{fNode, body.Node != nil, "node"},
		{fConfirm, len(body.Confirm) > 0, "confirm"},
		{fEnabled, body.Enabled != nil, "enabled"},
		{fLevel, body.Level != nil, "level"},
		{fComponent, body.Component != nil, "component"},
		{fVersion, body.Version != nil, "version"},
		{fMAC, body.MAC != nil, "mac"},
		{fDisk, body.InstallDisk != nil, "install_disk"},
		{fState, body.State != nil, "state"},
		{fMode, body.Mode != nil, "mode"},
		{fMin, len(body.Min) > 0, "min"},
		{fMax, len(body.Max) > 0, "max"},
	} {
		if err := present(c.bit, c.set, c.name); err != nil {
			return req, err
		}
	}
	req.Tenant, req.Group, req.Node = str(body.Tenant), str(body.Group), str(body.Node)
	if len(body.Confirm) > 0 { // the tenant's name (destroy), or true (forget)
		var b bool
		if err := json.Unmarshal(body.Confirm, &req.Confirm); err != nil {
			if json.Unmarshal(body.Confirm, &b) != nil {
				return req, errors.New("confirm must be a string (the tenant's name) or true")
			}
			req.Confirm = strconv.FormatBool(b)
		}
	}
	req.Level, req.Enabled = str(body.Level), body.Enabled
	req.MAC, req.InstallDisk, req.State = str(body.MAC), str(body.InstallDisk), str(body.State)
	req.Component, req.Version = str(body.Component), str(body.Version)
	if fields&fCount != 0 {
		n, err := parseCount(string(body.Count))
		if err != nil {
			return req, err
		}
		req.Count = &n
	}
	req.Mode = body.Mode
	for _, f := range []struct {
		raw  json.RawMessage
		to   **int
		name string
	}{{body.Min, &req.Min, "min"}, {body.Max, &req.Max, "max"}} {
		if len(f.raw) == 0 {
			continue
		}
		n, err := parseCount(string(f.raw))
		if err != nil {
			return req, fmt.Errorf("%s %s is not a whole number >= 0", f.name, truncate(string(f.raw), 40))
		}
		*f.to = &n
	}
	return req, checkFields(req)
}

// checkFields checks the fields an action needs, whatever built the request.
func checkFields(req Request) error {
	a, ok := actions[req.Action]
	if !ok {
		return fmt.Errorf("unknown action %q (known: %s)", req.Action, strings.Join(Actions(), ", "))
	}
	fields := a.fields
	if fields&fTenant != 0 && !tenant.IsDNSLabel(req.Tenant) {
		return fmt.Errorf("tenant %q is not a valid tenant name", req.Tenant)
	}
	if fields&fGroup != 0 && !tenant.IsDNSLabel(req.Group) {
		return fmt.Errorf("group %q is not a valid group name", req.Group)
	}
	if fields&fNode != 0 && !tenant.IsDNSLabel(req.Node) {
		return fmt.Errorf("node %q is not a valid node name", req.Node)
	}
	if fields&fConfirm != 0 && req.Confirm == "" {
		return errors.New("destroy needs confirm set to the tenant name")
	}
	if fields&fLevel != 0 {
		if _, err := logging.ParseLevel(req.Level); err != nil {
			return fmt.Errorf("level: %w", err)
		}
	}
	if fields&fCount != 0 && (req.Count == nil || *req.Count < 0) {
		return errors.New("count must be a whole number >= 0")
	}
	if fields&fEnabled != 0 && req.Enabled == nil {
		return errors.New("enabled must be true or false")
	}
	if fields&fComponent != 0 {
		if err := checkUpgradeFields(req.Component, req.Version); err != nil {
			return err
		}
	}
	if fields&fMode != 0 {
		if err := checkPoolFields(req); err != nil { // pool.go
			return err
		}
	}
	return checkMachineFields(req, fields) // machine.go
}

// parseCount accepts a JSON number (or a number in a string, as Home
// Assistant's number entity sends "3" or "3.0") that is a whole number.
func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	if s == "null" {
		return 0, fmt.Errorf("count must be a number: %w", errNull)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("count %s is not a number", truncate(s, 40))
	}
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("count %s is not a whole number", truncate(s, 40))
	}
	if f < 0 || f > 1e6 {
		return 0, fmt.Errorf("count %s is out of range", truncate(s, 40))
	}
	return int(f), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
