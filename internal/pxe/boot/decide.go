package boot

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// DefaultSchematic is the Image Factory's schematic without customizations.
const DefaultSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// Image is one Talos boot image of the Image Factory.
type Image struct {
	Schematic string // 64 hex characters
	Version   string // "v1.13.0"
	Arch      string // "amd64", "arm64"
}

func (i Image) String() string {
	return fmt.Sprintf("Talos %s %s (schematic %s…)", i.Version, i.Arch, i.Schematic[:min(8, len(i.Schematic))])
}

// Machine is what the engine knows about the machine with one MAC.
type Machine struct {
	// Known: a tenant file declares the MAC, or discovery found it.
	Known bool
	// Tenant and Node name the declaring tenant and node ("" when only
	// discovered or not yet a node).
	Tenant, Node string
	// Schematic and TalosVersion are the tenant's ("" for the default).
	Schematic, TalosVersion string
	// Installed: Talos is installed on the machine's disk (it was
	// configured and has not been reset since).
	Installed bool
	// Resetting: the machine is being reset (a scale-down, a reset
	// request): it boots maintenance again so it can be reused.
	Resetting bool
}

// Action is what a machine gets.
type Action string

// Actions; the names are the "Network boot" event types (docs/design.md
// §11.4): served (Talos in maintenance mode), local_boot (its own disk),
// refused (nothing).
const (
	Refuse      Action = "refused"
	Maintenance Action = "served"
	LocalBoot   Action = "local_boot"
)

// Decision is the answer to one machine.
type Decision struct {
	Action Action
	Image  Image  // for Maintenance
	Reason string // why, in words for the event and the log
}

// Policy is what Decide needs besides the machine.
type Policy struct {
	// WindowOpen: "Let new machines boot" is on.
	WindowOpen bool
	// Arches are the architectures enabled ([pxe] arch).
	Arches []string
	// Default is the image of machines no tenant names a schematic or
	// version for.
	Default Image
}

// Decide says what the machine with this MAC and architecture boots:
// nothing when it is neither known nor let in by the window, or its
// architecture is not enabled; maintenance when it is being reset or not
// installed; its disk when it is installed.
func Decide(mac net.HardwareAddr, arch string, m Machine, p Policy) Decision {
	if !slices.Contains(p.Arches, arch) {
		return Decision{Action: Refuse, Reason: fmt.Sprintf("%s machines are not enabled (pxe arch is %s)", arch, strings.Join(p.Arches, ", "))}
	}
	if !m.Known && !p.WindowOpen {
		return Decision{Action: Refuse, Reason: fmt.Sprintf("unknown machine %s: no tenant file declares it, discovery has not found it, and \"Let new machines boot\" is off", mac)}
	}
	img := p.Default
	img.Arch = arch
	if m.Schematic != "" {
		img.Schematic = m.Schematic
	}
	if m.TalosVersion != "" {
		img.Version = m.TalosVersion
	}
	who := "machine " + mac.String()
	if m.Node != "" {
		who = "node " + m.Node
	}
	switch {
	case m.Resetting:
		return Decision{Action: Maintenance, Image: img, Reason: who + " is being reset: Talos maintenance mode again"}
	case m.Installed:
		return Decision{Action: LocalBoot, Reason: who + " has Talos installed: boot from its disk"}
	case !m.Known:
		return Decision{Action: Maintenance, Image: img, Reason: "new machine " + mac.String() + " let in by \"Let new machines boot\": Talos maintenance mode"}
	}
	return Decision{Action: Maintenance, Image: img, Reason: who + " is not installed: Talos maintenance mode"}
}

// Window is "Let new machines boot": open until a time.
type Window struct {
	until time.Time
}

// Open opens the window until now+d.
func (w *Window) Open(now time.Time, d time.Duration) { w.until = now.Add(d) }

// Close closes it.
func (w *Window) Close() { w.until = time.Time{} }

// IsOpen reports whether the window is open at now.
func (w Window) IsOpen(now time.Time) bool { return now.Before(w.until) }

// Until is when it closes (zero when closed at now).
func (w Window) Until(now time.Time) time.Time {
	if !w.IsOpen(now) {
		return time.Time{}
	}
	return w.until
}
