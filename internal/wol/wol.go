// Package wol sends Wake-on-LAN magic packets, so that metal machines that
// are powered off can be woken when a cluster needs them.
package wol

import (
	"context"
	"fmt"
	"net"
)

// BroadcastAddr is where magic packets go by default: the local network's
// broadcast address, the discard port.
const BroadcastAddr = "255.255.255.255:9"

// Packet is the magic packet for a MAC address: six 0xff bytes, then the
// 6-byte address sixteen times.
func Packet(mac net.HardwareAddr) ([]byte, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("wake-on-lan: %q is not a 6-byte MAC address", mac)
	}
	p := make([]byte, 0, 102)
	for range 6 {
		p = append(p, 0xff)
	}
	for range 16 {
		p = append(p, mac...)
	}
	return p, nil
}

// Send sends the magic packet for mac (aa:bb:cc:dd:ee:ff) over UDP to addr.
func Send(ctx context.Context, mac, addr string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("wake-on-lan: %w", err)
	}
	p, err := Packet(hw)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return fmt.Errorf("wake-on-lan %s: %w", mac, err)
	}
	defer conn.Close()
	if _, err := conn.Write(p); err != nil {
		return fmt.Errorf("wake-on-lan %s: %w", mac, err)
	}
	return nil
}
