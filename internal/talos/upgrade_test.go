package talos_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

const (
	image1131   = "ghcr.io/siderolabs/installer:v1.13.1"
	schematic   = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	factory1131 = "factory.talos.dev/installer/" + schematic + ":v1.13.1"
)

// runningCloud is a bootstrapped simulated cloud cluster whose nodes are
// all running and ready.
func runningCloud(t *testing.T, cps, workers int, opts simnode.Options) *cloud {
	t.Helper()
	c := startCloud(t, cps, workers, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := talos.Bootstrap(ctx, talos.Direct(c.cps[0].PublicAddr()), c.cfgs.Talosconfig); err != nil {
		t.Fatal(err)
	}
	for _, n := range append(append([]*simnode.Node(nil), c.cps...), c.workers...) {
		if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// waitVersion waits until Status of tg reports version running and ready.
func waitVersion(ctx context.Context, t *testing.T, tg talos.Target, tc []byte, version string) talos.NodeState {
	t.Helper()
	var st talos.NodeState
	for {
		st, _ = talos.Status(ctx, tg, tc)
		if st.TalosVersion == version && st.Ready && st.Stage == tenant.StageRunning {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: waiting for %s running and ready: %v (last state %+v)", tg, version, ctx.Err(), st)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestUpgrade(t *testing.T) {
	c := runningCloud(t, 2, 1, fastDelays)
	tc := c.cfgs.Talosconfig
	cps := c.cpEndpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cases := []struct {
		name   string
		node   *simnode.Node
		target talos.Target
		image  string
		via    *simnode.Node // the control plane that routes, if any
	}{
		{"control plane direct", c.cps[0], talos.Direct(cps[0]), image1131, nil},
		{"control plane routed", c.cps[1], talos.Route(cps[:1], c.cps[1].Addr()), factory1131, c.cps[0]},
		{"worker routed", c.workers[0], talos.Route(cps, c.workers[0].Addr()), factory1131, c.cps[0]},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.node.Calls()
			var fwd int
			if tt.via != nil {
				fwd = tt.via.Calls().Forwarded
			}
			if err := talos.Upgrade(ctx, tt.target, tc, tt.image); err != nil {
				t.Fatal(err)
			}
			st := waitVersion(ctx, t, tt.target, tc, "v1.13.1")
			if st.KubeletVersion != "1.35.0" {
				t.Errorf("kubelet version after the upgrade %q", st.KubeletVersion)
			}
			after := tt.node.Calls()
			if after.ImagePull-before.ImagePull != 1 || after.Upgrade-before.Upgrade != 1 || after.Reboot-before.Reboot != 1 {
				t.Errorf("calls: pull %d upgrade %d reboot %d, want 1 each",
					after.ImagePull-before.ImagePull, after.Upgrade-before.Upgrade, after.Reboot-before.Reboot)
			}
			if imgs := tt.node.UpgradeImages(); len(imgs) == 0 || imgs[len(imgs)-1] != tt.image {
				t.Errorf("upgrade images %v, want %s last", imgs, tt.image)
			}
			if tt.via != nil && tt.via.Calls().Forwarded-fwd < 4 {
				t.Errorf("%s forwarded %d requests, want pull, upgrade, reboot and status", tt.name, tt.via.Calls().Forwarded-fwd)
			}
			if got := tt.node.TalosVersion(); got != "v1.13.1" {
				t.Errorf("simnode version %q", got)
			}
		})
	}
}

func TestUpgradeFailures(t *testing.T) {
	c := runningCloud(t, 1, 3, fastDelays)
	tc := c.cfgs.Talosconfig
	cps := c.cpEndpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cases := []struct {
		name    string
		fault   simnode.UpgradeFault
		wantErr bool
	}{
		{"image cannot be pulled", simnode.UpgradePullFails, true},
		{"installer fails", simnode.UpgradeInstallFails, true},
		{"node never comes back", simnode.UpgradeNeverBack, false},
	}
	for i, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			n := c.workers[i]
			tg := talos.Route(cps, n.Addr())
			n.FailUpgrade(tt.fault)
			before := n.Calls()
			err := talos.Upgrade(ctx, tg, tc, image1131)
			if tt.wantErr {
				if !errors.Is(err, talos.ErrUpgradeFailed) {
					t.Fatalf("want ErrUpgradeFailed, got %v", err)
				}
				if n.Calls().Reboot != before.Reboot {
					t.Error("a failed upgrade rebooted the node")
				}
				st, err := talos.Status(ctx, tg, tc)
				if err != nil || st.TalosVersion != "v1.13.0" || !st.Ready {
					t.Errorf("after a failed upgrade: %+v %v", st, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// down for good: unreachable through the control plane, until the
			// fault is cleared; then it boots the old version again.
			testenv.WaitFor(t, 30*time.Second, "the node to go down", func() bool {
				st, _ := talos.Status(ctx, tg, tc)
				return st.Stage == tenant.StageUnreachable
			})
			testenv.WaitFor(t, 10*time.Second, "the node stuck down", n.Stuck)
			if members, err := talos.EtcdMembers(ctx, talos.Direct(cps[0]), tc); err != nil || len(members) != 1 {
				t.Errorf("etcd members %v %v", members, err)
			}
			if n.Stage() != runtime.MachineStageRebooting {
				t.Errorf("stuck node in stage %s", n.Stage())
			}
			n.ClearFault()
			waitVersion(ctx, t, tg, tc, "v1.13.0")
			if err := talos.Upgrade(ctx, tg, tc, image1131); err != nil {
				t.Fatal(err)
			}
			waitVersion(ctx, t, tg, tc, "v1.13.1")
		})
	}
	if err := talos.Upgrade(ctx, talos.Direct(cps[0]), tc, " "); err == nil {
		t.Error("an empty image was accepted")
	}
}

// A node before Talos 1.13 has no Image or Lifecycle service: the legacy
// Upgrade, which reboots by itself.
func TestUpgradeLegacy(t *testing.T) {
	o := fastDelays
	o.TalosVersion = "v1.12.6"
	c := runningCloud(t, 1, 0, o)
	tc := c.cfgs.Talosconfig
	tg := talos.Direct(c.cpEndpoints()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := talos.Upgrade(ctx, tg, tc, "ghcr.io/siderolabs/installer:v1.13.0"); err != nil {
		t.Fatal(err)
	}
	waitVersion(ctx, t, tg, tc, "v1.13.0")
	if got := c.cps[0].Calls(); got.Upgrade != 1 || got.Reboot != 0 || got.ImagePull != 1 {
		t.Errorf("legacy path calls: %+v", got)
	}
	c.cps[0].FailUpgrade(simnode.UpgradePullFails)
	// now on 1.13: the lifecycle API, whose pull fails
	if err := talos.Upgrade(ctx, tg, tc, image1131); !errors.Is(err, talos.ErrUpgradeFailed) {
		t.Errorf("pull failure: %v", err)
	}
}

func TestEtcdSnapshot(t *testing.T) {
	o := fastDelays
	o.EtcdSnapshotSize = 300 << 10
	c := runningCloud(t, 2, 1, o)
	tc := c.cfgs.Talosconfig
	cps := c.cpEndpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const want = 300<<10 + 32

	var first, routed bytes.Buffer
	n, err := talos.EtcdSnapshot(ctx, talos.Direct(cps[0]), tc, &first)
	if err != nil || n != want || first.Len() != want {
		t.Fatalf("snapshot: %d bytes (buffer %d), %v; want %d", n, first.Len(), err, want)
	}
	n, err = talos.EtcdSnapshot(ctx, talos.Route(cps[:1], c.cps[1].Addr()), tc, &routed)
	if err != nil || n != want {
		t.Fatalf("routed snapshot: %d, %v", n, err)
	}
	if !bytes.Equal(first.Bytes(), routed.Bytes()) {
		t.Error("two snapshots of one cluster differ")
	}
	if got := c.cps[1].Calls().EtcdSnapshot; got != 1 {
		t.Errorf("routed control plane served %d snapshots", got)
	}

	for _, tt := range []struct {
		name string
		cut  int64
	}{
		{"mid-page", 10_000},
		{"at a 512·k+32 boundary", 512*100 + 32},
		{"without its trailer", 300 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.cps[0].TruncateEtcdSnapshot(tt.cut)
			var b bytes.Buffer
			n, err := talos.EtcdSnapshot(ctx, talos.Direct(cps[0]), tc, &b)
			if !errors.Is(err, talos.ErrSnapshotTruncated) {
				t.Fatalf("truncated at %d: %d bytes, %v", tt.cut, n, err)
			}
			if n != tt.cut {
				t.Errorf("reported %d bytes, stream had %d", n, tt.cut)
			}
		})
	}

	if _, err := talos.EtcdSnapshot(ctx, talos.Route(cps, c.workers[0].Addr()), tc, &bytes.Buffer{}); err == nil {
		t.Error("a worker served an etcd snapshot")
	}
}

func TestEtcdMembers(t *testing.T) {
	c := runningCloud(t, 3, 1, fastDelays)
	tc := c.cfgs.Talosconfig
	cps := c.cpEndpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for _, n := range c.tn.Nodes()[:3] {
		names = append(names, n.Name)
	}
	got, err := talos.EtcdMembers(ctx, talos.Route(cps, c.cps[2].Addr()), tc)
	if err != nil || len(got) != 3 || got[0] != names[0] || got[1] != names[1] || got[2] != names[2] {
		t.Fatalf("members %v %v, want %v", got, err, names)
	}
	c.cps[1].SetUnreachable(true)
	got, err = talos.EtcdMembers(ctx, talos.Direct(cps[0]), tc)
	if err != nil || len(got) != 2 || got[0] != names[0] || got[1] != names[2] {
		t.Errorf("members with %s down: %v %v", names[1], got, err)
	}
	c.cps[1].SetUnreachable(false)
	if _, err := talos.EtcdMembers(ctx, talos.Route(cps, c.workers[0].Addr()), tc); err == nil {
		t.Error("a worker listed etcd members")
	}
}

func TestKubernetesVersions(t *testing.T) {
	c := runningCloud(t, 1, 1, fastDelays)
	tc := c.cfgs.Talosconfig
	cp := talos.Direct(c.cpEndpoints()[0])
	wk := talos.Route(c.cpEndpoints(), c.workers[0].Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	check := func(want string) {
		t.Helper()
		v, err := talos.ControlPlaneVersions(ctx, cp, tc)
		if err != nil {
			t.Fatal(err)
		}
		for _, comp := range []string{talos.KubeAPIServer, talos.KubeControllerManager, talos.KubeScheduler} {
			if v[comp] != want {
				t.Errorf("%s runs %q, want %q (all: %v)", comp, v[comp], want, v)
			}
		}
		for _, tg := range []talos.Target{cp, wk} {
			st, err := talos.Status(ctx, tg, tc)
			if err != nil || st.KubeletVersion != want {
				t.Errorf("%s: kubelet %q (%v), want %q", tg, st.KubeletVersion, err, want)
			}
		}
	}
	check("1.35.0")
	if v, err := talos.ControlPlaneVersions(ctx, wk, tc); err != nil || len(v) != 0 {
		t.Errorf("worker control-plane versions %v %v", v, err)
	}

	tn := *c.tn
	tn.KubernetesVersion = "1.36.0"
	cfgs, err := talos.GenerateConfigs(&tn, sharedBundle(t), "")
	if err != nil {
		t.Fatal(err)
	}
	nodes := tn.Nodes()
	if err := talos.ApplyConfig(ctx, cp, tc, cfgs.Nodes[nodes[0].Name]); err != nil {
		t.Fatal(err)
	}
	if err := talos.ApplyConfig(ctx, wk, tc, cfgs.Nodes[nodes[1].Name]); err != nil {
		t.Fatal(err)
	}
	check("1.36.0")
	for _, n := range []*simnode.Node{c.cps[0], c.workers[0]} {
		if n.Calls().Reboot != 0 || n.Stage() != runtime.MachineStageRunning {
			t.Errorf("%s: rebooted for a Kubernetes upgrade (stage %s)", n.Addr(), n.Stage())
		}
	}
}
