package addoncheck

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Values the Supervisor accepts (supervisor/const.py, apps/const.py).
var (
	archAll        = []string{"aarch64", "amd64"}
	archDeprecated = []string{"armhf", "armv7", "i386"}
	startups       = []string{"initialize", "system", "services", "application", "once"}
	boots          = []string{"auto", "manual", "manual_only"}
	stages         = []string{"stable", "experimental", "deprecated"}
	backupModes    = []string{"hot", "cold"}
	roles          = []string{"default", "homeassistant", "backup", "manager", "admin"}
	mapTypes       = []string{"data", "config", "ssl", "local_apps", "backup", "share", "media",
		"homeassistant_config", "all_app_configs", "app_config", "addons", "all_addon_configs", "addon_config"}
	// legacyMapTypes are deprecated since Supervisor 2026.07 (a warning),
	// but a Supervisor older than that does not know their replacements.
	legacyMapTypes = map[string]string{"addons": "local_apps", "all_addon_configs": "all_app_configs", "addon_config": "app_config"}
)

// boolKeys, strKeys and the others are the typed optional keys of
// _SCHEMA_APP_CONFIG.
var (
	boolKeys = []string{"init", "ingress", "ingress_stream", "panel_admin", "host_network", "host_pid",
		"host_ipc", "host_uts", "host_dbus", "udev", "tmpfs", "apparmor", "full_access", "audio", "video",
		"gpio", "usb", "uart", "devicetree", "kernel_modules", "realtime", "hassio_api", "homeassistant_api",
		"stdin", "legacy", "docker_api", "auth_api", "journald"}
	strKeys     = []string{"ingress_entry", "panel_icon", "panel_title", "backup_pre", "backup_post"}
	strListKeys = []string{"devices", "discovery", "backup_exclude", "privileged", "machine"}
	otherKeys   = []string{"name", "version", "slug", "description", "arch", "url", "startup", "boot",
		"stage", "ports", "ports_description", "watchdog", "webui", "ingress_port", "homeassistant",
		"map", "environment", "hassio_role", "services", "backup", "options", "schema", "image",
		"ulimits", "timeout", "breaking_versions"}
	// deprecatedKeys are accepted but ignored, with a warning.
	deprecatedKeys = map[string]string{
		"advanced":   "deprecated since Supervisor 2026.03 and ignored",
		"codenotary": "deprecated and ignored",
	}
)

var (
	reSlug      = regexp.MustCompile(`^[-_.A-Za-z0-9]+$`)
	reService   = regexp.MustCompile(`^(mqtt|mysql):(provide|want|need)$`)
	reWatchdog  = regexp.MustCompile(`^(?:https?|\[PROTO:\w+\]|tcp)://\[HOST\]:(\[PORT:\d+\]|\d+).*$`)
	reWebUI     = regexp.MustCompile(`^(?:https?|\[PROTO:\w+\])://\[HOST\]:\[PORT:\d+\].*$`)
	reImagePart = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	reRegistry  = regexp.MustCompile(`^(?:localhost|[a-z0-9-]+(?:\.[a-z0-9-]+)+)(?::\d+)?$`)
	// reVersion is a Core version: YYYY.M.patch (optionally a pre-release).
	reCoreVersion = regexp.MustCompile(`^\d{4}\.\d{1,2}\.\d+(?:[a-z]+\d*)?$`)
	reEnvKey      = regexp.MustCompile(`^\w*$`)
)

// reSchemaElement is RE_SCHEMA_ELEMENT of supervisor/apps/options.py.
var reSchemaElement = regexp.MustCompile(`^(?:` +
	`|bool` +
	`|email` +
	`|url` +
	`|port` +
	`|device(?:\((?P<filter>subsystem=[a-z]+)\))?` +
	`|str(?:\((?P<s_min>\d+)?,(?P<s_max>\d+)?\))?` +
	`|password(?:\((?P<p_min>\d+)?,(?P<p_max>\d+)?\))?` +
	`|int(?:\((?P<i_min>-?\d+)?,(?P<i_max>-?\d+)?\))?` +
	`|float(?:\((?P<f_min>-?\d*\.?\d+)?,(?P<f_max>-?\d*\.?\d+)?\))?` +
	`|match\((?P<match>.*)\)` +
	`|list\((?P<list>.+)\)` +
	`)\??$`)

// Manifest is what CheckConfig learned that other checks need.
type Manifest struct {
	Version string
	Options map[string]*yaml.Node
	Schema  map[string]*yaml.Node // nil when schema: false
}

// CheckConfig checks config.yaml (file names it in errors) against the
// Supervisor's _SCHEMA_APP_CONFIG and the options against their schema.
func CheckConfig(file string, data []byte) (Manifest, []error) {
	r := &report{file: file}
	root := parse(r, data)
	var man Manifest
	if root == nil {
		return man, r.errs
	}
	known := map[string]bool{}
	for _, ks := range [][]string{boolKeys, strKeys, strListKeys, otherKeys} {
		for _, k := range ks {
			known[k] = true
		}
	}
	for _, p := range pairs(root) {
		k, v := p[0].Value, p[1]
		switch {
		case deprecatedKeys[k] != "":
			r.add(p[0], k, "%s; remove it", deprecatedKeys[k])
		case !known[k]:
			r.add(p[0], k, "unknown key (the Supervisor drops it silently)")
		case slices.Contains(boolKeys, k):
			if !isBool(v) {
				r.add(v, k, "must be true or false, not %s", kindName(v))
			}
		case slices.Contains(strKeys, k):
			if !isStr(v) {
				r.add(v, k, "must be a string, not %s", kindName(v))
			}
		case slices.Contains(strListKeys, k):
			checkStrList(r, v, k, nil)
		}
	}
	required := func(k string) *yaml.Node {
		v := get(root, k)
		if v == nil {
			r.add(root, k, "is required")
		}
		return v
	}
	if v := required("name"); v != nil && (!isStr(v) || v.Value == "") {
		r.add(v, "name", "must be a non-empty string")
	}
	if v := required("version"); v != nil {
		if !isStr(v) || v.Value == "" {
			r.add(v, "version", "must be a quoted string (YAML reads 0.1 as a number), not %s", kindName(v))
		} else {
			man.Version = v.Value
		}
	}
	if v := required("slug"); v != nil && (!isStr(v) || !reSlug.MatchString(v.Value)) {
		r.add(v, "slug", "must match %s, not %s", reSlug, kindName(v))
	}
	if v := required("description"); v != nil && (!isStr(v) || v.Value == "") {
		r.add(v, "description", "must be a non-empty string")
	}
	if v := required("arch"); v != nil {
		checkStrList(r, v, "arch", func(n *yaml.Node, s string) {
			switch {
			case slices.Contains(archDeprecated, s):
				r.add(n, "arch", "%q is deprecated; use %s", s, strings.Join(archAll, ", "))
			case !slices.Contains(archAll, s):
				r.add(n, "arch", "%q is not one of %s", s, strings.Join(archAll, ", "))
			}
		})
		if v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
			r.add(v, "arch", "must name at least one architecture")
		}
	}
	enum := func(k string, allowed []string) {
		if v := get(root, k); v != nil && (!isStr(v) || !slices.Contains(allowed, v.Value)) {
			r.add(v, k, "must be one of %s, not %s", strings.Join(allowed, ", "), kindName(v))
		}
	}
	enum("startup", startups)
	enum("boot", boots)
	enum("stage", stages)
	enum("backup", backupModes)
	enum("hassio_role", roles)
	if v := get(root, "url"); v != nil && !isURL(v) {
		r.add(v, "url", "must be an http(s) URL, not %s", kindName(v))
	}
	if v := get(root, "homeassistant"); v != nil && (!isStr(v) || !reCoreVersion.MatchString(v.Value)) {
		r.add(v, "homeassistant", "must be a quoted Core version like \"2025.10.0\", not %s", kindName(v))
	}
	if v := get(root, "watchdog"); v != nil && (!isStr(v) || !reWatchdog.MatchString(v.Value)) {
		r.add(v, "watchdog", "must look like http://[HOST]:[PORT:8099]/health or tcp://[HOST]:[PORT:80], not %s", kindName(v))
	}
	if v := get(root, "webui"); v != nil && (!isStr(v) || !reWebUI.MatchString(v.Value)) {
		r.add(v, "webui", "must look like http://[HOST]:[PORT:8080]/, not %s", kindName(v))
	}
	if v := get(root, "timeout"); v != nil {
		n, err := strconv.Atoi(v.Value)
		if !isInt(v) || err != nil || n < 10 || n > 300 {
			r.add(v, "timeout", "must be a whole number of seconds from 10 to 300, not %s", kindName(v))
		}
	}
	if v := get(root, "ingress_port"); v != nil {
		n, err := strconv.Atoi(v.Value)
		if !isInt(v) || err != nil || n < 0 || n > 65535 {
			r.add(v, "ingress_port", "must be a port (0 picks one), not %s", kindName(v))
		}
	}
	checkIngress(r, root)
	if v := get(root, "services"); v != nil {
		checkStrList(r, v, "services", func(n *yaml.Node, s string) {
			if !reService.MatchString(s) {
				r.add(n, "services", "%q must be mqtt or mysql with provide, want or need, e.g. mqtt:need", s)
			}
		})
	}
	if v := get(root, "breaking_versions"); v != nil {
		checkStrList(r, v, "breaking_versions", nil)
	}
	if v := get(root, "image"); v != nil {
		if !isStr(v) {
			r.add(v, "image", "must be a string, not %s", kindName(v))
		} else if msg := checkImage(v.Value); msg != "" {
			r.add(v, "image", "%s", msg)
		}
	}
	if v := get(root, "environment"); v != nil {
		if v.Kind != yaml.MappingNode {
			r.add(v, "environment", "must be a mapping of names to strings")
		} else {
			for _, p := range pairs(v) {
				if !reEnvKey.MatchString(p[0].Value) || !isStr(p[1]) {
					r.add(p[1], join("environment", p[0].Value), "must be a string under a word name")
				}
			}
		}
	}
	if v := get(root, "map"); v != nil {
		checkMap(r, v)
	}
	for _, k := range []string{"ports", "ports_description", "ulimits"} {
		if v := get(root, k); v != nil && v.Kind != yaml.MappingNode {
			r.add(v, k, "must be a mapping, not %s", kindName(v))
		}
	}
	man.Options, man.Schema = checkOptions(r, get(root, "options"), get(root, "schema"))
	checkHostNetwork(r, root, man.Schema) // netboot.go
	return man, r.errs
}

// reIcon is a Material Design Icons name, the only icons the sidebar shows.
var reIcon = regexp.MustCompile(`^mdi:[a-z0-9]+(?:-[a-z0-9]+)*$`)

// ingressKeys only mean something with ingress: true.
var ingressKeys = []string{"ingress_port", "ingress_entry", "ingress_stream", "panel_icon", "panel_title", "panel_admin"}

// checkIngress checks the ingress and panel keys (apps/validate.py and
// how the Supervisor and the frontend use them) and the backup commands.
func checkIngress(r *report, root *yaml.Node) {
	ingress := get(root, "ingress")
	on := ingress != nil && isBool(ingress) && ingress.Value == "true"
	for _, k := range ingressKeys {
		if v := get(root, k); v != nil && !on {
			r.add(v, k, "has no effect without ingress: true")
		}
	}
	if v := get(root, "panel_icon"); v != nil && isStr(v) && !reIcon.MatchString(v.Value) {
		r.add(v, "panel_icon", "%q must be a Material Design icon such as mdi:kubernetes", v.Value)
	}
	if v := get(root, "panel_title"); v != nil && isStr(v) && strings.TrimSpace(v.Value) == "" {
		r.add(v, "panel_title", "must not be empty (leave it out to show the add-on's name)")
	}
	if v := get(root, "ingress_entry"); v != nil && isStr(v) {
		// the Supervisor appends it to /api/hassio_ingress/<token>/
		if strings.HasPrefix(v.Value, "/") || strings.Contains(v.Value, "://") || slices.Contains(strings.Split(v.Value, "/"), "..") {
			r.add(v, "ingress_entry", "%q must be a path relative to the ingress root, without a leading / or ..", v.Value)
		}
	}
	port := get(root, "ingress_port")
	if on && port != nil && port.Value == "0" {
		if hn := get(root, "host_network"); hn == nil || hn.Value != "true" {
			r.add(port, "ingress_port", "0 (a port picked at start) is for host_network: true add-ons only")
		}
	}
	if on {
		n := "8099"
		if port != nil {
			n = port.Value
		}
		if ports := get(root, "ports"); ports != nil && ports.Kind == yaml.MappingNode {
			for _, p := range pairs(ports) {
				if strings.SplitN(p[0].Value, "/", 2)[0] == n && !isNull(p[1]) {
					r.add(p[1], join("ports", p[0].Value), "maps the ingress port to the host: the panel would be reachable without Home Assistant's login")
				}
			}
		}
	}
	for _, k := range []string{"backup_pre", "backup_post"} {
		v := get(root, k)
		if v == nil {
			continue
		}
		if isStr(v) && strings.TrimSpace(v.Value) == "" {
			r.add(v, k, "must be a command, not empty")
		}
		if b := get(root, "backup"); b != nil && b.Value == "cold" {
			r.add(v, k, "is ignored with backup: cold (the add-on is stopped instead)")
		}
	}
}

func isURL(v *yaml.Node) bool {
	if !isStr(v) {
		return false
	}
	u, err := url.Parse(v.Value)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// checkStrList checks a list of strings and calls each for every item.
func checkStrList(r *report, v *yaml.Node, path string, each func(*yaml.Node, string)) {
	if v.Kind != yaml.SequenceNode {
		r.add(v, path, "must be a list, not %s", kindName(v))
		return
	}
	for _, it := range v.Content {
		it = deref(it)
		if !isStr(it) {
			r.add(it, path, "items must be strings, not %s", kindName(it))
			continue
		}
		if each != nil {
			each(it, it.Value)
		}
	}
}

// checkImage is the Supervisor's docker_image: registry/org/name, lower
// case, no tag (the tag is the version).
func checkImage(s string) string {
	parts := strings.Split(s, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		if parts[0] != strings.ToLower(parts[0]) || !reRegistry.MatchString(parts[0]) {
			return fmt.Sprintf("registry %q is not a lower-case host name", parts[0])
		}
		parts = parts[1:]
	}
	if len(parts) == 0 || parts[0] == "" {
		return "has no name"
	}
	for _, p := range parts {
		if strings.Contains(p, ":") {
			return fmt.Sprintf("%q must not carry a tag: the Supervisor pulls <image>:<version>", s)
		}
		if !reImagePart.MatchString(strings.ReplaceAll(p, "{arch}", "arch")) {
			return fmt.Sprintf("path component %q is not a valid image name", p)
		}
	}
	return ""
}

func checkMap(r *report, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		r.add(v, "map", "must be a list of {type, read_only, path}, not %s", kindName(v))
		return
	}
	for i, it := range v.Content {
		it = deref(it)
		path := fmt.Sprintf("map[%d]", i)
		if isStr(it) {
			r.add(it, path, "the string form %q is legacy; use {type: …, read_only: …}", it.Value)
			continue
		}
		if it.Kind != yaml.MappingNode {
			r.add(it, path, "must be a mapping, not %s", kindName(it))
			continue
		}
		for _, p := range pairs(it) {
			switch k, x := p[0].Value, p[1]; k {
			case "type":
				if !isStr(x) || !slices.Contains(mapTypes, x.Value) {
					r.add(x, path+".type", "must be one of %s, not %s", strings.Join(mapTypes, ", "), kindName(x))
				}
			case "read_only":
				if !isBool(x) {
					r.add(x, path+".read_only", "must be true or false, not %s", kindName(x))
				}
			case "path":
				if !isStr(x) || !strings.HasPrefix(x.Value, "/") {
					r.add(x, path+".path", "must be an absolute path, not %s", kindName(x))
				}
			default:
				r.add(p[0], path+"."+k, "unknown key")
			}
		}
		if get(it, "type") == nil {
			r.add(it, path, "needs a type")
		}
	}
}

// checkOptions checks the schema's elements, every option's default against
// its schema, and that each mandatory option has a default.
func checkOptions(r *report, opts, schema *yaml.Node) (map[string]*yaml.Node, map[string]*yaml.Node) {
	options := map[string]*yaml.Node{}
	if opts != nil {
		if opts.Kind != yaml.MappingNode {
			r.add(opts, "options", "must be a mapping, not %s", kindName(opts))
		} else {
			for _, p := range pairs(opts) {
				options[p[0].Value] = p[1]
			}
		}
	}
	if isBool(schema) && schema.Value == "false" {
		return options, nil
	}
	elems := map[string]*yaml.Node{}
	if schema != nil {
		if schema.Kind != yaml.MappingNode {
			r.add(schema, "schema", "must be a mapping or false, not %s", kindName(schema))
			return options, elems
		}
		for _, p := range pairs(schema) {
			elems[p[0].Value] = p[1]
			checkElement(r, p[1], "schema."+p[0].Value, 0)
		}
	}
	for _, k := range sortedKeys(options) {
		v := options[k]
		el, ok := elems[k]
		if !ok {
			r.add(v, "options."+k, "has no schema (the Supervisor drops it with a warning)")
			continue
		}
		if s := el; isStr(s) && strings.HasSuffix(s.Value, "?") {
			r.add(v, "options."+k, "has a default but its schema %q is optional: drop the default or the ?", s.Value)
		}
		validateValue(r, el, v, "options."+k)
	}
	for _, k := range sortedKeys(elems) {
		checkDefault(r, elems[k], options[k], k)
	}
	return options, elems
}

// checkDefault checks that a mandatory option (no ?) and every section
// (a mapping) has a default, down into the sections: the Supervisor
// refuses to start an add-on with a missing option ("Missing option … in
// root"), and a section the defaults leave out is missing until the user
// saves the form. def is the default, nil when there is none.
func checkDefault(r *report, el, def *yaml.Node, path string) {
	switch {
	case el.Kind == yaml.MappingNode:
		if def == nil {
			r.add(el, "schema."+path, "is a section without a default: give it one in options (at least {}), or the add-on does not start")
			return
		}
		if def.Kind != yaml.MappingNode {
			return // reported by validateValue
		}
		for _, p := range pairs(el) {
			checkDefault(r, p[1], get(def, p[0].Value), join(path, p[0].Value))
		}
	case def == nil && el.Kind == yaml.SequenceNode && len(el.Content) == 1 &&
		!(isStr(deref(el.Content[0])) && strings.HasSuffix(deref(el.Content[0]).Value, "?")):
		r.add(el, "schema."+path, "is a mandatory list but has no default in options (at least []): the add-on would not start")
	case def == nil && isStr(el) && !strings.HasSuffix(el.Value, "?"):
		r.add(el, "schema."+path, "is mandatory (no ?) but has no default in options: the add-on would not start")
	case def != nil && isStr(el) && strings.HasSuffix(el.Value, "?") && strings.Contains(path, "."):
		r.add(def, "options."+path, "has a default but its schema %q is optional: drop the default or the ?", el.Value)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// checkElement checks one schema element (SCHEMA_ELEMENT): a type string,
// a list of one element, or a mapping of elements, at most two levels deep.
func checkElement(r *report, el *yaml.Node, path string, depth int) {
	switch {
	case isStr(el):
		m := reSchemaElement.FindStringSubmatch(el.Value)
		if m == nil {
			r.add(el, path, "%q is not a Supervisor schema type (str, password, int, float, bool, email, url, port, match(…), list(…), device)", el.Value)
			return
		}
		if re := m[reSchemaElement.SubexpIndex("match")]; strings.HasPrefix(el.Value, "match(") {
			if _, err := regexp.Compile(re); err != nil {
				r.add(el, path, "match(%s) does not compile: %v", re, err)
			}
		}
	case el.Kind == yaml.SequenceNode:
		if depth >= 2 {
			r.add(el, path, "nested deeper than two levels")
		}
		if len(el.Content) != 1 {
			r.add(el, path, "a list schema has exactly one element")
			return
		}
		if deref(el.Content[0]).Kind == yaml.SequenceNode {
			r.add(el, path, "a list may not directly contain another list")
			return
		}
		checkElement(r, deref(el.Content[0]), path+"[]", depth+1)
	case el.Kind == yaml.MappingNode:
		if depth >= 2 {
			r.add(el, path, "nested deeper than two levels")
		}
		for _, p := range pairs(el) {
			checkElement(r, p[1], path+"."+p[0].Value, depth+1)
		}
	default:
		r.add(el, path, "must be a type string, a list or a mapping, not %s", kindName(el))
	}
}

// validateValue checks an option value against its schema element the way
// AppOptions._validate_element does.
func validateValue(r *report, el, v *yaml.Node, path string) {
	switch {
	case el.Kind == yaml.SequenceNode:
		if v.Kind != yaml.SequenceNode {
			r.add(v, path, "must be a list, not %s", kindName(v))
			return
		}
		if len(el.Content) == 1 {
			for i, it := range v.Content {
				validateValue(r, deref(el.Content[0]), deref(it), fmt.Sprintf("%s[%d]", path, i))
			}
		}
		return
	case el.Kind == yaml.MappingNode:
		if v.Kind != yaml.MappingNode {
			r.add(v, path, "must be a mapping, not %s", kindName(v))
			return
		}
		for _, p := range pairs(v) {
			sub := get(el, p[0].Value)
			if sub == nil {
				r.add(p[0], join(path, p[0].Value), "has no schema")
				continue
			}
			validateValue(r, sub, p[1], join(path, p[0].Value))
		}
		return
	}
	if !isStr(el) {
		return
	}
	if msg := validateScalar(el.Value, v); msg != "" {
		r.add(v, path, "%s does not fit its schema %q: %s", kindName(v), el.Value, msg)
	}
}

// validateScalar returns why v does not fit the type string typ, or "".
func validateScalar(typ string, v *yaml.Node) string {
	if isNull(v) {
		return "a value is required"
	}
	if v.Kind != yaml.ScalarNode {
		return "must be a single value"
	}
	m := reSchemaElement.FindStringSubmatch(typ)
	if m == nil {
		return "unknown type"
	}
	group := func(name string) string { return m[reSchemaElement.SubexpIndex(name)] }
	bounds := func(lo, hi string) (float64, float64, bool, bool) {
		a, errA := strconv.ParseFloat(group(lo), 64)
		b, errB := strconv.ParseFloat(group(hi), 64)
		return a, b, errA == nil, errB == nil
	}
	s := v.Value
	base := strings.TrimSuffix(typ, "?")
	switch {
	case strings.HasPrefix(base, "str"), strings.HasPrefix(base, "password"):
		if v.Tag != "!!str" {
			return "must be a string"
		}
		lo, hi, hasLo, hasHi := bounds("s_min", "s_max")
		if strings.HasPrefix(base, "password") {
			lo, hi, hasLo, hasHi = bounds("p_min", "p_max")
		}
		n := float64(len([]rune(s)))
		if (hasLo && n < lo) || (hasHi && n > hi) {
			return fmt.Sprintf("length %d is out of range", int(n))
		}
	case strings.HasPrefix(base, "int"):
		n, err := strconv.Atoi(s)
		if v.Tag != "!!int" || err != nil {
			return "must be a whole number"
		}
		lo, hi, hasLo, hasHi := bounds("i_min", "i_max")
		if (hasLo && float64(n) < lo) || (hasHi && float64(n) > hi) {
			return fmt.Sprintf("%d is out of range", n)
		}
	case strings.HasPrefix(base, "float"):
		f, err := strconv.ParseFloat(s, 64)
		if (v.Tag != "!!float" && v.Tag != "!!int") || err != nil {
			return "must be a number"
		}
		lo, hi, hasLo, hasHi := bounds("f_min", "f_max")
		if (hasLo && f < lo) || (hasHi && f > hi) {
			return fmt.Sprintf("%v is out of range", f)
		}
	case base == "bool":
		if v.Tag != "!!bool" {
			return "must be true or false"
		}
	case base == "email":
		if !strings.Contains(s, "@") || strings.ContainsAny(s, " \t") {
			return "must be an e-mail address"
		}
	case base == "url":
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return "must be a URL"
		}
	case base == "port":
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return "must be a port 1–65535"
		}
	case strings.HasPrefix(base, "match("):
		// vol.Match uses Python's re.match: anchored at the start only.
		re, err := regexp.Compile(`^(?:` + group("match") + `)`)
		if err != nil {
			return "its pattern does not compile"
		}
		if !re.MatchString(s) {
			return "does not match"
		}
	case strings.HasPrefix(base, "list("):
		if !slices.Contains(strings.Split(group("list"), "|"), s) {
			return "is not one of " + strings.ReplaceAll(group("list"), "|", ", ")
		}
	case strings.HasPrefix(base, "device"):
		return "a device cannot have a default"
	}
	return ""
}

// CheckRepository checks repository.yaml (SCHEMA_REPOSITORY_CONFIG).
func CheckRepository(file string, data []byte) []error {
	r := &report{file: file}
	root := parse(r, data)
	if root == nil {
		return r.errs
	}
	for _, p := range pairs(root) {
		switch k, v := p[0].Value, p[1]; k {
		case "name", "maintainer":
			if !isStr(v) || v.Value == "" {
				r.add(v, k, "must be a non-empty string, not %s", kindName(v))
			}
		case "url":
			if !isURL(v) {
				r.add(v, k, "must be an http(s) URL, not %s", kindName(v))
			}
		default:
			r.add(p[0], k, "unknown key (name, url and maintainer are read)")
		}
	}
	if get(root, "name") == nil {
		r.add(root, "name", "is required")
	}
	return r.errs
}

// CheckTranslations checks a translations file (SCHEMA_APP_TRANSLATIONS)
// and that every option of the schema, nested fields included, has a name
// and a description, and nothing else is translated.
func CheckTranslations(file string, data []byte, schema map[string]*yaml.Node) []error {
	r := &report{file: file}
	root := parse(r, data)
	if root == nil {
		return r.errs
	}
	for _, p := range pairs(root) {
		switch p[0].Value {
		case "configuration":
		case "network":
			if p[1].Kind != yaml.MappingNode {
				r.add(p[1], "network", "must map ports to descriptions")
			}
		default:
			r.add(p[0], p[0].Value, "unknown key (configuration and network are read)")
		}
	}
	conf := get(root, "configuration")
	if conf == nil {
		if len(schema) > 0 {
			r.add(root, "configuration", "is required: the options have no names in the UI")
		}
		return r.errs
	}
	checkFields(r, conf, schema, "configuration")
	return r.errs
}

func checkFields(r *report, conf *yaml.Node, schema map[string]*yaml.Node, path string) {
	if conf.Kind != yaml.MappingNode {
		r.add(conf, path, "must be a mapping of options, not %s", kindName(conf))
		return
	}
	for _, p := range pairs(conf) {
		k, v := p[0].Value, p[1]
		at := join(path, k)
		el, ok := schema[k]
		if !ok {
			r.add(p[0], at, "translates an option the schema does not have")
		}
		if v.Kind != yaml.MappingNode {
			r.add(v, at, "must be {name, description}, not %s", kindName(v))
			continue
		}
		for _, q := range pairs(v) {
			switch q[0].Value {
			case "name", "description":
				if !isStr(q[1]) || strings.TrimSpace(q[1].Value) == "" {
					r.add(q[1], join(at, q[0].Value), "must be a non-empty string")
				}
			case "fields":
			default:
				r.add(q[0], join(at, q[0].Value), "unknown key (name, description and fields are read)")
			}
		}
		for _, need := range []string{"name", "description"} {
			if get(v, need) == nil {
				r.add(v, at, "has no %s", need)
			}
		}
		if el != nil {
			sub := nested(el)
			f := get(v, "fields")
			switch {
			case sub != nil && f == nil:
				r.add(v, at, "needs fields for its nested options")
			case sub != nil:
				checkFields(r, f, sub, join(at, "fields"))
			case f != nil:
				r.add(f, join(at, "fields"), "the option has no nested options")
			}
		}
	}
	for _, k := range sortedKeys(schema) {
		if get(conf, k) == nil {
			r.add(conf, join(path, k), "missing: every option needs a name and description")
		}
	}
}

// nested returns the sub-schema of a mapping (or list of mapping) element.
func nested(el *yaml.Node) map[string]*yaml.Node {
	if el.Kind == yaml.SequenceNode && len(el.Content) == 1 {
		el = deref(el.Content[0])
	}
	if el.Kind != yaml.MappingNode {
		return nil
	}
	out := map[string]*yaml.Node{}
	for _, p := range pairs(el) {
		out[p[0].Value] = p[1]
	}
	return out
}
