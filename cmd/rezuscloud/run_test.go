package main

import (
	"maps"
	"slices"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestCloudEnv checks that each platform's credentials reach tofu's
// environment under the names its provider reads, and only its own.
func TestCloudEnv(t *testing.T) {
	c := config.Credentials{
		OCI: config.OCICredentials{TenancyOCID: "ocid1.tenancy.oc1..t", UserOCID: "ocid1.user.oc1..u",
			Fingerprint: "aa:bb", PrivateKey: "-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----", Region: "eu-frankfurt-1"},
		OpenStack: config.OpenStackCredentials{AuthURL: "https://keystone.invalid:5000/v3", Username: "u", Password: "os-pass",
			ProjectName: "p", UserDomainName: "Default", ProjectDomainName: "Default", Region: "RegionOne"},
	}
	env := cloudEnv(c)
	ostack := env(tenant.ProviderOpenStack)
	want := map[string]string{"OS_AUTH_URL": "https://keystone.invalid:5000/v3", "OS_USERNAME": "u", "OS_PASSWORD": "os-pass",
		"OS_PROJECT_NAME": "p", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default", "OS_REGION_NAME": "RegionOne"}
	if len(ostack) != len(want) {
		t.Fatalf("openstack env has %d keys, want %d: %v", len(ostack), len(want), slices.Sorted(maps.Keys(ostack)))
	}
	for k, v := range want {
		if ostack[k] != v {
			t.Errorf("%s = %q, want %q", k, ostack[k], v)
		}
	}
	oci := env(tenant.ProviderOCI)
	if oci["OCI_PRIVATE_KEY"] != c.OCI.PrivateKey.Reveal() || oci["OCI_TENANCY_OCID"] != c.OCI.TenancyOCID || oci["OCI_REGION"] != "eu-frankfurt-1" {
		t.Errorf("oci env: %v", slices.Sorted(maps.Keys(oci)))
	}
	if _, leak := oci["OS_PASSWORD"]; leak {
		t.Error("OpenStack password in the OCI environment")
	}
	if m := env(tenant.ProviderMetal); len(m) != 0 {
		t.Errorf("metal gets credentials: %v", slices.Sorted(maps.Keys(m)))
	}
	// unset credentials are left out, not passed empty
	if m := cloudEnv(config.Credentials{})(tenant.ProviderOpenStack); len(m) != 0 {
		t.Errorf("empty credentials give %v", slices.Sorted(maps.Keys(m)))
	}
}
