package boot

import (
	"fmt"
	"net"
	"strings"
)

// The iPXE scripts. Machine configs are never in them: a machine boots
// maintenance mode and gets its config over the Talos API with TLS.

// MaintenanceScript boots the Talos kernel and initramfs of img, cached by
// the responder, with the image's kernel command line.
func MaintenanceScript(s Server, img Image, cmdline string, mac net.HardwareAddr) string {
	initrd := InitramfsName(img.Arch)
	return fmt.Sprintf(`#!ipxe
echo rezuscloud: %s boots Talos %s %s in maintenance mode
kernel %s initrd=%s %s
initrd %s
boot
`, mac, img.Version, img.Arch, s.AssetURL(mac, img, KernelName(img.Arch)), initrd, oneLine(cmdline), s.AssetURL(mac, img, initrd))
}

// LocalBootScript leaves iPXE so the firmware boots the next device, the
// machine's disk (Talos's own bare-metal tooling does the same).
func LocalBootScript(mac net.HardwareAddr) string {
	return fmt.Sprintf("#!ipxe\necho rezuscloud: %s boots from its disk\nexit\n", mac)
}

// WaitScript tells the machine why it cannot boot yet and asks again later
// (the boot assets are being fetched, or fetching them failed).
func WaitScript(s Server, arch string, mac net.HardwareAddr, why string, seconds int) string {
	return fmt.Sprintf("#!ipxe\necho rezuscloud: %s\nsleep %d\nchain --replace %s\n", oneLine(why), seconds, s.ScriptURL(arch, mac))
}

// oneLine keeps text on one script line (no newline can start a command).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Asset names, as the Image Factory calls them (GET /image/<schematic>/<version>/<name>).
func KernelName(arch string) string    { return "kernel-" + arch }
func InitramfsName(arch string) string { return "initramfs-" + arch + ".xz" }
func CmdlineName(arch string) string   { return "cmdline-metal-" + arch }
