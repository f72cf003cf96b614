package addoncheck

import (
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// selectorTypes are Core's selector types (homeassistant/helpers/selector.py).
var selectorTypes = []string{"action", "addon", "app", "area", "assist_pipeline", "attribute",
	"backup_location", "boolean", "color_rgb", "color_temp", "condition", "config_entry", "constant",
	"conversation_agent", "country", "date", "datetime", "device", "duration", "entity", "file",
	"floor", "icon", "label", "language", "location", "media", "navigation", "number", "object",
	"qr_code", "select", "selector", "state", "statistic", "target", "template", "text", "theme",
	"time", "trigger", "ui_action", "ui_color"}

var (
	blueprintKeys = []string{"name", "description", "domain", "author", "source_url", "homeassistant", "input"}
	inputKeys     = []string{"name", "description", "default", "selector"}
	sectionKeys   = []string{"name", "description", "icon", "collapsed", "input"}
	modes         = []string{"single", "restart", "queued", "parallel"}
	automationTop = []string{"blueprint", "alias", "description", "mode", "max", "max_exceeded", "variables",
		"trigger_variables", "triggers", "trigger", "conditions", "condition", "actions", "action", "id", "trace"}
	reMinVersion = regexp.MustCompile(`^\d{4}\.\d{1,2}\.\d+$`)
	// reEntityID is a literal entity id (domain.object_id).
	reEntityID = regexp.MustCompile(`^[a-z_]+\.[a-z0-9_]+$`)
	// reTemplateEntity finds entity ids written into templates.
	reTemplateEntity = regexp.MustCompile(`(?:states|is_state|state_attr|is_state_attr|has_value|expand)\(\s*['"]([a-z_]+\.[a-z0-9_]+)['"]|states\.([a-z_]+)\.([a-z0-9_]+)`)
)

// Blueprint is what CheckBlueprint learned: the declared inputs and the
// service actions the body calls.
type Blueprint struct {
	Name    string
	Domain  string
	Inputs  map[string]*yaml.Node // input name -> its definition
	Actions []string              // service actions called, e.g. number.set_value
}

// CheckBlueprint checks an automation or script blueprint against Core's
// blueprint rules: a blueprint block with name, domain and inputs (each a
// name and a selector of a known type; sections allowed; names unique),
// every !input tag naming a declared input and every input used, no entity
// written into the body (every entity is an input), and for automations
// triggers and actions.
func CheckBlueprint(file string, data []byte) (Blueprint, []error) {
	r := &report{file: file}
	var bp Blueprint
	root := parse(r, data)
	if root == nil {
		return bp, r.errs
	}
	meta := get(root, "blueprint")
	if meta == nil || meta.Kind != yaml.MappingNode {
		r.add(root, "blueprint", "a blueprint block (a mapping) is required")
		return bp, r.errs
	}
	for _, p := range pairs(meta) {
		if !slices.Contains(blueprintKeys, p[0].Value) {
			r.add(p[0], join("blueprint", p[0].Value), "unknown key")
		}
	}
	if v := get(meta, "name"); !isStr(v) || v.Value == "" {
		r.add(meta, "blueprint.name", "is required (a non-empty string)")
	} else {
		bp.Name = v.Value
	}
	if v := get(meta, "domain"); !isStr(v) || (v.Value != "automation" && v.Value != "script") {
		r.add(meta, "blueprint.domain", "must be automation or script")
	} else {
		bp.Domain = v.Value
	}
	if v := get(meta, "source_url"); v != nil && !isURL(v) {
		r.add(v, "blueprint.source_url", "must be an http(s) URL")
	}
	if ha := get(meta, "homeassistant"); ha != nil {
		v := get(ha, "min_version")
		if v == nil || !isStr(v) || !reMinVersion.MatchString(v.Value) {
			r.add(ha, "blueprint.homeassistant.min_version", "must be a quoted version like \"2025.10.0\"")
		}
	}
	bp.Inputs = map[string]*yaml.Node{}
	in := get(meta, "input")
	if in == nil {
		r.add(meta, "blueprint.input", "is required: a blueprint takes its entities as inputs")
	} else {
		checkInputs(r, in, "blueprint.input", bp.Inputs, 0)
	}

	used := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		n = deref(n)
		if n == nil {
			return
		}
		switch n.Kind {
		case yaml.ScalarNode:
			switch {
			case n.Tag == "!input":
				used[n.Value] = true
				if _, ok := bp.Inputs[n.Value]; !ok {
					r.add(n, path, "!input %s names no declared input", n.Value)
				}
			case strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!"):
				r.add(n, path, "tag %s is not allowed in a blueprint (only !input)", n.Tag)
			case n.Tag == "!!str":
				for _, m := range reTemplateEntity.FindAllStringSubmatch(n.Value, -1) {
					id := m[1]
					if id == "" {
						id = m[2] + "." + m[3]
					}
					r.add(n, path, "the template names the entity %s: make it an input", id)
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		case yaml.MappingNode:
			for _, p := range pairs(n) {
				k := p[0].Value
				if k == "entity_id" || k == "device_id" || k == "area_id" {
					checkNoLiteralIDs(r, p[1], join(path, k))
				}
				if (k == "action" || k == "service") && isStr(p[1]) && strings.Contains(p[1].Value, ".") && !strings.Contains(p[1].Value, "{") {
					bp.Actions = append(bp.Actions, p[1].Value)
				}
				walk(p[1], join(path, k))
			}
		}
	}
	for _, p := range pairs(root) {
		if p[0].Value == "blueprint" {
			continue
		}
		if bp.Domain == "automation" && !slices.Contains(automationTop, p[0].Value) {
			r.add(p[0], p[0].Value, "unknown automation key")
		}
		walk(p[1], p[0].Value)
	}
	for _, k := range sortedKeys(bp.Inputs) {
		if !used[k] {
			r.add(bp.Inputs[k], join("blueprint.input", k), "is declared but never used (!input %s)", k)
		}
	}
	switch bp.Domain {
	case "automation":
		if get(root, "triggers") == nil && get(root, "trigger") == nil {
			r.add(root, "triggers", "an automation blueprint needs triggers")
		}
		if get(root, "actions") == nil && get(root, "action") == nil {
			r.add(root, "actions", "an automation blueprint needs actions")
		}
	case "script":
		if get(root, "sequence") == nil {
			r.add(root, "sequence", "a script blueprint needs a sequence")
		}
	}
	if v := get(root, "mode"); v != nil && (!isStr(v) || !slices.Contains(modes, v.Value)) {
		r.add(v, "mode", "must be one of %s", strings.Join(modes, ", "))
	}
	checkSentences(r, root)
	return bp, r.errs
}

// checkInputs checks input definitions and sections (one level).
func checkInputs(r *report, in *yaml.Node, path string, out map[string]*yaml.Node, depth int) {
	if in.Kind != yaml.MappingNode {
		r.add(in, path, "must be a mapping of inputs")
		return
	}
	for _, p := range pairs(in) {
		k, v := p[0].Value, p[1]
		at := join(path, k)
		if isNull(v) {
			r.add(p[0], at, "needs a name and a selector")
			continue
		}
		if v.Kind != yaml.MappingNode {
			r.add(v, at, "must be a mapping")
			continue
		}
		if sub := get(v, "input"); sub != nil {
			if depth > 0 {
				r.add(v, at, "sections cannot be nested")
				continue
			}
			for _, q := range pairs(v) {
				if !slices.Contains(sectionKeys, q[0].Value) {
					r.add(q[0], join(at, q[0].Value), "unknown section key")
				}
			}
			checkInputs(r, sub, join(at, "input"), out, depth+1)
			continue
		}
		if _, dup := out[k]; dup {
			r.add(p[0], at, "input names must be unique across sections")
		}
		out[k] = v
		for _, q := range pairs(v) {
			if !slices.Contains(inputKeys, q[0].Value) {
				r.add(q[0], join(at, q[0].Value), "unknown input key")
			}
		}
		if n := get(v, "name"); !isStr(n) || n.Value == "" {
			r.add(v, join(at, "name"), "is required: the UI shows it")
		}
		sel := get(v, "selector")
		if sel == nil || sel.Kind != yaml.MappingNode || len(sel.Content) != 2 {
			r.add(v, join(at, "selector"), "must be a mapping with exactly one selector type")
			continue
		}
		if typ := sel.Content[0].Value; !slices.Contains(selectorTypes, typ) {
			r.add(sel.Content[0], join(at, "selector"), "%q is not a selector type", typ)
		}
	}
}

// checkNoLiteralIDs refuses entity, device and area ids written into a
// blueprint: every one must come from an input (or a template over inputs).
func checkNoLiteralIDs(r *report, v *yaml.Node, path string) {
	v = deref(v)
	switch {
	case v == nil:
	case v.Kind == yaml.SequenceNode:
		for _, c := range v.Content {
			checkNoLiteralIDs(r, c, path+"[]")
		}
	case v.Tag == "!input":
	case v.Kind == yaml.ScalarNode && strings.Contains(v.Value, "{{"):
	case v.Kind == yaml.ScalarNode:
		if v.Value != "" {
			r.add(v, path, "%q is written into the blueprint: make it an input", v.Value)
		}
	}
}

// checkSentences checks the command sentences of conversation triggers:
// balanced [optional], (a|b) and {slot} groups, and no empty alternatives.
func checkSentences(r *report, root *yaml.Node) {
	var trig *yaml.Node
	if trig = get(root, "triggers"); trig == nil {
		trig = get(root, "trigger")
	}
	if trig == nil || trig.Kind != yaml.SequenceNode {
		return
	}
	for _, t := range trig.Content {
		t = deref(t)
		kind := get(t, "trigger")
		if kind == nil {
			kind = get(t, "platform")
		}
		if kind == nil || kind.Value != "conversation" {
			continue
		}
		cmd := get(t, "command")
		var sentences []*yaml.Node
		switch {
		case cmd == nil:
			r.add(t, "triggers[].command", "a conversation trigger needs command sentences")
		case cmd.Kind == yaml.SequenceNode:
			sentences = cmd.Content
		default:
			sentences = []*yaml.Node{cmd}
		}
		for _, s := range sentences {
			if msg := sentenceProblem(s.Value); msg != "" {
				r.add(s, "triggers[].command", "%q: %s", s.Value, msg)
			}
		}
	}
}

func sentenceProblem(s string) string {
	if strings.TrimSpace(s) == "" {
		return "empty sentence"
	}
	var stack []rune
	closer := map[rune]rune{']': '[', ')': '(', '}': '{'}
	for _, c := range s {
		switch c {
		case '[', '(', '{':
			stack = append(stack, c)
		case ']', ')', '}':
			if len(stack) == 0 || stack[len(stack)-1] != closer[c] {
				return "unbalanced " + string(c)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return "unclosed " + string(stack[len(stack)-1])
	}
	if strings.Contains(s, "||") || strings.Contains(s, "(|") || strings.Contains(s, "|)") {
		return "empty alternative"
	}
	return ""
}
