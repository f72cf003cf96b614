package engine

import (
	"context"
	"io"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// Nodes is the Talos machine API as the engine uses it. The default
// (talosNodes) calls package talos; tests give fakes, so that flows can be
// tested without simulated nodes.
type Nodes interface {
	Status(ctx context.Context, t talos.Target, talosconfig []byte) (talos.NodeState, error)
	ApplyMaintenance(ctx context.Context, endpoint string, cfg []byte) error
	ApplyConfig(ctx context.Context, t talos.Target, talosconfig, cfg []byte) error
	WaitSecure(ctx context.Context, t talos.Target, talosconfig []byte) (string, error)
	Bootstrap(ctx context.Context, t talos.Target, talosconfig []byte) error
	Kubeconfig(ctx context.Context, t talos.Target, talosconfig []byte) ([]byte, error)
	Reboot(ctx context.Context, t talos.Target, talosconfig []byte) error
	Reset(ctx context.Context, t talos.Target, talosconfig []byte, opts talos.ResetOptions) error
	Upgrade(ctx context.Context, t talos.Target, talosconfig []byte, image string) error
	EtcdSnapshot(ctx context.Context, t talos.Target, talosconfig []byte, w io.Writer) (int64, error)
	EtcdMembers(ctx context.Context, t talos.Target, talosconfig []byte) ([]string, error)
	EtcdRemoveMember(ctx context.Context, t talos.Target, talosconfig []byte, hostname string) (bool, error)
	ControlPlaneVersions(ctx context.Context, t talos.Target, talosconfig []byte) (map[string]string, error)
	Shutdown(ctx context.Context, t talos.Target, talosconfig []byte) error
	WaitGone(ctx context.Context, t talos.Target, talosconfig []byte, interval time.Duration) error
	WaitAnswering(ctx context.Context, t talos.Target, talosconfig []byte, interval time.Duration) error
}

// talosNodes is Nodes over package talos (the real machine API). Node
// states are read over the connections of one talos.Reader, which the
// poller shares (it prunes them).
type talosNodes struct{ r *talos.Reader }

func newTalosNodes() talosNodes { return talosNodes{r: talos.NewReader()} }

func (n talosNodes) Status(ctx context.Context, t talos.Target, tc []byte) (talos.NodeState, error) {
	return n.r.Status(ctx, t, tc)
}

// Prune closes the connections no polled node uses any more.
func (n talosNodes) Prune(keep map[string]bool) { n.r.Prune(keep) }
func (talosNodes) ApplyMaintenance(ctx context.Context, ep string, cfg []byte) error {
	return talos.ApplyMaintenance(ctx, ep, cfg)
}
func (talosNodes) ApplyConfig(ctx context.Context, t talos.Target, tc, cfg []byte) error {
	return talos.ApplyConfig(ctx, t, tc, cfg)
}
func (talosNodes) WaitSecure(ctx context.Context, t talos.Target, tc []byte) (string, error) {
	return talos.WaitSecure(ctx, t, tc)
}
func (talosNodes) Bootstrap(ctx context.Context, t talos.Target, tc []byte) error {
	return talos.Bootstrap(ctx, t, tc)
}
func (talosNodes) Kubeconfig(ctx context.Context, t talos.Target, tc []byte) ([]byte, error) {
	return talos.Kubeconfig(ctx, t, tc)
}
func (talosNodes) Reboot(ctx context.Context, t talos.Target, tc []byte) error {
	return talos.Reboot(ctx, t, tc)
}
func (talosNodes) Reset(ctx context.Context, t talos.Target, tc []byte, o talos.ResetOptions) error {
	return talos.Reset(ctx, t, tc, o)
}
func (talosNodes) Upgrade(ctx context.Context, t talos.Target, tc []byte, image string) error {
	return talos.Upgrade(ctx, t, tc, image)
}
func (talosNodes) EtcdSnapshot(ctx context.Context, t talos.Target, tc []byte, w io.Writer) (int64, error) {
	return talos.EtcdSnapshot(ctx, t, tc, w)
}
func (talosNodes) EtcdMembers(ctx context.Context, t talos.Target, tc []byte) ([]string, error) {
	return talos.EtcdMembers(ctx, t, tc)
}
func (talosNodes) EtcdRemoveMember(ctx context.Context, t talos.Target, tc []byte, host string) (bool, error) {
	return talos.EtcdRemoveMember(ctx, t, tc, host)
}
func (talosNodes) ControlPlaneVersions(ctx context.Context, t talos.Target, tc []byte) (map[string]string, error) {
	return talos.ControlPlaneVersions(ctx, t, tc)
}
func (talosNodes) Shutdown(ctx context.Context, t talos.Target, tc []byte) error {
	return talos.Shutdown(ctx, t, tc)
}
func (talosNodes) WaitGone(ctx context.Context, t talos.Target, tc []byte, every time.Duration) error {
	return talos.WaitGone(ctx, t, tc, every)
}
func (talosNodes) WaitAnswering(ctx context.Context, t talos.Target, tc []byte, every time.Duration) error {
	return talos.WaitAnswering(ctx, t, tc, every)
}

// Workspace is one tenant's tofu workspace as the engine uses it;
// *tofu.Workspace is the real one.
type Workspace interface {
	Dir() string
	WriteConfig(doc []byte) error
	Plan(ctx context.Context, opts tofu.RunOptions) (*tofu.Plan, error)
	Apply(ctx context.Context, plan *tofu.Plan, opts tofu.RunOptions) (*tofu.Result, error)
	Destroy(ctx context.Context, opts tofu.RunOptions) (*tofu.Result, error)
	Output(ctx context.Context) (map[string]*tfjson.StateOutput, error)
	// Drift is a refresh-only plan: what was deleted or changed outside.
	Drift(ctx context.Context, opts tofu.RunOptions) (*tofu.Drift, error)
}

var _ Workspace = (*tofu.Workspace)(nil)

// Infra opens the tenants' workspaces and recovers them at start-up; the
// default (runnerInfra) is a *tofu.Runner.
type Infra interface {
	Workspace(tenant string, opts tofu.WorkspaceOptions) (Workspace, error)
	Recover(ctx context.Context, tenant string) error
}

// runnerInfra is Infra over a *tofu.Runner.
type runnerInfra struct{ r *tofu.Runner }

func (ri runnerInfra) Workspace(tenant string, opts tofu.WorkspaceOptions) (Workspace, error) {
	return ri.r.Workspace(tenant, opts)
}

func (ri runnerInfra) Recover(ctx context.Context, tenant string) error {
	return ri.r.Recover(ctx, tenant)
}
