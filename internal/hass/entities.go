package hass

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/logging"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// kind is the sort of device an entity belongs to.
type kind int

const (
	kindBridge kind = iota
	kindTenant
	kindNode
	kindMachine // a Talos machine found on the LAN (machine.go)
)

func (k kind) String() string {
	return [...]string{"bridge", "tenant", "node", "machine"}[k]
}

// entity is one row of the entity table. Discovery components, the state
// document fields an entity reads and the command routing are all derived
// from these rows: adding an entity is adding a row (and, for a new state
// key, a field in the device's state document).
type entity struct {
	kind     kind
	key      string // component id; unique_id = <device id>_<key>
	platform string
	name     string // short and speakable; never the device name

	category   string // "", "config" or "diagnostic"
	class      string // device_class
	stateClass string
	unit       string
	icon       string
	options    []string // enum sensor and select options
	// optionsFn, when set, gives a select's options from the bridge's
	// current state (machine.go's cluster groups). Callers hold b.mu.
	optionsFn  func(b *Bridge) []string
	eventTypes []string
	disabled   bool // noisy: disabled by default

	// value is the Jinja expression over value_json that yields the state;
	// attrs, when set, the expression for json_attributes_template.
	value string
	attrs string
	// stateOnAvailability: the entity reads the availability topic itself
	// and has no availability of its own (the bridge's connection state).
	stateOnAvailability bool
	// eventTopic: the entity reads the (not retained) operation event topic.
	eventTopic bool
	// availableWhen, when set, is a Jinja expression over the device's
	// state document: the entity is available only while it is true (and
	// the bridge is online), so a dashboard grays out a command that would
	// be refused.
	availableWhen string

	// perGroup: one component per node group (key and name get the group).
	perGroup bool
	// pooled: per group, only for groups with a pool (pool.go); bounds
	// gives such a number's min and max; poolEvents: the entity reads the
	// group's pool decision events.
	pooled     bool
	bounds     func(t *tenant.Tenant, g *tenant.NodeGroup) (lo, hi int)
	poolEvents bool
	// stateSuffix, when set, is the entity's own state (or event) topic
	// under the device's root instead of the device's state document.
	stateSuffix string
	// shown, when set, says whether the device has the entity now.
	shown func(b *Bridge) bool

	// Commands go through the action table (request.go). action names the
	// action a plain PRESS runs for this device; request, when set, turns
	// the payload into a request of the table (a syntax check, never a
	// semantic one). set is for the few commands that stay in the bridge
	// (republish, arming destroy, a machine's group select).
	action  string
	request func(b *Bridge, r ref, payload string) (Request, error)
	set     func(b *Bridge, ctx context.Context, r ref, payload string) error
	// topicSuffix is the last command topic level(s) after the device's
	// topic root; "" means key (buttons) — see commandTopic.
	topicSuffix string
}

// ref names the device (and group) a command or value belongs to.
type ref struct {
	tenant  string
	node    string
	group   string
	machine string // machine devices: the MAC without colons
}

var (
	phaseOptions = enumOptions(tenant.Phases) // tenant owns the lists
	stageOptions = enumOptions(tenant.Stages)
	eventTypes   = []string{string(tenant.ResultStarted), string(tenant.ResultSucceeded), string(tenant.ResultFailed), string(tenant.ResultCancelled), string(tenant.ResultRefused)}
	onOffString  = "{{ 'ON' if value_json.%s else 'OFF' }}"
)

func onOff(field string) string { return fmt.Sprintf(onOffString, field) }

// entities is the table (docs/design.md §4); the worker pools' rows are
// in pool.go.
var entities = slices.Concat([]entity{
	// bridge
	{kind: kindBridge, key: "connection", platform: "binary_sensor", name: "Connection state",
		category: "diagnostic", class: "connectivity", stateOnAvailability: true},
	{kind: kindBridge, key: "operations", platform: "sensor", name: "Running operations",
		stateClass: "measurement", icon: "mdi:progress-wrench", value: "value_json.operations"},
	{kind: kindBridge, key: "tenants", platform: "sensor", name: "Clusters",
		category: "diagnostic", stateClass: "measurement", icon: "mdi:server-network", value: "value_json.tenants"},
	{kind: kindBridge, key: "problem", platform: "binary_sensor", name: "Problem",
		category: "diagnostic", class: "problem", value: "value_json.problem",
		attrs: "{'message': value_json.problem_message} | tojson"},
	{kind: kindBridge, key: "role", platform: "sensor", name: "Role",
		category: "diagnostic", icon: "mdi:account-switch", value: "value_json.role.state",
		attrs: "{'instance': value_json.role.instance, 'standbys': value_json.role.standbys} | tojson", shown: roleShown},
	{kind: kindBridge, key: "version", platform: "sensor", name: "Version",
		category: "diagnostic", icon: "mdi:tag", value: "value_json.version", disabled: true},
	{kind: kindBridge, key: "log_level", platform: "select", name: "Log level",
		category: "config", icon: "mdi:math-log", options: logging.Levels, value: "value_json.log_level",
		topicSuffix: "log_level/set", request: logLevelRequest},
	{kind: kindBridge, key: "reload", platform: "button", name: "Reload clusters",
		category: "config", icon: "mdi:reload", action: ActionReload},
	{kind: kindBridge, key: "republish", platform: "button", name: "Republish discovery",
		category: "config", icon: "mdi:broadcast", set: pressRepublish},
	{kind: kindBridge, key: "scan", platform: "button", name: "Scan network",
		category: "config", icon: "mdi:lan-pending", action: ActionDiscover},
	{kind: kindBridge, key: "operation", platform: "event", name: "Operation",
		icon: "mdi:clipboard-pulse", eventTypes: eventTypes, eventTopic: true},
	// pxe.go: network boot, while the responder runs
	{kind: kindBridge, key: "boot_window", platform: "switch", name: "Let new machines boot",
		icon: "mdi:lan-connect", value: "value_json.window", attrs: "{'until': value_json.window_until} | tojson",
		stateSuffix: "pxe", shown: pxeShown, topicSuffix: "boot_window/set", set: setBootWindow},
	{kind: kindBridge, key: "boot_assets", platform: "sensor", name: "Boot assets",
		category: "diagnostic", icon: "mdi:package-down", value: "value_json.versions",
		attrs: "{'assets': value_json.assets, 'problem': value_json.assets_problem} | tojson", stateSuffix: "pxe", shown: pxeShown},
	{kind: kindBridge, key: "network_boot", platform: "event", name: "Network boot",
		icon: "mdi:lan-pending", eventTypes: netbootEventTypes, eventTopic: true, stateSuffix: "pxe/event", shown: pxeShown},

	// tenant
	{kind: kindTenant, key: "phase", platform: "sensor", name: "Phase",
		class: "enum", options: phaseOptions, icon: "mdi:kubernetes", value: "value_json.phase",
		attrs: "{'summary': value_json.summary} | tojson"},
	{kind: kindTenant, key: "nodes_ready", platform: "sensor", name: "Nodes ready",
		stateClass: "measurement", icon: "mdi:server", value: "value_json.nodes_ready"},
	{kind: kindTenant, key: "nodes_total", platform: "sensor", name: "Nodes declared",
		stateClass: "measurement", icon: "mdi:server", value: "value_json.nodes_total",
		category: "diagnostic", disabled: true},
	{kind: kindTenant, key: "progress", platform: "sensor", name: "Progress",
		unit: "%", stateClass: "measurement", icon: "mdi:progress-clock", value: "value_json.progress"},
	{kind: kindTenant, key: "pending", platform: "sensor", name: "Pending changes",
		stateClass: "measurement", icon: "mdi:file-document-edit",
		value: "value_json.pending.add + value_json.pending.change + value_json.pending.destroy",
		attrs: "value_json.pending | tojson"},
	{kind: kindTenant, key: "last_operation", platform: "sensor", name: "Last operation",
		class: "timestamp", icon: "mdi:history",
		value: "value_json.last_operation.at if value_json.last_operation else None",
		attrs: "value_json.last_operation | tojson if value_json.last_operation else '{}'"},
	{kind: kindTenant, key: "problem", platform: "binary_sensor", name: "Problem",
		class: "problem", value: "value_json.problem"},
	{kind: kindTenant, key: "talos_version", platform: "sensor", name: "Talos version",
		category: "diagnostic", icon: "mdi:tag", value: "value_json.talos_version_running"},
	{kind: kindTenant, key: "kubernetes_version", platform: "sensor", name: "Kubernetes version",
		category: "diagnostic", icon: "mdi:tag", value: "value_json.kubernetes_version_running"},
	// update.go: running versions, the file's targets, rollout progress
	{kind: kindTenant, key: "talos_update", platform: "update", name: "Talos", class: "firmware",
		value: "value_json.talos_update | tojson", topicSuffix: "talos_update/install", request: upgradeRequest(ComponentTalos)},
	{kind: kindTenant, key: "kubernetes_update", platform: "update", name: "Kubernetes",
		value: "value_json.kubernetes_update | tojson", topicSuffix: "kubernetes_update/install", request: upgradeRequest(ComponentKubernetes)},
	{kind: kindTenant, key: "backup", platform: "button", name: "Back up etcd", icon: "mdi:database-export", action: ActionBackup},
	{kind: kindTenant, key: "last_backup", platform: "sensor", name: "Last etcd backup",
		class: "timestamp", icon: "mdi:database-clock",
		value: "value_json.last_backup.at if value_json.last_backup else None",
		attrs: "{'size': value_json.last_backup.size, 'file': value_json.last_backup.file} | tojson if value_json.last_backup else '{}'"},
	{kind: kindTenant, key: "count", platform: "number", name: "count", perGroup: true,
		icon: "mdi:server-plus", value: "value_json.counts[%q]", topicSuffix: "count/set", request: countRequest},
	{kind: kindTenant, key: "apply", platform: "button", name: "Apply", icon: "mdi:play", action: ActionApply},
	{kind: kindTenant, key: "plan", platform: "button", name: "Plan", icon: "mdi:clipboard-list", action: ActionPlan},
	{kind: kindTenant, key: "cancel", platform: "button", name: "Cancel", icon: "mdi:stop", action: ActionCancel,
		availableWhen: "value_json.operation"},
	{kind: kindTenant, key: "auto_apply", platform: "switch", name: "Auto apply",
		category: "config", icon: "mdi:auto-mode", value: "value_json.auto_apply",
		topicSuffix: "auto_apply/set", request: autoApplyRequest},
	{kind: kindTenant, key: "destroy_armed", platform: "switch", name: "Allow destroy",
		category: "config", icon: "mdi:shield-alert", value: "value_json.destroy_armed",
		topicSuffix: "destroy_armed/set", set: setDestroyArmed},
	{kind: kindTenant, key: "destroy", platform: "button", name: "Destroy",
		category: "config", icon: "mdi:delete-alert", request: destroyRequest,
		availableWhen: "value_json.destroy_armed"},

	// node
	{kind: kindNode, key: "stage", platform: "sensor", name: "Stage",
		class: "enum", options: stageOptions, icon: "mdi:server", value: "value_json.stage"},
	{kind: kindNode, key: "ready", platform: "binary_sensor", name: "Ready",
		icon: "mdi:check-network", value: "value_json.ready"},
	{kind: kindNode, key: "address", platform: "sensor", name: "Address",
		category: "diagnostic", icon: "mdi:ip-network", value: "value_json.address"},
	{kind: kindNode, key: "role", platform: "sensor", name: "Role",
		category: "diagnostic", icon: "mdi:account-hard-hat", value: "value_json.role", disabled: true},
	{kind: kindNode, key: "talos_version", platform: "sensor", name: "Talos version",
		category: "diagnostic", icon: "mdi:tag", value: "value_json.talos_version", disabled: true},
	{kind: kindNode, key: "reboot", platform: "button", name: "Reboot",
		category: "config", class: "restart", action: ActionReboot},
	// machine (found on the LAN, machine.go)
	{kind: kindMachine, key: "address", platform: "sensor", name: "Address",
		icon: "mdi:ip-network", value: "value_json.address",
		attrs: "{'mac': value_json.mac, 'certificate_fingerprint': value_json.certificate_fingerprint} | tojson"},
	{kind: kindMachine, key: "model", platform: "sensor", name: "Model",
		icon: "mdi:desktop-tower", value: "value_json.model",
		attrs: "{'manufacturer': value_json.manufacturer, 'serial': value_json.serial, 'certificate_fingerprint': value_json.certificate_fingerprint} | tojson"},
	{kind: kindMachine, key: "cpu", platform: "sensor", name: "CPU",
		icon: "mdi:cpu-64-bit", value: "value_json.cpu", attrs: "{'cores': value_json.cores} | tojson"},
	{kind: kindMachine, key: "memory", platform: "sensor", name: "Memory",
		class: "data_size", unit: "GiB", stateClass: "measurement", icon: "mdi:memory", value: "value_json.memory_gib"},
	{kind: kindMachine, key: "disks", platform: "sensor", name: "Disks",
		stateClass: "measurement", icon: "mdi:harddisk", value: "value_json.disks | length",
		attrs: "{'disks': value_json.disks, 'install_disk': value_json.install_disk} | tojson"},
	{kind: kindMachine, key: "cluster_group", platform: "select", name: "Cluster group",
		icon: "mdi:server-network", optionsFn: metalGroupOptions, value: "value_json.group",
		topicSuffix: "cluster_group/set", set: setMachineGroup},
	{kind: kindMachine, key: "adopt", platform: "button", name: "Adopt",
		icon: "mdi:server-plus", request: adoptRequest},

	{kind: kindNode, key: "power", platform: "sensor", name: "Power",
		class: "enum", options: powerOptions, icon: "mdi:power", value: "value_json.power"},
	{kind: kindNode, key: "power_on", platform: "button", name: "Power on",
		icon: "mdi:power-on", request: powerRequest("on")},
	{kind: kindNode, key: "shutdown", platform: "button", name: "Shut down",
		category: "config", icon: "mdi:power-off", request: powerRequest("off")},
	// a dead machine (unreachable past unreachable_after): out of the
	// record and the file, untouched (docs/design.md §11.7)
	{kind: kindNode, key: "forget", platform: "button", name: "Forget machine",
		category: "config", icon: "mdi:server-remove", availableWhen: "value_json.forgettable", request: forgetRequest},
}, poolEntities)

// forGroup reports whether the row has a component for group g.
func (e *entity) forGroup(g *tenant.NodeGroup) bool { return !e.pooled || g.Pool != nil }

// attrsTemplate is the row's attributes expression for a group.
func (e *entity) attrsTemplate(group string) string {
	if e.perGroup {
		return strings.ReplaceAll(e.attrs, "%q", strconv.Quote(group))
	}
	return e.attrs
}

// hasCommand reports whether the row takes commands.
func (e *entity) hasCommand() bool {
	switch e.platform {
	case "button", "switch", "select", "number", "update":
		return true
	}
	return false
}

// compKey is the component id (and unique_id suffix) for a group.
func (e *entity) compKey(group string) string {
	if e.perGroup {
		return slug(group) + "_" + e.key
	}
	return e.key
}

// displayName is the entity name for a group of the device named device
// ("Workers count"; Home Assistant shows "Lab Workers count").
func (e *entity) displayName(group, device string) string {
	if !e.perGroup {
		return e.name
	}
	if g := groupWords(group, device, e.name); g != "" {
		return titleWord(g) + " " + e.name
	}
	return titleWord(e.name)
}

// groupWords is a group's name as words for a name that Home Assistant
// prefixes with the device's: "-" becomes a space, and words the device
// name or the rest of the name already say are left out (group "lab" of
// tenant "Lab" is not "Lab Lab count"; group "count" is not "Count count").
func groupWords(group, device, rest string) string {
	said := map[string]bool{}
	for _, w := range strings.Fields(strings.ToLower(device + " " + rest)) {
		said[w] = true
	}
	var out []string
	for _, w := range strings.Fields(strings.ReplaceAll(group, "-", " ")) {
		if lw := strings.ToLower(w); !said[lw] {
			said[lw] = true
			out = append(out, w)
		}
	}
	return strings.Join(out, " ")
}

// valueTemplate wraps the row's expression.
func (e *entity) valueTemplate(group string) string {
	if e.value == "" {
		return ""
	}
	v := e.value
	if e.perGroup {
		v = fmt.Sprintf(v, group)
	}
	switch e.platform {
	case "binary_sensor", "switch":
		return onOff(strings.TrimPrefix(v, "value_json."))
	}
	return "{{ " + v + " }}"
}

// titleWord makes a group name speakable: "workers" -> "Workers",
// "gpu-pool" -> "Gpu pool", short ones spelled: "cp" -> "CP".
func titleWord(s string) string {
	s = strings.ReplaceAll(s, "-", " ")
	if len(s) <= 3 {
		return strings.ToUpper(s)
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// slug turns a name into [a-z0-9_].
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// enumOptions turns one of tenant's value lists into an enum's options.
func enumOptions[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
