package platform

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestRenderFull(t *testing.T) {
	ten, err := tenant.Load("../../tenant/testdata/lab.toml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := talos.NewSecrets(ten.TalosVersion)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, endpoint, want string
	}{
		{"tenant's own endpoint", "", talos.Endpoint(ten)},
		{"given endpoint", "https://10.0.0.9:6443", "https://10.0.0.9:6443"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			full, err := RenderFull(ten, b, tc.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if full.Configs.Endpoint != tc.want {
				t.Errorf("endpoint %q, want %q", full.Configs.Endpoint, tc.want)
			}
			if len(full.Configs.Nodes) != len(ten.Nodes()) {
				t.Errorf("%d node configs for %d nodes", len(full.Configs.Nodes), len(ten.Nodes()))
			}
			// the document is the full stage rendered with those configs
			r, _ := For(ten.Provider)
			want, err := r.Render(provider.Input{Tenant: ten, MachineConfigs: full.Configs.Nodes, Stage: provider.StageFull})
			if err != nil {
				t.Fatal(err)
			}
			if len(full.Doc) == 0 || !bytes.Equal(full.Doc, want) {
				t.Errorf("document differs from the full stage rendered with its configs:\n%s", full.Doc)
			}
		})
	}
}

func TestRenderFullUnknownProvider(t *testing.T) {
	ten := &tenant.Tenant{Name: "x", Provider: "aws"}
	if _, err := RenderFull(ten, nil, ""); err == nil || !strings.Contains(err.Error(), `unknown provider "aws"`) {
		t.Fatalf("RenderFull with provider aws = %v", err)
	}
}
