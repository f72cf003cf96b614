// Package hasstest checks MQTT messages against Home Assistant's discovery
// rules (shared/reference/ha-mqtt-addon-spec.md §3, §4, §9) and scans
// payloads for secrets. It is a test helper shared by the hass package's
// tests and end-to-end tests.
package hasstest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

var supported = set("alarm_control_panel", "binary_sensor", "button", "camera", "climate", "cover", "date",
	"datetime", "device_automation", "device_tracker", "event", "fan", "humidifier", "image", "infrared",
	"lawn_mower", "light", "lock", "notify", "number", "scene", "siren", "select", "sensor", "switch", "tag",
	"text", "time", "update", "vacuum", "valve", "water_heater")

// non-entity platforms (no unique_id requirement).
var nonEntity = set("device_automation", "tag")

var rootKeys = set("device", "origin", "components", "availability", "availability_topic",
	"availability_template", "availability_mode", "payload_available", "payload_not_available",
	"state_topic", "command_topic", "qos", "encoding", "message_expiry_interval")

// shared are the root keys copied into components that do not set them.
var shared = []string{"availability", "availability_topic", "availability_template", "availability_mode",
	"payload_available", "payload_not_available", "state_topic", "command_topic", "qos", "encoding",
	"message_expiry_interval"}

var deviceClasses = map[string]map[string]bool{
	"button": set("identify", "restart", "update"),
	"update": set("firmware"),
	"switch": set("outlet", "switch"),
	"event":  set("button", "doorbell", "motion"),
	"binary_sensor": set("battery", "battery_charging", "carbon_monoxide", "cold", "connectivity", "door",
		"garage_door", "gas", "heat", "light", "lock", "moisture", "motion", "moving", "occupancy", "opening",
		"plug", "power", "presence", "problem", "running", "safety", "smoke", "sound", "tamper", "update",
		"vibration", "window"),
	"sensor": set("date", "enum", "timestamp", "apparent_power", "aqi", "area", "atmospheric_pressure",
		"battery", "blood_glucose_concentration", "carbon_monoxide", "carbon_dioxide", "conductivity",
		"current", "data_rate", "data_size", "distance", "duration", "energy", "energy_distance",
		"energy_storage", "frequency", "gas", "humidity", "illuminance", "irradiance", "moisture", "monetary",
		"nitrogen_dioxide", "nitrogen_monoxide", "nitrous_oxide", "ozone", "ph", "pm1", "pm10", "pm25",
		"power_factor", "power", "precipitation", "precipitation_intensity", "pressure", "reactive_power",
		"signal_strength", "sound_pressure", "speed", "sulphur_dioxide", "temperature",
		"volatile_organic_compounds", "volatile_organic_compounds_parts", "voltage", "volume",
		"volume_storage", "volume_flow_rate", "water", "weight", "wind_direction", "wind_speed"),
}

// unitsFor is DEVICE_CLASS_UNITS for the classes the reference lists; a
// class with an empty set allows no unit.
var unitsFor = map[string]map[string]bool{
	"data_size": set("bit", "kbit", "Mbit", "Gbit", "B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB",
		"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"),
	"data_rate":       set("bit/s", "kbit/s", "Mbit/s", "Gbit/s", "B/s", "kB/s", "MB/s", "GB/s", "KiB/s", "MiB/s", "GiB/s"),
	"duration":        set("d", "h", "min", "s", "ms", "μs"),
	"temperature":     set("°C", "°F", "K"),
	"power":           set("mW", "W", "kW", "MW", "GW", "TW"),
	"energy":          set("J", "kJ", "MJ", "GJ", "mWh", "Wh", "kWh", "MWh", "GWh", "TWh", "cal", "kcal", "Mcal", "Gcal"),
	"battery":         set("%"),
	"humidity":        set("%"),
	"moisture":        set("%"),
	"power_factor":    set("%", ""),
	"frequency":       set("Hz", "kHz", "MHz", "GHz"),
	"voltage":         set("µV", "mV", "V", "kV", "MV"),
	"current":         set("mA", "A"),
	"signal_strength": set("dB", "dBm"),
	"timestamp":       {},
	"date":            {},
	"enum":            {},
}

var stateClasses = set("measurement", "measurement_angle", "total", "total_increasing")

var (
	defaultEntityRE = regexp.MustCompile(`^([a-z_]+)\.[a-z0-9_]+$`)
	iconRE          = regexp.MustCompile(`^[a-z0-9-]+:[a-z0-9-]+$`)
	idRE            = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
)

// Checker checks discovery messages and remembers unique_ids across them
// (a unique_id may appear on one topic only). Use one Checker per broker.
type Checker struct {
	mu   sync.Mutex
	uids map[string][2]string // unique_id -> topic, component
}

// NewChecker makes a Checker with no unique_ids seen.
func NewChecker() *Checker { return &Checker{uids: map[string][2]string{}} }

// CheckDiscovery checks one discovery message on its own (see Checker.Check).
func CheckDiscovery(topic string, payload []byte, retained bool) []error {
	return NewChecker().Check(topic, payload, retained)
}

// Check checks one discovery message: topic shape, retain flag, JSON
// object, device-discovery root keys, device/origin/availability keys,
// per-platform required keys, device classes and units, categories,
// identity (unique_id, default_entity_id, no object_id) and naming. An
// empty retained payload (removal) is valid and forgets the topic's ids.
func (c *Checker) Check(topic string, payload []byte, retained bool) []error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }

	parts := strings.Split(topic, "/")
	if len(parts) < 4 || len(parts) > 5 || parts[len(parts)-1] != "config" {
		bad("topic %q: want <prefix>/<component>/[<node_id>/]<object_id>/config", topic)
		return errs
	}
	component := parts[1]
	for _, p := range parts[2 : len(parts)-1] {
		if !idRE.MatchString(p) {
			bad("topic %q: id %q must match [a-zA-Z0-9_-]+", topic, p)
		}
	}
	if component != "device" && !supported[component] {
		bad("topic %q: component %q is not supported", topic, component)
	}
	if !retained {
		bad("%s: discovery must be retained", topic)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forget(topic)
	if len(payload) == 0 {
		return errs
	}
	if !utf8.Valid(payload) {
		bad("%s: payload is not UTF-8", topic)
		return errs
	}
	var root map[string]any
	if err := json.Unmarshal(payload, &root); err != nil || root == nil {
		bad("%s: payload is not a JSON object: %v", topic, err)
		return errs
	}
	root, dup := expand(root, entityAbbr)
	for _, d := range dup {
		bad("%s: key %q given twice (full and abbreviated)", topic, d)
	}

	var comps []namedComp
	if component == "device" {
		for k := range root {
			if !rootKeys[k] {
				bad("%s: device discovery root key %q is not allowed (the whole payload would be refused)", topic, k)
			}
		}
		if _, ok := root["device"]; !ok {
			bad("%s: device is required", topic)
		}
		o, ok := root["origin"].(map[string]any)
		if !ok {
			bad("%s: origin is required in device discovery", topic)
		} else if n, _ := expandMap(o, originAbbr)["name"].(string); n == "" {
			bad("%s: origin.name is required", topic)
		}
		cm, ok := root["components"].(map[string]any)
		if !ok || len(cm) == 0 {
			bad("%s: components is required and must be a non-empty object", topic)
		}
		keys := make([]string, 0, len(cm))
		for k := range cm {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, id := range keys {
			raw, ok := cm[id].(map[string]any)
			if !ok {
				bad("%s: component %q is not an object", topic, id)
				continue
			}
			comp, dup := expand(raw, entityAbbr)
			for _, d := range dup {
				bad("%s: component %q: key %q given twice", topic, id, d)
			}
			for _, k := range shared {
				if _, has := comp[k]; !has {
					if v, ok := root[k]; ok {
						comp[k] = v
					}
				}
			}
			comp["device"], comp["origin"] = root["device"], root["origin"]
			if _, has := comp["~"]; has {
				comp = tilde(comp)
			}
			comps = append(comps, namedComp{id, comp})
		}
		if _, has := root["~"]; has {
			bad("%s: ~ is not allowed at the root of a device payload", topic)
		}
	} else {
		comp := root
		if _, has := comp["~"]; has {
			comp = tilde(comp)
		}
		comp["platform"] = component
		comps = append(comps, namedComp{parts[len(parts)-2], comp})
	}

	nullNames := 0
	for _, nc := range comps {
		where := fmt.Sprintf("%s: component %q", topic, nc.id)
		errs = append(errs, c.checkComponent(where, topic, nc.comp, &nullNames)...)
	}
	if nullNames > 1 {
		bad("%s: name null is for the device's one main entity, found %d", topic, nullNames)
	}
	return errs
}

type namedComp struct {
	id   string
	comp map[string]any
}

func (c *Checker) forget(topic string) {
	for uid, t := range c.uids {
		if t[0] == topic {
			delete(c.uids, uid)
		}
	}
}

func (c *Checker) checkComponent(where, topic string, m map[string]any, nullNames *int) []error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(where+": "+f, a...)) }
	platform, _ := m["platform"].(string)
	if !supported[platform] {
		bad("platform %q is not supported", platform)
		return errs
	}
	entity := !nonEntity[platform]
	uid, hasUID := m["unique_id"].(string)
	if entity && len(m) > 1 {
		if !hasUID || uid == "" {
			bad("unique_id is required")
		} else if other, seen := c.uids[uid]; seen {
			bad("unique_id %q is not unique (also in %s)", uid, other[1])
		} else {
			c.uids[uid] = [2]string{topic, where}
		}
	}
	if _, ok := m["object_id"]; ok {
		bad("object_id is deprecated (2025.10) and ignored since 2026.4: use default_entity_id")
	}
	if v, ok := m["default_entity_id"]; ok {
		s, _ := v.(string)
		mm := defaultEntityRE.FindStringSubmatch(s)
		if mm == nil {
			bad("default_entity_id %q must match <platform>.[a-z0-9_]+", s)
		} else if mm[1] != platform {
			bad("default_entity_id %q must start with %q", s, platform+".")
		}
	}

	// device
	var devName string
	if dv, ok := m["device"]; ok && dv != nil {
		d, ok := dv.(map[string]any)
		if !ok {
			bad("device must be an object")
		} else {
			d = expandMap(d, deviceAbbr)
			for k := range d {
				if !deviceKeys[k] {
					bad("device key %q is not allowed (extra keys not allowed)", k)
				}
			}
			ids := false
			switch v := d["identifiers"].(type) {
			case string:
				ids = v != ""
			case []any:
				ids = len(v) > 0
				for _, x := range v {
					if _, ok := x.(string); !ok {
						bad("device identifiers must be strings")
					}
				}
			}
			if cns, ok := d["connections"].([]any); ok {
				for _, cn := range cns {
					pair, ok := cn.([]any)
					if !ok || len(pair) != 2 {
						bad("device connection must be a pair of strings")
					}
				}
				ids = ids || len(cns) > 0
			}
			if !ids {
				bad("device must have at least one identifier or connection")
			}
			devName, _ = d["name"].(string)
			if devName == "" {
				bad("device name is missing")
			}
			if v, ok := d["via_device"]; ok {
				if _, ok := v.(string); !ok {
					bad("via_device must be a string")
				}
			}
			if u, ok := d["configuration_url"]; ok && !validURL(u, "http", "https", "homeassistant") {
				bad("configuration_url %v is not a valid URL", u)
			}
			for k, v := range d {
				if k != "identifiers" && k != "connections" {
					if _, ok := v.(string); !ok {
						bad("device %s must be a string", k)
					}
				}
			}
		}
	}
	if ov, ok := m["origin"]; ok && ov != nil {
		o, ok := ov.(map[string]any)
		if !ok {
			bad("origin must be an object")
		} else {
			o = expandMap(o, originAbbr)
			for k := range o {
				if !originKeys[k] {
					bad("origin key %q is not allowed", k)
				}
			}
			if n, _ := o["name"].(string); n == "" {
				bad("origin name is required")
			}
			if u, ok := o["support_url"]; ok && !validURL(u, "http", "https") {
				bad("origin support_url %v is not a valid URL", u)
			}
		}
	}

	// availability
	_, hasAT := m["availability_topic"]
	av, hasAv := m["availability"]
	if hasAT && hasAv {
		bad("availability and availability_topic are mutually exclusive")
	}
	if hasAT {
		errs = append(errs, checkTopic(where, "availability_topic", m["availability_topic"], false)...)
	}
	if hasAv {
		list, ok := av.([]any)
		if !ok {
			bad("availability must be a list")
		}
		for _, it := range list {
			a, ok := it.(map[string]any)
			if !ok {
				bad("availability item must be an object")
				continue
			}
			a, _ = expand(a, entityAbbr)
			for k := range a {
				if !availKeys[k] {
					bad("availability key %q is not allowed", k)
				}
			}
			if _, ok := a["topic"]; !ok {
				bad("availability item needs topic")
			}
			errs = append(errs, checkTopic(where, "availability.topic", a["topic"], false)...)
		}
	}
	if v, ok := m["availability_mode"]; ok && !in(v, "all", "any", "latest") {
		bad("availability_mode %v must be all, any or latest", v)
	}
	if v, ok := m["qos"]; ok {
		f, isNum := v.(float64)
		if !isNum || (f != 0 && f != 1 && f != 2) {
			bad("qos %v must be 0, 1 or 2", v)
		}
	}
	for k, v := range m {
		if strings.HasSuffix(k, "_topic") && k != "availability_topic" {
			errs = append(errs, checkTopic(where, k, v, strings.Contains(k, "command") || k == "command_topic")...)
		}
	}
	if v, ok := m["entity_category"]; ok && v != nil && !in(v, "config", "diagnostic") {
		bad("entity_category %v must be config or diagnostic", v)
	}
	if v, ok := m["entity_category"]; ok && v == "config" && (platform == "sensor" || platform == "binary_sensor") {
		bad("%s entities cannot have entity_category config", platform)
	}
	if v, ok := m["icon"]; ok {
		if s, _ := v.(string); !iconRE.MatchString(s) {
			bad("icon %v must be prefix:name", v)
		}
	}
	if v, ok := m["enabled_by_default"]; ok {
		if _, isBool := v.(bool); !isBool {
			bad("enabled_by_default must be a bool")
		}
	}
	for _, k := range []string{"value_template", "json_attributes_template", "command_template"} {
		if v, ok := m[k]; ok {
			if s, _ := v.(string); strings.TrimSpace(s) == "" {
				bad("%s must be a non-empty string", k)
			}
		}
	}
	if _, ok := m["json_attributes_template"]; ok {
		if _, ok := m["json_attributes_topic"]; !ok {
			bad("json_attributes_template without json_attributes_topic")
		}
	}

	// naming
	if entity {
		nv, hasName := m["name"]
		switch {
		case hasName && nv == nil:
			*nullNames++
		case hasName:
			n, ok := nv.(string)
			if !ok || strings.TrimSpace(n) == "" {
				bad("name must be a non-empty string or null")
			} else if devName != "" && strings.HasPrefix(strings.ToLower(n), strings.ToLower(devName)) {
				bad("name %q starts with the device name %q (HA shows %q)", n, devName, devName+" "+n)
			}
		default:
			if _, hasClass := m["device_class"]; !hasClass {
				bad("name missing: HA would call it \"MQTT %s\"", platform)
			}
		}
	}

	// device class
	if v, ok := m["device_class"]; ok && v != nil {
		s, _ := v.(string)
		if allowed, known := deviceClasses[platform]; known && !allowed[strings.ToLower(s)] {
			bad("device_class %q is not valid for %s", s, platform)
		}
		if platform == "number" && (s == "enum" || s == "timestamp" || s == "date" || !deviceClasses["sensor"][s]) {
			bad("device_class %q is not a number device class", s)
		}
	}
	errs = append(errs, checkPlatform(where, platform, m)...)
	return errs
}

func checkPlatform(where, platform string, m map[string]any) []error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(where+": "+f, a...)) }
	need := func(keys ...string) {
		for _, k := range keys {
			if s, ok := m[k].(string); !ok || s == "" {
				bad("%s requires %s", platform, k)
			}
		}
	}
	retainFalse := func() {
		if v, ok := m["retain"]; ok && v != false {
			bad("command entities must not retain commands (retain %v)", v)
		}
	}
	class, _ := m["device_class"].(string)
	switch platform {
	case "sensor":
		need("state_topic")
		unit, hasUnit := m["unit_of_measurement"].(string)
		if hasUnit && strings.TrimSpace(unit) == "" {
			hasUnit = false
		}
		sc, hasSC := m["state_class"].(string)
		if _, ok := m["state_class"]; ok && !hasSC {
			bad("state_class must be a string")
		}
		if hasSC && !stateClasses[sc] {
			bad("state_class %q is not valid", sc)
		}
		if opts, ok := m["options"]; ok {
			l, isList := opts.([]any)
			if !isList || len(l) == 0 {
				bad("options must be a non-empty list")
			}
			if class != "enum" {
				bad("options require device_class enum")
			}
			if hasSC || hasUnit {
				bad("options cannot be combined with state_class or unit_of_measurement")
			}
		}
		if class == "enum" {
			if _, ok := m["options"]; !ok {
				bad("an enum sensor should list its options")
			}
		}
		if us, known := unitsFor[class]; known && class != "" {
			if hasUnit && !us[unit] {
				bad("unit %q is not valid for device_class %s (discovery fails since 2025.7)", unit, class)
			}
			if !hasUnit && len(us) > 0 && !us[""] {
				bad("device_class %s needs a unit", class)
			}
		}
		if (class == "timestamp" || class == "date" || class == "enum") && hasSC {
			bad("device_class %s takes no state_class", class)
		}
		if sc == "measurement_angle" && unit != "°" {
			bad("state_class measurement_angle requires unit °")
		}
		if _, ok := m["last_reset_value_template"]; ok && sc != "total" {
			bad("last_reset_value_template only with state_class total")
		}
		if class == "" && unit == "%" && hasSC && sc != "measurement" {
			bad("a percentage should use state_class measurement")
		}
		if v, ok := m["suggested_display_precision"]; ok {
			if f, isNum := v.(float64); !isNum || f < 0 || f != float64(int(f)) {
				bad("suggested_display_precision must be an int >= 0")
			}
		}
	case "binary_sensor":
		need("state_topic")
	case "button":
		need("command_topic")
		retainFalse()
	case "select":
		need("command_topic")
		l, ok := m["options"].([]any)
		if !ok || len(l) == 0 {
			bad("select requires a non-empty options list")
		}
		for _, o := range l {
			if _, ok := o.(string); !ok {
				bad("select options must be strings")
			}
		}
		retainFalse()
	case "number":
		need("command_topic")
		lo, hi := num(m, "min", 0), num(m, "max", 100)
		if !(lo < hi) {
			bad("number min %v must be less than max %v", lo, hi)
		}
		if st := num(m, "step", 1); st < 0.001 {
			bad("number step %v must be >= 0.001", st)
		}
		if v, ok := m["mode"]; ok && !in(v, "auto", "box", "slider") {
			bad("number mode %v must be auto, box or slider", v)
		}
		retainFalse()
	case "text":
		need("command_topic")
		lo, hi := num(m, "min", 0), num(m, "max", 255)
		if !(lo <= hi && hi <= 255) {
			bad("text needs min <= max <= 255")
		}
		if v, ok := m["mode"]; ok && !in(v, "text", "password") {
			bad("text mode %v must be text or password", v)
		}
		if p, ok := m["pattern"].(string); ok {
			if _, err := regexp.Compile(p); err != nil {
				bad("text pattern: %v", err)
			}
		}
		retainFalse()
	case "switch":
		need("command_topic")
		retainFalse()
	case "update":
		need("state_topic")
		if _, ok := m["command_topic"]; ok {
			if _, ok := m["payload_install"]; !ok {
				bad("update with command_topic needs payload_install")
			}
		}
	case "event":
		need("state_topic")
		l, ok := m["event_types"].([]any)
		if !ok || len(l) == 0 {
			bad("event requires a non-empty event_types list")
		}
		if _, ok := m["entity_category"]; ok {
			bad("event entities should not have an entity_category")
		}
	case "device_automation":
		if m["automation_type"] != "trigger" {
			bad("device_automation needs automation_type trigger")
		}
		need("topic", "type", "subtype")
		if _, ok := m["device"]; !ok {
			bad("device_automation needs device")
		}
	}
	return errs
}

func checkTopic(where, key string, v any, publish bool) []error {
	s, ok := v.(string)
	if !ok || s == "" || len(s) > 65535 || !utf8.ValidString(s) {
		return []error{fmt.Errorf("%s: %s must be a non-empty UTF-8 topic", where, key)}
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xfdd0 && r <= 0xfdef) || r == 0xfffe || r == 0xffff {
			return []error{fmt.Errorf("%s: %s %q contains a control character", where, key, s)}
		}
	}
	if publish && strings.ContainsAny(s, "+#") {
		return []error{fmt.Errorf("%s: %s %q must not contain wildcards", where, key, s)}
	}
	if !publish {
		// Subscribe topic: + a whole level, # last.
		levels := strings.Split(s, "/")
		for i, l := range levels {
			if strings.Contains(l, "+") && l != "+" || strings.Contains(l, "#") && (l != "#" || i != len(levels)-1) {
				return []error{fmt.Errorf("%s: %s %q has a misplaced wildcard", where, key, s)}
			}
		}
	}
	return nil
}

func tilde(m map[string]any) map[string]any {
	base, _ := m["~"].(string)
	delete(m, "~")
	for k, v := range m {
		s, ok := v.(string)
		if !ok || !strings.HasSuffix(k, "topic") || s == "" {
			continue
		}
		if strings.HasPrefix(s, "~") {
			s = base + s[1:]
		}
		if strings.HasSuffix(s, "~") {
			s = s[:len(s)-1] + base
		}
		m[k] = s
	}
	return m
}

func expandMap(m map[string]any, table map[string]string) map[string]any {
	out, _ := expand(m, table)
	return out
}

func validURL(v any, schemes ...string) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && slices.Contains(schemes, u.Scheme) && (u.Host != "" || u.Scheme == "homeassistant")
}

func num(m map[string]any, k string, def float64) float64 {
	if f, ok := m[k].(float64); ok {
		return f
	}
	return def
}

func in(v any, opts ...string) bool {
	s, ok := v.(string)
	return ok && slices.Contains(opts, s)
}

func set(xs ...string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
