package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc/codes"
)

// upgradeContainerd is where installer images are pulled and run from:
// talosctl's default, the CRI instance (on disk in EPHEMERAL) with the
// system namespace; installer images with extensions are large.
func upgradeContainerd() *common.ContainerdInstance {
	return &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
}

// ErrUpgradeFailed marks an upgrade the node refused or whose installer
// failed; the node was not rebooted and still runs its old version.
var ErrUpgradeFailed = errors.New("upgrade failed")

// Upgrade installs image on the node and reboots it into it, as talosctl
// upgrade does on Talos 1.13 (ImagePull, then LifecycleService.Upgrade
// streaming progress until its exit code, then Reboot), falling back to the
// legacy MachineService.Upgrade for nodes that do not know the lifecycle
// API. It returns once the node has been told to reboot; the caller waits
// for the new version with Status.
//
// The caller cordons and drains the node first if it wants to: Talos 1.13
// does not drain before a plain Reboot. An installer that exits non-zero is
// an error matching ErrUpgradeFailed, and the node is not rebooted (a
// reboot after a failed install may boot an older slot, talos#10364).
func Upgrade(ctx context.Context, t Target, talosconfig []byte, image string) error {
	if strings.TrimSpace(image) == "" {
		return fmt.Errorf("upgrade %s: no installer image", t)
	}
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		name, err := pullImage(ctx, c, image)
		if client.StatusCode(err) == codes.Unimplemented {
			return legacyUpgrade(ctx, c, image) // Talos before 1.13
		}
		if err != nil {
			return err
		}
		if err := installUpgrade(ctx, c, name); err != nil {
			return err
		}
		if err := c.Reboot(ctx); err != nil {
			return fmt.Errorf("reboot into %s: %w", image, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("upgrade %s to %s: %w", t, image, err)
	}
	return nil
}

// pullImage pulls image into the node's containerd and returns the name the
// node knows it by.
func pullImage(ctx context.Context, c *client.Client, image string) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{Containerd: upgradeContainerd(), ImageRef: image})
	if err != nil {
		return "", err
	}
	name := ""
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if client.StatusCode(err) == codes.Unimplemented {
				return "", err
			}
			return "", fmt.Errorf("%w: pull %s: %s", ErrUpgradeFailed, image, statusMessage(err))
		}
		if n := m.GetName(); n != "" {
			name = n
		}
	}
	if name == "" {
		return "", fmt.Errorf("%w: pull %s: the node did not say it was pulled", ErrUpgradeFailed, image)
	}
	return name, nil
}

// installUpgrade runs the installer image on the node (LifecycleService)
// and requires exit code 0: the service reports a failed install as an
// exit code, not as an error.
func installUpgrade(ctx context.Context, c *client.Client, name string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: upgradeContainerd(),
		Source:     &machine.InstallArtifactsSource{ImageName: name},
	})
	if err != nil {
		return fmt.Errorf("%w: install %s: %s", ErrUpgradeFailed, name, statusMessage(err))
	}
	var last string
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: install %s: the installer ended without an exit code (last message: %q)", ErrUpgradeFailed, name, last)
		}
		if err != nil {
			if isUnreachable(err) {
				return fmt.Errorf("install %s: %w", name, err)
			}
			return fmt.Errorf("%w: install %s: %s", ErrUpgradeFailed, name, statusMessage(err))
		}
		p := m.GetProgress()
		if x, ok := p.GetResponse().(*machine.LifecycleServiceInstallProgress_ExitCode); ok {
			if x.ExitCode != 0 {
				return fmt.Errorf("%w: install %s: installer exit code %d: %s", ErrUpgradeFailed, name, x.ExitCode, last)
			}
			return nil
		}
		if msg := p.GetMessage(); msg != "" {
			last = msg
		}
	}
}

// legacyUpgrade is the pre-1.13 path: the node pulls, installs and reboots
// itself (and checks etcd quorum first on a control plane).
func legacyUpgrade(ctx context.Context, c *client.Client, image string) error {
	//nolint:staticcheck // the legacy API is the only one nodes before 1.13 have
	_, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image),
		client.WithUpgradeRebootMode(machine.UpgradeRequest_DEFAULT))
	if err != nil {
		if isUnreachable(err) {
			return fmt.Errorf("legacy upgrade: %w", err)
		}
		return fmt.Errorf("%w: legacy upgrade: %s", ErrUpgradeFailed, statusMessage(err))
	}
	return nil
}

// Kubernetes control-plane components, by their static pod names.
const (
	KubeAPIServer         = k8s.APIServerID
	KubeControllerManager = k8s.ControllerManagerID
	KubeScheduler         = k8s.SchedulerID
)

// ControlPlaneVersions reports the Kubernetes versions a control-plane node
// runs: its static pods' images (kube-apiserver, kube-controller-manager,
// kube-scheduler) as "1.35.0" style versions, keyed by those names. It
// reads the kubelet's pod status of each static pod (COSI StaticPodStatus,
// what talosctl upgrade-k8s waits on) and, for a component without one
// (kubelet not up yet), the config resource Talos renders the pod from
// (APIServerConfig etc.). A worker has none: an empty map.
func ControlPlaneVersions(ctx context.Context, t Target, talosconfig []byte) (map[string]string, error) {
	out := map[string]string{}
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		clear(out)
		pods, err := safe.StateListAll[*k8s.StaticPodStatus](ctx, c.COSI)
		if err != nil {
			return err
		}
		for p := range pods.All() {
			comp, img := podImage(p)
			if comp != "" && img != "" {
				if v := imageVersion(img); v != "" {
					out[comp] = v
				}
			}
		}
		for _, r := range []struct {
			comp string
			get  func() (string, error)
		}{
			{KubeAPIServer, func() (string, error) {
				return configImage[*k8s.APIServerConfig](ctx, c.COSI, k8s.NewAPIServerConfig().Metadata(), func(r *k8s.APIServerConfig) string { return r.TypedSpec().Image })
			}},
			{KubeControllerManager, func() (string, error) {
				return configImage[*k8s.ControllerManagerConfig](ctx, c.COSI, k8s.NewControllerManagerConfig().Metadata(), func(r *k8s.ControllerManagerConfig) string { return r.TypedSpec().Image })
			}},
			{KubeScheduler, func() (string, error) {
				return configImage[*k8s.SchedulerConfig](ctx, c.COSI, k8s.NewSchedulerConfig().Metadata(), func(r *k8s.SchedulerConfig) string { return r.TypedSpec().Image })
			}},
		} {
			if out[r.comp] != "" {
				continue
			}
			img, err := r.get()
			if err != nil {
				return err
			}
			if v := imageVersion(img); v != "" {
				out[r.comp] = v
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("control-plane versions of %s: %w", t, err)
	}
	return out, nil
}

// configImage reads the image of a control-plane config resource; "" when
// the node has none.
func configImage[T resource.Resource](ctx context.Context, st state.State, md *resource.Metadata, image func(T) string) (string, error) {
	r, err := safe.StateGet[T](ctx, st, md)
	if state.IsNotFoundError(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return image(r), nil
}

// podImage returns the component ("kube-apiserver") of a static pod status
// with id "kube-system/kube-apiserver-<node>" and the image its container
// reports.
func podImage(p *k8s.StaticPodStatus) (comp, image string) {
	id := strings.TrimPrefix(p.Metadata().ID(), "kube-system/")
	for _, c := range []string{KubeAPIServer, KubeControllerManager, KubeScheduler} {
		if strings.HasPrefix(id, c+"-") {
			comp = c
		}
	}
	if comp == "" {
		return "", ""
	}
	cs, _ := p.TypedSpec().PodStatus["containerStatuses"].([]any)
	for _, x := range cs {
		m, _ := x.(map[string]any)
		if name, _ := m["name"].(string); name == comp || len(cs) == 1 {
			image, _ = m["image"].(string)
			return comp, image
		}
	}
	return comp, ""
}

// imageVersion is the version of an image reference's tag without its
// "v" ("registry.k8s.io/kube-apiserver:v1.35.0" → "1.35.0"); "" without a
// tag.
func imageVersion(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	slash := strings.LastIndex(name, "/")
	colon := strings.LastIndex(name, ":")
	if colon <= slash || colon == len(name)-1 {
		return ""
	}
	return strings.TrimPrefix(name[colon+1:], "v")
}

// readKubeletVersion reads the kubelet version from the node's KubeletSpec;
// "" when it has none (maintenance mode, not configured yet) or it cannot
// be read.
func readKubeletVersion(ctx context.Context, c *client.Client) string {
	ks, err := safe.StateGetByID[*k8s.KubeletSpec](ctx, c.COSI, k8s.KubeletID)
	if err != nil {
		return ""
	}
	return imageVersion(ks.TypedSpec().Image)
}
