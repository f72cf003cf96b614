package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/discovery"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// DiscoveryOptions configure the scans for Talos machines in maintenance
// mode (docs/design.md §10.4).
type DiscoveryOptions struct {
	// CIDRs are the ranges scanned (discovery.ParseCIDR); none: off.
	CIDRs []string
	// Interval between periodic scans (default 5 min).
	Interval time.Duration
	// Port dialled (default TalosPort) and Timeout of each dial (default
	// discovery.DefaultTimeout).
	Port    int
	Timeout time.Duration
	// Probe reads a machine; default talos.ReadHardware.
	Probe func(ctx context.Context, endpoint string) (talos.Machine, error)
}

// MachinePublisher is a Publisher that also shows the machines found on
// the LAN (the MQTT bridge). A Publisher without it does not see them.
type MachinePublisher interface {
	SetMachines(ms []talos.Machine)
}

// missesToForget is how many scans in a row a machine may miss before it
// is no longer shown.
const missesToForget = 3

// discoverer remembers the machines the scans found, by MAC.
type discoverer struct {
	mu       sync.Mutex
	machines map[string]*seenMachine
	shown    string // signature of what was published last
	// running is the scan in progress, which later requests join (one
	// scan at a time, however many ask)
	running *scanCall
}

// scanCall is one scan and its result, for everyone waiting on it.
type scanCall struct {
	done     chan struct{}
	machines []talos.Machine
	err      error
}

type seenMachine struct {
	m      talos.Machine
	misses int
}

// startDiscovery runs the periodic scans until ctx ends; the returned
// channel is closed when they stopped.
func (e *Engine) startDiscovery(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if len(e.opts.Discovery.CIDRs) == 0 {
		close(done)
		return done
	}
	every := e.opts.Discovery.Interval
	if every <= 0 {
		every = 5 * time.Minute
	}
	go func() {
		defer close(done)
		select { // the tenant files first: declared machines are never shown
		case <-e.ready:
		case <-ctx.Done():
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if _, err := e.scan(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("scanning for machines", zap.Error(err))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return done
}

// Discover scans the configured ranges now and returns the machines found
// that no tenant declares.
func (e *Engine) Discover(ctx context.Context) ([]talos.Machine, error) {
	if len(e.opts.Discovery.CIDRs) == 0 {
		return nil, errors.New("finding machines is off: set discovery.cidrs (add-on options) or [discovery] cidrs (config file)")
	}
	return e.scan(ctx)
}

// scan runs one scan, updates what is remembered and publishes it. A scan
// asked for while one runs joins it: a burst of requests costs one scan
// and holds no request slot longer than it.
func (e *Engine) scan(ctx context.Context) ([]talos.Machine, error) {
	e.disc.mu.Lock()
	c := e.disc.running
	if c == nil {
		c = &scanCall{done: make(chan struct{})}
		e.disc.running = c
		go func() {
			// the scan runs to its end for everyone joined, bounded by the
			// engine's life, not by the first caller's context
			c.machines, c.err = e.scanOnce(e.opCtx())
			e.disc.mu.Lock()
			e.disc.running = nil
			e.disc.mu.Unlock()
			close(c.done)
		}()
	}
	e.disc.mu.Unlock()
	select {
	case <-c.done:
		return c.machines, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *Engine) scanOnce(ctx context.Context) ([]talos.Machine, error) {
	o := e.opts.Discovery
	port := o.Port
	if port == 0 {
		port = e.opts.TalosPort
	}
	probe := o.Probe
	if probe == nil {
		probe = talos.ReadHardware
	}
	rep, err := discovery.Scan(ctx, o.CIDRs, discovery.Options[talos.Machine]{Port: port, Timeout: o.Timeout, Probe: probe})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", strings.Join(o.CIDRs, ", "), err)
	}
	found := map[string]talos.Machine{}
	for _, f := range rep.Found {
		if f.Err != nil {
			// a configured node answers, but not to the maintenance client
			e.log.Debug("an address answered, but not in maintenance mode", zap.String("address", f.Address.String()), zap.Error(f.Err))
			continue
		}
		if mac := normMAC(f.Machine.MAC); mac != "" {
			f.Machine.MAC = mac
			found[mac] = f.Machine
		}
	}
	e.disc.mu.Lock()
	if e.disc.machines == nil {
		e.disc.machines = map[string]*seenMachine{}
	}
	for mac, sm := range e.disc.machines {
		if _, ok := found[mac]; !ok {
			sm.misses++
			if sm.misses >= missesToForget {
				delete(e.disc.machines, mac)
			}
		}
	}
	for mac, m := range found {
		e.disc.machines[mac] = &seenMachine{m: m}
	}
	e.disc.mu.Unlock()
	e.log.Info("scanned for machines", zap.Int("addresses", rep.Scanned), zap.Int("answered", len(rep.Found)), zap.Int("in_maintenance", len(found)))
	return e.publishMachines(), nil
}

// publishMachines drops the machines a tenant file declares and shows the
// rest (only when that changed); it returns them, by address.
func (e *Engine) publishMachines() []talos.Machine {
	addrs, macs := e.declaredMachines()
	e.disc.mu.Lock()
	var list []talos.Machine
	for mac, sm := range e.disc.machines {
		a, _ := netip.ParseAddr(sm.m.Address)
		if macs[mac] || addrs[a] {
			delete(e.disc.machines, mac)
			continue
		}
		list = append(list, sm.m)
	}
	slices.SortFunc(list, func(a, b talos.Machine) int { return strings.Compare(a.Address, b.Address) })
	var sig strings.Builder
	for _, m := range list {
		sig.WriteString(m.MAC + "@" + m.Address + ";")
	}
	changed := sig.String() != e.disc.shown
	e.disc.shown = sig.String()
	e.disc.mu.Unlock()
	if p, ok := e.opts.Publisher.(MachinePublisher); ok && changed && len(e.opts.Discovery.CIDRs) > 0 {
		p.SetMachines(list)
	}
	return list
}

// declaredMachines are the addresses and MACs of every metal machine the
// tenant files declare.
func (e *Engine) declaredMachines() (map[netip.Addr]bool, map[string]bool) {
	addrs, macs := map[netip.Addr]bool{}, map[string]bool{}
	for _, ts := range e.states() {
		t := ts.shownSpec()
		if t == nil || t.Provider != tenant.ProviderMetal {
			continue
		}
		for _, g := range t.NodeGroups {
			for _, m := range g.Machines {
				if a, err := netip.ParseAddr(m.Address); err == nil {
					addrs[a] = true
				}
				if mac := normMAC(m.MAC); mac != "" {
					macs[mac] = true
				}
			}
		}
	}
	return addrs, macs
}

func normMAC(s string) string {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return ""
	}
	return hw.String()
}

// Adopt adds a machine a scan found to a metal worker group of a tenant
// (tenant.Store.Adopt: in place, count raised by one) on installDisk, or
// else the largest disk that is not removable, read-only or a CD. Then the
// tenant reacts like to any change of its file. It returns the machine as
// the file now declares it.
func (e *Engine) Adopt(ctx context.Context, mac, name, group, installDisk string) (tenant.Machine, error) {
	norm := normMAC(mac)
	if norm == "" {
		return tenant.Machine{}, fmt.Errorf("adopting machine %q: not a MAC address like aa:bb:cc:dd:ee:ff", mac)
	}
	if _, macs := e.declaredMachines(); macs[norm] {
		return tenant.Machine{}, fmt.Errorf("adopting machine %s: a tenant file already declares it; nothing was changed", norm)
	}
	e.disc.mu.Lock()
	sm, ok := e.disc.machines[norm]
	var m talos.Machine
	if ok {
		m = sm.m
	}
	e.disc.mu.Unlock()
	if !ok {
		return tenant.Machine{}, fmt.Errorf("adopting machine %s: no scan found it in maintenance mode (press Scan network, or boot it from the Talos ISO)", norm)
	}
	var paths []string
	for _, d := range m.Disks {
		paths = append(paths, d.DevPath)
	}
	disk := installDisk
	if disk == "" {
		d, err := talos.InstallDisk(m.Disks)
		if err != nil {
			return tenant.Machine{}, fmt.Errorf("adopting machine %s (%s): %w", norm, m.Address, err)
		}
		disk = d.DevPath
	} else {
		i := slices.IndexFunc(m.Disks, func(d talos.Disk) bool { return d.DevPath == disk })
		switch {
		case i < 0:
			return tenant.Machine{}, fmt.Errorf("adopting machine %s (%s): it has no disk %q (disks: %s); nothing was changed", norm, m.Address, disk, strings.Join(paths, ", "))
		case m.Disks[i].Removable() || m.Disks[i].Readonly || m.Disks[i].CDROM:
			return tenant.Machine{}, fmt.Errorf("adopting machine %s (%s): disk %s is removable, read-only or a CD, never an install disk; nothing was changed", norm, m.Address, disk)
		}
	}
	tm := tenant.Machine{Address: m.Address, MAC: norm, InstallDisk: disk}
	if _, err := e.lookup(name); err != nil {
		return tenant.Machine{}, fmt.Errorf("adopting machine %s (%s): %w; nothing was changed", norm, m.Address, err)
	}
	if err := e.editSpec(name, func() (*tenant.Tenant, error) { return e.opts.Store.Adopt(name, group, tm, paths) }); err != nil {
		return tenant.Machine{}, err
	}
	e.publishMachines()
	return tm, nil
}
