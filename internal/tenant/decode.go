package tenant

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// MaxFileSize bounds a tenant file; anything larger is not a tenant file.
const MaxFileSize = 1 << 20

// Problem is one located problem of a tenant file.
type Problem struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int
	Field  string // key path, e.g. node_groups[1].count; "" for the whole file
	// Place is where Field stands in the file's own words, e.g.
	// `group "workers": count` ("" = say Field).
	Place string
	Msg   string
}

// Error is the problem as `rezuscloud validate` prints it (docs/design.md
// §3): file:line:col: place: message, the place in the file's own words.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", p.Line, p.Column)
	}
	b.WriteString(": ")
	if w := p.where(); w != "" {
		b.WriteString(w)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem found in one or more tenant files, one per line.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// AsProblems returns the problems held by err (a Problems or a Problem), if any.
func AsProblems(err error) (Problems, bool) {
	var ps Problems
	if errors.As(err, &ps) {
		return ps, true
	}
	var p Problem
	if errors.As(err, &p) {
		return Problems{p}, true
	}
	return nil, false
}

// NameFromPath gives the tenant name for a tenant file: its stem.
func NameFromPath(path string) string {
	return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
}

// Load reads, decodes and validates one tenant file.
func Load(path string) (*Tenant, error) {
	data, err := readTenantFile(path)
	if err != nil {
		return nil, Problems{{File: path, Msg: fileProblem(err)}}
	}
	return Parse(path, data)
}

// readTenantFile reads a tenant file of at most MaxFileSize bytes through
// safefile: a FIFO, a device such as /dev/zero, a directory (also behind a
// symlink) or an oversized file is refused before anything is read, and
// nothing can block the caller. The error names the file.
func readTenantFile(path string) ([]byte, error) {
	return safefile.Read(path, MaxFileSize)
}

// fileProblem is the message of a read error for a Problem, which names
// the file itself.
func fileProblem(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Parse decodes and validates a tenant file's contents. path names the file
// in problems and gives the tenant its name. All problems are returned at
// once as Problems, each located at its key.
func Parse(path string, data []byte) (*Tenant, error) {
	if !utf8.Valid(data) {
		return nil, Problems{{File: path, Msg: "file is not valid UTF-8"}}
	}
	t := &Tenant{Name: NameFromPath(path), Path: path, Source: slices.Clone(data)}
	var probs Problems
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	pos := positions(data)
	if err := dec.Decode(t); err != nil {
		var strict *toml.StrictMissingError
		var derr *toml.DecodeError
		switch {
		case errors.As(err, &strict):
			for _, e := range strict.Errors {
				line, col := e.Position()
				probs = append(probs, Problem{File: path, Line: line, Column: col,
					Field: pos.at(line, col, keyString(e.Key())), Msg: "unknown key" + suggest(e.Key())})
			}
		case errors.As(err, &derr):
			line, col := derr.Position()
			f := pos.at(line, col, keyString(derr.Key()))
			return nil, Problems{{File: path, Line: line, Column: col, Field: f, Place: t.place(f), Msg: derr.Error()}}
		default:
			return nil, Problems{{File: path, Msg: err.Error()}}
		}
	}
	for _, v := range t.validate(pos) {
		p := Problem{File: path, Field: v.field, Msg: v.msg}
		p.Line, p.Column = pos.find(v.field)
		probs = append(probs, p)
	}
	if len(probs) > 0 {
		for i := range probs {
			probs[i].Place = t.place(probs[i].Field)
		}
		sortProblems(probs)
		return nil, probs
	}
	return t, nil
}

func sortProblems(ps Problems) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// positionsOfFile reads a file again for the positions of its keys; a file
// that cannot be read has none.
func positionsOfFile(path string) posMap {
	data, err := readTenantFile(path)
	if err != nil {
		return posMap{}
	}
	return positions(data)
}

func keyString(k toml.Key) string { return strings.Join(k, ".") }

// knownKeys are the keys a tenant file may hold, for "did you mean" hints.
var knownKeys = []string{
	"display_name", "provider", "talos_version", "kubernetes_version", "endpoint", "auto_apply",
	"schematic", "etcd_backup_interval", "etcd_backup_keep",
	"config_patches", "oci", "openstack", "node_groups", "name", "role", "count", "machines",
	"address", "mac", "install_disk", "shape", "ocpus", "memory_gb", "boot_volume_gb", "flavor",
	"volume_gb", "compartment_ocid", "region", "subnet_ocid", "image_ocid", "availability_domain",
	"network", "image", "floating_ip_pool", "power", "redfish_insecure", "power_sensor",
	"pool", "mode", "min", "max", "watts", "price_ceiling", "cheap_hours", "surplus_delay", "pending_delay",
	"min_on", "min_off", "cooldown",
}

func suggest(k toml.Key) string {
	if len(k) == 0 {
		return ""
	}
	last := k[len(k)-1]
	best, bestD := "", 3
	for _, c := range knownKeys {
		if d := editDistance(last, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// posMap maps key paths (node_groups[1].count) to where they stand in a file.
type posMap map[string]unstable.Position

// has reports whether the file sets the key.
func (m posMap) has(path string) bool { _, ok := m[path]; return ok }

// at gives the key path that starts at line:col, or else the last key that
// starts before it on that line (the key of a value at line:col), or def.
func (m posMap) at(line, col int, def string) string {
	best, bestCol := def, 0
	for k, p := range m {
		if p.Line == line && p.Column <= col && (p.Column > bestCol || p.Column == bestCol && len(k) > len(best)) {
			best, bestCol = k, p.Column
		}
	}
	return best
}

// find gives the line and column of a key path, or of its nearest parent that
// the file holds (a missing key is reported where its table starts).
func (m posMap) find(path string) (int, int) {
	for path != "" {
		if p, ok := m[path]; ok {
			return p.Line, p.Column
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 1, 1
}

// positions walks a TOML document once and records where every key, table
// and array-table element starts. Syntax errors stop the walk; the decoder
// reports them.
func positions(data []byte) posMap {
	m := posMap{}
	var p unstable.Parser
	p.Reset(data)
	prefix := ""
	next := map[string]int{} // array path -> next element index
	cur := map[string]int{}  // array path -> current element index
	resolve := func(parts []string) string {
		acc := ""
		for i, part := range parts {
			if acc != "" {
				acc += "."
			}
			acc += part
			if i < len(parts)-1 {
				if idx, ok := cur[acc]; ok {
					acc += "[" + strconv.Itoa(idx) + "]"
				}
			}
		}
		return acc
	}
	var walkKV func(prefix string, n *unstable.Node)
	walkKV = func(prefix string, n *unstable.Node) {
		path := join(prefix, keyParts(n))
		m[path] = p.Shape(firstKeyRange(n)).Start
		v := n.Value()
		switch v.Kind {
		case unstable.InlineTable:
			it := v.Children()
			for it.Next() {
				walkKV(path, it.Node())
			}
		case unstable.Array:
			it := v.Children()
			for i := 0; it.Next(); i++ {
				el := it.Node()
				ep := path + "[" + strconv.Itoa(i) + "]"
				m[ep] = p.Shape(el.Raw).Start
				if el.Kind == unstable.InlineTable {
					ct := el.Children()
					for ct.Next() {
						walkKV(ep, ct.Node())
					}
				}
			}
		}
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			prefix = resolve(keyParts(e))
			m[prefix] = p.Shape(firstKeyRange(e)).Start
		case unstable.ArrayTable:
			base := resolve(keyParts(e))
			idx := next[base]
			next[base] = idx + 1
			cur[base] = idx
			prefix = base + "[" + strconv.Itoa(idx) + "]"
			m[prefix] = p.Shape(firstKeyRange(e)).Start
		case unstable.KeyValue:
			walkKV(prefix, e)
		}
	}
	return m
}

func join(prefix string, parts []string) string {
	k := strings.Join(parts, ".")
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func keyParts(n *unstable.Node) []string {
	var parts []string
	it := n.Key()
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

func firstKeyRange(n *unstable.Node) unstable.Range {
	it := n.Key()
	if it.Next() {
		return it.Node().Raw
	}
	return n.Raw
}
