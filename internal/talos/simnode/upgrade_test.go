package simnode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func upgradeHost(i int) string { return fmt.Sprintf("127.%d.9.%d", os.Getpid()%200+20, i) }

// bootControlPlane starts one control plane from its config, bootstrapped
// and running, and returns it with an admin client.
func bootControlPlane(t *testing.T, opts simnode.Options) (*simnode.Node, *client.Client) {
	t.Helper()
	n, c, _ := bootControlPlaneTC(t, opts)
	return n, c
}

// bootControlPlaneTC is bootControlPlane that also returns the talosconfig.
func bootControlPlaneTC(t *testing.T, opts simnode.Options) (*simnode.Node, *client.Client, []byte) {
	t.Helper()
	h := upgradeHost(1)
	tn := &tenant.Tenant{Name: "up", Provider: tenant.ProviderMetal, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: h}}}}}
	cfgs, err := talos.GenerateConfigs(tn, sharedBundle(t), "")
	if err != nil {
		t.Fatal(err)
	}
	opts.Addr, opts.Config = h+":0", cfgs.Nodes["up-cp-1"]
	n, err := simnode.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := talos.Bootstrap(ctx, talos.Direct(n.Addr()), cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	return n, secureClient(t, n.Addr(), cfgs.Talosconfig), cfgs.Talosconfig
}

var systemCRI = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

func TestLifecycleUpgradeAPI(t *testing.T) {
	// DownDelay longer than the grace the old server gets, so that the
	// client's connection is not cut under it after the reboot.
	n, c := bootControlPlane(t, simnode.Options{InstallDelay: 100 * time.Millisecond, DownDelay: 80 * time.Millisecond, BootDelay: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const schematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	image := "factory.talos.dev/installer/" + schematic + ":v1.13.1"

	upgrade := func(ctx context.Context, img string) (machine.LifecycleService_UpgradeClient, error) {
		return c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
			Containerd: systemCRI, Source: &machine.InstallArtifactsSource{ImageName: img}})
	}
	// An image that was not pulled is refused.
	st, err := upgrade(ctx, image)
	if err == nil {
		_, err = st.Recv()
	}
	if client.StatusCode(err) != codes.FailedPrecondition {
		t.Fatalf("upgrade without a pull: %v", err)
	}
	ps, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{Containerd: systemCRI, ImageRef: image})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for {
		m, err := ps.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.GetName() != "" {
			name = m.GetName()
		}
	}
	if name != image {
		t.Fatalf("pulled name %q", name)
	}

	st, err = upgrade(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetProgress().GetMessage() == "" {
		t.Fatalf("first progress: %v %v", m, err)
	}
	// Installing: stage upgrading, and a second upgrade is refused.
	if s := n.Stage(); s != runtime.MachineStageUpgrading {
		t.Errorf("stage while installing %s", s)
	}
	st2, err := upgrade(ctx, name)
	if err == nil {
		_, err = st2.Recv()
	}
	if client.StatusCode(err) != codes.FailedPrecondition {
		t.Errorf("concurrent upgrade: %v", err)
	}
	exit := int32(-1)
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if x, ok := m.GetProgress().GetResponse().(*machine.LifecycleServiceInstallProgress_ExitCode); ok {
			exit = x.ExitCode
		}
	}
	if exit != 0 {
		t.Fatalf("exit code %d", exit)
	}
	// Installed, not booted: still the old version, running.
	if v := n.TalosVersion(); v != "v1.13.0" || n.Stage() != runtime.MachineStageRunning {
		t.Errorf("before the reboot: %s in stage %s", v, n.Stage())
	}
	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	// switched when it boots again
	testenv.WaitFor(t, 30*time.Second, "the new version to boot", func() bool { return n.TalosVersion() == "v1.13.1" })
	if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	v, err := c.Version(ctx)
	if err != nil || v.Messages[0].Version.Tag != "v1.13.1" {
		t.Fatalf("version after the reboot: %v %v", v, err)
	}
	rv, err := safe.StateGetByID[*runtime.Version](ctx, c.COSI, "version")
	if err != nil || rv.TypedSpec().Version != "v1.13.1" {
		t.Errorf("runtime Version: %v %v", rv, err)
	}
	ext, err := safe.StateGetByID[*runtime.ExtensionStatus](ctx, c.COSI, "0")
	if err != nil || ext.TypedSpec().Metadata.Name != "schematic" || ext.TypedSpec().Metadata.Version != schematic {
		t.Errorf("schematic extension: %v %v", ext, err)
	}
	if got := n.UpgradeImages(); len(got) != 1 || got[0] != image {
		t.Errorf("upgrade images %v", got)
	}
	if got := n.Calls(); got.Upgrade != 3 || got.ImagePull != 1 {
		t.Errorf("calls %+v", got)
	}
}

func TestComponentResourcesAndSnapshot(t *testing.T) {
	_, c := bootControlPlane(t, simnode.Options{EtcdSnapshotSize: 5000})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pod, err := safe.StateGetByID[*k8s.StaticPodStatus](ctx, c.COSI, "kube-system/kube-apiserver-up-cp-1")
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := pod.TypedSpec().PodStatus["containerStatuses"].([]any)
	if len(cs) != 1 || cs[0].(map[string]any)["image"] != "registry.k8s.io/kube-apiserver:v1.35.0" {
		t.Errorf("apiserver pod status %v", pod.TypedSpec().PodStatus)
	}
	ks, err := safe.StateGetByID[*k8s.KubeletSpec](ctx, c.COSI, k8s.KubeletID)
	if err != nil || ks.TypedSpec().Image != "ghcr.io/siderolabs/kubelet:v1.35.0" {
		t.Errorf("kubelet spec %v %v", ks, err)
	}

	r, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 8192+32 {
		t.Fatalf("snapshot of %d bytes, want two 4 KiB pages and the trailer", len(data))
	}
	sum := sha256.Sum256(data[:8192])
	if !bytes.Equal(sum[:], data[8192:]) {
		t.Error("the trailer is not the sha256 of the database")
	}
	if bytes.Equal(data[:4096], data[4096:8192]) {
		t.Error("pages are not distinct")
	}
}
