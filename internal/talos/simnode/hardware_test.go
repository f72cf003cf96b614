package simnode_test

import (
	"net"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

func TestHardwareOfIsDeterministicPerAddress(t *testing.T) {
	a := simnode.HardwareOf(net.ParseIP("127.91.5.10"))
	if b := simnode.HardwareOf(net.ParseIP("127.91.5.10")); b.MAC != a.MAC || b.Serial != a.Serial || b.InstallDisk != a.InstallDisk {
		t.Fatalf("same address, different machines: %+v / %+v", a, b)
	}
	seen := map[string]bool{}
	for i := 1; i < 40; i++ {
		hw := simnode.HardwareOf(net.IPv4(127, 91, 5, byte(i)))
		if seen[hw.MAC] {
			t.Fatalf("MAC %s repeats", hw.MAC)
		}
		seen[hw.MAC] = true
		mac, err := net.ParseMAC(hw.MAC)
		if err != nil || mac[0]&0x01 != 0 || mac[0]&0x02 == 0 {
			t.Fatalf("MAC %s: want a locally administered unicast address (%v)", hw.MAC, err)
		}
		var internal, usb, cd *block.DiskSpec
		for i := range hw.Disks {
			d := &hw.Disks[i]
			switch {
			case d.CDROM:
				cd = d
			case d.Transport == "usb":
				usb = d
			case d.DevPath == hw.InstallDisk:
				internal = d
			}
		}
		if internal == nil || usb == nil || cd == nil {
			t.Fatalf("disks %+v: want an internal disk, a USB disk and a CD", hw.Disks)
		}
		if usb.Size <= internal.Size {
			t.Fatalf("USB disk %d bytes, internal %d: the USB disk must be the larger one", usb.Size, internal.Size)
		}
		if !cd.Readonly || internal.Transport != "nvme" && internal.Transport != "sata" {
			t.Fatalf("cd %+v internal %+v", cd, internal)
		}
	}
}

func TestNodeServesHardwareInMaintenance(t *testing.T) {
	ctx := t.Context()
	n, err := simnode.Start(ctx, simnode.Options{Addr: host(4) + ":0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	want := n.Hardware()
	c := insecureClient(t, n.Addr())

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		t.Fatal(err)
	}
	if si.TypedSpec().ProductName != want.Model || si.TypedSpec().UUID != want.UUID {
		t.Fatalf("system information %+v; want model %s", si.TypedSpec(), want.Model)
	}
	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		t.Fatal(err)
	}
	if disks.Len() != len(want.Disks) {
		t.Fatalf("%d disks; want %d", disks.Len(), len(want.Disks))
	}
	for d := range disks.All() {
		if "/dev/"+d.Metadata().ID() != d.TypedSpec().DevPath || d.TypedSpec().Size == 0 {
			t.Fatalf("disk %s: %+v", d.Metadata().ID(), d.TypedSpec())
		}
	}
	links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		t.Fatal(err)
	}
	var macs []string
	for l := range links.All() {
		if l.TypedSpec().Physical() {
			macs = append(macs, l.TypedSpec().HardwareAddr.String())
		}
	}
	if len(macs) != 2 || macs[0] != want.MAC || macs[1] != want.SpareMAC {
		t.Fatalf("physical links %v; want %s, %s", macs, want.MAC, want.SpareMAC)
	}
	cpus, err := safe.StateListAll[*hardware.Processor](ctx, c.COSI)
	if err != nil || cpus.Len() != 1 || int(cpus.Get(0).TypedSpec().CoreCount) != want.CoresPerSocket {
		t.Fatalf("processors %v, %v", cpus, err)
	}
}
