package provider

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// builtinTypes are resource types that need no required_providers entry.
var builtinTypes = map[string]bool{"terraform_data": true}

var (
	reTemplate = regexp.MustCompile(`\$\{([^}]*)\}`)
	reData     = regexp.MustCompile(`\bdata\.([a-z][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_-]*)`)
	reVar      = regexp.MustCompile(`\b(var|local)\.([A-Za-z_][A-Za-z0-9_-]*)`)
	reResource = regexp.MustCompile(`(^|[^.\w-])([a-z][a-z0-9]*_[a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_-]*)`)
)

// CheckDocument checks a rendered document for the mistakes the upstream
// renderers made (reference/upstream-rezuscloud.md §2): it must be JSON, must
// not hold a backend or encryption block, every var., local., data. and
// resource reference in a template must be declared, and every resource and
// data source type must belong to a provider in terraform.required_providers
// (terraform_data is built in). It returns all problems found, sorted.
func CheckDocument(doc []byte) error {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	var problems []string
	tf, _ := root["terraform"].(map[string]any)
	for _, k := range []string{"backend", "encryption", "cloud"} {
		if _, ok := tf[k]; ok {
			problems = append(problems, fmt.Sprintf("terraform.%s block present", k))
		}
	}
	required := map[string]bool{}
	if rp, ok := tf["required_providers"].(map[string]any); ok {
		for k := range rp {
			required[k] = true
		}
	}
	declared := map[string]bool{}
	for kind, prefix := range map[string]string{"resource": "", "data": "data."} {
		types, _ := root[kind].(map[string]any)
		for typ, names := range types {
			if local := strings.SplitN(typ, "_", 2)[0]; !builtinTypes[typ] && !required[local] {
				problems = append(problems, fmt.Sprintf("%s type %s: provider %q not in required_providers", kind, typ, local))
			}
			for name := range names.(map[string]any) {
				declared[prefix+typ+"."+name] = true
			}
		}
	}
	for _, kind := range []string{"variable", "locals"} {
		m, _ := root[kind].(map[string]any)
		for name := range m {
			p := "var."
			if kind == "locals" {
				p = "local."
			}
			declared[p+name] = true
		}
	}
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			s := strings.ReplaceAll(strings.ReplaceAll(v, "$${", ""), "%%{", "")
			for _, m := range reTemplate.FindAllStringSubmatch(s, -1) {
				expr := m[1]
				for _, r := range reData.FindAllString(expr, -1) {
					addr := strings.Join(strings.SplitN(r, ".", 4)[:3], ".")
					if !declared[addr] && !seen[addr] {
						seen[addr] = true
						problems = append(problems, "undeclared "+addr)
					}
				}
				expr = reData.ReplaceAllString(expr, "")
				for _, r := range reVar.FindAllString(expr, -1) {
					if !declared[r] && !seen[r] {
						seen[r] = true
						problems = append(problems, "undeclared "+r)
					}
				}
				expr = reVar.ReplaceAllString(expr, "")
				for _, r := range reResource.FindAllStringSubmatch(expr, -1) {
					addr := r[2] + "." + r[3]
					if !declared[addr] && !seen[addr] {
						seen[addr] = true
						problems = append(problems, "undeclared "+addr)
					}
				}
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	for k, v := range root {
		if k != "terraform" {
			walk(v)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("%s", strings.Join(problems, "; "))
}

// Addresses flattens a document into its top-level addresses ("resource.T.N",
// "data.T.N", "output.N", "provider.P", "terraform") with each one's JSON
// body, to compare two renders block by block.
func Addresses(doc []byte) (map[string]string, error) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for kind, raw := range root {
		switch kind {
		case "resource", "data":
			var types map[string]map[string]json.RawMessage
			if err := json.Unmarshal(raw, &types); err != nil {
				return nil, err
			}
			for typ, names := range types {
				for name, body := range names {
					out[kind+"."+typ+"."+name] = string(body)
				}
			}
		case "output", "provider", "variable":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			for name, body := range m {
				out[kind+"."+name] = string(body)
			}
		default:
			out[kind] = string(raw)
		}
	}
	return out, nil
}

// DiffAddresses returns the sorted addresses whose bodies differ between two
// documents (added, removed or changed).
func DiffAddresses(a, b []byte) ([]string, error) {
	am, err := Addresses(a)
	if err != nil {
		return nil, err
	}
	bm, err := Addresses(b)
	if err != nil {
		return nil, err
	}
	var diff []string
	for k, v := range am {
		if w, ok := bm[k]; !ok || w != v {
			diff = append(diff, k)
		}
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			diff = append(diff, k)
		}
	}
	sort.Strings(diff)
	return diff, nil
}
