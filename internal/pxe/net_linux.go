package pxe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// listeners are the responder's sockets.
type listeners struct {
	dhcp67, dhcp4011, tftp net.PacketConn
	http                   net.Listener
}

func (l *listeners) close() {
	for _, c := range []interface{ Close() error }{l.dhcp67, l.dhcp4011, l.tftp, l.http} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// listen opens the sockets: DHCP on 0.0.0.0:67 and :4011 bound to the
// interface (broadcasts arrive only on the wildcard address; binding to the
// device keeps other interfaces out and sends broadcasts out of this one),
// shared with a DHCP server of the host (SO_REUSEADDR); TFTP and HTTP on the
// interface's address only.
func (r *Responder) listen(ctx context.Context) (*listeners, error) {
	dev := r.iface.Name
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); serr != nil {
				return
			}
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1); serr != nil {
				return
			}
			serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, dev)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	l := &listeners{}
	var err error
	fail := func(what string, err error) (*listeners, error) {
		l.close()
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			err = fmt.Errorf("%w (binding DHCP and TFTP ports needs root or CAP_NET_BIND_SERVICE and CAP_NET_RAW)", err)
		}
		return nil, fmt.Errorf("pxe: %s: %w", what, err)
	}
	if l.dhcp67, err = lc.ListenPacket(ctx, "udp4", ":67"); err != nil {
		return fail("proxy DHCP on port 67", err)
	}
	if l.dhcp4011, err = lc.ListenPacket(ctx, "udp4", ":4011"); err != nil {
		return fail("proxy DHCP on port 4011", err)
	}
	ip := r.server.IP.String()
	if l.tftp, err = net.ListenPacket("udp4", net.JoinHostPort(ip, "69")); err != nil {
		return fail("TFTP on port 69", err)
	}
	if l.http, err = net.Listen("tcp4", net.JoinHostPort(ip, strconv.Itoa(r.server.HTTPPort))); err != nil {
		return fail("HTTP on port "+strconv.Itoa(r.server.HTTPPort), err)
	}
	return l, nil
}

// defaultInterface is the interface of the IPv4 default route
// (/proc/net/route).
func defaultInterface() (string, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 2 && fs[1] == "00000000" && fs[0] != "Iface" {
			return fs[0], nil
		}
	}
	return "", errors.New("no IPv4 default route")
}

// interfaceIPv4 is an interface's first IPv4 address.
func interfaceIPv4(ifc *net.Interface) (netip.Addr, error) {
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, errors.New("no IPv4 address")
}

// procARP finds the MAC of a neighbour in the kernel's ARP table.
func procARP(ip netip.Addr) string {
	f, err := os.Open("/proc/net/arp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 4 && fs[0] == ip.String() && fs[3] != "00:00:00:00:00:00" {
			return fs[3]
		}
	}
	return ""
}
