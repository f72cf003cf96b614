package simnode_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// cloudHost is a loopback address for this file's nodes (another /24 than
// host's).
func cloudHost(i int) string { return fmt.Sprintf("127.%d.7.%d", os.Getpid()%200+20, i) }

// bootCloud starts a control plane (private 1, public 101) and a worker
// (private 2, no public address), both configured from their user_data.
func bootCloud(t *testing.T) (cp, wk *simnode.Node, tc []byte) {
	t.Helper()
	tn := &tenant.Tenant{Name: "cloud", Provider: tenant.ProviderMetal, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: cloudHost(1)}}},
			{Name: "w", Role: tenant.RoleWorker, Count: 1, Machines: []tenant.Machine{{Address: cloudHost(2)}}},
		}}
	cfgs, err := talos.GenerateConfigs(tn, sharedBundle(t), "")
	if err != nil {
		t.Fatal(err)
	}
	w := simnode.NewWorld()
	// The worker first: it waits for its control plane (trustd).
	wk, err = w.Start(context.Background(), simnode.Options{Addr: cloudHost(2) + ":0", Config: cfgs.Nodes["cloud-w-1"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wk.Close)
	cp, err = w.Start(context.Background(), simnode.Options{Addr: cloudHost(1) + ":0", PublicAddr: cloudHost(101) + ":0", Config: cfgs.Nodes["cloud-cp-1"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []*simnode.Node{cp, wk} {
		if err := n.WaitStage(ctx, runtime.MachineStageRunning, false); err != nil {
			t.Fatal(err)
		}
	}
	return cp, wk, cfgs.Talosconfig
}

// Nodes booted from a config never pass through maintenance mode, answer
// on their public address with a certificate naming it, and a control
// plane routes to the worker, which sees no direct connection.
func TestBootFromConfigAndRouting(t *testing.T) {
	if _, err := simnode.Start(context.Background(), simnode.Options{Addr: cloudHost(9) + ":0", Config: []byte("garbage: [")}); err == nil ||
		!strings.Contains(err.Error(), "boot config") {
		t.Errorf("bad boot config: %v", err)
	}
	cp, wk, tc := bootCloud(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if wk.Role().String() != "worker" || cp.Role().String() != "controlplane" || len(wk.Config()) == 0 {
		t.Fatalf("roles %s %s", cp.Role(), wk.Role())
	}
	// The public address with full verification (the certificate names it).
	c := secureClient(t, cp.PublicAddr(), tc)
	v, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.GetMessages()[0].GetVersion().GetTag(); got != simnode.DefaultTalosVersion {
		t.Errorf("version %q", got)
	}
	// Routed: unary, COSI and a server stream, served by the worker.
	rctx := client.WithNode(ctx, wk.Host())
	ms, err := safe.StateGetByID[*runtime.MachineStatus](rctx, c.COSI, runtime.MachineStatusID)
	if err != nil || ms.TypedSpec().Stage != runtime.MachineStageRunning {
		t.Fatalf("routed machine status: %v", err)
	}
	list, err := safe.StateListAll[*runtime.MachineStatus](rctx, c.COSI)
	if err != nil || list.Len() != 1 {
		t.Errorf("routed list: %v", err)
	}
	if _, err := c.Kubeconfig(rctx); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("routed kubeconfig from a worker: %v, want the worker's Unimplemented", err)
	}
	if _, err := c.Version(client.WithNode(ctx, cp.Host())); err != nil {
		t.Errorf("naming itself: %v", err)
	}
	if _, err := c.Version(client.WithNode(ctx, cloudHost(77))); client.StatusCode(err) != codes.Unavailable {
		t.Errorf("routed to nobody: %v", err)
	}
	if _, err := c.Version(client.WithNodes(ctx, wk.Host(), cp.Host())); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("one to many: %v", err)
	}
	// The worker's own authorization applies: a reader may read, not reboot.
	b := sharedBundle(t)
	rtc := readerTalosconfig(t, b)
	rc := secureClient(t, cp.PublicAddr(), rtc)
	if _, err := rc.Version(rctx); err != nil {
		t.Errorf("reader routed version: %v", err)
	}
	if err := rc.Reboot(rctx); client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("reader routed reboot: %v", err)
	}
	if wk.Calls().Reboot != 0 {
		t.Error("a reader's reboot reached the worker")
	}
	// Workers do not route.
	if _, err := c.Version(client.WithNode(ctx, cp.Host())); err != nil {
		t.Fatal(err)
	}
	cw := secureClient(t, wk.Addr(), tc) // a direct connection, on purpose
	if _, err := cw.Version(client.WithNode(ctx, cp.Host())); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("worker routing: %v", err)
	}

	w, p := wk.Calls(), cp.Calls()
	if w.DirectPrivate != 1 || w.Routed < 4 || p.Forwarded < 4 || p.DirectPrivate != 0 || p.DirectPublic < 2 {
		t.Errorf("worker %+v\ncontrol plane %+v", w, p)
	}
	if p.StateReads != 0 || p.Kubeconfig != 0 {
		t.Errorf("the control plane served routed calls itself: %+v", p)
	}
}

// A floating IP associated after boot: the node answers on it (its
// certificate names it) until it is disassociated.
func TestAddRemovePublicAddr(t *testing.T) {
	cp, _, tc := bootCloud(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := cp.AddPublicAddr(cloudHost(102) + ":0")
	if err != nil {
		t.Fatal(err)
	}
	if got := cp.PublicAddrs(); len(got) != 2 || got[1] != addr {
		t.Errorf("public addresses %v", got)
	}
	c := secureClient(t, addr, tc)
	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("on the new public address: %v", err)
	}
	if err := cp.RemovePublicAddr(addr); err != nil {
		t.Fatal(err)
	}
	c2 := secureClient(t, addr, tc)
	if _, err := c2.Version(ctx); client.StatusCode(err) != codes.Unavailable {
		t.Errorf("after removal: %v", err)
	}
	if err := cp.RemovePublicAddr(addr); err == nil {
		t.Error("removing it twice: want error")
	}
	if _, err := cp.AddPublicAddr("localhost:0"); err == nil {
		t.Error("a host name as public address: want error")
	}
}
