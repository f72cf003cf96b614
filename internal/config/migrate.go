package config

import (
	"maps"
	"slices"
)

// flatOptions are the add-on options of 0.1.0, which had no sections, and
// the section and field each one moved to. The top-level log_level,
// tenants_dir and parallel_applies kept their names.
var flatOptions = map[string][2]string{
	"mqtt_url":                      {"mqtt", "url"},
	"mqtt_username":                 {"mqtt", "username"},
	"mqtt_password":                 {"mqtt", "password"},
	"discovery_prefix":              {"mqtt", "discovery_prefix"},
	"base_topic":                    {"mqtt", "base_topic"},
	"state_passphrase":              {"state", "passphrase"},
	"oci_tenancy_ocid":              {"oci", "tenancy_ocid"},
	"oci_user_ocid":                 {"oci", "user_ocid"},
	"oci_fingerprint":               {"oci", "fingerprint"},
	"oci_private_key":               {"oci", "private_key"},
	"oci_private_key_file":          {"oci", "private_key_file"},
	"oci_region":                    {"oci", "region"},
	"openstack_auth_url":            {"openstack", "auth_url"},
	"openstack_username":            {"openstack", "username"},
	"openstack_password":            {"openstack", "password"},
	"openstack_project_name":        {"openstack", "project_name"},
	"openstack_user_domain_name":    {"openstack", "user_domain_name"},
	"openstack_project_domain_name": {"openstack", "project_domain_name"},
	"openstack_region":              {"openstack", "region"},
	"redfish_username":              {"redfish", "username"},
	"redfish_password":              {"redfish", "password"},
	"discovery_cidrs":               {"discovery", "cidrs"},
	"discovery_interval":            {"discovery", "interval"},
	"assist_expose":                 {"assist", "expose"},
}

// Migration reports the one-time move of flat add-on options (0.1.0) into
// their sections. Nothing in it is a secret: it names options, never values.
type Migration struct {
	// Moved names the flat options whose values were moved, as
	// "mqtt_url → mqtt.url", sorted.
	Moved []string
	// Saved: the moved options were written back through the Supervisor,
	// so the form shows them in their sections and the next start finds
	// nothing to move.
	Saved bool
	// Err is why they could not be written back (nil when they were, or
	// when there was nothing to write). The options still apply to this
	// run.
	Err error
}

// Where MigrateFlat found flat options.
const (
	sourceFile   = iota // /data/options.json
	sourceStored        // the Supervisor's stored options (/addons/self/info)
)

// MigrateFlat moves the flat options of 0.1.0 into their sections. current
// is /data/options.json; stored, when known, is what the Supervisor keeps,
// which still holds the flat options after an update to the sectioned
// schema: the Supervisor drops options the schema no longer has from
// /data/options.json (with a warning in its log), but keeps them stored
// until the user saves the form again. A flat value replaces the section's
// (which can only be config.yaml's default: the Supervisor stores either
// the one layout or the other, never both). Empty values are dropped, and
// so are the flat keys themselves. It returns the migrated options, the
// moved names (see Migration) and where flat keys were found.
func MigrateFlat(current, stored map[string]any) (out map[string]any, moved []string, found map[int]bool) {
	out = deepCopy(current)
	found = map[int]bool{}
	seen := map[string]bool{}
	for src, opts := range []map[string]any{sourceFile: current, sourceStored: stored} {
		for _, k := range slices.Sorted(maps.Keys(opts)) {
			to, ok := flatOptions[k]
			if !ok {
				continue
			}
			found[src] = true
			delete(out, k)
			v := opts[k]
			if empty(v) {
				continue
			}
			sec, _ := out[to[0]].(map[string]any)
			if sec == nil {
				sec = map[string]any{}
				out[to[0]] = sec
			}
			sec[to[1]] = v
			if !seen[k] {
				seen[k] = true
				moved = append(moved, k+" → "+to[0]+"."+to[1])
			}
		}
	}
	slices.Sort(moved)
	return out, moved, found
}

// empty reports a value that sets nothing: null, "", an empty list.
func empty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return false
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}
