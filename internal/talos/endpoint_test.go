package talos_test

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestEndpoint(t *testing.T) {
	metal := func(addr string) *tenant.Tenant {
		return &tenant.Tenant{Provider: tenant.ProviderMetal, NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: addr}}},
		}}
	}
	tests := []struct {
		name string
		t    *tenant.Tenant
		want string
	}{
		{"explicit endpoint wins", &tenant.Tenant{Provider: tenant.ProviderMetal, Endpoint: "https://vip:6443"}, "https://vip:6443"},
		{"metal: first control plane", metal("192.168.1.21"), "https://192.168.1.21:6443"},
		{"metal: IPv6 is bracketed", metal("fd00::21"), "https://[fd00::21]:6443"},
		{"cloud without endpoint", &tenant.Tenant{Provider: tenant.ProviderOpenStack}, ""},
	}
	for _, tc := range tests {
		if got := talos.Endpoint(tc.t); got != tc.want {
			t.Errorf("%s: Endpoint = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := talos.EndpointURL("10.0.0.5"); got != "https://10.0.0.5:6443" {
		t.Errorf("EndpointURL = %q", got)
	}
}
