package simnode_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

const faultImage = "ghcr.io/siderolabs/installer:v1.13.1"

var faultDelays = simnode.Options{InstallDelay: 20 * time.Millisecond, RebootDelay: 10 * time.Millisecond,
	DownDelay: 80 * time.Millisecond, BootDelay: 10 * time.Millisecond, ResetDelay: 20 * time.Millisecond}

func bootFaulty(t *testing.T, opts simnode.Options) (*simnode.Node, *client.Client, []byte) {
	t.Helper()
	return bootControlPlaneTC(t, opts)
}

// stays fails the test when the node leaves stage s, or its readiness
// changes from ready, within d: d is many times the node's stage delays,
// so a node that would progress has done so by then.
func stays(t *testing.T, n *simnode.Node, s runtime.MachineStage, ready bool, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if got, r := n.Stage(), n.Ready(); got != s || r != ready {
			t.Fatalf("the node went on from %s (ready %v) to %s (ready %v)", s, ready, got, r)
		}
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// TestUpgradeStuckBooting: the upgrade installs and the node boots the new
// version, answers, but stays booting (not ready) until ClearFault.
func TestUpgradeStuckBooting(t *testing.T) {
	n, _, tc := bootFaulty(t, faultDelays)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.FailUpgrade(simnode.UpgradeStuckBooting)
	if err := talos.Upgrade(ctx, talos.Direct(n.Addr()), tc, faultImage); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the node to answer on its new version", func() bool {
		st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc)
		return err == nil && st.TalosVersion == "v1.13.1" && st.Stage == tenant.StageBooting
	})
	stays(t, n, runtime.MachineStageBooting, false, 2*time.Second)
	if !n.Stuck() {
		t.Error("Stuck() = false for a node stuck booting")
	}
	st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc)
	if err != nil || st.Ready || st.Stage != tenant.StageBooting {
		t.Fatalf("status of the stuck node: %+v %v", st, err)
	}
	// a reboot does not help while the fault is set
	if err := talos.Reboot(ctx, talos.Direct(n.Addr()), tc); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the reboot", func() bool { return n.Calls().Reboot == 2 && n.Stage() == runtime.MachineStageBooting })
	stays(t, n, runtime.MachineStageBooting, false, 2*time.Second)

	n.ClearFault()
	if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
		t.Fatal(err)
	}
	if n.Stuck() || n.TalosVersion() != "v1.13.1" {
		t.Errorf("after ClearFault: stuck %v, version %s", n.Stuck(), n.TalosVersion())
	}
}

// TestUpgradeHangs: the installer never ends; the node answers in stage
// upgrading and refuses another upgrade, also after the client gave up;
// ClearFault lets the install finish.
func TestUpgradeHangs(t *testing.T) {
	t.Run("client gives up", func(t *testing.T) {
		n, _, tc := bootFaulty(t, faultDelays)
		n.FailUpgrade(simnode.UpgradeHangs)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := talos.Upgrade(ctx, talos.Direct(n.Addr()), tc, faultImage)
		cancel()
		if err == nil {
			t.Fatal("an upgrade whose installer hangs returned")
		}
		if n.Stage() != runtime.MachineStageUpgrading || !n.Stuck() || n.Calls().Reboot != 0 {
			t.Fatalf("stage %s, stuck %v, calls %+v", n.Stage(), n.Stuck(), n.Calls())
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc)
		if err != nil || st.Stage != tenant.StageUpgrading {
			t.Fatalf("status while hanging: %+v %v", st, err)
		}
		if err := talos.Upgrade(ctx, talos.Direct(n.Addr()), tc, faultImage); err == nil {
			t.Fatal("a second upgrade was accepted while the installer hangs")
		}
		n.ClearFault()
		if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
			t.Fatal(err)
		}
		// installed: the next reboot boots it
		if err := talos.Reboot(ctx, talos.Direct(n.Addr()), tc); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 30*time.Second, "the new version", func() bool { return n.TalosVersion() == "v1.13.1" })
	})
	t.Run("client waits", func(t *testing.T) {
		n, c, _ := bootFaulty(t, faultDelays)
		n.FailUpgrade(simnode.UpgradeHangs)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ps, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{Containerd: systemCRI, ImageRef: faultImage})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := ps.Recv(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		st, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
			Containerd: systemCRI, Source: &machine.InstallArtifactsSource{ImageName: faultImage}})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := st.Recv(); err != nil || m.GetProgress().GetMessage() == "" {
			t.Fatalf("first progress: %v %v", m, err)
		}
		got := make(chan int32, 1)
		go func() {
			for {
				m, err := st.Recv()
				if err != nil {
					got <- -1
					return
				}
				if x, ok := m.GetProgress().GetResponse().(*machine.LifecycleServiceInstallProgress_ExitCode); ok {
					got <- x.ExitCode
					return
				}
			}
		}()
		stays(t, n, runtime.MachineStageUpgrading, true, 2*time.Second)
		select {
		case code := <-got:
			t.Fatalf("the hanging installer ended with %d", code)
		default:
		}
		n.ClearFault()
		select {
		case code := <-got:
			if code != 0 {
				t.Fatalf("exit code %d after ClearFault", code)
			}
		case <-ctx.Done():
			t.Fatal("no exit code after ClearFault")
		}
		if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("legacy", func(t *testing.T) {
		o := faultDelays
		o.TalosVersion = "v1.12.4"
		n, _, tc := bootFaulty(t, o)
		n.FailUpgrade(simnode.UpgradeHangs)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := talos.Upgrade(ctx, talos.Direct(n.Addr()), tc, faultImage); err != nil {
			t.Fatal(err) // the legacy call is accepted
		}
		if err := n.WaitStage(ctx, runtime.MachineStageUpgrading, false); err != nil {
			t.Fatal(err)
		}
		stays(t, n, runtime.MachineStageUpgrading, true, 2*time.Second)
		if !n.Stuck() {
			t.Error("Stuck() = false")
		}
		n.ClearFault()
		testenv.WaitFor(t, 30*time.Second, "the upgrade to finish and reboot", func() bool { return n.TalosVersion() == "v1.13.1" })
		if err := n.WaitStage(ctx, runtime.MachineStageRunning, true); err != nil {
			t.Fatal(err)
		}
	})
}

// TestResetFaults: a reset that hangs answers in stage resetting; one that
// never comes back goes silent, neither in maintenance nor powered off;
// ClearFault lets both finish as asked.
func TestResetFaults(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault simnode.ResetFault
		halt  bool
	}{
		{"hangs", simnode.ResetHangs, false},
		{"hangs, halt", simnode.ResetHangs, true},
		{"never back", simnode.ResetNeverBack, false},
		{"never back, halt", simnode.ResetNeverBack, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, _, tc := bootFaulty(t, faultDelays)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n.FailReset(tt.fault)
			if err := talos.Reset(ctx, talos.Direct(n.Addr()), tc, talos.ResetOptions{Graceful: true, Halt: tt.halt}); err != nil {
				t.Fatal(err) // accepted
			}
			if !n.ResetHung() {
				t.Fatal("ResetHung() = false")
			}
			switch tt.fault {
			case simnode.ResetHangs:
				stays(t, n, runtime.MachineStageResetting, true, 2*time.Second)
				st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc)
				if err != nil || st.Stage != tenant.StageResetting {
					t.Fatalf("status of a hanging reset: %+v %v", st, err)
				}
			case simnode.ResetNeverBack:
				testenv.WaitFor(t, 30*time.Second, "the node to go silent", func() bool {
					st, _ := talos.Status(ctx, talos.Direct(n.Addr()), tc)
					return st.Stage == tenant.StageUnreachable
				})
				stays(t, n, runtime.MachineStageResetting, true, 2*time.Second)
				if st, _ := talos.Status(ctx, talos.Direct(n.Addr()), nil); st.Stage != tenant.StageUnreachable {
					t.Fatalf("in maintenance mode: %+v", st)
				}
			}
			if n.PoweredOff() || n.Config() == nil {
				t.Fatalf("the hung reset finished: off %v, config %d bytes", n.PoweredOff(), len(n.Config()))
			}
			n.ClearFault()
			if tt.halt {
				testenv.WaitFor(t, 30*time.Second, "the halt to finish", n.PoweredOff)
			} else if err := n.WaitStage(ctx, runtime.MachineStageMaintenance, true); err != nil {
				t.Fatal(err)
			}
			if n.ResetHung() || n.Config() != nil {
				t.Errorf("after ClearFault: hung %v, config %d bytes", n.ResetHung(), len(n.Config()))
			}
		})
	}
}

// TestPowerCutAndDie: a machine whose power is cut stops answering at once
// and keeps its config (PowerOn boots it back into its cluster); a dead
// one never comes back.
func TestPowerCutAndDie(t *testing.T) {
	n, _, tc := bootFaulty(t, faultDelays)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.PowerCut()
	if !n.PoweredOff() {
		t.Fatal("PoweredOff() = false after PowerCut")
	}
	st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc)
	if err != nil || st.Stage != tenant.StageUnreachable {
		t.Fatalf("status after a power cut: %+v %v", st, err)
	}
	if err := talos.Reset(ctx, talos.Direct(n.Addr()), tc, talos.ResetOptions{}); err == nil {
		t.Fatal("a reset of a machine without power succeeded")
	}
	if n.Config() == nil {
		t.Fatal("the power cut wiped the config")
	}
	n.PowerOn() // the stage it shows is the last one it reported: ask the node
	testenv.WaitFor(t, 30*time.Second, "the node back in its cluster", func() bool {
		st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc)
		return err == nil && st.Stage == tenant.StageRunning && st.Ready
	})

	n.Die()
	n.PowerOn()
	n.ClearFault()
	if !n.Dead() || !n.PoweredOff() {
		t.Fatalf("dead %v off %v", n.Dead(), n.PoweredOff())
	}
	stays(t, n, runtime.MachineStageRunning, true, 2*time.Second) // the last stage it reported; it never answers again
	if st, err := talos.Status(ctx, talos.Direct(n.Addr()), tc); err != nil || st.Stage != tenant.StageUnreachable {
		t.Fatalf("a dead machine answered: %+v %v", st, err)
	}
	if c := n.Calls(); c.Dropped == 0 {
		t.Errorf("no connection counted as dropped: %+v", c)
	}
}
