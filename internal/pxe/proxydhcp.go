package pxe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
	"github.com/rezuscloud/rezuscloud/internal/pxe/dhcp"
)

// serveDHCP answers PXE requests arriving on conn: DHCPDISCOVER on port 67
// (broadcast), DHCPREQUEST on port 4011 (PXE spec §2.5.1.1).
func (r *Responder) serveDHCP(ctx context.Context, conn net.PacketConn, port int) error {
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 65536)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pxe: dhcp port %d: %w", port, err)
		}
		start := time.Now()
		reply, ev, ok := r.answerDHCP(buf[:n], port)
		if ev != nil {
			if ua, ok := from.(*net.UDPAddr); ok {
				ev.Client = ua.AddrPort().Addr().Unmap()
			}
		}
		if ok {
			to := replyAddr(reply, port, from)
			b, err := reply.Marshal()
			if err == nil {
				_, err = conn.WriteTo(b, to)
			}
			if err != nil {
				ev = &Event{Type: boot.Refuse, Step: StepDHCP, MAC: ev.MAC, File: ev.File, Reason: "sending the answer: " + err.Error()}
			} else {
				ev.Duration = time.Since(start)
			}
		}
		if ev != nil {
			r.emit(*ev)
		}
	}
}

// replyAddr is where an answer goes (RFC 2131 §4.1): a relay's giaddr;
// the broadcast address on port 67 (the client has no address yet) and on
// 4011 when the client sets the broadcast flag (iPXE does: it takes its
// address only once DHCP is done); else the sender.
func replyAddr(reply *dhcp.Packet, port int, from net.Addr) net.Addr {
	if reply.GIAddr.IsValid() && !reply.GIAddr.IsUnspecified() {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(reply.GIAddr, 67))
	}
	ua, _ := from.(*net.UDPAddr)
	switch {
	case port == 67:
		return &net.UDPAddr{IP: net.IPv4bcast, Port: 68}
	case reply.Flags&0x8000 != 0 || !reply.CIAddr.IsValid() || reply.CIAddr.IsUnspecified() || ua == nil:
		p := 68
		if ua != nil {
			p = ua.Port
		}
		return &net.UDPAddr{IP: net.IPv4bcast, Port: p}
	}
	return from
}

// answerDHCP is the proxy DHCP decision for one packet: the answer (ok)
// and the event to report (nil for packets that are not PXE requests
// this port takes: the LAN's ordinary DHCP traffic is not ours).
func (r *Responder) answerDHCP(b []byte, port int) (*dhcp.Packet, *Event, bool) {
	p, err := dhcp.Parse(b)
	if err != nil {
		return nil, &Event{Type: boot.Refuse, Step: StepDHCP, Reason: err.Error()}, false
	}
	want := dhcp.Discover
	if port == 4011 {
		want = dhcp.Request
	}
	if p.Op != dhcp.BootRequest || !p.IsPXE() || p.MessageType() != want {
		return nil, nil, false
	}
	mac, err := p.MAC()
	if err != nil {
		return nil, &Event{Type: boot.Refuse, Step: StepDHCP, Reason: err.Error()}, false
	}
	refuse := func(reason string) (*dhcp.Packet, *Event, bool) {
		return nil, &Event{Type: boot.Refuse, Step: StepDHCP, MAC: mac.String(), Reason: reason}, false
	}
	arches, err := p.Arches()
	if err != nil {
		return refuse(err.Error())
	}
	guid, err := p.GUID()
	if err != nil {
		return refuse(err.Error())
	}
	fw, arch, err := boot.Classify(boot.Client{Arches: arches, VendorClass: p.VendorClass(), UserClasses: p.UserClasses()})
	if err != nil {
		return refuse(err.Error())
	}
	d := r.decide(mac, arch)
	if d.Action == boot.Refuse {
		return refuse(d.Reason)
	}
	ans := boot.DHCPAnswer(fw, arch, mac, r.server)
	if ans.TFTP && !r.bins[ans.File] {
		return refuse(fmt.Sprintf("no iPXE binary %s for %s %s firmware: install the ipxe package", ans.File, arch, fw))
	}
	reply := proxyReply(p, r.server.IP, ans, guid, port)
	return reply, &Event{Type: boot.Maintenance, Step: StepDHCP, MAC: mac.String(), File: ans.File, Reason: fw.String() + " " + arch}, true
}

// proxyReply is a proxy DHCP answer (PXE spec §2.2): the client's header
// echoed, no address offered (yiaddr 0), our address as server identifier
// and next server (iPXE takes an offer's boot file only with a next
// server), the PXE vendor class and the boot file; PXE discovery control 8
// (boot the file named, no menu).
func proxyReply(req *dhcp.Packet, server netip.Addr, ans boot.Answer, guid []byte, port int) *dhcp.Packet {
	typ := dhcp.Offer
	if port == 4011 {
		typ = dhcp.Ack
	}
	rep := &dhcp.Packet{
		Op: dhcp.BootReply, HType: req.HType, HLen: req.HLen, XID: req.XID, Flags: req.Flags,
		CIAddr: netip.IPv4Unspecified(), YIAddr: netip.IPv4Unspecified(), SIAddr: server, GIAddr: req.GIAddr,
		CHAddr: req.CHAddr,
		Options: dhcp.Options{
			dhcp.OptMessageType: {typ},
			dhcp.OptServerID:    server.AsSlice(),
			dhcp.OptBootFile:    []byte(ans.File),
		},
	}
	if port == 4011 {
		rep.CIAddr = req.CIAddr
	}
	if ans.HTTPClient {
		rep.Options[dhcp.OptVendorClass] = []byte("HTTPClient")
	} else {
		rep.Options[dhcp.OptVendorClass] = []byte("PXEClient")
		rep.Options[dhcp.OptVendorSpec] = []byte{6, 1, 8, 255} // PXE_DISCOVERY_CONTROL: boot the file
	}
	if ans.TFTP {
		rep.Options[dhcp.OptTFTPServer] = []byte(server.String())
	}
	if len(ans.File) <= 127 {
		rep.File = ans.File
	}
	if guid != nil {
		rep.Options[dhcp.OptClientGUID] = guid
	}
	return rep
}
