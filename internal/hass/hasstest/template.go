package hasstest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// valuePath matches value_json.a.b, value_json["a"] and value_json.a['b'].
var valuePath = regexp.MustCompile(`value_json((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\s*(?:"[^"]*"|'[^']*')\s*\])+)`)
var pathPart = regexp.MustCompile(`\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:"([^"]*)"|'([^']*)')\s*\]`)

// jinjaFilters are attribute names that are filters or methods, not keys.
var jinjaMethods = map[string]bool{"get": true, "items": true, "keys": true, "values": true}

// CheckTemplate checks that every value_json path a template reads exists
// in the JSON document doc. A path may stop at a null value (templates guard
// those with "if"). It returns one error per missing path.
func CheckTemplate(tpl string, doc []byte) []error {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return []error{fmt.Errorf("state document is not JSON: %v", err)}
	}
	if !strings.Contains(tpl, "value_json") {
		return nil
	}
	var errs []error
	for _, m := range valuePath.FindAllStringSubmatch(tpl, -1) {
		cur := root
		path := "value_json"
		for _, p := range pathPart.FindAllStringSubmatch(m[1], -1) {
			key := p[1] + p[2] + p[3]
			if p[1] != "" && jinjaMethods[key] {
				break
			}
			path += "." + key
			if cur == nil {
				break
			}
			obj, ok := cur.(map[string]any)
			if !ok {
				errs = append(errs, fmt.Errorf("template %q: %s is not an object", tpl, path))
				break
			}
			v, ok := obj[key]
			if !ok {
				errs = append(errs, fmt.Errorf("template %q: %s is missing from the state document", tpl, path))
				break
			}
			cur = v
		}
	}
	return errs
}
