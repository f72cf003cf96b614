package tenant

import (
	"fmt"
	"slices"
	"strconv"
)

// SetPool writes a group's pool mode, min and max (each nil: unchanged)
// into the tenant's [node_groups.pool] table in place, keeping comments
// and layout, in one atomic write. The group must already have a pool
// table (the watts and delays are the user's to write), and the new file
// must validate (min <= max <= the group's bound), or nothing is written.
func (s *Store) SetPool(name, group string, mode *string, min, max *int) (*Tenant, error) {
	if mode == nil && min == nil && max == nil {
		return nil, fmt.Errorf("tenant %s: pool of group %q: nothing to change (give mode, min or max)", name, group)
	}
	if mode != nil && !slices.Contains(PoolModes, PoolMode(*mode)) {
		return nil, fmt.Errorf("tenant %s: pool of group %q: mode %q is not one of off, observe, on", name, group, *mode)
	}
	return s.editFields(name, func(t *Tenant) ([]fieldValue, error) {
		gi := slices.IndexFunc(t.NodeGroups, func(g NodeGroup) bool { return g.Name == group })
		if gi < 0 {
			return nil, fmt.Errorf("tenant %s has no group %q", name, group)
		}
		if t.NodeGroups[gi].Pool == nil {
			return nil, fmt.Errorf("tenant %s: group %q has no pool: add a [node_groups.pool] table with its watts to the file first", name, group)
		}
		f := fmt.Sprintf("node_groups[%d].pool.", gi)
		var fvs []fieldValue
		if mode != nil {
			fvs = append(fvs, fieldValue{f + "mode", strconv.Quote(*mode)})
		}
		if min != nil {
			fvs = append(fvs, fieldValue{f + "min", strconv.Itoa(*min)})
		}
		if max != nil {
			fvs = append(fvs, fieldValue{f + "max", strconv.Itoa(*max)})
		}
		return fvs, nil
	})
}
