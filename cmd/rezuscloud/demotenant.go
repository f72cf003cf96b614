package main

import (
	"fmt"
	"strings"
)

// demoTenantFile declares a metal tenant: the first node is the control
// plane, the others form the workers' pool, all of them in use.
func demoTenantFile(addrs []string, talosVersion string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `display_name       = "Demo"
provider           = "metal"
talos_version      = "%s"
kubernetes_version = "1.35.0"
auto_apply         = true

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = "%s"
  install_disk = "/dev/sda"

[[node_groups]]
name  = "workers"
role  = "worker"
count = %d
`, talosVersion, addrs[0], len(addrs)-1)
	for _, a := range addrs[1:] {
		fmt.Fprintf(&b, "  [[node_groups.machines]]\n  address      = \"%s\"\n  install_disk = \"/dev/sda\"\n", a)
	}
	return b.String()
}
