package tenant

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// fieldPart is one step of a key path: a key and, for an array of tables,
// the element's index (node_groups[1]).
var fieldPart = regexp.MustCompile(`^([a-z_]+)(?:\[(\d+)\])?$`)

// place says where a key path stands in the words of the user's own file:
// node_groups[1].count is `group "workers": count`,
// node_groups[1].machines[0].address is `group "workers", machine
// 192.168.1.31: address`, config_patches[0] is `config patch 1`. A group
// without a usable name is its position ("the 2nd group"). t may be nil
// or partly decoded.
func (t *Tenant) place(field string) string {
	if field == "" {
		return ""
	}
	var where, key []string
	var g *NodeGroup
	for _, part := range strings.Split(field, ".") {
		m := fieldPart.FindStringSubmatch(part)
		if m == nil {
			key = append(key, part)
			continue
		}
		name, idx := m[1], -1
		if m[2] != "" {
			idx, _ = strconv.Atoi(m[2])
		}
		switch {
		case name == "node_groups" && idx >= 0 && len(key) == 0 && len(where) == 0:
			if t != nil && idx < len(t.NodeGroups) && IsDNSLabel(t.NodeGroups[idx].Name) && t.firstGroup(t.NodeGroups[idx].Name) == idx {
				g = &t.NodeGroups[idx]
				where = append(where, fmt.Sprintf("group %q", g.Name))
			} else {
				where = append(where, "the "+ordinal(idx+1)+" group")
			}
		case name == "machines" && idx >= 0 && len(key) == 0:
			if g != nil && idx < len(g.Machines) && looksLikeAddress(g.Machines[idx].Address) {
				where = append(where, "machine "+g.Machines[idx].Address)
			} else {
				where = append(where, "the "+ordinal(idx+1)+" machine")
			}
		case name == "config_patches" && idx >= 0 && len(key) == 0:
			where = append(where, fmt.Sprintf("config patch %d", idx+1))
		default:
			key = append(key, part)
		}
	}
	s := strings.Join(where, ", ")
	if len(key) > 0 {
		if s != "" {
			s += ": "
		}
		s += strings.Join(key, ".")
	}
	return s
}

// firstGroup is the index of the first group with that name (a second
// one is named by its position).
func (t *Tenant) firstGroup(name string) int {
	for i, g := range t.NodeGroups {
		if g.Name == name {
			return i
		}
	}
	return -1
}

// looksLikeAddress: short and without spaces, so that it reads as a name.
func looksLikeAddress(s string) bool {
	return s != "" && len(s) <= 45 && !strings.ContainsAny(s, " \t\"")
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// Text is the problem as a person reads it in a notification or a refused
// command: the file's name (no folder), its line, the place in the file's
// own words, the message: `lab.toml:18: group "workers": count: 500 is out
// of range 0..100 for a worker group`.
func (p Problem) Text() string {
	var b strings.Builder
	b.WriteString(filepath.Base(p.File))
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if w := p.where(); w != "" {
		b.WriteString(w)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Text is every problem as Problem.Text, one per line.
func (ps Problems) Text() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Text()
	}
	return strings.Join(lines, "\n")
}

// where is the place of the problem, else its key path.
func (p Problem) where() string {
	if p.Place != "" {
		return p.Place
	}
	return p.Field
}

// Readable wraps err's problems, if it holds any, so that its message is
// their Text (no folders, the file's own words) while errors.As still
// finds the Problems. Any other error is returned as it is.
func Readable(err error) error {
	ps, ok := AsProblems(err)
	if !ok {
		return err
	}
	return readable{ps: ps}
}

type readable struct {
	ps   Problems
	text string // "" = ps.Text()
}

func (r readable) Error() string {
	if r.text != "" {
		return r.text
	}
	return r.ps.Text()
}
func (r readable) Unwrap() error { return r.ps }
