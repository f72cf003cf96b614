package pxe

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pxe/assets"
	"github.com/rezuscloud/rezuscloud/internal/pxe/assets/factorytest"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// The network-boot test (docs/design.md §11.4) boots real QEMU virtual
// machines through the responder: three network namespaces the test
// creates, "lan" with a bridge and the VMs' taps, "rtr" with dnsmasq as the
// home router's DHCP server, and "add" with the responder (this test binary
// run again as a helper process). Everything stays in those namespaces and
// on their loopback; the test deletes them.

const marker = "REZUSCLOUD-NETBOOT-MARKER"

// helperEnv carries the helper's configuration.
const helperEnv = "REZUSCLOUD_PXE_HELPER"

type helperConfig struct {
	Interface string   `json:"interface"`
	DataDir   string   `json:"data_dir"`
	Kernel    string   `json:"kernel"`
	Initramfs string   `json:"initramfs"`
	Cmdline   string   `json:"cmdline"`
	Known     []string `json:"known"`
	Installed []string `json:"installed"`
}

// jsonEvent is an Event as the helper writes it.
type jsonEvent struct {
	Type     string  `json:"type"`
	Step     string  `json:"step"`
	MAC      string  `json:"mac"`
	Client   string  `json:"client"`
	File     string  `json:"file"`
	Reason   string  `json:"reason"`
	Bytes    int64   `json:"bytes"`
	Duration float64 `json:"duration_s"`
	At       time.Time
}

// TestHelperResponder is not a test: it is the responder process the VM
// test runs inside its namespace (it does nothing without helperEnv). It
// serves a stand-in Image Factory on the namespace's loopback, writes
// "READY", one "EVENT <json>" line per event, and at the end "STATS <json>",
// and stops when its standard input closes.
func TestHelperResponder(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("the network-boot VM test's helper process")
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	f, err := factorytest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, path := range map[string]string{"kernel-amd64": cfg.Kernel, "initramfs-amd64.xz": cfg.Initramfs} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Add(boot.DefaultSchematic, DefaultVersion, name, b)
	}
	f.Add(boot.DefaultSchematic, DefaultVersion, "cmdline-metal-amd64", []byte(cfg.Cmdline))
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	line := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	inv := InventoryFunc(func(mac net.HardwareAddr) boot.Machine {
		switch {
		case slices.Contains(cfg.Installed, mac.String()):
			return boot.Machine{Known: true, Node: "vm-" + mac.String(), Installed: true}
		case slices.Contains(cfg.Known, mac.String()):
			return boot.Machine{Known: true, Node: "vm-" + mac.String()}
		}
		return boot.Machine{}
	})
	r, err := New(Options{Interface: cfg.Interface, Inventory: inv, DataDir: cfg.DataDir,
		Cache: &assets.Cache{Dir: filepath.Join(cfg.DataDir, "assets"), Factory: f.URL},
		OnEvent: func(e Event) {
			b, _ := json.Marshal(jsonEvent{Type: string(e.Type), Step: e.Step, MAC: e.MAC, Client: e.Client.String(), File: e.File,
				Reason: e.Reason, Bytes: e.Bytes, Duration: e.Duration.Seconds(), At: e.At})
			line("EVENT %s", b)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Ready():
		line("READY")
	case err := <-done:
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	status, _ := os.ReadFile("/proc/self/status")
	hwm := ""
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			hwm = strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	line(`STATS {"user_s":%.3f,"sys_s":%.3f,"vm_hwm":%q}`, tv(ru.Utime), tv(ru.Stime), hwm)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// lab is the test's network: namespaces, the bridge, dnsmasq, the helper.
type lab struct {
	t          *testing.T
	lan, rtr   string
	add        string
	dir        string
	leases     string
	mu         sync.Mutex
	events     []jsonEvent
	stats      string
	helperIn   io.WriteCloser
	helperDone chan struct{}
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// needVM skips when the test cannot run here (not root, no network
// namespaces) and fails when a package it needs is missing: make test
// installs them (make pxe-deps).
func needVM(t *testing.T) (kernel string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the network-boot VM test needs root (network namespaces, taps, ports 67/69)")
	}
	probe := fmt.Sprintf("rzcprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("network namespaces are not possible here: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	for _, bin := range []string{"qemu-system-x86_64", "dnsmasq"} {
		if _, err := lookPath(bin); err != nil {
			t.Fatalf("%s is missing: run make pxe-deps (Debian's qemu-system-x86, ipxe-qemu, ipxe, ovmf, dnsmasq-base, linux-image-cloud-amd64)", bin)
		}
	}
	for _, f := range []string{"/usr/lib/ipxe/undionly.kpxe", "/usr/lib/ipxe/ipxe.efi", "/usr/lib/ipxe/qemu/pxe-virtio.rom", "/usr/share/OVMF/OVMF_CODE_4M.fd"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run make pxe-deps", f)
		}
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		t.Fatal("no kernel in /boot: run make pxe-deps (linux-image-cloud-amd64)")
	}
	slices.Sort(ks)
	return ks[len(ks)-1]
}

func newLab(t *testing.T) *lab {
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	l := &lab{t: t, lan: "rzcpxe" + id + "lan", rtr: "rzcpxe" + id + "rtr", add: "rzcpxe" + id + "add", dir: t.TempDir()}
	for _, ns := range []string{l.lan, l.rtr, l.add} {
		ip(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ip(t, "-n", ns, "link", "set", "lo", "up")
	}
	ip(t, "-n", l.lan, "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
	ip(t, "-n", l.lan, "link", "set", "br0", "up")
	for _, side := range []struct{ ns, port, addr string }{{l.rtr, "vrtr", "10.77.0.1/24"}, {l.add, "vadd", "10.77.0.2/24"}} {
		ip(t, "-n", l.lan, "link", "add", side.port, "type", "veth", "peer", "name", "eth0", "netns", side.ns)
		ip(t, "-n", l.lan, "link", "set", side.port, "master", "br0", "up")
		ip(t, "-n", side.ns, "addr", "add", side.addr, "dev", "eth0")
		ip(t, "-n", side.ns, "link", "set", "eth0", "up")
	}
	return l
}

// tap adds a tap for one VM to the bridge.
func (l *lab) tap(name string) {
	ip(l.t, "-n", l.lan, "tuntap", "add", "dev", name, "mode", "tap")
	ip(l.t, "-n", l.lan, "link", "set", name, "master", "br0", "up")
}

// startRouter runs dnsmasq as the LAN's DHCP server (its own config, no
// DNS, in the foreground; leases in the test's directory).
func (l *lab) startRouter() {
	t := l.t
	l.leases = filepath.Join(l.dir, "dnsmasq.leases")
	conf := filepath.Join(l.dir, "dnsmasq.conf")
	if err := os.WriteFile(conf, []byte(strings.Join([]string{
		"port=0", "interface=eth0", "bind-interfaces", "no-resolv", "no-hosts", "user=root",
		"dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h", "dhcp-authoritative",
		"dhcp-leasefile=" + l.leases, "log-dhcp", "log-facility=-", "pid-file=",
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dnsmasq, _ := lookPath("dnsmasq")
	cmd := exec.Command("ip", "netns", "exec", l.rtr, dnsmasq, "--keep-in-foreground", "--conf-file="+conf)
	logf, err := os.Create(filepath.Join(l.dir, "dnsmasq.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("dnsmasq log:\n%s", b)
		}
	})
	testenv.WaitFor(t, 20*time.Second, "dnsmasq to start", func() bool {
		b, _ := os.ReadFile(logf.Name())
		return bytes.Contains(b, []byte("DHCP, IP range"))
	})
}

// lease is the address dnsmasq leased to a MAC ("" when none).
func (l *lab) lease(mac string) string {
	b, _ := os.ReadFile(l.leases)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == mac {
			return f[2]
		}
	}
	return ""
}

// startResponder runs this test binary as the responder helper in the
// add-on's namespace.
func (l *lab) startResponder(cfg helperConfig) {
	t := l.t
	raw, _ := json.Marshal(cfg)
	cmd := exec.Command("ip", "netns", "exec", l.add, os.Args[0], "-test.run=^TestHelperResponder$", "-test.timeout=20m")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.helperIn, l.helperDone = in, make(chan struct{})
	ready := make(chan struct{})
	var rest bytes.Buffer
	logf, err := os.Create(filepath.Join(l.dir, "responder.log"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(l.helperDone)
		defer logf.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s := sc.Text()
			fmt.Fprintln(logf, s)
			switch {
			case s == "READY":
				close(ready)
			case strings.HasPrefix(s, "EVENT "):
				var e jsonEvent
				if json.Unmarshal([]byte(strings.TrimPrefix(s, "EVENT ")), &e) == nil {
					l.mu.Lock()
					l.events = append(l.events, e)
					l.mu.Unlock()
				}
			case strings.HasPrefix(s, "STATS "):
				l.mu.Lock()
				l.stats = strings.TrimPrefix(s, "STATS ")
				l.mu.Unlock()
			default:
				rest.WriteString(s + "\n")
			}
		}
	}()
	t.Cleanup(func() {
		l.stopResponder()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("responder helper output:\n%s\n%s", rest.String(), stderr.String())
		}
	})
	select {
	case <-ready:
	case <-l.helperDone:
		_ = cmd.Wait()
		t.Fatalf("the responder did not start:\n%s\n%s", rest.String(), stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("the responder did not start within 60 s")
	}
}

func (l *lab) stopResponder() {
	if l.helperIn != nil {
		l.helperIn.Close()
		l.helperIn = nil
		<-l.helperDone
	}
}

func (l *lab) eventsOf(mac string) []jsonEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []jsonEvent
	for _, e := range l.events {
		if e.MAC == mac {
			out = append(out, e)
		}
	}
	return out
}

func (l *lab) has(mac, typ, step, fileSuffix string) (jsonEvent, bool) {
	for _, e := range l.eventsOf(mac) {
		if e.Type == typ && e.Step == step && strings.HasSuffix(e.File, fileSuffix) {
			return e, true
		}
	}
	return jsonEvent{}, false
}

// vm is one QEMU virtual machine and its serial console.
type vm struct {
	name    string
	mac     string
	cmd     *exec.Cmd
	started time.Time
	mu      sync.Mutex
	console strings.Builder
	seen    map[string]time.Time
	exited  chan struct{}
}

// startVM boots a VM from the network on a tap of the lab's bridge: BIOS
// (SeaBIOS and Debian's iPXE ROM) or UEFI (OVMF's own PXE client: the NIC's
// iPXE ROM is left out, so the firmware loads iPXE over TFTP).
func (l *lab) startVM(name, mac, tap string, uefi bool) *vm {
	t := l.t
	// -nographic: the console on the serial port (SeaBIOS and iPXE print
	// there only without a display)
	args := []string{"netns", "exec", l.lan, "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-nographic", "-no-reboot",
		"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no"}
	if uefi {
		vars := filepath.Join(l.dir, name+"-vars.fd")
		b, err := os.ReadFile("/usr/share/OVMF/OVMF_VARS_4M.fd")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vars, b, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-machine", "q35",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
			"-drive", "if=pflash,format=raw,unit=1,file="+vars,
			"-device", "virtio-net-pci,netdev=n0,mac="+mac+",romfile=")
	} else {
		args = append(args, "-machine", "pc", "-boot", "n", "-device", "virtio-net-pci,netdev=n0,mac="+mac)
	}
	v := &vm{name: name, mac: mac, seen: map[string]time.Time{}, exited: make(chan struct{})}
	v.cmd = exec.Command("ip", args...)
	out, err := v.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stderr = v.cmd.Stdout
	v.started = time.Now()
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(l.dir, name+".console"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(v.exited)
		defer logf.Close()
		r := bufio.NewReader(out)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = logf.Write(buf[:n])
				v.mu.Lock()
				v.console.Write(buf[:n])
				v.mu.Unlock()
			}
			if err != nil {
				_ = v.cmd.Wait()
				return
			}
		}
	}()
	t.Cleanup(func() {
		v.stop()
		if t.Failed() {
			t.Logf("console of %s (%s):\n%s", name, mac, v.text())
		}
	})
	return v
}

func (v *vm) text() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.console.String()
}

// wait waits until the console shows s; it returns when it was first seen
// after power-on.
func (v *vm) wait(t *testing.T, d time.Duration, s string) time.Duration {
	t.Helper()
	testenv.WaitFor(t, d, v.name+"'s console to show "+s, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		if _, ok := v.seen[s]; !ok && strings.Contains(v.console.String(), s) {
			v.seen[s] = time.Now()
		}
		_, ok := v.seen[s]
		return ok
	})
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seen[s].Sub(v.started)
}

func (v *vm) stop() {
	select {
	case <-v.exited:
	default:
		_ = v.cmd.Process.Kill()
		<-v.exited
	}
}

// newc writes a gzip-compressed cpio archive (the kernel's initramfs
// format, "newc") with one file, /init.
func newc(t *testing.T, init []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	entry := func(ino int, name string, mode uint32, data []byte) {
		hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		_, _ = zw.Write([]byte(hdr + name + "\x00"))
		if pad := (4 - (len(hdr)+len(name)+1)%4) % 4; pad > 0 {
			_, _ = zw.Write(make([]byte, pad))
		}
		_, _ = zw.Write(data)
		if pad := (4 - len(data)%4) % 4; pad > 0 {
			_, _ = zw.Write(make([]byte, pad))
		}
	}
	entry(1, "init", 0o100755, init)
	entry(0, "TRAILER!!!", 0, nil)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestNetworkBootVM boots real VMs through the responder (see the top of
// this file): a BIOS and a UEFI machine that are declared but not
// installed reach the test's kernel and print the marker; an installed
// machine is sent to its disk; a machine nobody allowed gets nothing from
// the responder, while the router still gives it an address.
func TestNetworkBootVM(t *testing.T) {
	kernel := needVM(t)
	l := newLab(t)
	// the test's kernel and initramfs, served as the factory's assets
	initBin := filepath.Join(l.dir, "init")
	build := exec.Command("go", "build", "-o", initBin, "./testdata/vminit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the VM's init: %v: %s", err, out)
	}
	initData, err := os.ReadFile(initBin)
	if err != nil {
		t.Fatal(err)
	}
	initramfs := filepath.Join(l.dir, "initramfs.cpio.gz")
	if err := os.WriteFile(initramfs, newc(t, initData), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		biosMAC      = "52:54:00:77:00:01"
		uefiMAC      = "52:54:00:77:00:02"
		installedMAC = "52:54:00:77:00:03"
		strangerMAC  = "52:54:00:77:00:04"
	)
	for _, tap := range []string{"tap0", "tap1", "tap2", "tap3"} {
		l.tap(tap)
	}
	l.startRouter()
	l.startResponder(helperConfig{Interface: "eth0", DataDir: filepath.Join(l.dir, "addon"), Kernel: kernel, Initramfs: initramfs,
		Cmdline: "console=ttyS0 panic=-1 quiet", Known: []string{biosMAC, uefiMAC}, Installed: []string{installedMAC}})

	kernelSize, initSize := fileSize(t, kernel), fileSize(t, initramfs)
	checkBoot := func(v *vm, tftp bool) {
		t.Helper()
		took := v.wait(t, 8*time.Minute, marker)
		if ip := l.lease(v.mac); !strings.HasPrefix(ip, "10.77.0.") {
			t.Errorf("%s: dnsmasq leased no address (%q)", v.name, ip)
		}
		dhcp, ok := l.has(v.mac, "served", StepDHCP, "")
		if !ok {
			t.Errorf("%s: no DHCP answer in the events", v.name)
		}
		script, ok := l.has(v.mac, "served", StepHTTP, "/boot.ipxe")
		if !ok {
			t.Errorf("%s: no boot script in the events", v.name)
		}
		k, ok1 := l.has(v.mac, "served", StepHTTP, "/kernel-amd64")
		i, ok2 := l.has(v.mac, "served", StepHTTP, "/initramfs-amd64.xz")
		if !ok1 || !ok2 || k.Bytes != kernelSize || i.Bytes != initSize {
			t.Errorf("%s: kernel %d of %d bytes, initramfs %d of %d", v.name, k.Bytes, kernelSize, i.Bytes, initSize)
		}
		var tf jsonEvent
		if tftp {
			var tok bool
			tf, tok = l.has(v.mac, "served", StepTFTP, "ipxe.efi")
			if !tok || tf.Bytes != fileSize(t, "/usr/lib/ipxe/ipxe.efi") {
				t.Errorf("%s: no TFTP transfer of ipxe.efi in the events (%+v)", v.name, tf)
			}
		}
		t.Logf("measure: %s: power-on to marker %.1f s; DHCP answer %.3f ms; script %.3f ms; kernel %.1f MB/s (%d B in %.3f s), initramfs %.1f MB/s%s",
			v.name, took.Seconds(), dhcp.Duration*1e3, script.Duration*1e3, rate(k), k.Bytes, k.Duration, rate(i),
			map[bool]string{true: fmt.Sprintf("; TFTP ipxe.efi %.2f MB/s (%d B in %.3f s)", rate(tf), tf.Bytes, tf.Duration)}[tftp])
	}

	t.Run("bios", func(t *testing.T) {
		checkBoot(l.startVM("bios", biosMAC, "tap0", false), false)
	})
	t.Run("uefi", func(t *testing.T) {
		checkBoot(l.startVM("uefi", uefiMAC, "tap1", true), true)
	})
	t.Run("installed and stranger", func(t *testing.T) {
		inst := l.startVM("installed", installedMAC, "tap2", false)
		str := l.startVM("stranger", strangerMAC, "tap3", false)
		inst.wait(t, 5*time.Minute, "boots from its disk")
		testenv.WaitFor(t, time.Minute, "the local_boot event", func() bool {
			_, ok := l.has(installedMAC, "local_boot", StepHTTP, "/boot.ipxe")
			return ok
		})
		testenv.WaitFor(t, 5*time.Minute, "the stranger refused", func() bool {
			for _, e := range l.eventsOf(strangerMAC) {
				if e.Type == "refused" && e.Step == StepDHCP && strings.Contains(e.Reason, "Let new machines boot") {
					return true
				}
			}
			return false
		})
		testenv.WaitFor(t, 5*time.Minute, "the router to lease the stranger an address", func() bool { return l.lease(strangerMAC) != "" })
		str.wait(t, 5*time.Minute, "No bootable device")
		for _, e := range l.eventsOf(installedMAC) {
			if strings.Contains(e.File, "/assets/") {
				t.Errorf("an installed machine was served %s", e.File)
			}
		}
		for _, e := range l.eventsOf(strangerMAC) {
			if e.Type != "refused" {
				t.Errorf("the stranger was served: %+v", e)
			}
		}
		for _, v := range []*vm{inst, str} {
			if strings.Contains(v.text(), marker) {
				t.Errorf("%s booted the kernel", v.name)
			}
		}
	})
	l.stopResponder()
	l.mu.Lock()
	t.Logf("measure: responder process over the whole test: %s", l.stats)
	l.mu.Unlock()
}

// lookPath finds a program on PATH or in /usr/sbin (dnsmasq lives there
// and a user's PATH may lack it).
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return exec.LookPath(filepath.Join("/usr/sbin", name))
}

func fileSize(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func rate(e jsonEvent) float64 {
	if e.Duration <= 0 {
		return 0
	}
	return float64(e.Bytes) / e.Duration / 1e6
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
