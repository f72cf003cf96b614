package platform

import (
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestForKnowsEveryProvider(t *testing.T) {
	for _, p := range tenant.Providers {
		r, err := For(p)
		if err != nil {
			t.Fatalf("For(%q): %v", p, err)
		}
		if r.Provider() != p {
			t.Errorf("For(%q) gave the %q renderer", p, r.Provider())
		}
	}
}

func TestForUnknownProvider(t *testing.T) {
	for _, p := range []tenant.Provider{"aws", ""} {
		_, err := For(p)
		if err == nil || !strings.Contains(err.Error(), "metal, oci, openstack") {
			t.Fatalf("For(%q): %v", p, err)
		}
	}
	if _, err := For("aws"); !strings.Contains(err.Error(), `unknown provider "aws"`) {
		t.Errorf("error %q does not name the provider", err)
	}
}
