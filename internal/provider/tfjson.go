package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Doc is an OpenTofu JSON configuration document under construction. Its
// blocks are plain maps, so encoding sorts every key.
type Doc struct {
	root map[string]any
}

// NewDoc returns an empty document.
func NewDoc() *Doc { return &Doc{root: map[string]any{}} }

func (d *Doc) block(path ...string) map[string]any {
	m := d.root
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

// RequiredProvider declares a provider under terraform.required_providers.
func (d *Doc) RequiredProvider(local, source, version string) {
	d.block("terraform", "required_providers")[local] = map[string]any{"source": source, "version": version}
}

// Provider sets the default configuration block of a provider.
func (d *Doc) Provider(local string, body map[string]any) {
	d.block("provider")[local] = body
}

// Resource declares resource typ.name and returns its address.
func (d *Doc) Resource(typ, name string, body map[string]any) string {
	mustIdent(name)
	rs := d.block("resource", typ)
	if _, dup := rs[name]; dup {
		panic(fmt.Sprintf("provider: resource %s.%s declared twice", typ, name))
	}
	rs[name] = body
	return typ + "." + name
}

// Data declares data source typ.name and returns its address
// ("data.typ.name").
func (d *Doc) Data(typ, name string, body map[string]any) string {
	mustIdent(name)
	ds := d.block("data", typ)
	if _, dup := ds[name]; dup {
		panic(fmt.Sprintf("provider: data source %s.%s declared twice", typ, name))
	}
	ds[name] = body
	return "data." + typ + "." + name
}

// Output declares an output.
func (d *Doc) Output(name, description string, value any) {
	o := map[string]any{"value": value}
	if description != "" {
		o["description"] = description
	}
	d.block("output")[name] = o
}

// Encode renders the document: indented JSON, keys sorted, HTML characters
// left as they are, ending in a newline.
func (d *Doc) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d.root); err != nil {
		return nil, fmt.Errorf("provider: encoding .tf.json: %w", err)
	}
	return buf.Bytes(), nil
}

// Lit makes s a literal string in a .tf.json expression position: tofu reads
// such strings as templates, so "${" and "%{" are escaped to "$${" and "%%{".
// Every value that comes from a user (names, images, machine configs) goes
// through Lit.
func Lit(s string) string {
	if !strings.Contains(s, "${") && !strings.Contains(s, "%{") {
		return s
	}
	s = strings.ReplaceAll(s, "${", "$${")
	return strings.ReplaceAll(s, "%{", "%%{")
}

// Expr wraps an HCL expression as a .tf.json template: "${expr}".
func Expr(expr string) string { return "${" + expr + "}" }

// Ident turns a node or tenant name (a DNS-1123 label, which may start with a
// digit) into a resource name: names starting with a letter stay as they
// are, others get a leading underscore. The mapping is fixed, so names are
// stable.
func Ident(name string) string {
	if name != "" && isLetter(name[0]) {
		return name
	}
	return "_" + name
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func mustIdent(name string) {
	if name == "" || !(isLetter(name[0]) || name[0] == '_') {
		panic(fmt.Sprintf("provider: %q is not a valid resource name", name))
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if !(isLetter(c) || c >= '0' && c <= '9' || c == '_' || c == '-') {
			panic(fmt.Sprintf("provider: %q is not a valid resource name", name))
		}
	}
}

// Tag keys and values that mark every cloud resource rezuscloud creates, so
// leftovers can be found by tenant.
const (
	TagManagedBy = "managed_by" // value: "rezuscloud"
	TagTenant    = "rezuscloud_tenant"
	TagGroup     = "rezuscloud_group"
	TagNode      = "rezuscloud_node"
	TagRole      = "rezuscloud_role"
	ManagedBy    = "rezuscloud"
)

// Labels returns the key/value labels of a tenant resource; group, node and
// role are added when not empty.
func Labels(tenantName, group, node, role string) map[string]any {
	m := map[string]any{TagManagedBy: ManagedBy, TagTenant: Lit(tenantName)}
	if group != "" {
		m[TagGroup] = Lit(group)
	}
	if node != "" {
		m[TagNode] = Lit(node)
	}
	if role != "" {
		m[TagRole] = Lit(role)
	}
	return m
}

// TagList returns the same labels as "key=value" strings, sorted, for clouds
// whose tags are plain strings (OpenStack).
func TagList(tenantName, group, node, role string) []any {
	var out []string
	for k, v := range Labels(tenantName, group, node, role) {
		out = append(out, k+"="+v.(string))
	}
	sortStrings(out)
	list := make([]any, len(out))
	for i, s := range out {
		list[i] = s
	}
	return list
}
