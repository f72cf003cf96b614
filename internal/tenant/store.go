package tenant

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// Store is the directory of tenant files: one <name>.toml per tenant.
// Changes made from Home Assistant are written back into the user's file
// in place (only the changed value), atomically.
type Store struct {
	Dir string

	mu sync.Mutex // serialises writes
}

// Snapshot is the valid tenants of the store and the problems of the rest.
// A file with problems is left out, and so is every tenant it would make
// conflict (the last file, in name order, that reuses a machine address).
type Snapshot struct {
	Tenants  []*Tenant
	Problems Problems
	// Invalid names the tenants whose files exist but do not validate; they
	// must not be treated as removed.
	Invalid []string
	// Sum identifies the contents of every file, to notice changes.
	Sum [32]byte
}

// Load reads every tenant file of the store.
func (s *Store) Load() (*Snapshot, error) {
	paths, err := filepath.Glob(filepath.Join(s.Dir, "*.toml"))
	if err != nil {
		return nil, fmt.Errorf("tenants dir %s: %w", s.Dir, err)
	}
	if _, err := os.Stat(s.Dir); err != nil {
		return nil, fmt.Errorf("tenants dir: %w", err)
	}
	slices.Sort(paths)
	snap := &Snapshot{}
	h := sha256.New()
	for _, p := range paths {
		// readTenantFile refuses FIFOs, devices and oversized files before
		// reading: one hostile file must not block or exhaust the watcher.
		data, rerr := readTenantFile(p)
		h.Write([]byte(p))
		h.Write(data)
		var t *Tenant
		if rerr == nil {
			t, rerr = Parse(p, data)
		} else {
			// a changed problem (a FIFO replaced by a device) is a change
			h.Write([]byte(rerr.Error()))
		}
		if rerr != nil {
			if ps, ok := AsProblems(rerr); ok {
				snap.Problems = append(snap.Problems, ps...)
			} else {
				snap.Problems = append(snap.Problems, Problem{File: p, Msg: fileProblem(rerr)})
			}
			snap.Invalid = append(snap.Invalid, NameFromPath(p))
			continue
		}
		snap.Tenants = append(snap.Tenants, t)
	}
	defer func() { relativeFiles(snap.Problems) }()
	copy(snap.Sum[:], h.Sum(nil))
	if cross := CheckAcrossTenants(snap.Tenants); len(cross) > 0 {
		snap.Problems = append(snap.Problems, cross...)
		bad := map[string]bool{}
		for _, p := range cross {
			bad[NameFromPath(p.File)] = true
		}
		snap.Tenants = slices.DeleteFunc(snap.Tenants, func(t *Tenant) bool {
			if bad[t.Name] {
				snap.Invalid = append(snap.Invalid, t.Name)
				return true
			}
			return false
		})
	}
	return snap, nil
}

// relativeFiles names the files of problems by their name in the folder:
// the folder is the container's (/config/tenants), which the user knows
// by another name (app_configs/…_rezuscloud/tenants).
func relativeFiles(ps Problems) {
	for i := range ps {
		ps[i].File = filepath.Base(ps[i].File)
	}
}

// onlyMessages is err's problems for a message that already names the
// key: just their messages when every one is at field, else their Text.
func onlyMessages(err error, field string) error {
	ps, ok := AsProblems(err)
	if !ok {
		return err
	}
	var msgs []string
	for _, p := range ps {
		if p.Field != field {
			return Readable(err)
		}
		msgs = append(msgs, p.Msg)
	}
	return readable{ps: ps, text: strings.Join(msgs, "; ")}
}

// Watch calls fn with a new snapshot whenever the files change (checked
// every interval), starting with the current one. It returns when ctx ends.
// A directory that cannot be read is reported once per change of its error.
func (s *Store) Watch(ctx context.Context, interval time.Duration, fn func(*Snapshot, error)) {
	var last [32]byte
	var lastErr string
	first := true
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		snap, err := s.Load()
		switch {
		case err != nil:
			if err.Error() != lastErr {
				lastErr = err.Error()
				fn(nil, err)
			}
		case first || snap.Sum != last:
			last, lastErr, first = snap.Sum, "", false
			fn(snap, nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Path is the file of the named tenant.
func (s *Store) Path(name string) string { return filepath.Join(s.Dir, name+".toml") }

// SetCount writes a group's node count into the tenant's file. The new file
// must validate, or nothing is written.
func (s *Store) SetCount(name, group string, count int) (*Tenant, error) {
	return s.edit(name, func(t *Tenant) (string, string, error) {
		for i, g := range t.NodeGroups {
			if g.Name == group {
				return fmt.Sprintf("node_groups[%d].count", i), strconv.Itoa(count), nil
			}
		}
		return "", "", fmt.Errorf("tenant %s has no group %q", name, group)
	})
}

// SetAutoApply writes auto_apply into the tenant's file.
func (s *Store) SetAutoApply(name string, on bool) (*Tenant, error) {
	return s.edit(name, func(*Tenant) (string, string, error) {
		return "auto_apply", strconv.FormatBool(on), nil
	})
}

// edit replaces the value of one top-level or group key in a tenant file,
// keeping everything else (comments, layout) as the user wrote it. A key the
// file does not set yet is added: top-level keys at the top, group keys
// right after the group's header.
func (s *Store) edit(name string, change func(*Tenant) (field, value string, err error)) (*Tenant, error) {
	return s.editFields(name, func(t *Tenant) ([]fieldValue, error) {
		f, v, err := change(t)
		return []fieldValue{{f, v}}, err
	})
}

// fieldValue is one key path and its new TOML literal.
type fieldValue struct{ field, value string }

// editFields is edit for several keys at once: all are written, in one
// atomic write, or none (the edited file must validate).
func (s *Store) editFields(name string, change func(*Tenant) ([]fieldValue, error)) (*Tenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.Path(name)
	data, err := readTenantFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	t, err := Parse(path, data)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: the file has problems, fix them first (nothing was changed):\n%w", name, Readable(err))
	}
	fvs, err := change(t)
	if err != nil {
		return nil, err
	}
	out := data
	var what []string
	for _, fv := range fvs {
		if out, err = setValue(out, fv.field, fv.value); err != nil {
			return nil, fmt.Errorf("tenant %s: %s: %w", name, t.place(fv.field), err)
		}
		what = append(what, t.place(fv.field)+" = "+fv.value)
	}
	nt, err := Parse(path, out)
	if err != nil {
		if len(fvs) == 1 {
			return nil, fmt.Errorf("tenant %s: %s cannot be %s (nothing was changed): %w", name, t.place(fvs[0].field), fvs[0].value, onlyMessages(err, fvs[0].field))
		}
		return nil, fmt.Errorf("tenant %s: %s is not allowed (nothing was changed): %w", name, strings.Join(what, ", "), Readable(err))
	}
	if err := atomicfile.Write(path, out, 0o644); err != nil {
		return nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	return nt, nil
}

// setValue puts value (TOML literal) at field in a TOML document.
func setValue(data []byte, field, value string) ([]byte, error) {
	pos := positions(data)
	if p, ok := pos[field]; ok {
		// the key starts at p; the value follows "key =" on the same line
		lineStart := p.Offset - (p.Column - 1)
		lineEnd := bytes.IndexByte(data[lineStart:], '\n')
		if lineEnd < 0 {
			lineEnd = len(data) - lineStart
		}
		line := string(data[lineStart : lineStart+lineEnd])
		eq := strings.IndexByte(line[p.Column-1:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("cannot find its value")
		}
		vstart := p.Column - 1 + eq + 1
		for vstart < len(line) && (line[vstart] == ' ' || line[vstart] == '\t') {
			vstart++
		}
		vend := vstart
		for vend < len(line) && !strings.ContainsRune(" \t#\r,}", rune(line[vend])) {
			vend++
		}
		var b bytes.Buffer
		b.Write(data[:lineStart+vstart])
		b.WriteString(value)
		b.Write(data[lineStart+vend:])
		return b.Bytes(), nil
	}
	key := field[strings.LastIndexByte(field, '.')+1:]
	parent := strings.TrimSuffix(field, key)
	parent = strings.TrimSuffix(parent, ".")
	if parent == "" {
		return append([]byte(key+" = "+value+"\n"), data...), nil
	}
	p, ok := pos[parent]
	if !ok {
		return nil, fmt.Errorf("cannot find %s in the file", parent)
	}
	lineStart := p.Offset - (p.Column - 1)
	if !bytes.HasPrefix(bytes.TrimLeft(data[lineStart:], " \t"), []byte("[")) {
		return nil, fmt.Errorf("%s is an inline table: write it as a [table] to have %s added", parent, key)
	}
	nl := bytes.IndexByte(data[lineStart:], '\n')
	if nl < 0 {
		return append(append(slices.Clone(data), '\n'), []byte(key+" = "+value+"\n")...), nil
	}
	at := lineStart + nl + 1
	var b bytes.Buffer
	b.Write(data[:at])
	b.WriteString(key + " = " + value + "\n")
	b.Write(data[at:])
	return b.Bytes(), nil
}
