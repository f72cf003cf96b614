package talos_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

func TestInstallDisk(t *testing.T) {
	const gb = 1000 * 1000 * 1000
	nvme := talos.Disk{DevPath: "/dev/nvme0n1", Size: 512 * gb, Transport: "nvme"}
	sata := talos.Disk{DevPath: "/dev/sda", Size: 1000 * gb, Transport: "sata", Rotational: true}
	usb := talos.Disk{DevPath: "/dev/sdb", Size: 2000 * gb, Transport: "usb"}
	usbUpper := talos.Disk{DevPath: "/dev/sdc", Size: 4000 * gb, Transport: "USB"}
	cd := talos.Disk{DevPath: "/dev/sr0", Size: 4000 * gb, Transport: "sata", CDROM: true, Readonly: true}
	ro := talos.Disk{DevPath: "/dev/mmcblk0boot0", Size: 4000 * gb, Transport: "mmc", Readonly: true}
	loop := talos.Disk{DevPath: "/dev/loop0", Size: 4000 * gb}
	empty := talos.Disk{DevPath: "/dev/sdd", Transport: "sata"}
	sd := talos.Disk{DevPath: "/dev/mmcblk0", Size: 64 * gb, Transport: "mmc"}
	nvme2 := talos.Disk{DevPath: "/dev/nvme1n1", Size: 512 * gb, Transport: "nvme"}
	tests := []struct {
		name  string
		disks []talos.Disk
		want  string // device path, or "" for an error
	}{
		{"internal beats a larger USB disk, CD and read-only", []talos.Disk{usb, cd, nvme, ro, usbUpper, loop, empty}, "/dev/nvme0n1"},
		{"largest internal", []talos.Disk{nvme, sata, usb}, "/dev/sda"},
		{"SD card of a single-board computer", []talos.Disk{sd, usb}, "/dev/mmcblk0"},
		{"equal sizes: first by path", []talos.Disk{nvme2, nvme}, "/dev/nvme0n1"},
		{"only removable and read-only", []talos.Disk{usb, cd, ro}, ""},
		{"no disks", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := talos.InstallDisk(tt.disks)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "no disk to install Talos on") {
					t.Fatalf("InstallDisk = %+v, %v; want an error", d, err)
				}
				return
			}
			if err != nil || d.DevPath != tt.want {
				t.Fatalf("InstallDisk = %+v, %v; want %s", d, err, tt.want)
			}
		})
	}
}

func TestReadHardwareFromMaintenanceNode(t *testing.T) {
	ctx := t.Context()
	n, err := simnode.Start(ctx, simnode.Options{Addr: loopbackHosts(1)[0] + ":0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	if n.Stage() != runtime.MachineStageMaintenance {
		t.Fatalf("stage %s", n.Stage())
	}
	want := n.Hardware()

	m, err := talos.ReadHardware(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if m.Address != n.Host() || m.MAC != want.MAC || m.Model != want.Model || m.Manufacturer != want.Manufacturer ||
		m.Serial != want.Serial || m.UUID != want.UUID || m.CPU != want.CPU || m.Cores != want.CoresPerSocket*want.Sockets {
		t.Fatalf("machine %+v; want %+v", m, want)
	}
	var mem uint64
	for _, mib := range want.MemoryModulesMiB {
		mem += uint64(mib) << 20
	}
	if m.MemoryBytes != mem || len(m.MACs) != 2 {
		t.Fatalf("memory %d (want %d), MACs %v", m.MemoryBytes, mem, m.MACs)
	}
	if len(m.Disks) != len(want.Disks) {
		t.Fatalf("disks %+v", m.Disks)
	}
	for i := 1; i < len(m.Disks); i++ {
		if m.Disks[i-1].DevPath >= m.Disks[i].DevPath {
			t.Fatalf("disks not sorted: %+v", m.Disks)
		}
	}
	d, err := talos.InstallDisk(m.Disks)
	if err != nil || d.DevPath != want.InstallDisk || d.Removable() {
		t.Fatalf("install disk %+v, %v; want %s", d, err, want.InstallDisk)
	}

	// The fingerprint is the one Talos prints: base64 SHA-256 of the
	// certificate's public key, here compared with what a TLS handshake of
	// our own sees.
	conn, err := tls.Dial("tcp", n.Addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test
	if err != nil {
		t.Fatal(err)
	}
	fp := x509.SPKIFingerprint(conn.ConnectionState().PeerCertificates[0]).String()
	_ = conn.Close()
	raw, err := base64.StdEncoding.DecodeString(m.Fingerprint)
	if err != nil || len(raw) != 32 || m.Fingerprint != fp {
		t.Fatalf("fingerprint %q; want %q (32 bytes base64)", m.Fingerprint, fp)
	}
}

func TestReadHardwareUnreachable(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	n, err := simnode.Start(ctx, simnode.Options{Addr: loopbackHosts(1)[0] + ":0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()
	n.Close()
	cancel()
	rctx, rcancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer rcancel()
	if _, err := talos.ReadHardware(rctx, addr); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("ReadHardware of a closed node: %v; want an error naming %s", err, addr)
	}
}
