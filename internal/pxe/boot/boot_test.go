package boot

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var (
	mac  = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	srv  = Server{IP: netip.MustParseAddr("10.0.0.2"), HTTPPort: 8098}
	def  = Image{Schematic: DefaultSchematic, Version: "v1.13.0"}
	tsch = strings.Repeat("ab", 32)
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		c    Client
		fw   Firmware
		arch string
		err  string
	}{
		{"bios", Client{Arches: []uint16{0}, VendorClass: "PXEClient:Arch:00000:UNDI:002001"}, BIOS, "amd64", ""},
		{"uefi x64", Client{Arches: []uint16{7}, VendorClass: "PXEClient:Arch:00007:UNDI:003000"}, UEFI, "amd64", ""},
		{"uefi x64 9", Client{Arches: []uint16{9}}, UEFI, "amd64", ""},
		{"uefi arm64", Client{Arches: []uint16{11}}, UEFI, "arm64", ""},
		{"http x64", Client{Arches: []uint16{16}, VendorClass: "HTTPClient:Arch:00016"}, UEFIHTTP, "amd64", ""},
		{"http without class", Client{Arches: []uint16{16}, VendorClass: "PXEClient"}, Unsupported, "", "HTTPClient"},
		{"ipxe rom", Client{Arches: []uint16{0}, UserClasses: []string{"iPXE"}}, IPXE, "amd64", ""},
		{"ipxe efi", Client{Arches: []uint16{7}, UserClasses: []string{"iPXE"}}, IPXE, "amd64", ""},
		{"first known arch wins", Client{Arches: []uint16{99, 11}}, UEFI, "arm64", ""},
		{"no arch", Client{VendorClass: "PXEClient"}, Unsupported, "", "option 93"},
		{"riscv", Client{Arches: []uint16{0x19}}, Unsupported, "", "not x86"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fw, arch, err := Classify(c.c)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || fw != c.fw || arch != c.arch {
				t.Fatalf("got %v %q %v, want %v %q", fw, arch, err, c.fw, c.arch)
			}
		})
	}
}

func TestDHCPAnswer(t *testing.T) {
	cases := []struct {
		fw   Firmware
		arch string
		want Answer
	}{
		{BIOS, "amd64", Answer{File: "undionly.kpxe", TFTP: true}},
		{UEFI, "amd64", Answer{File: "ipxe.efi", TFTP: true}},
		{UEFI, "arm64", Answer{File: "snp-arm64.efi", TFTP: true}},
		{UEFIHTTP, "amd64", Answer{File: "http://10.0.0.2:8098/ipxe/ipxe.efi", HTTPClient: true}},
		{IPXE, "amd64", Answer{File: "http://10.0.0.2:8098/ipxe/amd64/52-54-00-12-34-56/boot.ipxe"}},
	}
	for _, c := range cases {
		if got := DHCPAnswer(c.fw, c.arch, mac, srv); got != c.want {
			t.Errorf("%v %s: %+v, want %+v", c.fw, c.arch, got, c.want)
		}
	}
}

func TestDecide(t *testing.T) {
	pol := Policy{Arches: []string{"amd64"}, Default: def}
	open := pol
	open.WindowOpen = true
	tenantImg := Image{Schematic: tsch, Version: "v1.12.4", Arch: "amd64"}
	defImg := Image{Schematic: DefaultSchematic, Version: "v1.13.0", Arch: "amd64"}
	declared := Machine{Known: true, Tenant: "lab", Node: "lab-workers-1", Schematic: tsch, TalosVersion: "v1.12.4"}
	installed := declared
	installed.Installed = true
	resetting := installed
	resetting.Resetting = true
	cases := []struct {
		name   string
		arch   string
		m      Machine
		p      Policy
		action Action
		img    Image
		reason string
	}{
		{"unknown, window closed", "amd64", Machine{}, pol, Refuse, Image{}, "\"Let new machines boot\" is off"},
		{"unknown, window open", "amd64", Machine{}, open, Maintenance, defImg, "let in"},
		{"discovered", "amd64", Machine{Known: true}, pol, Maintenance, defImg, "not installed"},
		{"declared, not installed", "amd64", declared, pol, Maintenance, tenantImg, "node lab-workers-1 is not installed"},
		{"installed", "amd64", installed, pol, LocalBoot, Image{}, "boot from its disk"},
		{"installed, window open", "amd64", installed, open, LocalBoot, Image{}, "boot from its disk"},
		{"being reset", "amd64", resetting, pol, Maintenance, tenantImg, "being reset"},
		{"arch not enabled", "arm64", declared, open, Refuse, Image{}, "arm64 machines are not enabled"},
		{"version only", "amd64", Machine{Known: true, TalosVersion: "v1.12.0"}, pol, Maintenance,
			Image{Schematic: DefaultSchematic, Version: "v1.12.0", Arch: "amd64"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(mac, c.arch, c.m, c.p)
			if d.Action != c.action || d.Image != c.img || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("got %+v, want %s %+v reason ~%q", d, c.action, c.img, c.reason)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var w Window
	if w.IsOpen(t0) {
		t.Fatal("zero window open")
	}
	w.Open(t0, 30*time.Minute)
	if !w.IsOpen(t0.Add(29*time.Minute)) || w.IsOpen(t0.Add(30*time.Minute)) {
		t.Fatal("window not open for exactly 30 minutes")
	}
	if got := w.Until(t0); !got.Equal(t0.Add(30 * time.Minute)) {
		t.Fatalf("until %v", got)
	}
	w.Close()
	if w.IsOpen(t0) || !w.Until(t0).IsZero() {
		t.Fatal("closed window open")
	}
}

func TestScripts(t *testing.T) {
	img := Image{Schematic: tsch, Version: "v1.12.4", Arch: "amd64"}
	s := MaintenanceScript(srv, img, "talos.platform=metal\nconsole=ttyS0  ", mac)
	for _, want := range []string{
		"#!ipxe\n",
		"kernel http://10.0.0.2:8098/assets/52-54-00-12-34-56/" + tsch + "/v1.12.4/kernel-amd64 initrd=initramfs-amd64.xz talos.platform=metal console=ttyS0\n",
		"initrd http://10.0.0.2:8098/assets/52-54-00-12-34-56/" + tsch + "/v1.12.4/initramfs-amd64.xz\n",
		"boot\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("maintenance script lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "talos.config") {
		t.Error("a machine config URL in the boot script")
	}
	if s := LocalBootScript(mac); !strings.HasSuffix(s, "\nexit\n") {
		t.Errorf("local boot script: %q", s)
	}
	if s := WaitScript(srv, "amd64", mac, "fetching\nassets", 10); !strings.Contains(s, "echo rezuscloud: fetching assets\nsleep 10\nchain --replace http://10.0.0.2:8098/ipxe/amd64/52-54-00-12-34-56/boot.ipxe\n") {
		t.Errorf("wait script: %q", s)
	}
}

func TestMACPath(t *testing.T) {
	if got := MACPath(mac); got != "52-54-00-12-34-56" {
		t.Fatal(got)
	}
	if hw, err := ParseMACPath("52-54-00-12-34-56"); err != nil || hw.String() != mac.String() {
		t.Fatal(hw, err)
	}
	for _, bad := range []string{"", "52:54:00:12:34:56", "../etc", "52-54-00-12-34-56-78-9a"} {
		if _, err := ParseMACPath(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
