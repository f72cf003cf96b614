package talos

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// DefaultInstallDisk is the install disk of nodes whose machine names none
// (and of cloud nodes, whose images are installed already).
const DefaultInstallDisk = "/dev/sda"

// InstallerImage is the Talos installer image of a version: the Image
// Factory's image of the schematic when one is given (so a node's
// extensions survive its upgrades), else the plain installer.
func InstallerImage(talosVersion, schematic string) string {
	v := "v" + strings.TrimPrefix(talosVersion, "v")
	if schematic != "" {
		return "factory.talos.dev/installer/" + schematic + ":" + v
	}
	return "ghcr.io/siderolabs/installer:" + v
}

// TalosconfigTTL is how long the client certificate of a talosconfig is valid.
const TalosconfigTTL = constants.TalosAPIDefaultCertificateValidityDuration

// Configs are a tenant's generated Talos configuration.
type Configs struct {
	// Endpoint is the Kubernetes API endpoint the configs name.
	Endpoint string
	// ControlPlane and Worker are the role base configs: tenant patches
	// applied, no per-node hostname or install disk.
	ControlPlane []byte
	Worker       []byte
	// Nodes holds each declared node's machine config, keyed by node name
	// (tenant.Node.Name): the role base plus the node's hostname
	// (HostnameConfig document) and, on metal, its machine's install disk.
	Nodes map[string][]byte
	// Talosconfig is a client config for the tenant whose endpoints are the
	// metal control-plane addresses, or the endpoint's host on clouds. Use
	// Talosconfig() for other endpoints.
	Talosconfig []byte
}

// EndpointURL is the Kubernetes API endpoint served at addr (an IP or host
// name, IPv6 bracketed): https://addr:6443. It is the one place the URL is
// built, for metal's first control plane and a cloud's endpoint output.
func EndpointURL(addr string) string { return "https://" + net.JoinHostPort(addr, "6443") }

// Endpoint returns the Kubernetes API endpoint of a tenant: its explicit
// endpoint, or https://<first control plane machine>:6443 on metal. It is ""
// when neither is known (a cloud tenant before its network exists).
func Endpoint(t *tenant.Tenant) string {
	if t.Endpoint != "" {
		return t.Endpoint
	}
	if t.Provider == tenant.ProviderMetal {
		if g := t.ControlPlaneGroup(); g != nil && len(g.Machines) > 0 {
			return EndpointURL(g.Machines[0].Address)
		}
	}
	return ""
}

// GenerateConfigs builds the machine configs of every node the tenant
// declares from its secrets bundle. endpoint is the Kubernetes API endpoint
// (https://host:6443); "" means Endpoint(t). Every config is validated with
// machinery (strict) and encoded without comments.
func GenerateConfigs(t *tenant.Tenant, b *secrets.Bundle, endpoint string) (*Configs, error) {
	return GenerateConfigsAt(t, b, endpoint, nil)
}

// Versions are the versions one node's machine config is made with:
// Talos (its installer image and config contract), Kubernetes (the
// control-plane components) and the kubelet; "" takes the tenant's (for
// Kubelet: Kubernetes). A rolling upgrade moves a node's versions one at a
// time, so the nodes of a cluster may differ for a while.
type Versions struct {
	Talos, Kubernetes, Kubelet string
}

// GenerateConfigsAt is GenerateConfigs with each node's config made at the
// versions at gives it (nil: the tenant's for every node). The role base
// configs are the tenant's.
func GenerateConfigsAt(t *tenant.Tenant, b *secrets.Bundle, endpoint string, at func(tenant.Node) Versions) (*Configs, error) {
	g, err := newGenerator(t, b, endpoint)
	if err != nil {
		return nil, err
	}
	out := &Configs{Endpoint: g.endpoint, Nodes: map[string][]byte{}}
	if out.ControlPlane, err = g.render(machine.TypeControlPlane, nil); err != nil {
		return nil, fmt.Errorf("tenant %q controlplane config: %w", t.Name, err)
	}
	if out.Worker, err = g.render(machine.TypeWorker, nil); err != nil {
		return nil, fmt.Errorf("tenant %q worker config: %w", t.Name, err)
	}
	gens := map[[2]string]*generator{{"", ""}: g}
	for _, n := range t.Nodes() {
		var v Versions
		if at != nil {
			v = at(n)
		}
		if out.Nodes[n.Name], err = nodeAt(gens, t, b, g.endpoint, n, v); err != nil {
			return nil, err
		}
	}
	if out.Talosconfig, err = Talosconfig(b, t.Name, g.talosEndpoints); err != nil {
		return nil, err
	}
	return out, nil
}

// NodeConfig builds one node's machine config (what GenerateConfigs puts in
// Nodes[n.Name]).
func NodeConfig(t *tenant.Tenant, b *secrets.Bundle, endpoint string, n tenant.Node) ([]byte, error) {
	return NodeConfigAt(t, b, endpoint, n, Versions{})
}

// NodeConfigAt builds one node's machine config at versions v.
func NodeConfigAt(t *tenant.Tenant, b *secrets.Bundle, endpoint string, n tenant.Node, v Versions) ([]byte, error) {
	return nodeAt(map[[2]string]*generator{}, t, b, endpoint, n, v)
}

// nodeAt renders n at v with a generator of gens (made once per pair of
// Talos and Kubernetes versions).
func nodeAt(gens map[[2]string]*generator, t *tenant.Tenant, b *secrets.Bundle, endpoint string, n tenant.Node, v Versions) ([]byte, error) {
	tv, kv := v.Talos, v.Kubernetes
	if tv == t.TalosVersion {
		tv = ""
	}
	if kv == t.KubernetesVersion {
		kv = ""
	}
	key := [2]string{tv, kv}
	g := gens[key]
	if g == nil {
		c := *t
		if tv != "" {
			c.TalosVersion = tv
		}
		if kv != "" {
			c.KubernetesVersion = kv
		}
		var err error
		if g, err = newGenerator(&c, b, endpoint); err != nil {
			return nil, err
		}
		gens[key] = g
	}
	kubelet := ""
	if v.Kubelet != "" && strings.TrimPrefix(v.Kubelet, "v") != strings.TrimPrefix(g.t.KubernetesVersion, "v") {
		kubelet = strings.TrimPrefix(v.Kubelet, "v")
	}
	return g.node(n, kubelet)
}

type generator struct {
	t              *tenant.Tenant
	in             *generate.Input
	endpoint       string
	patches        []configpatcher.Patch
	mode           validation.RuntimeMode
	talosEndpoints []string
}

func newGenerator(t *tenant.Tenant, b *secrets.Bundle, endpoint string) (*generator, error) {
	if b == nil {
		return nil, errors.New("talos: no secrets bundle")
	}
	if endpoint == "" {
		endpoint = Endpoint(t)
	}
	if endpoint == "" {
		return nil, fmt.Errorf("tenant %q: no Kubernetes endpoint known yet", t.Name)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("tenant %q: endpoint %q is not an https://host:port URL", t.Name, endpoint)
	}
	vc, err := contract(t.TalosVersion)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", t.Name, err)
	}
	// Cert SANs: the endpoint's host and, on metal, every control plane's
	// address, so that the API server and apid answer under those names.
	sans := []string{u.Hostname()}
	var cpAddrs []string
	if t.Provider == tenant.ProviderMetal {
		for _, n := range t.Nodes() {
			if n.Role == tenant.RoleControlPlane && n.Machine != nil {
				cpAddrs = append(cpAddrs, n.Machine.Address)
				if n.Machine.Address != u.Hostname() {
					sans = append(sans, n.Machine.Address)
				}
			}
		}
	}
	talosEndpoints := cpAddrs
	if len(talosEndpoints) == 0 {
		talosEndpoints = []string{u.Hostname()}
	}
	kv := strings.TrimPrefix(t.KubernetesVersion, "v")
	if kv == "" {
		kv = constants.DefaultKubernetesVersion
	}
	opts := []generate.Option{
		generate.WithVersionContract(vc),
		generate.WithSecretsBundle(b),
		generate.WithEndpointList(talosEndpoints),
		generate.WithInstallDisk(DefaultInstallDisk),
		generate.WithAdditionalSubjectAltNames(sans),
	}
	if t.TalosVersion != "" {
		opts = append(opts, generate.WithInstallImage(InstallerImage(t.TalosVersion, t.Schematic)))
	}
	in, err := generate.NewInput(t.Name, endpoint, kv, opts...)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", t.Name, err)
	}
	patches := make([]configpatcher.Patch, 0, len(t.ConfigPatches))
	for i, p := range t.ConfigPatches {
		pp, err := configpatcher.LoadPatch([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("tenant %q: config_patches[%d]: %w", t.Name, i, err)
		}
		if _, ok := pp.(configpatcher.StrategicMergePatch); !ok {
			return nil, fmt.Errorf("tenant %q: config_patches[%d]: only strategic merge patches are supported (JSON patches fail on multi-document configs)", t.Name, i)
		}
		patches = append(patches, pp)
	}
	return &generator{t: t, in: in, endpoint: endpoint, patches: patches, mode: modeFor(t.Provider), talosEndpoints: talosEndpoints}, nil
}

// node renders one node's config; kubelet, when not "", pins its kubelet
// to that version (the control-plane step of a Kubernetes upgrade).
func (g *generator) node(n tenant.Node, kubelet string) ([]byte, error) {
	typ := machine.TypeWorker
	if n.Role == tenant.RoleControlPlane {
		typ = machine.TypeControlPlane
	}
	var sb strings.Builder
	disk := n.Machine != nil && n.Machine.InstallDisk != ""
	if disk || kubelet != "" {
		sb.WriteString("machine:\n")
		if disk {
			fmt.Fprintf(&sb, "  install:\n    disk: %q\n", n.Machine.InstallDisk)
		}
		if kubelet != "" {
			fmt.Fprintf(&sb, "  kubelet:\n    image: %s:v%s\n", constants.KubeletImage, kubelet)
		}
		sb.WriteString("---\n")
	}
	fmt.Fprintf(&sb, "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: %q\nauto: \"off\"\n", n.Name)
	p, err := configpatcher.LoadPatch([]byte(sb.String()))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	data, err := g.render(typ, p)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return data, nil
}

// render generates a role's config, applies the tenant's patches and then
// extra (if any), encodes it without comments and validates the result.
func (g *generator) render(typ machine.Type, extra configpatcher.Patch) ([]byte, error) {
	cfg, err := g.in.Config(typ)
	if err != nil {
		return nil, err
	}
	patches := g.patches
	if extra != nil {
		patches = append(patches[:len(patches):len(patches)], extra)
	}
	if len(patches) > 0 {
		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
		if err != nil {
			return nil, fmt.Errorf("apply config patches: %w", err)
		}
		if cfg, err = out.Config(); err != nil {
			return nil, fmt.Errorf("apply config patches: %w", err)
		}
	}
	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, err
	}
	if _, err := ValidateConfig(data, g.mode); err != nil {
		return nil, err
	}
	return data, nil
}

// ValidateConfig parses a machine config with machinery and validates it
// strictly for a runtime mode (nil: metal). It returns the parsed config and
// any warnings turned into the error.
func ValidateConfig(data []byte, mode validation.RuntimeMode) (config.Provider, error) {
	if mode == nil {
		mode = Metal
	}
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("parse machine config: %w", err)
	}
	if _, err := cfg.Validate(mode, validation.WithStrict()); err != nil {
		return nil, fmt.Errorf("invalid machine config: %w", err)
	}
	return cfg, nil
}

// RuntimeMode is a validation runtime mode.
type RuntimeMode struct {
	Name    string
	Install bool
}

func (m RuntimeMode) String() string        { return m.Name }
func (m RuntimeMode) RequiresInstall() bool { return m.Install }
func (m RuntimeMode) InContainer() bool     { return false }

// Runtime modes: metal nodes install to disk; cloud images are installed.
var (
	Metal = RuntimeMode{Name: "metal", Install: true}
	Cloud = RuntimeMode{Name: "cloud", Install: false}
)

func modeFor(p tenant.Provider) validation.RuntimeMode {
	if p == tenant.ProviderMetal || p == "" {
		return Metal
	}
	return Cloud
}

// Talosconfig mints a talosconfig for the tenant: context name, the given
// endpoints (addresses, optionally host:port), the OS CA of the bundle and a
// new admin client certificate valid for TalosconfigTTL.
func Talosconfig(b *secrets.Bundle, name string, endpoints []string) ([]byte, error) {
	if b == nil || b.Certs == nil || b.Certs.OS == nil {
		return nil, errors.New("talos: secrets bundle has no OS CA")
	}
	if b.Clock == nil {
		b.Clock = secrets.NewClock()
	}
	crt, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), TalosconfigTTL)
	if err != nil {
		return nil, fmt.Errorf("talosconfig client certificate: %w", err)
	}
	data, err := clientconfig.NewConfig(name, endpoints, b.Certs.OS.Crt, crt).Bytes()
	if err != nil {
		return nil, fmt.Errorf("encode talosconfig: %w", err)
	}
	return data, nil
}
