package platform

import (
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Full is what a tenant becomes for tofu and Talos: its machine configs and
// its complete .tf.json document (provider.StageFull).
type Full struct {
	Configs *talos.Configs
	Doc     []byte
}

// RenderFull generates t's machine configs from bundle for endpoint ("":
// talos.Endpoint(t)) and renders the full document that carries them. It is
// the pure part of the pipeline that `rezuscloud render` and the engine's
// prepare share, so that what render shows is what an apply hands tofu.
// Errors are returned as GenerateConfigs and the renderer word them (they
// name the tenant).
func RenderFull(t *tenant.Tenant, bundle *secrets.Bundle, endpoint string) (*Full, error) {
	r, err := For(t.Provider)
	if err != nil {
		return nil, err
	}
	return RenderFullAt(r, t, bundle, endpoint, nil)
}

// RenderFullAt is RenderFull with renderer r and each node's config made
// at the versions at gives it (talos.GenerateConfigsAt).
func RenderFullAt(r provider.Renderer, t *tenant.Tenant, bundle *secrets.Bundle, endpoint string, at func(tenant.Node) talos.Versions) (*Full, error) {
	configs, err := talos.GenerateConfigsAt(t, bundle, endpoint, at)
	if err != nil {
		return nil, err
	}
	doc, err := r.Render(provider.Input{Tenant: t, MachineConfigs: configs.Nodes, Stage: provider.StageFull})
	if err != nil {
		return nil, err
	}
	return &Full{Configs: configs, Doc: doc}, nil
}
