package power_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/power"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// bmc is OpenIPMI's ipmi_sim on loopback. Its chassis is a program the
// simulator runs for chassis control (its chassis_control protocol:
// "<prog> get power" prints "power:<0|1>", "<prog> set power 1" powers on,
// "set shutdown 1" asks for a soft shutdown): the "machine" notes the
// request and powers itself off a moment later, as an OS shutting down does.
type bmc struct {
	addr     string
	power    string // the machine's power, 0 or 1
	requests string // what the machine was asked, one line each
}

func startBMC(t *testing.T) *bmc {
	t.Helper()
	sim, err := exec.LookPath("ipmi_sim")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("ipmi_sim is missing: run make pxe-deps (Debian's openipmi)")
		}
		t.Skip("ipmi_sim is not installed (Debian's openipmi; make pxe-deps)")
	}
	dir := t.TempDir()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	b := &bmc{addr: fmt.Sprintf("127.0.0.1:%d", port), power: filepath.Join(dir, "power"), requests: filepath.Join(dir, "requests")}
	if err := os.WriteFile(b.power, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	machine := filepath.Join(dir, "chassis.sh")
	if err := os.WriteFile(machine, []byte(fmt.Sprintf(`#!/bin/sh
power=%q
requests=%q
op=$1; shift
case $op in
get)
	for p in "$@"; do [ "$p" = power ] && echo "power:$(cat "$power")"; done ;;
set)
	while [ $# -ge 2 ]; do
		echo "$1 $2" >> "$requests"
		case $1 in
		power) echo "$2" > "$power" ;;
		shutdown) (sleep 1; echo 0 > "$power") >/dev/null 2>&1 & ;;
		esac
		shift 2
	done ;;
esac
`, b.power, b.requests)), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`name "rzcbmc"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "%s"
  user 1 true  ""      "test"        user  10 none md2 md5 straight
  user 2 true  "ADMIN" "bmc-secret1" admin 10 none md2 md5 straight
`, port, machine)
	emu := "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n"
	for name, body := range map[string]string{"lan.conf": conf, "cmds.emu": emu} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sim, "-c", filepath.Join(dir, "lan.conf"), "-f", filepath.Join(dir, "cmds.emu"), "-s", state, "-n")
	logf, err := os.Create(filepath.Join(dir, "ipmi_sim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("ipmi_sim log:\n%s", out)
		}
	})
	return b
}

func (b *bmc) controller(t *testing.T, user, pass string) power.Controller {
	t.Helper()
	spec, err := power.Parse("ipmi://"+b.addr, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := power.New(spec, power.Deps{IPMI: power.IPMICredentials{Username: user, Password: pass},
		GracePeriod: 20 * time.Second, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIPMI: status, power on, a graceful off (the soft shutdown reaches the
// machine, which stops on its own), and a wrong password refused with a
// clear error that changes nothing.
func TestIPMI(t *testing.T) {
	b := startBMC(t)
	ctx := context.Background()
	c := b.controller(t, "ADMIN", "bmc-secret1")
	testenv.WaitFor(t, 20*time.Second, "ipmi_sim to answer", func() bool {
		st, err := c.State(ctx)
		return err == nil && st == power.StateOff
	})

	wrong := b.controller(t, "ADMIN", "not-the-password")
	err := wrong.On(ctx)
	if err == nil || !strings.Contains(err.Error(), "the BMC refused the login of user \"ADMIN\"") || strings.Contains(err.Error(), "not-the-password") {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := wrong.State(ctx); err == nil {
		t.Fatal("state read with a wrong password")
	}
	if st, _ := c.State(ctx); st != power.StateOff {
		t.Fatalf("a refused login changed the power: %s", st)
	}

	if err := c.On(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx); err != nil || st != power.StateOn {
		t.Fatalf("after on: %s %v", st, err)
	}
	if err := c.On(ctx); err != nil { // on again: nothing to do
		t.Fatal(err)
	}

	if err := c.Off(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx); err != nil || st != power.StateOff {
		t.Fatalf("after off: %s %v", st, err)
	}
	// the soft shutdown was asked for and sufficed: no hard power off
	if req, err := os.ReadFile(b.requests); err != nil || string(req) != "power 1\nshutdown 1\n" {
		t.Fatalf("the machine was asked %q (%v), want power on, then a soft shutdown only", req, err)
	}
	if err := c.Off(ctx); err != nil { // off again: nothing to do
		t.Fatal(err)
	}
}

// TestIPMIUnreachable: a BMC that does not answer is an error that names it.
func TestIPMIUnreachable(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0") // bound, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	spec, _ := power.Parse("ipmi://"+pc.LocalAddr().String(), "")
	c, err := power.New(spec, power.Deps{IPMI: power.IPMICredentials{Username: "ADMIN", Password: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.State(ctx)
	if err == nil || !strings.Contains(err.Error(), "ipmi "+pc.LocalAddr().String()+": no IPMI session") {
		t.Fatalf("err %v", err)
	}
	if _, err := power.New(spec, power.Deps{}); err == nil || !strings.Contains(err.Error(), "no IPMI username") {
		t.Fatalf("no credentials: %v", err)
	}
}
