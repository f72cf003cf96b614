// Package pxe is the network-boot responder (docs/design.md §11.4): proxy
// DHCP on ports 67 and 4011 that answers only PXE clients and never hands
// out an address (the home router stays the DHCP server), TFTP for the
// iPXE binaries, and HTTP for the iPXE script and the Talos kernel and
// initramfs. Only machines that are allowed boot: those the engine knows
// (tenant files, discovery) and, while "Let new machines boot" is open,
// any. What a machine boots is boot.Decide's answer; machine configs never
// go over these protocols (they go over the Talos API with TLS).
package pxe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/gendata"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/pxe/assets"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
	"github.com/rezuscloud/rezuscloud/internal/pxe/tftp"
)

// Inventory is what the responder asks the engine about a machine: whether
// a tenant file declares its MAC or discovery found it, which image its
// tenant boots, and whether it is installed or being reset.
type Inventory interface {
	BootMachine(mac net.HardwareAddr) boot.Machine
}

// InventoryFunc is an Inventory in one function.
type InventoryFunc func(mac net.HardwareAddr) boot.Machine

// BootMachine calls f.
func (f InventoryFunc) BootMachine(mac net.HardwareAddr) boot.Machine { return f(mac) }

// Steps of a boot, as events name them.
const (
	StepDHCP = "dhcp"
	StepTFTP = "tftp"
	StepHTTP = "http"
)

// Event is one step of a network boot: served, refused or local_boot
// (the "Network boot" event types).
type Event struct {
	Type   boot.Action
	Step   string // dhcp, tftp, http
	MAC    string // "" when the step does not tell (a TFTP client without an ARP entry)
	Client netip.Addr
	// File is what was served or asked for: a boot file, a script, an asset.
	File   string
	Reason string
	// Bytes and Duration of the step: a DHCP answer's time, a transfer's.
	Bytes    int64
	Duration time.Duration
	At       time.Time
}

// Boot reports whether Home Assistant is told: what a machine boots (its
// script: served or local_boot) and every refusal; the steps in between
// are in the log.
func (e Event) Boot() bool {
	return e.Type == boot.Refuse || (e.Step == StepHTTP && filepath.Base(e.File) == "boot.ipxe")
}

// Options configure a responder.
type Options struct {
	// Interface is the host's interface facing the machines; "" is the
	// interface of the default route.
	Interface string
	// ServerIP is the address machines reach the responder at; default
	// the interface's first IPv4 address.
	ServerIP netip.Addr
	// HTTPPort of the script and asset server (default 8098).
	HTTPPort int
	// Window is how long "Let new machines boot" stays open (default 30 min).
	Window time.Duration
	// Arches are the architectures that boot (default amd64).
	Arches []string
	// Default is the image of machines no tenant names one for; default
	// the factory's plain schematic and Version.
	Default boot.Image
	// Inventory tells allowed, installed and resetting machines.
	Inventory Inventory
	// Cache holds the boot assets.
	Cache *assets.Cache
	// DataDir is where the TFTP root is prepared (<data>/pxe).
	DataDir string
	// IPXEDirs are searched for the iPXE binaries (default Debian's
	// /usr/lib/ipxe and Alpine's /usr/share/ipxe).
	IPXEDirs []string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnEvent gets every event; it must not block.
	OnEvent func(Event)
	// OnWindow gets every change of "Let new machines boot"; it must not
	// block.
	OnWindow func(open bool, until time.Time)
	// OnAssets gets every change of the cached assets or their problem.
	OnAssets func(AssetsState)
	// ARP finds the MAC of a client address (TFTP events); default
	// /proc/net/arp.
	ARP func(netip.Addr) string
	Log *zap.Logger
}

// AssetsState is the "Boot assets" sensor.
type AssetsState struct {
	Cached  []assets.Entry
	Problem string // the last fetch's error, "" when none
}

// Responder is a network-boot responder. Create it with New, then Run.
type Responder struct {
	o      Options
	server boot.Server
	iface  *net.Interface
	root   *os.Root
	bins   map[string]bool // iPXE binaries in the TFTP root

	mu      sync.Mutex
	window  boot.Window
	timer   *time.Timer
	problem string
	refused map[string]time.Time // "<mac> <reason>" -> last reported
	ctx     context.Context
	ready   chan struct{}
}

// New checks the options, finds the interface and its address, and
// prepares the TFTP root with the iPXE binaries.
func New(o Options) (*Responder, error) {
	if o.Inventory == nil || o.Cache == nil || o.DataDir == "" {
		return nil, errors.New("pxe: Inventory, Cache and DataDir are required")
	}
	if o.HTTPPort == 0 {
		o.HTTPPort = 8098
	}
	if o.Window <= 0 {
		o.Window = 30 * time.Minute
	}
	if len(o.Arches) == 0 {
		o.Arches = []string{"amd64"}
	}
	if o.Default.Schematic == "" {
		o.Default.Schematic = boot.DefaultSchematic
	}
	if o.Default.Version == "" {
		o.Default.Version = DefaultVersion
	}
	if len(o.IPXEDirs) == 0 {
		o.IPXEDirs = []string{"/usr/lib/ipxe", "/usr/share/ipxe"}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.ARP == nil {
		o.ARP = procARP
	}
	r := &Responder{o: o, refused: map[string]time.Time{}, ctx: context.Background(), ready: make(chan struct{})}
	ifname := o.Interface
	if ifname == "" {
		var err error
		if ifname, err = defaultInterface(); err != nil {
			return nil, fmt.Errorf("pxe: interface: %w; set pxe interface", err)
		}
	}
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("pxe: interface %q: %w", ifname, err)
	}
	r.iface = ifc
	ip := o.ServerIP
	if !ip.IsValid() {
		if ip, err = interfaceIPv4(ifc); err != nil {
			return nil, fmt.Errorf("pxe: interface %s: %w", ifname, err)
		}
	}
	r.server = boot.Server{IP: ip, HTTPPort: o.HTTPPort}
	if err := r.prepareRoot(); err != nil {
		return nil, err
	}
	return r, nil
}

// Server is where machines reach the responder.
func (r *Responder) Server() boot.Server { return r.server }

// prepareRoot copies the iPXE binaries into <DataDir>/tftp, the only
// directory TFTP serves.
func (r *Responder) prepareRoot() error {
	dir := filepath.Join(r.o.DataDir, "tftp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pxe: %w", err)
	}
	r.bins = map[string]bool{}
	for _, name := range []string{"undionly.kpxe", "ipxe.efi", "snp-arm64.efi"} {
		for _, d := range r.o.IPXEDirs {
			if err := copyFile(filepath.Join(d, name), filepath.Join(dir, name)); err == nil {
				r.bins[name] = true
				break
			}
		}
		if !r.bins[name] {
			r.o.Log.Warn("iPXE binary not found: machines that need it are refused", zap.String("file", name), zap.Strings("looked_in", r.o.IPXEDirs))
		}
	}
	if !r.bins["undionly.kpxe"] && !r.bins["ipxe.efi"] {
		return fmt.Errorf("pxe: no iPXE binary (undionly.kpxe, ipxe.efi) in %v: install the ipxe package", r.o.IPXEDirs)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("pxe: %w", err)
	}
	r.root = root
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

// Run serves proxy DHCP, TFTP and HTTP until ctx ends.
func (r *Responder) Run(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	defer r.root.Close()
	l, err := r.listen(ctx)
	if err != nil {
		return err
	}
	r.o.Log.Info("network boot responder up", zap.String("interface", r.iface.Name), zap.Stringer("address", r.server.IP),
		zap.Int("http_port", r.server.HTTPPort), zap.Strings("arch", r.o.Arches))
	r.publishAssets()
	close(r.ready)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 4)
	go func() { errs <- r.serveDHCP(ctx, l.dhcp67, 67) }()
	go func() { errs <- r.serveDHCP(ctx, l.dhcp4011, 4011) }()
	ts := &tftp.Server{Root: r.root, LocalIP: r.server.IP, Done: r.tftpDone}
	go func() { errs <- ts.Serve(ctx, l.tftp) }()
	go func() { errs <- r.serveHTTP(ctx, l.http) }()
	var first error
	for range 4 {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	l.close()
	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	return first
}

// Ready is closed once Run listens on every port.
func (r *Responder) Ready() <-chan struct{} { return r.ready }

// SetWindow opens "Let new machines boot" for the configured time, or
// closes it.
func (r *Responder) SetWindow(open bool) {
	r.mu.Lock()
	now := r.o.Now()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if open {
		r.window.Open(now, r.o.Window)
		r.timer = time.AfterFunc(r.o.Window, r.windowExpired)
	} else {
		r.window.Close()
	}
	until := r.window.Until(now)
	r.mu.Unlock()
	r.o.Log.Info("let new machines boot", zap.Bool("open", open), zap.Time("until", until))
	if r.o.OnWindow != nil {
		r.o.OnWindow(open, until)
	}
}

func (r *Responder) windowExpired() {
	r.mu.Lock()
	open := r.window.IsOpen(r.o.Now())
	r.mu.Unlock()
	if open {
		return // opened again meanwhile
	}
	r.o.Log.Info("let new machines boot: the window closed")
	if r.o.OnWindow != nil {
		r.o.OnWindow(false, time.Time{})
	}
}

// Window says whether new machines may boot, and until when.
func (r *Responder) Window() (bool, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.o.Now()
	return r.window.IsOpen(now), r.window.Until(now)
}

// Assets is the "Boot assets" sensor's state.
func (r *Responder) Assets() AssetsState {
	r.mu.Lock()
	p := r.problem
	r.mu.Unlock()
	return AssetsState{Cached: r.o.Cache.List(), Problem: p}
}

func (r *Responder) publishAssets() {
	if r.o.OnAssets != nil {
		r.o.OnAssets(r.Assets())
	}
}

func (r *Responder) setProblem(p string) {
	r.mu.Lock()
	changed := r.problem != p
	r.problem = p
	r.mu.Unlock()
	if changed {
		r.publishAssets()
	}
}

// decide is boot.Decide with the responder's policy and the engine's facts.
func (r *Responder) decide(mac net.HardwareAddr, arch string) boot.Decision {
	r.mu.Lock()
	open := r.window.IsOpen(r.o.Now())
	r.mu.Unlock()
	return boot.Decide(mac, arch, r.o.Inventory.BootMachine(mac), boot.Policy{WindowOpen: open, Arches: r.o.Arches, Default: r.o.Default})
}

// emit reports an event; refusals of the same MAC for the same reason are
// reported once a minute (firmware asks again every few seconds).
func (r *Responder) emit(ev Event) {
	ev.At = r.o.Now()
	if ev.Type == boot.Refuse {
		key := ev.MAC + " " + ev.Step + " " + ev.Reason
		r.mu.Lock()
		last, seen := r.refused[key]
		if seen && ev.At.Sub(last) < time.Minute {
			r.mu.Unlock()
			return
		}
		r.refused[key] = ev.At
		for k, at := range r.refused {
			if ev.At.Sub(at) > time.Minute {
				delete(r.refused, k)
			}
		}
		r.mu.Unlock()
		r.o.Log.Info("network boot refused", zap.String("step", ev.Step), zap.String("mac", ev.MAC), zap.String("file", ev.File), zap.String("reason", ev.Reason))
	} else {
		r.o.Log.Info("network boot", zap.String("event", string(ev.Type)), zap.String("step", ev.Step), zap.String("mac", ev.MAC),
			zap.String("file", ev.File), zap.Int64("bytes", ev.Bytes), zap.Duration("duration", ev.Duration))
	}
	if r.o.OnEvent != nil {
		r.o.OnEvent(ev)
	}
}

func (r *Responder) tftpDone(t tftp.Transfer) {
	ev := Event{Type: boot.Maintenance, Step: StepTFTP, Client: t.Client.Addr(), MAC: r.o.ARP(t.Client.Addr()), File: t.File, Bytes: t.Bytes, Duration: t.Duration}
	if t.Err != nil {
		ev.Type, ev.Reason = boot.Refuse, t.Err.Error()
	}
	r.emit(ev)
}

// DefaultVersion is the Talos version machines boot when no tenant names
// one: the version of the Talos machinery rezuscloud is built with.
var DefaultVersion = gendata.VersionTag
