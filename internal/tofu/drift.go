package tofu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// DriftPlanFile is the refresh-only plan Drift writes (and removes) in a
// work dir.
const DriftPlanFile = "tfplan-drift"

// DriftKind says how a resource drifted.
type DriftKind string

const (
	// DriftDeleted: the resource is gone outside tofu (the provider said
	// 404); the next apply creates it again.
	DriftDeleted DriftKind = "deleted"
	// DriftChanged: the resource was changed outside tofu in attributes the
	// configuration sets; the next apply changes them back.
	DriftChanged DriftKind = "changed"
)

// DriftedResource is one resource a refresh found deleted or changed
// outside tofu.
type DriftedResource struct {
	Address string // e.g. openstack_compute_instance_v2.lab-cp-1
	Kind    DriftKind
	// Attributes are, for DriftChanged, the configured attributes that
	// differ from the state (e.g. flavor_name, metadata), sorted.
	Attributes []string
}

// Drift is what a refresh-only plan found: the resources deleted or
// changed outside tofu, sorted by address. A resource whose refresh only
// brought in values the configuration does not set (a port's device_id
// once a server was attached to it, a floating IP's port after its
// association, ignore_changes attributes) is no drift: nothing would be
// applied for it; such resources are listed in Settled.
type Drift struct {
	Resources []DriftedResource
	Settled   []string
}

// Empty reports whether nothing was deleted or changed outside.
func (d *Drift) Empty() bool { return len(d.Resources) == 0 }

// Deleted lists the addresses of the resources deleted outside.
func (d *Drift) Deleted() []string { return d.addresses(DriftDeleted) }

// Changed lists the addresses of the resources changed outside.
func (d *Drift) Changed() []string { return d.addresses(DriftChanged) }

func (d *Drift) addresses(k DriftKind) []string {
	var out []string
	for _, r := range d.Resources {
		if r.Kind == k {
			out = append(out, r.Address)
		}
	}
	return out
}

// String is a one-line summary: "openstack_compute_instance_v2.lab-cp-1
// deleted; openstack_networking_port_v2.lab-cp-1 changed (tags)".
func (d *Drift) String() string {
	if d.Empty() {
		return "no drift"
	}
	parts := make([]string, len(d.Resources))
	for i, r := range d.Resources {
		parts[i] = r.Address + " " + string(r.Kind)
		if len(r.Attributes) > 0 {
			parts[i] += " (" + strings.Join(r.Attributes, ", ") + ")"
		}
	}
	return strings.Join(parts, "; ")
}

// Drift runs a refresh-only plan (`plan -refresh-only -json -out`) and
// reads it back (`show -json`) to find what was deleted or changed outside
// tofu since the last apply. Nothing changes: neither the cloud nor the
// stored state (a plan does not write state; the plan file is removed).
// The state lock is held for the refresh, as for any plan.
func (w *Workspace) Drift(ctx context.Context, opts RunOptions) (*Drift, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ensureInit(ctx, "drift", opts); err != nil {
		return nil, err
	}
	file := filepath.Join(w.dir, DriftPlanFile)
	_ = os.Remove(file)
	defer os.Remove(file)
	var s stream
	if _, err := w.run(ctx, "drift", []string{"plan", "-refresh-only", "-input=false", "-json", "-out=" + DriftPlanFile}, &s, opts); err != nil {
		return nil, err
	}
	plan, err := w.show(ctx, DriftPlanFile)
	if err != nil {
		return nil, err
	}
	doc, err := safefile.Read(filepath.Join(w.dir, ConfigFile), maxDocument)
	if err != nil {
		return nil, fmt.Errorf("tofu drift %s: %w", w.name, err)
	}
	cfg, err := configuredAttributes(doc)
	if err != nil {
		return nil, fmt.Errorf("tofu drift %s: %s: %w", w.name, ConfigFile, err)
	}
	d := driftOf(plan, cfg)
	// the event stream names the same resources; a drift event whose
	// resource the plan does not hold means tofu and we disagree
	for _, ev := range s.drift {
		if ev.Resource == nil {
			continue
		}
		if !slices.ContainsFunc(d.Resources, func(r DriftedResource) bool { return r.Address == ev.Resource.Addr }) &&
			!slices.Contains(d.Settled, ev.Resource.Addr) {
			return nil, fmt.Errorf("tofu drift %s: %s drifted (%s) but the plan does not show it", w.name, ev.Resource.Addr, ev.Action)
		}
	}
	return d, nil
}

// ShowPlan reads a plan from Plan as tofu's JSON (`show -json`); it holds
// sensitive values in clear text: keep it off logs and MQTT.
func (w *Workspace) ShowPlan(ctx context.Context, plan *Plan) (*tfjson.Plan, error) {
	if plan == nil || plan.File == "" {
		return nil, fmt.Errorf("tofu show %s: no plan", w.name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.show(ctx, filepath.Base(plan.File))
}

func (w *Workspace) show(ctx context.Context, file string) (*tfjson.Plan, error) {
	out, err := w.run(ctx, "show", []string{"show", "-json", file}, nil, RunOptions{})
	if err != nil {
		return nil, err
	}
	var p tfjson.Plan
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("tofu show %s: %w", w.name, err)
	}
	return &p, nil
}

// driftOf classifies a refresh-only plan's resource_drift.
func driftOf(p *tfjson.Plan, cfg map[string]resourceConfig) *Drift {
	d := &Drift{}
	for _, rc := range p.ResourceDrift {
		if rc == nil || rc.Change == nil || rc.Mode == tfjson.DataResourceMode {
			continue
		}
		switch {
		case rc.Change.Actions.Delete():
			d.Resources = append(d.Resources, DriftedResource{Address: rc.Address, Kind: DriftDeleted})
		case rc.Change.Actions.Update():
			if attrs := cfg[configAddress(rc.Address)].changed(rc.Change.Before, rc.Change.After); len(attrs) > 0 {
				d.Resources = append(d.Resources, DriftedResource{Address: rc.Address, Kind: DriftChanged, Attributes: attrs})
			} else {
				d.Settled = append(d.Settled, rc.Address)
			}
		}
	}
	slices.SortFunc(d.Resources, func(a, b DriftedResource) int { return strings.Compare(a.Address, b.Address) })
	slices.Sort(d.Settled)
	return d
}

// configAddress strips an instance key: a.b["x"] and a.b[0] are a.b in
// the configuration.
func configAddress(addr string) string {
	if i := strings.IndexByte(addr, '['); i >= 0 {
		return addr[:i]
	}
	return addr
}

// resourceConfig is what a document sets for one resource.
type resourceConfig struct {
	attrs     map[string]bool // the attributes and blocks it sets
	ignoreAll bool            // lifecycle.ignore_changes = "all"
}

// changed lists the configured attributes that differ between before and
// after (ignore_changes left out), sorted.
func (c resourceConfig) changed(before, after any) []string {
	b, _ := before.(map[string]any)
	a, _ := after.(map[string]any)
	if c.ignoreAll {
		return nil
	}
	var out []string
	for k := range c.attrs {
		if !reflect.DeepEqual(b[k], a[k]) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// configuredAttributes reads, from a JSON document, the attributes each
// managed resource sets (by address), without the meta-arguments and
// without what lifecycle.ignore_changes names.
func configuredAttributes(doc []byte) (map[string]resourceConfig, error) {
	var m struct {
		Resource map[string]map[string]json.RawMessage `json:"resource"`
	}
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, err
	}
	meta := map[string]bool{"count": true, "for_each": true, "provider": true, "depends_on": true,
		"lifecycle": true, "provisioner": true, "connection": true}
	out := map[string]resourceConfig{}
	for typ, byName := range m.Resource {
		for name, raw := range byName {
			body, err := firstObject(raw)
			if err != nil {
				return nil, fmt.Errorf("resource %s.%s: %w", typ, name, err)
			}
			rc := resourceConfig{attrs: map[string]bool{}}
			for k := range body {
				if !meta[k] {
					rc.attrs[k] = true
				}
			}
			if lc, ok := body["lifecycle"]; ok {
				l, err := firstObject(lc)
				if err != nil {
					return nil, fmt.Errorf("resource %s.%s: lifecycle: %w", typ, name, err)
				}
				var ignore any
				if raw, ok := l["ignore_changes"]; ok {
					if err := json.Unmarshal(raw, &ignore); err != nil {
						return nil, fmt.Errorf("resource %s.%s: ignore_changes: %w", typ, name, err)
					}
				}
				switch v := ignore.(type) {
				case string:
					rc.ignoreAll = v == "all" || v == "${all}"
				case []any:
					for _, e := range v {
						if s, ok := e.(string); ok {
							delete(rc.attrs, strings.TrimSuffix(strings.TrimPrefix(s, "${"), "}"))
						}
					}
				}
			}
			out[typ+"."+name] = rc
		}
	}
	return out, nil
}

// firstObject decodes a JSON object, or the first of an array of objects
// (both are valid for a block in tofu's JSON syntax).
func firstObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err == nil {
		return obj, nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return nil, fmt.Errorf("not an object")
	}
	return list[0], nil
}
