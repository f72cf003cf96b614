package hass

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Manufacturer is what devices show as their manufacturer and the origin name.
const Manufacturer = "rezuscloud"

// discoveryPayload renders one device's discovery message (device-based
// discovery, docs/design.md §4). Callers hold b.mu.
func (b *Bridge) discoveryPayload(k kind, r ref, t *tenant.Tenant, n *tenant.Node) []byte {
	id := b.topics.deviceID(k, r)
	dev := map[string]any{
		"identifiers":  []string{id},
		"manufacturer": Manufacturer,
	}
	if u := b.opts.ConfigurationURL; u != "" {
		dev["configuration_url"] = u
	}
	switch k {
	case kindBridge:
		dev["name"] = "Rezuscloud"
		dev["model"] = "Bridge"
		dev["sw_version"] = b.opts.Version
	case kindTenant:
		dev["name"] = t.Title()
		dev["model"] = "Talos cluster"
		dev["model_id"] = string(t.Provider)
		if v := b.views[r.tenant].Status.TalosVersionRunning; v != "" {
			dev["sw_version"] = v // what the nodes run (none before the cluster exists)
		}
		dev["via_device"] = b.topics.deviceID(kindBridge, ref{})
	case kindNode:
		// Speakable: "Lab workers 2" (the node name lab-workers-2 is its
		// id); group "lab" of tenant "Lab" gives "Lab 1", not "Lab lab 1".
		dev["name"] = strings.Join(strings.Fields(fmt.Sprintf("%s %s %d", t.Title(), groupWords(n.Group, t.Title(), ""), n.Index)), " ")
		dev["model"] = "Talos node"
		dev["model_id"] = string(n.Role)
		dev["via_device"] = b.topics.deviceID(kindTenant, ref{tenant: r.tenant})
	case kindMachine:
		b.machineDevice(dev, r) // machine.go
	}
	if b.opts.ConfigurationURL != "" {
		dev["configuration_url"] = b.opts.ConfigurationURL
	}
	cmps := map[string]any{}
	state := b.topics.state(k, r)
	for i := range entities {
		e := &entities[i]
		if e.kind != k || (e.shown != nil && !e.shown(b)) {
			continue
		}
		if e.perGroup {
			for _, g := range t.NodeGroups {
				if !e.forGroup(&g) {
					continue
				}
				rg := r
				rg.group = g.Name
				cmps[e.compKey(g.Name)] = b.component(e, id, dev["name"].(string), state, rg, t, &g)
			}
			continue
		}
		cmps[e.compKey("")] = b.component(e, id, dev["name"].(string), state, r, t, nil)
	}
	payload := map[string]any{
		"device": dev,
		"origin": map[string]any{
			"name":        Manufacturer,
			"sw_version":  b.opts.Version,
			"support_url": b.opts.SupportURL,
		},
		"qos":        1,
		"components": cmps,
	}
	p, _ := json.Marshal(payload)
	return p
}

// component renders one entity row for one device (and group).
func (b *Bridge) component(e *entity, devID, devName, stateTopic string, r ref, t *tenant.Tenant, g *tenant.NodeGroup) map[string]any {
	key := e.compKey(r.group)
	uid := devID + "_" + key
	if e.stateSuffix != "" {
		stateTopic = b.topics.root(e.kind, r) + "/" + e.stateSuffix
	}
	c := map[string]any{
		"platform":          e.platform,
		"unique_id":         uid,
		"default_entity_id": e.platform + "." + slug(uid),
		"name":              e.displayName(r.group, devName),
	}
	switch {
	case e.availableWhen != "":
		c["availability"] = []map[string]any{
			{"topic": b.topics.availability()},
			{"topic": stateTopic, "value_template": "{{ 'online' if " + e.availableWhen + " else 'offline' }}"},
		}
		c["availability_mode"] = "all"
	case !e.stateOnAvailability:
		c["availability_topic"] = b.topics.availability()
	}
	set := func(k, v string) {
		if v != "" {
			c[k] = v
		}
	}
	set("entity_category", e.category)
	set("device_class", e.class)
	set("state_class", e.stateClass)
	set("unit_of_measurement", e.unit)
	set("icon", e.icon)
	if len(e.options) > 0 {
		c["options"] = e.options
	}
	if e.optionsFn != nil {
		c["options"] = e.optionsFn(b)
	}
	if e.disabled {
		c["enabled_by_default"] = false
	}
	switch {
	case e.stateOnAvailability:
		c["state_topic"] = b.topics.availability()
		c["payload_on"] = "online"
		c["payload_off"] = "offline"
	case e.eventTopic:
		c["state_topic"] = b.topics.event()
		if e.stateSuffix != "" {
			c["state_topic"] = stateTopic
		}
		c["event_types"] = e.eventTypes
	case e.poolEvents:
		c["state_topic"] = b.topics.poolEvent(r)
		c["event_types"] = e.eventTypes
	case e.value != "":
		c["state_topic"] = stateTopic
		c["value_template"] = e.valueTemplate(r.group)
		if e.attrs != "" {
			c["json_attributes_topic"] = stateTopic
			c["json_attributes_template"] = "{{ " + e.attrsTemplate(r.group) + " }}"
		}
	}
	if e.hasCommand() {
		c["command_topic"] = b.topics.command(e, r)
		c["retain"] = false
	}
	switch e.platform {
	case "button":
		c["payload_press"] = "PRESS"
	case "switch":
		c["payload_on"], c["payload_off"] = "ON", "OFF"
	case "update":
		c["payload_install"] = PayloadInstall
	case "number":
		lo, hi := tenant.CountBounds(g.Role)
		if e.bounds != nil {
			lo, hi = e.bounds(t, g)
		}
		c["min"], c["max"], c["step"], c["mode"] = lo, hi, 1, "box"
	}
	return c
}
