package simnode_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

var (
	once   sync.Once
	bundle *secrets.Bundle
)

func sharedBundle(t *testing.T) *secrets.Bundle {
	once.Do(func() {
		var err error
		if bundle, err = talos.NewSecrets("v1.13.0"); err != nil {
			panic(err)
		}
	})
	return bundle
}

func host(i int) string { return fmt.Sprintf("127.%d.1.%d", os.Getpid()%200+20, i) }

func insecureClient(t *testing.T, addr string) *client.Client {
	c, err := client.New(context.Background(), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func secureClient(t *testing.T, addr string, tc []byte) *client.Client {
	cfg, err := clientconfig.FromBytes(tc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(context.Background(), client.WithConfig(cfg), client.WithEndpoints(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestMachineAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := host(1)
	tn := &tenant.Tenant{Name: "sim", Provider: tenant.ProviderMetal, TalosVersion: "v1.13.0", KubernetesVersion: "1.35.0",
		NodeGroups: []tenant.NodeGroup{{Name: "cp", Role: tenant.RoleControlPlane, Count: 1, Machines: []tenant.Machine{{Address: h}}}}}
	b := sharedBundle(t)
	cfgs, err := talos.GenerateConfigs(tn, b, "")
	if err != nil {
		t.Fatal(err)
	}
	n, err := simnode.Start(ctx, simnode.Options{Addr: h + ":0", World: simnode.NewWorld(),
		InstallDelay: 20 * time.Millisecond, DownDelay: 20 * time.Millisecond, BootDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	// Maintenance: readable, Apply accepted, everything else refused.
	mc := insecureClient(t, n.Addr())
	v, err := mc.Version(ctx)
	if err != nil || v.Messages[0].Version.Tag != simnode.DefaultTalosVersion {
		t.Fatalf("version: %v %v", v, err)
	}
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, mc.COSI, runtime.MachineStatusID)
	if err != nil || ms.TypedSpec().Stage != runtime.MachineStageMaintenance {
		t.Fatalf("machine status: %v %v", ms, err)
	}
	if err := mc.Bootstrap(ctx, &machine.BootstrapRequest{}); client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("bootstrap in maintenance: %v", err)
	}
	if err := mc.Reboot(ctx); client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("reboot in maintenance: %v", err)
	}
	// The cluster's talosconfig does not trust the self-signed certificate.
	if _, err := secureClient(t, n.Addr(), cfgs.Talosconfig).Version(ctx); err == nil {
		t.Error("mTLS against maintenance mode: want error")
	}
	if _, err := mc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("{")}); client.StatusCode(err) != codes.InvalidArgument {
		t.Errorf("garbage apply: %v", err)
	}

	// Watch the stages while the config is applied.
	var mu sync.Mutex
	var seen []runtime.MachineStage
	ch := make(chan state.Event)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if err := mc.COSI.Watch(wctx, runtime.NewMachineStatus().Metadata(), ch); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range ch {
			if ms, ok := ev.Resource.(*runtime.MachineStatus); ok {
				mu.Lock()
				seen = append(seen, ms.TypedSpec().Stage)
				mu.Unlock()
			}
		}
	}()
	resp, err := mc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfgs.Nodes["sim-cp-1"], Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Messages[0]; m.Mode != machine.ApplyConfigurationRequest_NO_REBOOT {
		t.Errorf("maintenance apply mode %v, want NO_REBOOT", m.Mode)
	}
	if err := n.WaitStage(ctx, runtime.MachineStageRunning, false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("watched over the maintenance connection: %v", seen)
	if len(seen) < 2 || seen[0] != runtime.MachineStageMaintenance || seen[1] != runtime.MachineStageInstalling {
		t.Errorf("watched %v", seen)
	}
	mu.Unlock()
	if n.Ready() {
		t.Error("control plane ready before bootstrap")
	}

	// Secure mode.
	sc := secureClient(t, n.Addr(), cfgs.Talosconfig)
	if _, err := insecureClient(t, n.Addr()).Version(ctx); err == nil {
		t.Error("client without certificate against a configured node: want error")
	}
	n.FailBootstrap(1)
	if err := sc.Bootstrap(ctx, &machine.BootstrapRequest{}); client.StatusCode(err) != codes.FailedPrecondition {
		t.Errorf("injected failure: %v", err)
	}
	if err := sc.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := sc.Bootstrap(ctx, &machine.BootstrapRequest{}); client.StatusCode(err) != codes.AlreadyExists {
		t.Errorf("second bootstrap: %v", err)
	}
	if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	kc, err := sc.Kubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), "server: https://"+h+":6443") {
		t.Errorf("kubeconfig:\n%s", kc)
	}

	// A reader may read but not change anything.
	rtc := readerTalosconfig(t, b)
	rc := secureClient(t, n.Addr(), rtc)
	if _, err := rc.Version(ctx); err != nil {
		t.Errorf("reader version: %v", err)
	}
	if err := rc.Reboot(ctx); client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("reader reboot: %v", err)
	}

	c := n.Calls()
	if c.Apply != 2 || c.ApplyRejected != 1 || c.Bootstrap != 4 || c.Bootstrapped != 1 || c.Kubeconfig != 1 || c.Reboot != 2 {
		t.Errorf("calls %+v", c)
	}
}

func TestUnreachableKnob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := simnode.Start(ctx, simnode.Options{Addr: host(2) + ":0", World: simnode.NewWorld()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.SetUnreachable(true)
	qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = insecureClient(t, n.Addr()).Version(qctx)
	qcancel()
	if client.StatusCode(err) != codes.Unavailable {
		t.Errorf("unreachable: %v", err)
	}
	if n.Calls().Dropped == 0 {
		t.Error("dropped connection not counted")
	}
	n.SetUnreachable(false)
	if _, err := insecureClient(t, n.Addr()).Version(ctx); err != nil {
		t.Errorf("back: %v", err)
	}
}

func TestStartContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n, err := simnode.Start(ctx, simnode.Options{Addr: host(3) + ":0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()
	cancel()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n2, err := simnode.Start(context.Background(), simnode.Options{Addr: addr})
		if err == nil {
			n2.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("address not released after ctx ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartOnLoopback(t *testing.T) {
	c, err := simnode.StartOnLoopback(context.Background(), 2, "", 0, simnode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Nodes) != 2 || c.World == nil {
		t.Fatalf("cluster %+v", c)
	}
	a, b := c.Nodes[0].Host(), c.Nodes[1].Host()
	if !strings.HasPrefix(a, "127.") || !strings.HasSuffix(a, ".10") || !strings.HasSuffix(b, ".11") ||
		a[:strings.LastIndex(a, ".")] != b[:strings.LastIndex(b, ".")] {
		t.Fatalf("hosts %s %s", a, b)
	}
	// the same addresses and port again: taken
	nw := a[:strings.LastIndex(a, ".")]
	_, port, _ := strings.Cut(c.Nodes[0].Addr(), ":")
	p, _ := strconv.Atoi(port)
	if _, err := simnode.StartOnLoopback(context.Background(), 1, nw, p, simnode.Options{}); err == nil {
		t.Fatal("a taken address was accepted")
	}
	if _, err := simnode.StartOnLoopback(context.Background(), 1, "10.0.0", 0, simnode.Options{}); err == nil {
		t.Fatal("a network outside loopback was accepted")
	}
}

// readerTalosconfig is a talosconfig of the read-only role for bundle b.
func readerTalosconfig(t *testing.T, b *secrets.Bundle) []byte {
	t.Helper()
	crt, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Reader), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := clientconfig.NewConfig("r", nil, b.Certs.OS.Crt, crt).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
