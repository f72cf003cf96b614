package hass

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// topics derives every topic and id from the base topic and the prefix.
type topics struct {
	base   string
	prefix string
}

func (t topics) availability() string { return t.base + "/bridge/availability" }
func (t topics) event() string        { return t.base + "/bridge/event" }
func (t topics) instance() string     { return t.base + "/bridge/instance" }

// scanMark is where the start-up scan's marker goes (one topic per process).
func (t topics) scanMark(instance string) string { return t.base + "/bridge/scan/" + instance }
func (t topics) birth() string                   { return t.prefix + "/status" }
func (t topics) request(a string) string {
	return t.base + "/bridge/request/" + a
}
func (t topics) response(a string) string {
	return t.base + "/bridge/response/" + a
}

// deviceID is the device identifier (and discovery object id).
func (t topics) deviceID(k kind, r ref) string {
	switch k {
	case kindTenant:
		return t.base + "_" + r.tenant
	case kindNode:
		return t.base + "_" + r.tenant + "_" + nodeSuffix(r.tenant, r.node)
	case kindMachine:
		return t.base + "_machine_" + r.machine
	}
	return t.base + "_bridge"
}

// nodeSuffix strips "<tenant>-" from a node name.
func nodeSuffix(tenantName, node string) string {
	if s, ok := strings.CutPrefix(node, tenantName+"-"); ok && s != "" {
		return s
	}
	return node
}

func (t topics) discovery(k kind, r ref) string {
	return t.prefix + "/device/" + t.deviceID(k, r) + "/config"
}

// root is the topic root of a device's state and commands.
func (t topics) root(k kind, r ref) string {
	switch k {
	case kindTenant:
		return t.base + "/" + r.tenant
	case kindNode:
		return t.base + "/" + r.tenant + "/" + r.node
	case kindMachine:
		return t.base + "/machine/" + r.machine
	}
	return t.base + "/bridge"
}

func (t topics) state(k kind, r ref) string { return t.root(k, r) + "/state" }

// commandTopic: buttons <root>/<key>; numbers <base>/<tenant>/<group>/count/set;
// others <root>/<suffix>.
func (t topics) command(e *entity, r ref) string {
	switch {
	case e.perGroup:
		return t.root(e.kind, r) + "/" + r.group + "/" + e.topicSuffix
	case e.topicSuffix != "":
		return t.root(e.kind, r) + "/" + e.topicSuffix
	}
	return t.root(e.kind, r) + "/" + e.key
}

// rebuildLocked recomputes discovery payloads, state documents, command
// routes and subscription filters from the tenants. Callers hold b.mu.
func (b *Bridge) rebuildLocked() {
	disc := make(map[string][]byte, len(b.discovery))
	states := make(map[string][]byte, len(b.states))
	routes := make(map[string]route, len(b.routes))
	filters := map[string]bool{b.topics.birth(): true, b.topics.request("+"): true, b.topics.instance(): true}

	add := func(k kind, r ref, t *tenant.Tenant, n *tenant.Node) {
		disc[b.topics.discovery(k, r)] = b.discoveryPayload(k, r, t, n)
		states[b.topics.state(k, r)] = b.stateDoc(k, r, t)
		for i := range entities {
			e := &entities[i]
			if e.kind != k || !e.hasCommand() {
				continue
			}
			if e.perGroup {
				for _, g := range t.NodeGroups {
					if !e.forGroup(&g) {
						continue
					}
					rg := r
					rg.group = g.Name
					routes[b.topics.command(e, rg)] = route{e, rg}
				}
				continue
			}
			routes[b.topics.command(e, r)] = route{e, r}
		}
	}
	add(kindBridge, ref{}, nil, nil)
	b.pxeStatesLocked(states)           // pxe.go
	for _, id := range b.machineOrder { // machine.go
		add(kindMachine, ref{machine: id}, nil, nil)
	}
	for _, name := range b.order {
		v := b.views[name]
		r := ref{tenant: name}
		add(kindTenant, r, v.Spec, nil)
		for _, n := range shownNodes(v) {
			n := n
			add(kindNode, ref{tenant: name, node: n.Name, group: n.Group}, v.Spec, &n)
		}
	}
	// Filters: bridge and tenant commands as wildcards over tenants; node
	// commands per tenant, so that no filter overlaps the request filter
	// (<base>/+/+/reboot would also match <base>/bridge/request/reboot).
	for i := range entities {
		e := &entities[i]
		if !e.hasCommand() {
			continue
		}
		switch e.kind {
		case kindBridge:
			filters[b.topics.command(e, ref{})] = true
		case kindTenant:
			filters[b.topics.command(e, ref{tenant: "+", group: "+"})] = true
		case kindNode:
			for _, name := range b.order {
				filters[b.topics.command(e, ref{tenant: name, node: "+"})] = true
			}
		case kindMachine:
			filters[b.topics.command(e, ref{machine: "+"})] = true
		}
	}
	if b.scanning {
		filters[b.topics.prefix+"/device/+/config"] = true
		filters[b.topics.scanMark(b.instance)] = true
	}
	b.discovery, b.states, b.routes, b.filters = disc, states, routes, filters
}

// refreshStateLocked recomputes one device's state document.
func (b *Bridge) refreshStateLocked(k kind, r ref) {
	var t *tenant.Tenant
	if k != kindBridge && k != kindMachine {
		v, ok := b.views[r.tenant]
		if !ok {
			return
		}
		t = v.Spec
	}
	b.states[b.topics.state(k, r)] = b.stateDoc(k, r, t)
}

// shownNodes are the nodes a tenant's view shows, as nodes: those the file
// declares, in its order, then those that still exist without being
// declared (a removed node until its reset is done), by name.
func shownNodes(v tenant.View) []tenant.Node {
	var out []tenant.Node
	seen := map[string]bool{}
	if v.Spec != nil {
		for _, n := range v.Spec.Nodes() {
			if _, ok := v.Nodes[n.Name]; ok || v.Nodes == nil {
				out = append(out, n)
				seen[n.Name] = true
			}
		}
	}
	var extra []string
	for name := range v.Nodes {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		ns := v.Nodes[name]
		out = append(out, tenant.Node{Name: name, Tenant: v.Name, Group: ns.Group, Role: ns.Role,
			Index: tenant.NodeIndex(v.Name, ns.Group, name)})
	}
	return out
}

// SetTenants declares the tenants shown in Home Assistant, with their
// complete views. New tenants and nodes appear, changed ones are updated,
// and the devices of tenants and nodes no longer shown are removed at once
// (empty retained discovery and state). A tenant named "bridge" cannot be
// shown (its topics would be the bridge's) and is skipped with an error
// log.
func (b *Bridge) SetTenants(vs []tenant.View) {
	b.mu.Lock()
	b.views = make(map[string]tenant.View, len(vs))
	b.order = b.order[:0]
	for _, v := range vs {
		if !b.showable(v) {
			continue
		}
		if _, dup := b.views[v.Name]; dup {
			continue
		}
		b.views[v.Name] = v
		b.order = append(b.order, v.Name)
	}
	slices.Sort(b.order)
	for name, tm := range b.armed {
		if _, ok := b.views[name]; !ok {
			tm.Stop()
			delete(b.armed, name)
		}
	}
	b.rebuildLocked()
	b.mu.Unlock()
	b.trigger()
}

// showable reports whether a view can be shown (logged when not).
func (b *Bridge) showable(v tenant.View) bool {
	switch {
	case v.Spec == nil:
		return false
	case v.Name == "bridge":
		b.log.Error(`tenant name "bridge" is reserved for the add-on's own device; not shown`)
		return false
	case !tenant.IsDNSLabel(v.Name):
		b.log.Error("tenant name is not a DNS label; not shown", zap.String("tenant", v.Name))
		return false
	}
	return true
}

// SetTenant updates one tenant's documents (published if changed); when
// its nodes or its file changed, its devices too.
func (b *Bridge) SetTenant(v tenant.View) {
	if !b.showable(v) {
		return
	}
	b.mu.Lock()
	old, known := b.views[v.Name]
	b.views[v.Name] = v
	switch {
	case !known:
		b.order = append(b.order, v.Name)
		slices.Sort(b.order)
		b.rebuildLocked()
	case old.Spec != v.Spec || !sameNodes(old, v):
		b.rebuildLocked()
	default:
		r := ref{tenant: v.Name}
		b.refreshStateLocked(kindTenant, r)
		for _, n := range shownNodes(v) {
			b.refreshStateLocked(kindNode, ref{tenant: v.Name, node: n.Name, group: n.Group})
		}
		if old.Status.TalosVersionRunning != v.Status.TalosVersionRunning { // the device's sw_version
			b.discovery[b.topics.discovery(kindTenant, r)] = b.discoveryPayload(kindTenant, r, v.Spec, nil)
		}
	}
	b.mu.Unlock()
	b.trigger()
}

// sameNodes reports whether two views show the same nodes.
func sameNodes(a, b tenant.View) bool {
	if len(a.Nodes) != len(b.Nodes) {
		return false
	}
	for n, sa := range a.Nodes {
		sb, ok := b.Nodes[n]
		if !ok || sa.Group != sb.Group || sa.Role != sb.Role {
			return false
		}
	}
	return true
}

// SetBridgeStatus updates the number of running operations.
func (b *Bridge) SetBridgeStatus(operations int) {
	b.mu.Lock()
	b.operations = operations
	b.refreshStateLocked(kindBridge, ref{})
	b.mu.Unlock()
	b.trigger()
}

// SetStandbys names the instances that share the state store and wait to
// lead (the Role sensor's standbys attribute).
func (b *Bridge) SetStandbys(names []string) {
	b.mu.Lock()
	if slices.Equal(b.standbys, names) {
		b.mu.Unlock()
		return
	}
	b.standbys = slices.Clone(names)
	b.refreshStateLocked(kindBridge, ref{})
	b.mu.Unlock()
	b.trigger()
}

// roleShown: the Role sensor exists only with a shared state store.
func roleShown(b *Bridge) bool { return b.opts.Instance != "" }

// SetBridgeProblem shows what keeps the add-on itself from working (the
// bridge's Problem entity, its message as an attribute); "" clears it.
func (b *Bridge) SetBridgeProblem(msg string) {
	b.mu.Lock()
	b.problem = msg
	b.refreshStateLocked(kindBridge, ref{})
	b.mu.Unlock()
	b.trigger()
}

// PublishOperation fires the bridge's operation event entity (not retained).
func (b *Bridge) PublishOperation(ev tenant.OperationEvent) {
	doc := struct {
		EventType string   `json:"event_type"`
		Tenant    string   `json:"tenant"`
		Operation string   `json:"operation"`
		Message   string   `json:"message"`
		At        string   `json:"at"`
		Duration  *float64 `json:"duration_s,omitempty"`
	}{string(ev.Result), ev.Tenant, ev.Name, ev.Message, isoTime(ev.At), nil}
	if ev.Duration > 0 {
		d := ev.Duration.Seconds()
		doc.Duration = &d
	}
	if !slices.Contains(eventTypes, doc.EventType) {
		b.log.Warn("operation event with unknown result not published", zap.String("result", doc.EventType))
		return
	}
	p, _ := json.Marshal(doc)
	b.mu.Lock()
	if len(b.events) >= maxQueuedEvents {
		b.log.Warn("operation events queued while the broker is away: dropping the oldest", zap.Int("queued", len(b.events)))
		b.events = b.events[1:]
	}
	b.events = append(b.events, p)
	b.mu.Unlock()
	b.trigger()
}

// maxQueuedEvents bounds the operation events kept while the broker is
// away; they are sent, in order, once it is back.
const maxQueuedEvents = 256

// sendEvents publishes the queued operation events in order; what the
// broker did not acknowledge stays queued for the next connection.
func (b *Bridge) sendEvents() error {
	b.mu.Lock()
	evs := b.events
	b.mu.Unlock()
	for i, p := range evs {
		if !b.client.IsConnectionOpen() {
			return errNotReady
		}
		tok := b.client.Publish(b.topics.event(), 1, false, p)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.mu.Lock()
			b.events = b.events[i:]
			b.mu.Unlock()
			return errors.Join(errors.New("publish operation event failed"), tok.Error())
		}
	}
	b.mu.Lock()
	b.events = b.events[len(evs):]
	b.mu.Unlock()
	return nil
}

// isoTime is ISO 8601 with a numeric offset ("+00:00" for UTC).
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format("2006-01-02T15:04:05.000-07:00")
}

// State documents.

type bridgeDoc struct {
	Version        string `json:"version"`
	Operations     int    `json:"operations"`
	Tenants        int    `json:"tenants"`
	LogLevel       string `json:"log_level"`
	Problem        bool   `json:"problem"`
	ProblemMessage string `json:"problem_message"`
	// Role is set with a shared state store (Options.Instance).
	Role *roleDoc `json:"role,omitempty"`
}

// roleDoc is the Role sensor's: only the leader publishes, so its state is
// always "leader".
type roleDoc struct {
	State    string   `json:"state"`
	Instance string   `json:"instance"`
	Standbys []string `json:"standbys"`
}

type lastOpDoc struct {
	Name    string `json:"name"`
	Result  string `json:"result"`
	At      string `json:"at"`
	Message string `json:"message"`
}

type tenantDoc struct {
	Phase             tenant.Phase   `json:"phase"`
	NodesReady        int            `json:"nodes_ready"`
	NodesTotal        int            `json:"nodes_total"`
	Progress          int            `json:"progress"`
	Pending           tenant.Changes `json:"pending"`
	Operation         *string        `json:"operation"`
	Activity          string         `json:"activity"`
	OperationStep     string         `json:"operation_step"`
	LastOperation     *lastOpDoc     `json:"last_operation"`
	Problem           bool           `json:"problem"`
	Problems          []string       `json:"problems"`
	TalosVersion      string         `json:"talos_version"`
	KubernetesVersion string         `json:"kubernetes_version"`
	Provider          string         `json:"provider"`
	AutoApply         bool           `json:"auto_apply"`
	DestroyArmed      bool           `json:"destroy_armed"`
	Counts            map[string]int `json:"counts"`
	Summary           string         `json:"summary"` // one spoken sentence (tenant.Summary)

	// update.go: running versions (null when the cluster does not exist),
	// the update entities' states and the newest etcd snapshot
	TalosVersionRunning      *string        `json:"talos_version_running"`
	KubernetesVersionRunning *string        `json:"kubernetes_version_running"`
	TalosUpdate              map[string]any `json:"talos_update"`
	KubernetesUpdate         map[string]any `json:"kubernetes_update"`
	LastBackup               *backupDoc     `json:"last_backup"`

	Pools map[string]poolDoc `json:"pools"` // pool.go
}

type nodeDoc struct {
	Stage          tenant.Stage `json:"stage"`
	Ready          bool         `json:"ready"`
	Address        *string      `json:"address"`
	PrivateAddress *string      `json:"private_address"`
	Role           tenant.Role  `json:"role"`
	Group          string       `json:"group"`
	TalosVersion   *string      `json:"talos_version"`
	Power          string       `json:"power"` // on, off, unknown
	Forgettable    bool         `json:"forgettable"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// stateDoc renders a device's state document. Callers hold b.mu.
func (b *Bridge) stateDoc(k kind, r ref, t *tenant.Tenant) []byte {
	var v any
	switch k {
	case kindBridge:
		d := bridgeDoc{Version: b.opts.Version, Operations: b.operations, Tenants: len(b.order), LogLevel: b.logLevel,
			Problem: b.problem != "", ProblemMessage: b.problem}
		if roleShown(b) {
			d.Role = &roleDoc{State: "leader", Instance: b.opts.Instance, Standbys: slices.Clone(b.standbys)}
			if d.Role.Standbys == nil {
				d.Role.Standbys = []string{}
			}
		}
		v = d
	case kindTenant:
		st := b.views[r.tenant].Status
		d := tenantDoc{
			Phase: st.Phase, NodesReady: st.NodesReady, NodesTotal: st.NodesTotal,
			Progress: st.Progress, Pending: st.Pending, Operation: st.Operation,
			Activity: st.Activity, OperationStep: st.OperationStep,
			Problem: st.Problem, Problems: st.Problems, TalosVersion: st.TalosVersion, KubernetesVersion: st.KubernetesVersion,
			Provider: string(st.Provider), AutoApply: st.AutoApply, DestroyArmed: b.armed[r.tenant] != nil,
			Counts: st.Counts, Summary: st.Summary,
		}
		if d.Problems == nil {
			d.Problems = []string{}
		}
		if d.Counts == nil {
			d.Counts = map[string]int{}
		}
		d.TalosVersionRunning, d.KubernetesVersionRunning = strOrNil(st.TalosVersionRunning), strOrNil(st.KubernetesVersionRunning)
		d.TalosUpdate = updateDoc(ComponentTalos, st.TalosVersionRunning, d.TalosVersion, st.Rollout, st.Progress)
		d.KubernetesUpdate = updateDoc(ComponentKubernetes, st.KubernetesVersionRunning, d.KubernetesVersion, st.Rollout, st.Progress)
		d.LastBackup = backupOf(st.Backup)
		d.Pools = poolDocs(t, st)
		if lo := st.LastOperation; lo != nil {
			d.LastOperation = &lastOpDoc{Name: lo.Name, Result: string(lo.Result), At: isoTime(lo.At), Message: lo.Message}
		}
		v = d
	case kindNode:
		ns := b.views[r.tenant].Nodes[r.node]
		v = nodeDoc{Stage: ns.Stage, Ready: ns.Ready, Address: strOrNil(ns.Address), PrivateAddress: strOrNil(ns.PrivateAddress),
			Role: ns.Role, Group: ns.Group, TalosVersion: strOrNil(ns.TalosVersion), Power: ns.Power, Forgettable: ns.Forgettable}
	case kindMachine:
		v = b.machineDoc(r.machine) // machine.go
	}
	p, _ := json.Marshal(v)
	return p
}
