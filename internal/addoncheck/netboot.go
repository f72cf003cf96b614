package addoncheck

import (
	"strings"

	"go.yaml.in/yaml/v4"
)

// checkHostNetwork: an add-on that offers network boot (a pxe section of
// the schema, or flat pxe_* options) must run on the host's network: proxy
// DHCP answers broadcasts on ports 67 and 4011 and TFTP replies from new
// ports, none of which cross the Supervisor's bridged network or its port
// mappings (docs/design.md §11.4).
func checkHostNetwork(r *report, root *yaml.Node, schema map[string]*yaml.Node) {
	offers := ""
	for k := range schema {
		if k == "pxe" || strings.HasPrefix(k, "pxe_") {
			offers = k
			break
		}
	}
	if offers == "" {
		return
	}
	hn := get(root, "host_network")
	if hn == nil {
		r.add(root, "host_network", "must be true: option %q offers network boot, whose proxy DHCP and TFTP need the host's network", offers)
		return
	}
	if !isBool(hn) || hn.Value != "true" {
		r.add(hn, "host_network", "must be true: option %q offers network boot, whose proxy DHCP and TFTP need the host's network", offers)
	}
}
