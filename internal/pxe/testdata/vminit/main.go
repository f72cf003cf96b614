// Command vminit is the /init of the initramfs the network-boot VM test
// boots: it prints a marker on the serial console and powers the VM off.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	if con, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		os.Stdout = con
	}
	fmt.Println("REZUSCLOUD-NETBOOT-MARKER: the network-booted kernel runs its init")
	_ = os.Stdout.Sync()
	syscall.Sync()
	_ = syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}
