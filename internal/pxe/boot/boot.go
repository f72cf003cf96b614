// Package boot holds the network-boot decisions as pure functions: which
// kind of firmware asks (RFC 4578 option 93, the vendor and user classes),
// which file its proxy DHCP answer names, and what a machine boots: Talos in
// maintenance mode, its own disk, or nothing. The responder (internal/pxe)
// only carries the answers out.
package boot

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Firmware is the kind of boot client.
type Firmware int

// Firmware kinds. IPXE is any iPXE (a ROM or one we chainloaded): it gets
// the HTTP script directly, so a chainloaded iPXE never loops.
const (
	Unsupported Firmware = iota
	BIOS                 // x86 BIOS PXE ROM: TFTP undionly.kpxe
	UEFI                 // UEFI PXE: TFTP ipxe.efi (snp-arm64.efi on arm64)
	UEFIHTTP             // UEFI HTTP boot: the iPXE binary over HTTP
	IPXE                 // iPXE: the HTTP script
)

func (f Firmware) String() string {
	return [...]string{"unsupported", "bios", "uefi", "uefi-http", "ipxe"}[f]
}

// Client is what a PXE DHCP request says about its sender.
type Client struct {
	Arches      []uint16 // option 93
	VendorClass string   // option 60
	UserClasses []string // option 77
}

// Classify finds the firmware and CPU architecture ("amd64", "arm64") of a
// PXE client (architecture types of RFC 4578 and IANA's registry).
func Classify(c Client) (Firmware, string, error) {
	if len(c.Arches) == 0 {
		return Unsupported, "", fmt.Errorf("no client architecture (option 93): not a PXE client")
	}
	fw, arch := Unsupported, ""
arches:
	for _, a := range c.Arches {
		switch a {
		case 0: // x86 BIOS
			fw, arch = BIOS, "amd64"
		case 6, 7, 9: // EFI IA32, EFI BC, EFI x86-64
			fw, arch = UEFI, "amd64"
		case 11: // EFI ARM64
			fw, arch = UEFI, "arm64"
		case 15, 16: // EFI x86 / x86-64 HTTP
			fw, arch = UEFIHTTP, "amd64"
		case 19: // EFI ARM64 HTTP
			fw, arch = UEFIHTTP, "arm64"
		default:
			continue
		}
		break arches
	}
	if fw == Unsupported {
		return Unsupported, "", fmt.Errorf("client architecture %v is not x86 BIOS, x86-64 or arm64 UEFI", c.Arches)
	}
	if fw == UEFIHTTP && !strings.HasPrefix(c.VendorClass, "HTTPClient") {
		return Unsupported, "", fmt.Errorf("client architecture %d (HTTP boot) without the HTTPClient vendor class", c.Arches[0])
	}
	if slices.Contains(c.UserClasses, "iPXE") {
		fw = IPXE
	}
	return fw, arch, nil
}

// BinaryName is the iPXE binary a firmware is given.
func BinaryName(fw Firmware, arch string) string {
	switch {
	case fw == BIOS:
		return "undionly.kpxe"
	case arch == "arm64":
		return "snp-arm64.efi"
	}
	return "ipxe.efi"
}

// Server is where the responder is reached by the machines.
type Server struct {
	IP       netip.Addr
	HTTPPort int
}

func (s Server) base() string {
	return "http://" + net.JoinHostPort(s.IP.String(), strconv.Itoa(s.HTTPPort))
}

// ScriptURL is the boot script of the machine with this MAC and
// architecture.
func (s Server) ScriptURL(arch string, mac net.HardwareAddr) string {
	return s.base() + "/ipxe/" + arch + "/" + MACPath(mac) + "/boot.ipxe"
}

// BinaryURL is an iPXE binary served over HTTP (UEFI HTTP boot).
func (s Server) BinaryURL(name string) string { return s.base() + "/ipxe/" + name }

// AssetURL is a cached boot asset as the machine with this MAC fetches it
// (the responder serves it only to a machine that boots this image).
func (s Server) AssetURL(mac net.HardwareAddr, img Image, name string) string {
	return s.base() + "/assets/" + MACPath(mac) + "/" + img.Schematic + "/" + img.Version + "/" + name
}

// MACPath is a MAC as it appears in URLs: hyphens, lower case
// (aa-bb-cc-dd-ee-ff, iPXE's ${mac:hexhyp}).
func MACPath(mac net.HardwareAddr) string { return strings.ReplaceAll(mac.String(), ":", "-") }

// ParseMACPath reads a MAC written by MACPath.
func ParseMACPath(s string) (net.HardwareAddr, error) {
	hw, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
	if err != nil || len(hw) != 6 || strings.Contains(s, ":") {
		return nil, fmt.Errorf("%q is not a MAC address like aa-bb-cc-dd-ee-ff", s)
	}
	return hw, nil
}

// Answer is what the proxy DHCP reply names.
type Answer struct {
	// File is the boot file: a TFTP file name, or an HTTP URL.
	File string
	// TFTP: File is fetched over TFTP from the responder (siaddr).
	TFTP bool
	// HTTPClient: the reply carries the "HTTPClient" vendor class (UEFI
	// HTTP boot requires it).
	HTTPClient bool
}

// DHCPAnswer is the boot file a firmware is told to fetch.
func DHCPAnswer(fw Firmware, arch string, mac net.HardwareAddr, s Server) Answer {
	switch fw {
	case IPXE:
		return Answer{File: s.ScriptURL(arch, mac)}
	case UEFIHTTP:
		return Answer{File: s.BinaryURL(BinaryName(fw, arch)), HTTPClient: true}
	}
	return Answer{File: BinaryName(fw, arch), TFTP: true}
}
