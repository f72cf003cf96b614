package talos

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/rezuscloud/rezuscloud/internal/machine"
)

// Machine is what a node in maintenance mode tells about itself (package
// machine, which the domain shares).
type Machine = machine.Machine

// Disk is one block device of a machine.
type Disk = machine.Disk

// InstallDisk chooses where Talos goes (machine.InstallDisk).
func InstallDisk(disks []Disk) (Disk, error) { return machine.InstallDisk(disks) }

// ReadHardware reads the hardware of a node in maintenance mode at endpoint
// ("host:port") with the insecure client, as `talosctl get … --insecure`
// does: system information, processors, memory modules, disks and links,
// and the fingerprint of the certificate the node presented.
func ReadHardware(ctx context.Context, endpoint string) (Machine, error) {
	host := endpoint
	if h, _, err := net.SplitHostPort(endpoint); err == nil {
		host = h
	}
	var (
		mu   sync.Mutex
		leaf []byte // DER of the server certificate
	)
	tc := &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // maintenance mode has no identity to verify; the fingerprint is reported instead
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			mu.Lock()
			leaf = cs.PeerCertificates[0].Raw
			mu.Unlock()
			return nil
		},
	}
	c, err := client.New(ctx, client.WithTLSConfig(tc), client.WithEndpoints(endpoint))
	if err != nil {
		return Machine{}, fmt.Errorf("talos maintenance client for %s: %w", endpoint, err)
	}
	defer c.Close() //nolint:errcheck
	m, err := readHardware(ctx, c.COSI, host)
	if err != nil {
		return Machine{}, fmt.Errorf("reading the hardware of %s: %w", endpoint, err)
	}
	mu.Lock()
	der := leaf
	mu.Unlock()
	if der != nil {
		fp, err := x509.SPKIFingerprintFromDER(der)
		if err != nil {
			return Machine{}, fmt.Errorf("certificate of %s: %w", endpoint, err)
		}
		m.Fingerprint = fp.String()
	}
	return m, nil
}

// readHardware reads the resources from st (a node's COSI state).
func readHardware(ctx context.Context, st state.CoreState, host string) (Machine, error) {
	m := Machine{Address: host}
	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, st, hardware.SystemInformationID)
	switch {
	case err == nil:
		s := si.TypedSpec()
		m.Manufacturer, m.Model = strings.TrimSpace(s.Manufacturer), strings.TrimSpace(s.ProductName)
		m.Serial, m.UUID = strings.TrimSpace(s.SerialNumber), s.UUID
	case state.IsNotFoundError(err): // no SMBIOS (some boards, VMs)
	default:
		return Machine{}, fmt.Errorf("system information: %w", err)
	}

	cpus, err := safe.StateListAll[*hardware.Processor](ctx, st)
	if err != nil {
		return Machine{}, fmt.Errorf("processors: %w", err)
	}
	for p := range cpus.All() {
		s := p.TypedSpec()
		if m.CPU == "" {
			m.CPU = strings.TrimSpace(s.ProductName)
		}
		m.Cores += int(s.CoreCount)
	}

	mems, err := safe.StateListAll[*hardware.MemoryModule](ctx, st)
	if err != nil {
		return Machine{}, fmt.Errorf("memory modules: %w", err)
	}
	for mm := range mems.All() {
		m.MemoryBytes += uint64(mm.TypedSpec().Size) << 20 // MiB
	}

	disks, err := safe.StateListAll[*block.Disk](ctx, st)
	if err != nil {
		return Machine{}, fmt.Errorf("disks: %w", err)
	}
	for d := range disks.All() {
		s := d.TypedSpec()
		path := s.DevPath
		if path == "" {
			path = "/dev/" + d.Metadata().ID()
		}
		m.Disks = append(m.Disks, Disk{
			DevPath: path, Size: s.Size, Model: strings.TrimSpace(s.Model), Serial: strings.TrimSpace(s.Serial),
			Transport: s.Transport, Rotational: s.Rotational, Readonly: s.Readonly, CDROM: s.CDROM,
		})
	}
	slices.SortFunc(m.Disks, func(a, b Disk) int { return cmp.Compare(a.DevPath, b.DevPath) })

	links, err := safe.StateListAll[*network.LinkStatus](ctx, st)
	if err != nil {
		return Machine{}, fmt.Errorf("links: %w", err)
	}
	addrs, err := safe.StateListAll[*network.AddressStatus](ctx, st)
	if err != nil {
		return Machine{}, fmt.Errorf("addresses: %w", err)
	}
	carrier := ""
	if ip, err := netip.ParseAddr(host); err == nil {
		for a := range addrs.All() {
			if a.TypedSpec().Address.Addr() == ip.Unmap() {
				carrier = a.TypedSpec().LinkName
			}
		}
	}
	var up string
	for l := range links.All() { // sorted by ID
		s := l.TypedSpec()
		if !s.Physical() || len(s.HardwareAddr) == 0 {
			continue
		}
		mac := macOf(s)
		m.MACs = append(m.MACs, mac)
		if l.Metadata().ID() == carrier {
			m.MAC = mac
		}
		if up == "" && s.OperationalState == nethelpers.OperStateUp {
			up = mac
		}
	}
	if m.MAC == "" {
		m.MAC = up
	}
	if m.MAC == "" && len(m.MACs) > 0 {
		m.MAC = m.MACs[0]
	}
	return m, nil
}

// macOf is the link's burnt-in address when it has one (a bond may have
// changed the current one), else its current address.
func macOf(s *network.LinkStatusSpec) string {
	if len(s.PermanentAddr) > 0 {
		return net.HardwareAddr(s.PermanentAddr).String()
	}
	return net.HardwareAddr(s.HardwareAddr).String()
}
