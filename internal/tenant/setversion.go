package tenant

import (
	"fmt"
	"strconv"
)

// SetVersion writes talos_version (component "talos") or
// kubernetes_version ("kubernetes") into the tenant's file in place,
// keeping comments and layout. The new file must validate (a Kubernetes
// version this Talos does not support is refused), or nothing is written.
func (s *Store) SetVersion(name, component, version string) (*Tenant, error) {
	var field string
	switch component {
	case "talos":
		field = "talos_version"
	case "kubernetes":
		field = "kubernetes_version"
	default:
		return nil, fmt.Errorf("tenant %s: component %q is not talos or kubernetes", name, component)
	}
	return s.edit(name, func(*Tenant) (string, string, error) {
		return field, strconv.Quote(version), nil
	})
}
