package pxe

import (
	"net"
	"net/netip"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/pxe/dhcp"
)

func TestReplyAddr(t *testing.T) {
	client := &net.UDPAddr{IP: net.IPv4(10, 0, 0, 100), Port: 68}
	bcast := "255.255.255.255:68"
	ci := netip.MustParseAddr("10.0.0.100")
	for _, c := range []struct {
		name string
		rep  dhcp.Packet
		port int
		want string
	}{
		{"discover", dhcp.Packet{}, 67, bcast},
		{"4011, broadcast flag", dhcp.Packet{Flags: 0x8000, CIAddr: ci}, 4011, bcast},
		{"4011, no ciaddr", dhcp.Packet{CIAddr: netip.IPv4Unspecified()}, 4011, bcast},
		{"4011, unicast", dhcp.Packet{CIAddr: ci}, 4011, "10.0.0.100:68"},
		{"relayed", dhcp.Packet{GIAddr: netip.MustParseAddr("10.0.1.1")}, 67, "10.0.1.1:67"},
	} {
		if got := replyAddr(&c.rep, c.port, client).String(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
