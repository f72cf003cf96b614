package web

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
)

// planView is a pending plan as the page shows it: what is added,
// changed, replaced and destroyed, each resource with the attributes that
// matter. Secrets never reach it: values tofu marks sensitive, keys that
// carry secrets (user_data holds a machine config) and anything that looks
// like a key or certificate are hidden, and long values are only counted.
type planView struct {
	Add, Change, Replace, Destroy []resourceDiff
	// Counts as tofu's summary gives them (a replacement is one add and
	// one destroy).
	Counts struct{ Add, Change, Destroy int }
}

// Empty reports a plan with no change.
func (p *planView) Empty() bool {
	return len(p.Add)+len(p.Change)+len(p.Replace)+len(p.Destroy) == 0
}

type resourceDiff struct {
	Address string
	Action  string // create, update, replace, delete
	Reason  string // why tofu replaces or deletes it, in words
	Attrs   []attrDiff
	More    int // attributes left out
}

type attrDiff struct {
	Path          string
	Before, After string // "" when the side has no value
	Forces        bool   // forces a replacement
}

// maxAttrs bounds the attributes shown per resource.
const maxAttrs = 24

// secretKey matches attribute names whose values are secrets or machine
// configs; the name is shown, never the value.
var reHex = regexp.MustCompile(`^[0-9a-f]+$`)

var secretKey = regexp.MustCompile(`(?i)(user_?data|password|passphrase|secret|token|private|_key$|^key$|cert|ca_|kubeconfig|talosconfig|machine_?config|credential)`)

// newPlanView turns tofu's plan JSON into the page's diff.
func newPlanView(p *tfjson.Plan) *planView {
	v := &planView{}
	if p == nil {
		return v
	}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Mode == tfjson.DataResourceMode {
			continue
		}
		a := rc.Change.Actions
		d := resourceDiff{Address: rc.Address, Reason: reason(rc.ActionReason)}
		switch {
		case a.Replace():
			d.Action = "replace"
		case a.Create():
			d.Action = "create"
		case a.Update():
			d.Action = "update"
		case a.Delete():
			d.Action = "delete"
		default:
			continue // no-op, read
		}
		d.Attrs, d.More = attrDiffs(d.Action, rc.Change)
		switch d.Action {
		case "create":
			v.Add = append(v.Add, d)
			v.Counts.Add++
		case "update":
			v.Change = append(v.Change, d)
			v.Counts.Change++
		case "replace":
			v.Replace = append(v.Replace, d)
			v.Counts.Add++
			v.Counts.Destroy++
		case "delete":
			v.Destroy = append(v.Destroy, d)
			v.Counts.Destroy++
		}
	}
	return v
}

// reason words tofu's action_reason.
func reason(r tfjson.ActionReason) string {
	switch r {
	case tfjson.ActionReasonNone:
		return ""
	case tfjson.ActionReasonReplaceBecauseTainted:
		return "it is tainted"
	case tfjson.ActionReasonReplaceByRequest:
		return "replacement was requested"
	case tfjson.ActionReasonReplaceBecauseCannotUpdate:
		return "an attribute that cannot change in place changes"
	case tfjson.ActionReasonReplaceByTriggers:
		return "its replace triggers changed (another machine)"
	case tfjson.ActionReasonDeleteBecauseNoResourceConfig:
		return "the tenant no longer declares it"
	case tfjson.ActionReasonDeleteBecauseCountIndex, tfjson.ActionReasonDeleteBecauseEachKey:
		return "the count went down"
	case tfjson.ActionReasonDeleteBecauseNoModule:
		return "its module is gone"
	}
	return strings.ReplaceAll(strings.ToLower(string(r)), "_", " ")
}

// attrDiffs lists the attributes of a change: a new resource's values, an
// updated or replaced one's changed values, a deleted one's identity.
func attrDiffs(action string, c *tfjson.Change) ([]attrDiff, int) {
	before, beforeRaw := leaves(c.Before, c.BeforeSensitive, nil)
	after, afterRaw := leaves(c.After, c.AfterSensitive, c.AfterUnknown)
	forces := map[string]bool{}
	for _, rp := range c.ReplacePaths {
		if parts, ok := rp.([]any); ok {
			forces[pathString(parts)] = true
		}
	}
	var out []attrDiff
	switch action {
	case "create":
		for _, k := range sortedKeys(after) {
			if after[k] != "null" {
				out = append(out, attrDiff{Path: k, After: after[k]})
			}
		}
	case "delete":
		for _, k := range []string{"id", "name", "input.node", "input.address"} {
			if b, ok := before[k]; ok && b != "null" {
				out = append(out, attrDiff{Path: k, Before: b})
			}
		}
	default:
		keys := sortedKeys(before)
		for k := range after {
			if _, ok := before[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		// a value that becomes unknown stands for everything under it
		unknown := map[string]bool{}
		for k, a := range after {
			if a == knownAfterApply {
				unknown[k] = true
			}
		}
		for _, k := range keys {
			b, hb := before[k]
			a, ha := after[k]
			if hb && ha && a == b {
				if !hidden(a) || reflect.DeepEqual(beforeRaw[k], afterRaw[k]) {
					continue
				}
				a = "(" + strings.Trim(a, "()") + ", changed)" // say a secret changes, never what
			}
			if !ha && under(k, unknown) {
				continue
			}
			if !hb {
				b = "null"
				if n := children(k, before); n > 0 {
					b = fmt.Sprintf("(%d values)", n)
				}
			}
			if !ha {
				a = "null"
			}
			out = append(out, attrDiff{Path: k, Before: b, After: a, Forces: forces[k] || forcesPrefix(forces, k)})
		}
	}
	if len(out) > maxAttrs {
		return out[:maxAttrs], len(out) - maxAttrs
	}
	return out, 0
}

// knownAfterApply is a value tofu learns only by applying.
const knownAfterApply = "(known after apply)"

// under reports whether path k lies under one of the paths in set.
func under(k string, set map[string]bool) bool {
	for p := range set {
		if strings.HasPrefix(k, p+".") || strings.HasPrefix(k, p+"[") {
			return true
		}
	}
	return false
}

// children counts the paths of m under k.
func children(k string, m map[string]string) int {
	n := 0
	for p := range m {
		if strings.HasPrefix(p, k+".") || strings.HasPrefix(p, k+"[") {
			n++
		}
	}
	return n
}

func forcesPrefix(forces map[string]bool, k string) bool {
	for f := range forces {
		if strings.HasPrefix(k, f+".") || strings.HasPrefix(k, f+"[") {
			return true
		}
	}
	return false
}

func pathString(parts []any) string {
	var b strings.Builder
	for _, p := range parts {
		switch x := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(x)
		case float64:
			fmt.Fprintf(&b, "[%d]", int(x))
		case json.Number:
			fmt.Fprintf(&b, "[%s]", x)
		}
	}
	return b.String()
}

// maxDepth bounds how deep values are flattened; deeper parts are counted.
const maxDepth = 4

// hidden reports a value shown as a secret.
func hidden(s string) bool { return s == "(hidden)" || s == "(sensitive)" }

// leaves flattens a value into path → shown value, honouring the
// sensitive and unknown markers (which mirror the value's shape); raw
// keeps the values of the hidden ones, only to tell whether they change.
func leaves(v, sensitive, unknown any) (out map[string]string, raw map[string]any) {
	out, raw = map[string]string{}, map[string]any{}
	var walk func(path string, v, s, u any, depth int)
	walk = func(path string, v, s, u any, depth int) {
		key := path[strings.LastIndexAny(path, ".[")+1:]
		switch {
		case s == true:
			out[path], raw[path] = "(sensitive)", v
			return
		case u == true:
			out[path] = knownAfterApply
			return
		case path != "" && secretKey.MatchString(strings.TrimSuffix(key, "]")):
			if v == nil {
				out[path] = "null"
			} else {
				out[path], raw[path] = "(hidden)", v
			}
			return
		}
		switch x := v.(type) {
		case map[string]any:
			if depth >= maxDepth {
				out[path] = fmt.Sprintf("(%d keys)", len(x))
				return
			}
			sm, _ := s.(map[string]any)
			um, _ := u.(map[string]any)
			for k, xv := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, xv, sm[k], um[k], depth+1)
			}
			for k, uv := range um { // unknown keys the value does not have yet
				if _, ok := x[k]; !ok && uv == true {
					p := k
					if path != "" {
						p = path + "." + k
					}
					out[p] = knownAfterApply
				}
			}
		case []any:
			if depth >= maxDepth {
				out[path] = fmt.Sprintf("(%d items)", len(x))
				return
			}
			ss, _ := s.([]any)
			us, _ := u.([]any)
			if len(x) == 0 {
				out[path] = "[]"
			}
			for i, xv := range x {
				var si, ui any
				if i < len(ss) {
					si = ss[i]
				}
				if i < len(us) {
					ui = us[i]
				}
				walk(fmt.Sprintf("%s[%d]", path, i), xv, si, ui, depth+1)
			}
		default:
			out[path] = shown(x)
			if hidden(out[path]) {
				raw[path] = x
			}
		}
	}
	walk("", v, sensitive, unknown, 0)
	delete(out, "")
	return out, raw
}

// shown is a scalar as the page shows it.
func shown(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if strings.Contains(x, "-----BEGIN") || strings.Contains(x, "PRIVATE KEY") {
			return "(hidden)"
		}
		if n := len(x); n > 120 || strings.Count(x, "\n") > 2 {
			return fmt.Sprintf("(%d characters)", n)
		}
		if len(x) >= 40 && reHex.MatchString(x) { // a hash: its start tells them apart
			return strconv.Quote(x[:12] + "…")
		}
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	}
	return fmt.Sprint(v)
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
