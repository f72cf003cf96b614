// Package platform picks the renderer of a tenant's provider. It is the one
// place that knows every platform package (they import package provider,
// so provider cannot import them back).
package platform

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/metal"
	"github.com/rezuscloud/rezuscloud/internal/provider/oci"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// For returns the renderer of a platform.
func For(p tenant.Provider) (provider.Renderer, error) {
	switch p {
	case tenant.ProviderMetal:
		return metal.Renderer{}, nil
	case tenant.ProviderOCI:
		return oci.Renderer{}, nil
	case tenant.ProviderOpenStack:
		return openstack.Renderer{}, nil
	case "":
		return nil, fmt.Errorf("provider: tenant names no provider (known: metal, oci, openstack)")
	}
	return nil, fmt.Errorf("provider: unknown provider %q (known: metal, oci, openstack)", p)
}
