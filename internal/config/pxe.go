package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DefaultPXEHTTPPort serves the iPXE scripts and boot assets.
const DefaultPXEHTTPPort = 8098

// PXE is the network-boot responder (docs/design.md §11.4): off by
// default; when on, it answers PXE clients on the interface facing the
// machines (proxy DHCP only: the router stays the DHCP server).
type PXE struct {
	Enabled bool `toml:"enabled"`
	// Interface is the host's interface facing the machines; "" is the
	// interface of the default route.
	Interface string `toml:"interface"`
	// HTTPPort serves the iPXE scripts and the Talos kernel and initramfs.
	HTTPPort int `toml:"http_port"`
	// Window is how long "Let new machines boot" stays open, a Go
	// duration from 1m to 24h.
	Window string `toml:"window"`
	// Arch are the architectures that boot: amd64, arm64.
	Arch []string `toml:"arch"`
}

// WindowDuration is the window (Validate checked it).
func (p PXE) WindowDuration() time.Duration {
	d, err := time.ParseDuration(p.Window)
	if err != nil || d <= 0 {
		return 30 * time.Minute
	}
	return d
}

// check lists what is wrong, each error starting with its key.
func (p PXE) check() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if p.Interface != "" && (len(p.Interface) > 15 || strings.ContainsAny(p.Interface, "/ \t\n:") || p.Interface == "." || p.Interface == "..") {
		bad("interface", "%q is not a network interface name (such as eth0 or enp3s0)", p.Interface)
	}
	switch {
	case p.HTTPPort < 1 || p.HTTPPort > 65535:
		bad("http_port", "%d is out of range 1..65535", p.HTTPPort)
	case p.HTTPPort == 67 || p.HTTPPort == 69 || p.HTTPPort == 4011:
		bad("http_port", "%d is a port the responder uses for DHCP or TFTP", p.HTTPPort)
	}
	if d, err := time.ParseDuration(p.Window); err != nil || d < time.Minute || d > 24*time.Hour {
		bad("window", "%q must be a duration from 1m to 24h, such as \"30m\"", p.Window)
	}
	if len(p.Arch) == 0 {
		bad("arch", "is empty: list amd64, arm64 or both")
	}
	for i, a := range p.Arch {
		switch {
		case a != "amd64" && a != "arm64":
			bad("arch", "%q is not amd64 or arm64", a)
		case slices.Index(p.Arch, a) != i:
			bad("arch", "%q is listed twice", a)
		}
	}
	return errs
}
