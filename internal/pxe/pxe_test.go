package pxe

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pxe/assets"
	"github.com/rezuscloud/rezuscloud/internal/pxe/assets/factorytest"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
	"github.com/rezuscloud/rezuscloud/internal/pxe/dhcp"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

var (
	known     = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 1}
	installed = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 2}
	stranger  = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 3}
	resetting = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 4}
)

// inventory is a fake of the engine's facts.
func inventory(mac net.HardwareAddr) boot.Machine {
	switch mac.String() {
	case known.String():
		return boot.Machine{Known: true, Tenant: "lab", Node: "lab-workers-1"}
	case installed.String():
		return boot.Machine{Known: true, Tenant: "lab", Node: "lab-workers-2", Installed: true}
	case resetting.String():
		return boot.Machine{Known: true, Tenant: "lab", Node: "lab-workers-3", Installed: true, Resetting: true}
	}
	return boot.Machine{}
}

type rec struct {
	mu  sync.Mutex
	evs []Event
}

func (r *rec) add(e Event) { r.mu.Lock(); r.evs = append(r.evs, e); r.mu.Unlock() }
func (r *rec) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.evs...)
}

type fixture struct {
	r       *Responder
	ev      *rec
	factory *factorytest.Factory
	windows []bool
}

func newFixture(t *testing.T, now func() time.Time) *fixture { return newFixtureFactory(t, now, true) }

// newFixtureFactory: withFactory false starts no stand-in factory (a
// synctest bubble cannot hold a server blocked on the network).
func newFixtureFactory(t testing.TB, now func() time.Time, withFactory bool) *fixture {
	t.Helper()
	bins := t.TempDir()
	for _, n := range []string{"undionly.kpxe", "ipxe.efi"} {
		if err := os.WriteFile(filepath.Join(bins, n), []byte("iPXE "+n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := &factorytest.Factory{URL: "http://127.0.0.1:1"}
	if withFactory {
		var err error
		if f, err = factorytest.New(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		img := boot.Image{Schematic: boot.DefaultSchematic, Version: DefaultVersion}
		f.Add(img.Schematic, img.Version, "kernel-amd64", []byte("KERNEL"))
		f.Add(img.Schematic, img.Version, "initramfs-amd64.xz", []byte("INITRAMFS"))
		f.Add(img.Schematic, img.Version, "cmdline-metal-amd64", []byte("talos.platform=metal console=ttyS0"))
	}
	data := t.TempDir()
	fx := &fixture{ev: &rec{}, factory: f}
	var mu sync.Mutex
	r, err := New(Options{Interface: "lo", ServerIP: netip.MustParseAddr("10.9.0.2"), Inventory: InventoryFunc(inventory),
		Cache: &assets.Cache{Dir: filepath.Join(data, "assets"), Factory: f.URL}, DataDir: data, IPXEDirs: []string{bins},
		Now: now, OnEvent: fx.ev.add, ARP: func(netip.Addr) string { return "" },
		OnWindow: func(open bool, _ time.Time) { mu.Lock(); fx.windows = append(fx.windows, open); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	fx.r = r
	return fx
}

// pxePacket is a PXE client's request.
func pxePacket(t testing.TB, mac net.HardwareAddr, typ byte, arch uint16, vendor string, ipxe bool) []byte {
	t.Helper()
	p := &dhcp.Packet{Op: dhcp.BootRequest, HType: 1, HLen: 6, XID: 42, Flags: 0x8000, Options: dhcp.Options{
		dhcp.OptMessageType: {typ}, dhcp.OptVendorClass: []byte(vendor), dhcp.OptClientArch: {byte(arch >> 8), byte(arch)},
		dhcp.OptClientGUID: append([]byte{0}, bytes.Repeat([]byte{9}, 16)...),
	}}
	if ipxe {
		p.Options[dhcp.OptUserClass] = []byte("iPXE")
	}
	copy(p.CHAddr[:], mac)
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAnswerDHCP(t *testing.T) {
	fx := newFixture(t, time.Now)
	pxe := "PXEClient:Arch:00000:UNDI:002001"
	cases := []struct {
		name   string
		pkt    []byte
		port   int
		answer bool
		file   string
		typ    byte
		event  string // "" no event; else the reason or file it names
	}{
		{"bios, known", pxePacket(t, known, dhcp.Discover, 0, pxe, false), 67, true, "undionly.kpxe", dhcp.Offer, "undionly.kpxe"},
		{"uefi, known, port 4011", pxePacket(t, known, dhcp.Request, 7, "PXEClient:Arch:00007:UNDI:003000", false), 4011, true, "ipxe.efi", dhcp.Ack, "ipxe.efi"},
		{"ipxe, installed (the script decides)", pxePacket(t, installed, dhcp.Discover, 0, pxe, true), 67, true,
			"http://10.9.0.2:8098/ipxe/amd64/52-54-00-00-00-02/boot.ipxe", dhcp.Offer, "boot.ipxe"},
		{"uefi http", pxePacket(t, known, dhcp.Discover, 16, "HTTPClient:Arch:00016", false), 67, true, "http://10.9.0.2:8098/ipxe/ipxe.efi", dhcp.Offer, "ipxe.efi"},
		{"stranger, window closed", pxePacket(t, stranger, dhcp.Discover, 0, pxe, false), 67, false, "", 0, "\"Let new machines boot\" is off"},
		{"arm64 not enabled", pxePacket(t, known, dhcp.Discover, 11, pxe, false), 67, false, "", 0, "arm64 machines are not enabled"},
		{"unknown arch", pxePacket(t, known, dhcp.Discover, 0x19, pxe, false), 67, false, "", 0, "not x86 BIOS"},
		{"not PXE: the LAN's own DHCP", pxePacket(t, known, dhcp.Discover, 0, "android-dhcp-14", false), 67, false, "", 0, ""},
		{"request on 67 is the router's", pxePacket(t, known, dhcp.Request, 0, pxe, false), 67, false, "", 0, ""},
		{"discover on 4011", pxePacket(t, known, dhcp.Discover, 0, pxe, false), 4011, false, "", 0, ""},
		{"malformed", []byte("\x01\x01\x06\x00garbage"), 67, false, "", 0, "malformed DHCP packet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, ev, ok := fx.r.answerDHCP(c.pkt, c.port)
			if ok != c.answer {
				t.Fatalf("answered %v, want %v (event %+v)", ok, c.answer, ev)
			}
			if c.event == "" && ev != nil {
				t.Fatalf("event %+v for a packet that is not ours", ev)
			}
			if c.event != "" && (ev == nil || !strings.Contains(ev.Reason+ev.File, c.event)) {
				t.Fatalf("event %+v, want one naming %q", ev, c.event)
			}
			if !ok {
				return
			}
			b, err := rep.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			p, err := dhcp.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if p.Op != dhcp.BootReply || p.MessageType() != c.typ || p.XID != 42 || p.CHAddr != rep.CHAddr {
				t.Fatalf("reply header %+v", p)
			}
			if !p.YIAddr.IsUnspecified() {
				t.Fatalf("the proxy handed out an address: yiaddr %s", p.YIAddr)
			}
			if string(p.Options[dhcp.OptBootFile]) != c.file {
				t.Fatalf("boot file %q, want %q", p.Options[dhcp.OptBootFile], c.file)
			}
			if netip.AddrFrom4([4]byte(p.Options[dhcp.OptServerID])) != netip.MustParseAddr("10.9.0.2") {
				t.Fatalf("server id %v", p.Options[dhcp.OptServerID])
			}
			if len(p.Options[dhcp.OptClientGUID]) != 17 {
				t.Fatal("the client GUID was not echoed")
			}
			if p.SIAddr != netip.MustParseAddr("10.9.0.2") {
				t.Fatalf("siaddr %s: iPXE takes the boot file only with a next server", p.SIAddr)
			}
			if _, tftp := p.Options[dhcp.OptTFTPServer]; tftp == strings.HasPrefix(c.file, "http") {
				t.Fatalf("option 66 for boot file %s: %v", c.file, tftp)
			}
		})
	}
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "10.9.0.50:40000"
	h.ServeHTTP(rr, req)
	return rr.Code, rr.Body.String()
}

func TestScripts(t *testing.T) {
	fx := newFixture(t, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx.r.ctx = ctx
	h := fx.r.Handler()
	// a known machine: first a wait script while the assets are fetched,
	// then the maintenance script
	code, body := get(t, h, "/ipxe/amd64/52-54-00-00-00-01/boot.ipxe")
	if code != 200 || !strings.Contains(body, "sleep 10\nchain --replace http://10.9.0.2:8098/ipxe/amd64/52-54-00-00-00-01/boot.ipxe") {
		t.Fatalf("first script %d %q", code, body)
	}
	testenv.WaitFor(t, 10*time.Second, "the maintenance script", func() bool {
		_, body = get(t, h, "/ipxe/amd64/52-54-00-00-00-01/boot.ipxe")
		return strings.Contains(body, "\nboot\n")
	})
	kernel := "/assets/52-54-00-00-00-01/" + boot.DefaultSchematic + "/" + DefaultVersion + "/kernel-amd64"
	if !strings.Contains(body, "kernel http://10.9.0.2:8098"+kernel+" initrd=initramfs-amd64.xz talos.platform=metal console=ttyS0\n") {
		t.Fatalf("maintenance script %q", body)
	}
	if code, b := get(t, h, kernel); code != 200 || b != "KERNEL" {
		t.Fatalf("kernel: %d %q", code, b)
	}
	if st := fx.r.Assets(); len(st.Cached) != 1 || st.Problem != "" {
		t.Fatalf("assets %+v", st)
	}
	// installed: its disk
	if code, body := get(t, h, "/ipxe/amd64/52-54-00-00-00-02/boot.ipxe"); code != 200 || !strings.HasSuffix(body, "\nexit\n") {
		t.Fatalf("installed machine's script %d %q", code, body)
	}
	// being reset: maintenance again
	if _, body := get(t, h, "/ipxe/amd64/52-54-00-00-00-04/boot.ipxe"); !strings.Contains(body, "\nboot\n") {
		t.Fatalf("resetting machine's script %q", body)
	}
	// refused: a stranger, its assets, an installed machine's assets, names that are not ours
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/ipxe/amd64/52-54-00-00-00-03/boot.ipxe", 403, "\"Let new machines boot\" is off"},
		{"/assets/52-54-00-00-00-03/" + boot.DefaultSchematic + "/" + DefaultVersion + "/kernel-amd64", 403, "is off"},
		{"/assets/52-54-00-00-00-02/" + boot.DefaultSchematic + "/" + DefaultVersion + "/kernel-amd64", 403, "boot from its disk"},
		{"/assets/52-54-00-00-00-01/" + boot.DefaultSchematic + "/v1.0.0/kernel-amd64", 403, "not " + boot.DefaultSchematic + "/v1.0.0"},
		{"/assets/52-54-00-00-00-01/" + boot.DefaultSchematic + "/" + DefaultVersion + "/cmdline-metal-amd64", 404, "not a kernel or initramfs"},
		{"/assets/52-54-00-00-00-01/" + boot.DefaultSchematic + "/" + DefaultVersion + "/SHA256SUMS-amd64", 404, "not a kernel"},
		{"/ipxe/amd64/not-a-mac/boot.ipxe", 404, "not a MAC address"},
		{"/ipxe/../../etc/passwd", 307, ""}, // cleaned by the mux to /etc/passwd, a 404
		{"/etc/passwd", 404, ""},
		{"/ipxe/pxelinux.0", 404, "not an iPXE binary"},
		{"/config?mac=52-54-00-00-00-01", 404, ""},
		{"/", 404, ""},
	} {
		if code, body := get(t, h, c.path); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q, want %d ~%q", c.path, code, body, c.code, c.want)
		}
	}
	var kinds = map[boot.Action]int{}
	for _, e := range fx.ev.all() {
		kinds[e.Type]++
		if e.Step != StepHTTP || e.Client != netip.MustParseAddr("10.9.0.50") {
			t.Errorf("event %+v", e)
		}
	}
	if kinds[boot.LocalBoot] != 1 || kinds[boot.Maintenance] < 3 || kinds[boot.Refuse] < 6 {
		t.Fatalf("events by type %v", kinds)
	}
}

// TestAssetProblem: a wrong checksum is refused, the machine is told why
// and asks again later, and the sensor shows the problem.
func TestAssetProblem(t *testing.T) {
	fx := newFixture(t, time.Now)
	fx.factory.PublishSum(boot.DefaultSchematic, DefaultVersion, "kernel-amd64", strings.Repeat("1", 64))
	fx.r.ctx = context.Background()
	h := fx.r.Handler()
	var body string
	testenv.WaitFor(t, 10*time.Second, "the checksum refusal in the script", func() bool {
		_, body = get(t, h, "/ipxe/amd64/52-54-00-00-00-01/boot.ipxe")
		return strings.Contains(body, "checksum mismatch")
	})
	if strings.Contains(body, "\nboot\n") || !strings.Contains(body, "sleep 60") {
		t.Fatalf("script %q", body)
	}
	if st := fx.r.Assets(); len(st.Cached) != 0 || !strings.Contains(st.Problem, "kernel-amd64: checksum mismatch") {
		t.Fatalf("assets %+v", st)
	}
	refused := false
	for _, e := range fx.ev.all() {
		refused = refused || (e.Type == boot.Refuse && strings.Contains(e.Reason, "checksum mismatch"))
	}
	if !refused {
		t.Fatal("no refused event names the checksum")
	}
}

// TestWindow: "Let new machines boot" lets a stranger in for the window's
// time only, and says when it closes by itself.
func TestWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixtureFactory(t, time.Now, false)
		pkt := pxePacket(t, stranger, dhcp.Discover, 0, "PXEClient", false)
		if _, _, ok := fx.r.answerDHCP(pkt, 67); ok {
			t.Fatal("a stranger answered with the window closed")
		}
		fx.r.SetWindow(true)
		if open, until := fx.r.Window(); !open || until.Sub(time.Now()) != 30*time.Minute {
			t.Fatalf("window %v until %v", open, until)
		}
		if _, _, ok := fx.r.answerDHCP(pkt, 67); !ok {
			t.Fatal("a stranger refused with the window open")
		}
		time.Sleep(30*time.Minute + time.Second)
		synctest.Wait()
		if open, _ := fx.r.Window(); open {
			t.Fatal("the window is still open after 30 minutes")
		}
		if _, _, ok := fx.r.answerDHCP(pkt, 67); ok {
			t.Fatal("a stranger answered after the window closed")
		}
		if len(fx.windows) != 2 || !fx.windows[0] || fx.windows[1] {
			t.Fatalf("window changes %v, want open then closed", fx.windows)
		}
		fx.r.SetWindow(true)
		fx.r.SetWindow(false)
		if open, _ := fx.r.Window(); open {
			t.Fatal("closing did not close")
		}
	})
}

// TestRefusalsOncePerMinute: firmware asking again and again is reported
// once a minute, not on every packet.
func TestRefusalsOncePerMinute(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	fx := newFixture(t, func() time.Time { return now })
	pkt := pxePacket(t, stranger, dhcp.Discover, 0, "PXEClient", false)
	for range 5 {
		_, ev, _ := fx.r.answerDHCP(pkt, 67)
		fx.r.emit(*ev)
	}
	now = now.Add(61 * time.Second)
	_, ev, _ := fx.r.answerDHCP(pkt, 67)
	fx.r.emit(*ev)
	if n := len(fx.ev.all()); n != 2 {
		t.Fatalf("%d refused events, want 2", n)
	}
}

func TestNewRefuses(t *testing.T) {
	c := &assets.Cache{Dir: t.TempDir()}
	if _, err := New(Options{Interface: "lo", Inventory: InventoryFunc(inventory), Cache: c, DataDir: t.TempDir(), IPXEDirs: []string{t.TempDir()}}); err == nil ||
		!strings.Contains(err.Error(), "no iPXE binary") {
		t.Fatalf("no binaries: %v", err)
	}
	if _, err := New(Options{Interface: "no-such-if0", Inventory: InventoryFunc(inventory), Cache: c, DataDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), `interface "no-such-if0"`) {
		t.Fatalf("no interface: %v", err)
	}
	if _, err := New(Options{Interface: "lo"}); err == nil {
		t.Fatal("no inventory accepted")
	}
}

func TestEventBoot(t *testing.T) {
	for _, c := range []struct {
		e    Event
		want bool
	}{
		{Event{Type: boot.Maintenance, Step: StepDHCP, File: "undionly.kpxe"}, false},
		{Event{Type: boot.Maintenance, Step: StepTFTP, File: "undionly.kpxe"}, false},
		{Event{Type: boot.Maintenance, Step: StepHTTP, File: "/assets/x/kernel-amd64"}, false},
		{Event{Type: boot.Maintenance, Step: StepHTTP, File: "/ipxe/amd64/52-54-00-00-00-01/boot.ipxe"}, true},
		{Event{Type: boot.LocalBoot, Step: StepHTTP, File: "/ipxe/amd64/52-54-00-00-00-01/boot.ipxe"}, true},
		{Event{Type: boot.Refuse, Step: StepDHCP}, true},
	} {
		if got := c.e.Boot(); got != c.want {
			t.Errorf("%+v: %v", c.e, got)
		}
	}
}
