package simnode

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// Hardware is what a simulated machine is made of, derived from its address
// alone, so that the same address always is the same machine. A node serves
// it through COSI as Talos 1.13 does (hardware.SystemInformation,
// hardware.Processor, hardware.MemoryModule, block.Disk, network.LinkStatus,
// network.AddressStatus), readable in maintenance mode.
type Hardware struct {
	Manufacturer, Model, Serial, UUID string
	CPU                               string
	Sockets, CoresPerSocket           int
	MemoryModulesMiB                  []uint32
	// MAC is the address of the link the node's IP is on; SpareMAC that
	// of a second physical link that is down.
	MAC, SpareMAC string
	// Disks: the internal disk (NVMe or SATA), a removable USB disk that is
	// LARGER than the internal one (a naive "largest disk" choice picks
	// it), and a read-only CD-ROM (the boot ISO).
	Disks []block.DiskSpec
	// InstallDisk is the device path of the internal disk, the right
	// install target.
	InstallDisk string
}

type model struct{ manufacturer, product, cpu string }

var models = []model{
	{"Intel(R) Client Systems", "NUC12WSHi5", "12th Gen Intel(R) Core(TM) i5-1240P"},
	{"Dell Inc.", "OptiPlex 7090", "11th Gen Intel(R) Core(TM) i7-11700 @ 2.50GHz"},
	{"LENOVO", "ThinkCentre M75q Gen 2", "AMD Ryzen 5 PRO 5650GE with Radeon Graphics"},
	{"HP", "EliteDesk 800 G6 Desktop Mini PC", "Intel(R) Core(TM) i5-10500T CPU @ 2.30GHz"},
	{"Supermicro", "X11SCH-F", "Intel(R) Xeon(R) E-2278G CPU @ 3.40GHz"},
}

// HardwareOf is the hardware of the simulated machine at ip.
func HardwareOf(ip net.IP) Hardware {
	key := ip.To16()
	sum := sha256.Sum256(append([]byte("simnode-hardware:"), key...))
	pick := binary.BigEndian.Uint32(sum[0:4])
	m := models[int(pick%uint32(len(models)))]
	mac := net.HardwareAddr{0x02, sum[4], sum[5], sum[6], sum[7], sum[8]} // locally administered, unicast
	spare := net.HardwareAddr{0x02, sum[9], sum[10], sum[11], sum[12], sum[13]}
	dimm := []uint32{8192, 16384, 32768}[sum[15]%3]
	hw := Hardware{
		Manufacturer:     m.manufacturer,
		Model:            m.product,
		Serial:           fmt.Sprintf("SIM%X", sum[14:20]),
		UUID:             fmt.Sprintf("%x-%x-%x-%x-%x", sum[16:20], sum[20:22], sum[22:24], sum[24:26], sum[26:32]),
		CPU:              m.cpu,
		Sockets:          1,
		CoresPerSocket:   []int{4, 6, 8, 12}[sum[14]%4],
		MemoryModulesMiB: []uint32{dimm, dimm}, // two equal DIMMs
		MAC:              mac.String(),
		SpareMAC:         spare.String(),
	}
	internalGB := []uint64{256, 512, 1000}[sum[16]%3]
	internal := block.DiskSpec{
		DevPath: "/dev/nvme0n1", Model: "Samsung SSD 980 PRO", Serial: fmt.Sprintf("S5GX%X", sum[17:21]),
		Transport: "nvme", IOSize: 512, SectorSize: 512,
		WWID: fmt.Sprintf("eui.%x", sum[21:29]), BusPath: "/pci0000:00/0000:00:06.0/0000:01:00.0/nvme/nvme0", SubSystem: "/sys/class/block",
	}
	usbPath := "/dev/sda"
	if sum[17]%2 == 1 {
		internal = block.DiskSpec{
			DevPath: "/dev/sda", Model: "CT500MX500SSD1", Serial: fmt.Sprintf("2049E%X", sum[17:21]),
			Transport: "sata", IOSize: 4096, SectorSize: 512,
			WWID: fmt.Sprintf("naa.%x", sum[21:29]), BusPath: "/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0", SubSystem: "/sys/class/block",
		}
		usbPath = "/dev/sdb"
	}
	internal.SetSize(internalGB * 1000 * 1000 * 1000)
	usb := block.DiskSpec{
		DevPath: usbPath, Model: "Extreme 55AE", Serial: fmt.Sprintf("3232%X", sum[24:28]),
		Transport: "usb", IOSize: 512, SectorSize: 512,
		BusPath: "/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host1/target1:0:0/1:0:0:0", SubSystem: "/sys/class/block",
	}
	usb.SetSize(2 * internalGB * 1000 * 1000 * 1000)
	cd := block.DiskSpec{
		DevPath: "/dev/sr0", Model: "DVD+-RW GU90N", Transport: "sata", Readonly: true, CDROM: true,
		IOSize: 2048, SectorSize: 2048, SubSystem: "/sys/class/block",
	}
	cd.SetSize(120 * 1024 * 1024)
	hw.Disks = []block.DiskSpec{internal, usb, cd}
	hw.InstallDisk = internal.DevPath
	return hw
}

// Hardware is the node's simulated hardware.
func (n *Node) Hardware() Hardware { return HardwareOf(n.ip) }

// createHardware puts the node's hardware into its COSI state, with the
// resource definitions talosctl looks up.
func (n *Node) createHardware(ctx context.Context) error {
	hw := n.Hardware()
	var res []resource.Resource

	si := hardware.NewSystemInformation(hardware.SystemInformationID)
	*si.TypedSpec() = hardware.SystemInformationSpec{
		Manufacturer: hw.Manufacturer, ProductName: hw.Model, Version: "1.0",
		SerialNumber: hw.Serial, UUID: hw.UUID, WakeUpType: "Power Switch", SKUNumber: "SIM",
	}
	res = append(res, si)
	for s := range hw.Sockets {
		p := hardware.NewProcessorInfo(fmt.Sprintf("CPU%d", s))
		*p.TypedSpec() = hardware.ProcessorSpec{
			Socket: fmt.Sprintf("CPU%d", s), Manufacturer: "Simulated", ProductName: hw.CPU,
			MaxSpeed: 4400, BootSpeed: 2100, Status: 65,
			CoreCount: uint32(hw.CoresPerSocket), CoreEnabled: uint32(hw.CoresPerSocket), ThreadCount: uint32(2 * hw.CoresPerSocket),
		}
		res = append(res, p)
	}
	for i, size := range hw.MemoryModulesMiB {
		mm := hardware.NewMemoryModuleInfo(fmt.Sprintf("Controller0-ChannelA-DIMM%d", i))
		*mm.TypedSpec() = hardware.MemoryModuleSpec{
			Size: size, DeviceLocator: fmt.Sprintf("DIMM %d", i), BankLocator: fmt.Sprintf("BANK %d", i),
			Speed: 3200, Manufacturer: "Simulated", ProductName: "SIM-DDR4",
		}
		res = append(res, mm)
	}
	for _, spec := range hw.Disks {
		d := block.NewDisk(block.NamespaceName, spec.DevPath[len("/dev/"):])
		*d.TypedSpec() = spec
		res = append(res, d)
	}

	lo := network.NewLinkStatus(network.NamespaceName, "lo")
	*lo.TypedSpec() = network.LinkStatusSpec{
		Index: 1, Type: nethelpers.LinkLoopbck, MTU: 65536,
		Flags: nethelpers.LinkFlags(net.FlagUp | net.FlagLoopback), OperationalState: nethelpers.OperStateUnknown,
	}
	res = append(res, lo)
	for i, l := range []struct {
		name, mac string
		up        bool
	}{{"enp1s0", hw.MAC, true}, {"enp2s0", hw.SpareMAC, false}} {
		mac, _ := net.ParseMAC(l.mac)
		ls := network.NewLinkStatus(network.NamespaceName, l.name)
		spec := network.LinkStatusSpec{
			Index: uint32(i + 2), Type: nethelpers.LinkEther, MTU: 1500, QueueDisc: "fq_codel",
			HardwareAddr: nethelpers.HardwareAddr(mac), PermanentAddr: nethelpers.HardwareAddr(mac),
			BroadcastAddr:    nethelpers.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			OperationalState: nethelpers.OperStateDown, Driver: "igc", Vendor: "Intel Corporation", Product: "Ethernet Controller I225-V",
		}
		if l.up {
			spec.Flags = nethelpers.LinkFlags(net.FlagUp | net.FlagBroadcast | net.FlagMulticast)
			spec.OperationalState, spec.LinkState, spec.SpeedMegabits = nethelpers.OperStateUp, true, 2500
		}
		*ls.TypedSpec() = spec
		res = append(res, ls)
	}
	if ip, ok := netip.AddrFromSlice(n.ip); ok {
		ip = ip.Unmap()
		bits := 24
		if ip.Is6() {
			bits = 64
		}
		pfx := netip.PrefixFrom(ip, bits)
		as := network.NewAddressStatus(network.NamespaceName, network.AddressID("enp1s0", pfx))
		*as.TypedSpec() = network.AddressStatusSpec{Address: pfx, Local: ip, LinkIndex: 2, LinkName: "enp1s0"}
		res = append(res, as)
	}

	for _, r := range res {
		if err := n.st.Create(ctx, r); err != nil {
			return fmt.Errorf("simnode: hardware: %w", err)
		}
	}
	for _, ext := range []meta.ResourceDefinitionProvider{
		hardware.SystemInformationExtension{}, hardware.ProcessorExtension{}, hardware.MemoryModuleExtension{},
		block.DiskExtension{}, network.LinkStatusExtension{}, network.AddressStatusExtension{},
	} {
		rd, err := meta.NewResourceDefinition(ext.ResourceDefinition())
		if err != nil {
			return fmt.Errorf("simnode: hardware: %w", err)
		}
		if err := n.st.Create(ctx, rd); err != nil {
			return fmt.Errorf("simnode: hardware: %w", err)
		}
	}
	return nil
}
