package addoncheck

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
)

// Defaults are the manifest's default options as Go values (what the
// Supervisor merges a user's stored options over).
func (m Manifest) Defaults() (map[string]any, error) {
	out := map[string]any{}
	for k, n := range m.Options {
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("options.%s: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// ValidateOptions checks options (decoded JSON) the way the Supervisor's
// AppOptions (apps/options.py) does before it stores them (POST
// /addons/<slug>/options) and at every start, before it writes
// /data/options.json: an option the schema does not have is dropped (the
// Supervisor logs a warning; dropped names them), every value must fit its
// type (str and password must be strings, int and float are coerced,
// match() is Python's re.match, anchored at the start only), and every
// option whose schema is not optional (no "?"), every list of such items
// and every section must be present. It returns what the Supervisor keeps.
// "!secret name" values are accepted unresolved.
func ValidateOptions(schema map[string]*yaml.Node, options map[string]any) (kept map[string]any, dropped []string, errs []error) {
	v := &optValidator{}
	kept = v.dict(schema, options, "")
	return kept, v.dropped, v.errs
}

type optValidator struct {
	dropped []string
	errs    []error
}

func (v *optValidator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// dict is _nested_validate_dict (and, at the root, __call__).
func (v *optValidator) dict(schema map[string]*yaml.Node, data map[string]any, path string) map[string]any {
	out := map[string]any{}
	for _, k := range sortedKeys(data) {
		el, ok := schema[k]
		if !ok {
			v.dropped = append(v.dropped, join(path, k))
			continue
		}
		if x, ok := v.element(el, data[k], join(path, k)); ok {
			out[k] = x
		}
	}
	// _check_missing_options
	for _, k := range sortedKeys(schema) {
		if _, ok := out[k]; ok {
			continue
		}
		if _, given := data[k]; given {
			continue // already reported
		}
		el := schema[k]
		if el.Kind == yaml.SequenceNode && len(el.Content) > 0 {
			el = deref(el.Content[0])
		}
		if isStr(el) && strings.HasSuffix(el.Value, "?") {
			continue
		}
		where := path
		if where == "" {
			where = "root"
		}
		v.fail(join(path, k), "missing option %q in %s", k, where)
	}
	return out
}

// element is _validate_element.
func (v *optValidator) element(el *yaml.Node, val any, path string) (any, bool) {
	switch el.Kind {
	case yaml.SequenceNode:
		list, ok := val.([]any)
		if !ok {
			v.fail(path, "invalid list")
			return nil, false
		}
		if len(el.Content) != 1 {
			v.fail(path, "a list schema has exactly one element")
			return nil, false
		}
		out := make([]any, 0, len(list))
		for i, it := range list {
			if x, ok := v.element(deref(el.Content[0]), it, fmt.Sprintf("%s[%d]", path, i)); ok {
				out = append(out, x)
			}
		}
		return out, true
	case yaml.MappingNode:
		m, ok := val.(map[string]any)
		if !ok {
			v.fail(path, "invalid dict")
			return nil, false
		}
		return v.dict(nested(el), m, path), true
	}
	x, msg := singleValue(el.Value, val)
	if msg != "" {
		v.fail(path, "%s (schema %q)", msg, el.Value)
		return nil, false
	}
	return x, true
}

// singleValue is _single_validate for a decoded JSON value: the value the
// Supervisor stores, or why it refuses it.
func singleValue(typ string, val any) (any, string) {
	if val == nil {
		return nil, "missing required option"
	}
	if s, ok := val.(string); ok && strings.HasPrefix(s, "!secret ") {
		return val, ""
	}
	m := reSchemaElement.FindStringSubmatch(typ)
	if m == nil {
		return nil, "unknown type"
	}
	group := func(name string) (float64, bool) {
		f, err := strconv.ParseFloat(m[reSchemaElement.SubexpIndex(name)], 64)
		return f, err == nil
	}
	inRange := func(n float64, lo, hi string) bool {
		if a, ok := group(lo); ok && n < a {
			return false
		}
		if b, ok := group(hi); ok && n > b {
			return false
		}
		return true
	}
	switch {
	case strings.HasPrefix(typ, "str"), strings.HasPrefix(typ, "password"):
		s, ok := val.(string)
		if !ok {
			return nil, "expected str"
		}
		lo, hi := "s_min", "s_max"
		if strings.HasPrefix(typ, "password") {
			lo, hi = "p_min", "p_max"
		}
		if !inRange(float64(utf8.RuneCountInString(s)), lo, hi) {
			return nil, fmt.Sprintf("length of value %d is out of range", utf8.RuneCountInString(s))
		}
		return s, ""
	case strings.HasPrefix(typ, "int"), strings.HasPrefix(typ, "port"):
		n, ok := coerceInt(val)
		if !ok {
			return nil, "expected int"
		}
		if strings.HasPrefix(typ, "port") {
			if n < 1 || n > 65535 {
				return nil, "not a port"
			}
		} else if !inRange(float64(n), "i_min", "i_max") {
			return nil, fmt.Sprintf("value %d is out of range", n)
		}
		return n, ""
	case strings.HasPrefix(typ, "float"):
		f, ok := coerceFloat(val)
		if !ok {
			return nil, "expected float"
		}
		if !inRange(f, "f_min", "f_max") {
			return nil, fmt.Sprintf("value %v is out of range", f)
		}
		return f, ""
	case strings.HasPrefix(typ, "bool"):
		switch x := val.(type) {
		case bool:
			return x, ""
		case string:
			switch strings.ToLower(x) {
			case "1", "true", "yes", "on", "enable":
				return true, ""
			case "0", "false", "no", "off", "disable":
				return false, ""
			}
			return nil, "expected boolean"
		case float64:
			return x != 0, ""
		}
		return nil, "expected boolean"
	case strings.HasPrefix(typ, "email"):
		s := pyStr(val)
		if !strings.Contains(s, "@") || strings.ContainsAny(s, " \t") {
			return nil, "expected an email address"
		}
		return s, ""
	case strings.HasPrefix(typ, "url"):
		s := pyStr(val)
		if u, err := url.Parse(s); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, "expected a URL"
		}
		return s, ""
	case strings.HasPrefix(typ, "match("):
		s := pyStr(val)
		re, err := regexp.Compile(`^(?:` + m[reSchemaElement.SubexpIndex("match")] + `)`)
		if err != nil {
			return nil, "its pattern does not compile"
		}
		if !re.MatchString(s) {
			return nil, "does not match regular expression " + m[reSchemaElement.SubexpIndex("match")]
		}
		return s, ""
	case strings.HasPrefix(typ, "list("):
		s := pyStr(val)
		if !slices.Contains(strings.Split(m[reSchemaElement.SubexpIndex("list")], "|"), s) {
			return nil, "value must be one of " + strings.ReplaceAll(m[reSchemaElement.SubexpIndex("list")], "|", ", ")
		}
		return s, ""
	case strings.HasPrefix(typ, "device"):
		if _, ok := val.(string); !ok {
			return nil, "expected a string"
		}
		return val, ""
	}
	return nil, "fatal error for type " + typ
}

// coerceInt is Python's int() on a JSON value.
func coerceInt(val any) (int, bool) {
	switch x := val.(type) {
	case int:
		return x, true
	case int64:
		return int(x), true
	case uint64:
		return int(x), true
	case float64:
		return int(math.Trunc(x)), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		return n, err == nil
	}
	return 0, false
}

// coerceFloat is Python's float() on a JSON value.
func coerceFloat(val any) (float64, bool) {
	switch x := val.(type) {
	case int:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	}
	return 0, false
}

// pyStr is Python's str() on a JSON value.
func pyStr(val any) string {
	switch x := val.(type) {
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		// JSON does not tell 5 from 5.0; options are almost always ints
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(val)
}

// EmptyRefused lists the optional fields (schema type ending in "?") whose
// type refuses the empty string, by dotted path. The options form drops a
// field the user clears, but YAML mode and the API send "", and the
// Supervisor then refuses to save.
func EmptyRefused(schema map[string]*yaml.Node) []string {
	var out []string
	var walk func(el *yaml.Node, path string)
	walk = func(el *yaml.Node, path string) {
		switch {
		case el.Kind == yaml.MappingNode:
			for _, p := range pairs(el) {
				walk(p[1], join(path, p[0].Value))
			}
		case isStr(el) && strings.HasSuffix(el.Value, "?"):
			if _, msg := singleValue(el.Value, ""); msg != "" {
				out = append(out, path)
			}
		}
	}
	for _, k := range sortedKeys(schema) {
		walk(schema[k], k)
	}
	return out
}
