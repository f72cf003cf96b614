// Package addoncheck checks the add-on package against the rules of Home
// Assistant's Supervisor and Core, so that `go test` (and make test) fails
// before a user's Supervisor refuses or silently drops something:
// config.yaml, repository.yaml and translations/en.yaml (keys, types,
// allowed values, option defaults valid against their schema, a translation
// for every option, no unknown keys), the icon and logo, and automation
// blueprints (a blueprint block, known selectors, every !input declared,
// every entity an input). ValidateOptions transcribes the Supervisor's
// validation of options (what it keeps, drops and refuses), for the manifest
// check and for the stand-in Supervisor of the tests; the package's tests
// also lint the GitHub workflows (actionlint) and check the image workflow
// against config.yaml.
//
// The rules are transcribed from the Supervisor's supervisor/apps/validate.py,
// apps/options.py and store/validate.py (commit 090ef31, August 2026) and
// Core's components/blueprint/schemas.py. Where the Supervisor only warns
// or silently removes a key (unknown keys, deprecated ones), this package
// reports an error: such a key is a typo or dead configuration.
package addoncheck

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Error is one problem, located by file, line and key path.
type Error struct {
	File string
	Line int
	Path string // dotted key path, e.g. schema.base_topic
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Path != "" {
		b.WriteString(": " + e.Path)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// report collects errors for one file.
type report struct {
	file string
	errs []error
}

func (r *report) add(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.errs = append(r.errs, &Error{File: r.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// parse decodes a YAML document and returns its root node (a mapping).
func parse(r *report, data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		r.add(nil, "", "not valid YAML: %v", err)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		r.add(nil, "", "empty document")
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		r.add(root, "", "the document must be a mapping")
		return nil
	}
	return root
}

// pairs iterates a mapping's key and value nodes (aliases resolved).
func pairs(m *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		out = append(out, [2]*yaml.Node{m.Content[i], deref(m.Content[i+1])})
	}
	return out
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// get returns a mapping's value for key, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for _, p := range pairs(m) {
		if p[0].Value == key {
			return p[1]
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isScalar(n *yaml.Node, tag string) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.Tag == tag
}

func isStr(n *yaml.Node) bool  { return isScalar(n, "!!str") }
func isBool(n *yaml.Node) bool { return isScalar(n, "!!bool") }
func isInt(n *yaml.Node) bool  { return isScalar(n, "!!int") }
func isNull(n *yaml.Node) bool { return n == nil || isScalar(n, "!!null") }

// kindName says what a node is, for messages.
func kindName(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case n.Tag == "!!null":
		return "null"
	}
	return fmt.Sprintf("%s %s", strings.TrimPrefix(n.Tag, "!!"), n.Value)
}
