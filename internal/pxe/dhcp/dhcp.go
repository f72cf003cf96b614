// Package dhcp reads and writes the DHCPv4 messages (RFC 2131, options RFC
// 2132) a proxy DHCP server needs: the BOOTP header, the options (with RFC
// 3396 long options and RFC 2132 option overload), and the PXE client
// options of RFC 4578. It is small on purpose: every length is checked
// against the packet, so any byte string either parses or is refused with
// the reason.
package dhcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Opcodes (BOOTP op).
const (
	BootRequest byte = 1
	BootReply   byte = 2
)

// Message types (option 53).
const (
	Discover byte = 1
	Offer    byte = 2
	Request  byte = 3
	Decline  byte = 4
	Ack      byte = 5
	Nak      byte = 6
	Release  byte = 7
	Inform   byte = 8
)

// Option codes used here.
const (
	OptPad         byte = 0
	OptOverload    byte = 52
	OptMessageType byte = 53
	OptServerID    byte = 54
	OptParamList   byte = 55
	OptMaxSize     byte = 57
	OptVendorClass byte = 60
	OptTFTPServer  byte = 66
	OptBootFile    byte = 67
	OptUserClass   byte = 77
	OptClientArch  byte = 93 // RFC 4578
	OptClientNDI   byte = 94 // RFC 4578
	OptClientGUID  byte = 97 // RFC 4578
	OptVendorSpec  byte = 43
	OptEnd         byte = 255
	headerLen           = 236
	minLen              = headerLen + 4 // header and magic cookie
	MaxLen              = 1500 - 20 - 8 // one Ethernet frame of IPv4 UDP
)

var magic = [4]byte{99, 130, 83, 99}

// Packet is one DHCPv4 message. Options holds each option once, its data
// the concatenation of every occurrence (RFC 3396).
type Packet struct {
	Op, HType, HLen, Hops byte
	XID                   uint32
	Secs, Flags           uint16
	CIAddr, YIAddr        netip.Addr
	SIAddr, GIAddr        netip.Addr
	CHAddr                [16]byte
	SName                 string // server host name (sname), when not overloaded
	File                  string // boot file name (file), when not overloaded
	Options               Options
}

// Options are a packet's options by code.
type Options map[byte][]byte

// ErrMalformed wraps every reason a packet is refused.
var ErrMalformed = errors.New("malformed DHCP packet")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Parse reads a DHCPv4 message.
func Parse(b []byte) (*Packet, error) {
	if len(b) < minLen {
		return nil, malformed("%d bytes, shorter than the %d of a BOOTP header and magic cookie", len(b), minLen)
	}
	if len(b) > 65507 {
		return nil, malformed("%d bytes, longer than a UDP datagram", len(b))
	}
	p := &Packet{Op: b[0], HType: b[1], HLen: b[2], Hops: b[3]}
	if p.Op != BootRequest && p.Op != BootReply {
		return nil, malformed("op %d is neither BOOTREQUEST nor BOOTREPLY", p.Op)
	}
	if p.HLen > 16 {
		return nil, malformed("hardware address length %d is over 16", p.HLen)
	}
	p.XID = binary.BigEndian.Uint32(b[4:8])
	p.Secs = binary.BigEndian.Uint16(b[8:10])
	p.Flags = binary.BigEndian.Uint16(b[10:12])
	p.CIAddr = addr4(b[12:16])
	p.YIAddr = addr4(b[16:20])
	p.SIAddr = addr4(b[20:24])
	p.GIAddr = addr4(b[24:28])
	copy(p.CHAddr[:], b[28:44])
	sname, file := b[44:108], b[108:236]
	if [4]byte(b[236:240]) != magic {
		return nil, malformed("no DHCP magic cookie (a plain BOOTP packet)")
	}
	p.Options = Options{}
	if err := p.Options.parse(b[240:], "options"); err != nil {
		return nil, err
	}
	overload := byte(0)
	if v, ok := p.Options[OptOverload]; ok {
		if len(v) != 1 || v[0] < 1 || v[0] > 3 {
			return nil, malformed("option 52 (overload) is %v, want one byte 1, 2 or 3", v)
		}
		overload = v[0]
		delete(p.Options, OptOverload)
	}
	if overload&1 != 0 {
		if err := p.Options.parse(file, "file field"); err != nil {
			return nil, err
		}
	} else {
		p.File = cString(file)
	}
	if overload&2 != 0 {
		if err := p.Options.parse(sname, "sname field"); err != nil {
			return nil, err
		}
	} else {
		p.SName = cString(sname)
	}
	return p, nil
}

// parse reads options from b into o, appending to options seen before.
func (o Options) parse(b []byte, where string) error {
	for i := 0; i < len(b); {
		code := b[i]
		switch code {
		case OptPad:
			i++
			continue
		case OptEnd:
			return nil
		}
		if i+1 >= len(b) {
			return malformed("%s: option %d at byte %d has no length", where, code, i)
		}
		n := int(b[i+1])
		if i+2+n > len(b) {
			return malformed("%s: option %d at byte %d says %d bytes, only %d follow", where, code, i, n, len(b)-i-2)
		}
		o[code] = append(o[code], b[i+2:i+2+n]...)
		i += 2 + n
	}
	if where == "options" {
		return malformed("options: no end option (255)")
	}
	return nil
}

func addr4(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b)) }

func cString(b []byte) string {
	if i := slices.Index(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Marshal writes the packet. Options longer than 255 bytes are split (RFC
// 3396); codes are written in ascending order, message type first. SName
// and File longer than their fields are an error.
func (p *Packet) Marshal() ([]byte, error) {
	if len(p.SName) > 63 || len(p.File) > 127 {
		return nil, fmt.Errorf("dhcp: sname (%d bytes) or file (%d bytes) does not fit its field", len(p.SName), len(p.File))
	}
	b := make([]byte, minLen, MaxLen)
	b[0], b[1], b[2], b[3] = p.Op, p.HType, p.HLen, p.Hops
	binary.BigEndian.PutUint32(b[4:8], p.XID)
	binary.BigEndian.PutUint16(b[8:10], p.Secs)
	binary.BigEndian.PutUint16(b[10:12], p.Flags)
	for i, a := range []netip.Addr{p.CIAddr, p.YIAddr, p.SIAddr, p.GIAddr} {
		if a.IsValid() {
			if !a.Is4() {
				return nil, fmt.Errorf("dhcp: address %s is not IPv4", a)
			}
			v := a.As4()
			copy(b[12+4*i:], v[:])
		}
	}
	copy(b[28:44], p.CHAddr[:])
	copy(b[44:108], p.SName)
	copy(b[108:236], p.File)
	copy(b[236:240], magic[:])
	codes := make([]int, 0, len(p.Options))
	for c := range p.Options {
		if c != OptPad && c != OptEnd && c != OptMessageType {
			codes = append(codes, int(c))
		}
	}
	slices.Sort(codes)
	if _, ok := p.Options[OptMessageType]; ok {
		codes = append([]int{int(OptMessageType)}, codes...)
	}
	for _, c := range codes {
		v := p.Options[byte(c)]
		for first := true; first || len(v) > 0; first = false {
			n := min(len(v), 255)
			b = append(b, byte(c), byte(n))
			b = append(b, v[:n]...)
			v = v[n:]
		}
	}
	b = append(b, OptEnd)
	for len(b) < 300 { // the BOOTP minimum some clients insist on
		b = append(b, OptPad)
	}
	if len(b) > MaxLen {
		return nil, fmt.Errorf("dhcp: reply of %d bytes does not fit one frame", len(b))
	}
	return b, nil
}

// MAC is the client hardware address of an Ethernet packet.
func (p *Packet) MAC() (net.HardwareAddr, error) {
	if p.HType != 1 || p.HLen != 6 {
		return nil, malformed("hardware type %d with address length %d is not Ethernet (1, 6)", p.HType, p.HLen)
	}
	return net.HardwareAddr(slices.Clone(p.CHAddr[:6])), nil
}

// MessageType is option 53, 0 when absent or malformed.
func (p *Packet) MessageType() byte {
	if v := p.Options[OptMessageType]; len(v) == 1 {
		return v[0]
	}
	return 0
}

// VendorClass is option 60 ("PXEClient:Arch:00007:UNDI:003016").
func (p *Packet) VendorClass() string { return string(p.Options[OptVendorClass]) }

// UserClasses are the user classes of option 77: RFC 3004's length-prefixed
// list, or (as iPXE sends it) one plain string.
func (p *Packet) UserClasses() []string {
	v := p.Options[OptUserClass]
	if len(v) == 0 {
		return nil
	}
	var out []string
	for i := 0; i < len(v); {
		n := int(v[i])
		if n == 0 || i+1+n > len(v) {
			return []string{string(v)} // not RFC 3004: one plain string
		}
		out = append(out, string(v[i+1:i+1+n]))
		i += 1 + n
	}
	return out
}

// Arches are the client system architectures of option 93 (RFC 4578).
func (p *Packet) Arches() ([]uint16, error) {
	v, ok := p.Options[OptClientArch]
	if !ok {
		return nil, nil
	}
	if len(v) == 0 || len(v)%2 != 0 {
		return nil, malformed("option 93 (client architecture) has %d bytes, want a non-zero even number", len(v))
	}
	out := make([]uint16, len(v)/2)
	for i := range out {
		out[i] = binary.BigEndian.Uint16(v[2*i:])
	}
	return out, nil
}

// GUID is option 97 (RFC 4578: type 0 and 16 bytes); nil when absent.
func (p *Packet) GUID() ([]byte, error) {
	v, ok := p.Options[OptClientGUID]
	if !ok || len(v) == 0 {
		return nil, nil // some ROMs omit it; it is only echoed back
	}
	if len(v) != 17 || v[0] != 0 {
		return nil, malformed("option 97 (client machine id) is %d bytes of type %d, want type 0 and 16 bytes", len(v), v[0])
	}
	return v, nil
}

// IsPXE reports whether the vendor class is a PXE or UEFI HTTP boot
// client's.
func (p *Packet) IsPXE() bool {
	vc := p.VendorClass()
	return strings.HasPrefix(vc, "PXEClient") || strings.HasPrefix(vc, "HTTPClient")
}
