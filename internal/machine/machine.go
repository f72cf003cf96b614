// Package machine holds what the house's machines are, as the domain knows
// them: the hardware a machine in maintenance mode reports (Machine, Disk,
// the choice of an install disk) and how a machine is powered (a parsed
// power value). It is a leaf: it imports nothing of the project, so the
// domain (tenant) and the adapters (talos, hass, power, redfish) share it
// without an arrow pointing the wrong way.
package machine

import (
	"fmt"
	"strings"
)

// Machine is what a node in maintenance mode tells about itself, read
// without credentials: enough to recognise it and adopt it into a cluster.
type Machine struct {
	Address      string // the IP the machine answered on
	MAC          string // hardware address of the physical link carrying Address (else the first physical link)
	MACs         []string
	Manufacturer string // SMBIOS system manufacturer
	Model        string // SMBIOS product name
	Serial       string
	UUID         string
	CPU          string // product name of the first processor
	Cores        int    // cores over all processors
	MemoryBytes  uint64 // sum of the memory modules
	Disks        []Disk // by device path
	// Fingerprint is the SHA-256 of the maintenance server certificate's
	// public key, base64: what Talos prints on the console under "server
	// certificate fingerprint" and talosctl --cert-fingerprint takes.
	Fingerprint string
}

// Disk is one block device of a machine (block.Disk).
type Disk struct {
	DevPath    string // /dev/nvme0n1
	Size       uint64 // bytes
	Model      string
	Serial     string
	Transport  string // nvme, sata, usb, virtio, mmc, ...
	Rotational bool
	Readonly   bool
	CDROM      bool
}

// Removable reports whether the disk is attached over USB: a stick or an
// external drive, possibly the one the machine booted from, never an
// install target.
func (d Disk) Removable() bool { return strings.EqualFold(d.Transport, "usb") }

// installable reports whether d may hold Talos.
func (d Disk) installable() bool {
	if d.Removable() || d.Readonly || d.CDROM || d.Size == 0 {
		return false
	}
	for _, virt := range []string{"/dev/loop", "/dev/ram", "/dev/zram", "/dev/nbd", "/dev/dm-", "/dev/md"} {
		if strings.HasPrefix(d.DevPath, virt) {
			return false
		}
	}
	return true
}

// InstallDisk chooses where Talos goes: the largest disk that is not
// removable (USB), read-only, a CD or virtual; on equal sizes the first by
// device path. No such disk is an error that lists what there is.
func InstallDisk(disks []Disk) (Disk, error) {
	var best Disk
	found := false
	for _, d := range disks {
		if !d.installable() {
			continue
		}
		if !found || d.Size > best.Size || (d.Size == best.Size && d.DevPath < best.DevPath) {
			best, found = d, true
		}
	}
	if !found {
		names := make([]string, 0, len(disks))
		for _, d := range disks {
			names = append(names, d.DevPath)
		}
		return Disk{}, fmt.Errorf("no disk to install Talos on (removable, read-only and CD drives are never chosen; disks: %s)", orNone(names))
	}
	return best, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
