package dhcp

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// discover is an iPXE-like PXE DHCPDISCOVER built field by field.
func discover(t testing.TB, opts Options) []byte {
	t.Helper()
	p := &Packet{Op: BootRequest, HType: 1, HLen: 6, XID: 0x1234abcd, Flags: 0x8000, Options: opts}
	copy(p.CHAddr[:], []byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56})
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 600) // split into three options (RFC 3396)
	b := discover(t, Options{
		OptMessageType: {Discover},
		OptVendorClass: []byte("PXEClient:Arch:00000:UNDI:002001"),
		OptClientArch:  {0, 0},
		OptUserClass:   []byte("iPXE"),
		OptClientGUID:  append([]byte{0}, bytes.Repeat([]byte{7}, 16)...),
		200:            long,
	})
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageType() != Discover || p.XID != 0x1234abcd || p.Flags != 0x8000 {
		t.Fatalf("header: type %d xid %x flags %x", p.MessageType(), p.XID, p.Flags)
	}
	if mac, err := p.MAC(); err != nil || mac.String() != "52:54:00:12:34:56" {
		t.Fatalf("mac %v %v", mac, err)
	}
	if !p.IsPXE() {
		t.Fatal("not PXE")
	}
	if a, err := p.Arches(); err != nil || len(a) != 1 || a[0] != 0 {
		t.Fatalf("arches %v %v", a, err)
	}
	if uc := p.UserClasses(); len(uc) != 1 || uc[0] != "iPXE" {
		t.Fatalf("user classes %q", uc)
	}
	if !bytes.Equal(p.Options[200], long) {
		t.Fatalf("long option: %d bytes back", len(p.Options[200]))
	}
	if g, err := p.GUID(); err != nil || len(g) != 17 {
		t.Fatalf("guid %v %v", g, err)
	}
}

func TestUserClassRFC3004(t *testing.T) {
	p := &Packet{Options: Options{OptUserClass: []byte("\x04iPXE\x03foo")}}
	if uc := p.UserClasses(); len(uc) != 2 || uc[0] != "iPXE" || uc[1] != "foo" {
		t.Fatalf("%q", uc)
	}
}

func TestOverload(t *testing.T) {
	b := discover(t, Options{OptMessageType: {Discover}, OptOverload: {1}})
	// option 60 inside the file field
	copy(b[108:], append([]byte{OptVendorClass, 9}, append([]byte("PXEClient"), OptEnd)...))
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.VendorClass() != "PXEClient" || p.File != "" {
		t.Fatalf("vendor class %q file %q", p.VendorClass(), p.File)
	}
}

func TestParseRefuses(t *testing.T) {
	good := discover(t, Options{OptMessageType: {Discover}})
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"short", good[:100], "shorter than"},
		{"bad op", mut(func(b []byte) []byte { b[0] = 9; return b }), "op 9"},
		{"hlen", mut(func(b []byte) []byte { b[2] = 17; return b }), "length 17"},
		{"no cookie", mut(func(b []byte) []byte { b[236] = 0; return b }), "magic cookie"},
		{"option overrun", mut(func(b []byte) []byte { return append(b[:240], OptVendorClass, 200, 'P') }), "says 200 bytes"},
		{"no length", mut(func(b []byte) []byte { return append(b[:240], OptVendorClass) }), "no length"},
		{"no end", mut(func(b []byte) []byte { return append(b[:240], OptMessageType, 1, 1) }), "no end option"},
		{"overload value", mut(func(b []byte) []byte { return append(b[:240], OptOverload, 1, 7, OptEnd) }), "overload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.b)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

func TestAccessorsRefuse(t *testing.T) {
	p := &Packet{HType: 6, HLen: 6, Options: Options{OptClientArch: {0}, OptClientGUID: {1, 2}}}
	if _, err := p.MAC(); err == nil {
		t.Fatal("token ring accepted as Ethernet")
	}
	if _, err := p.Arches(); err == nil {
		t.Fatal("odd option 93 accepted")
	}
	if _, err := p.GUID(); err == nil {
		t.Fatal("short option 97 accepted")
	}
}

func TestMarshalRefuses(t *testing.T) {
	if _, err := (&Packet{File: strings.Repeat("f", 128)}).Marshal(); err == nil {
		t.Fatal("long file accepted")
	}
	if _, err := (&Packet{SIAddr: netip.MustParseAddr("::1")}).Marshal(); err == nil {
		t.Fatal("IPv6 siaddr accepted")
	}
	if _, err := (&Packet{Options: Options{1: make([]byte, 1400)}}).Marshal(); err == nil {
		t.Fatal("oversized reply accepted")
	}
}

// FuzzParse: any bytes parse or are refused as malformed; what parses
// writes back to a packet that parses to the same options.
func FuzzParse(f *testing.F) {
	f.Add(discover(f, Options{OptMessageType: {Discover}, OptVendorClass: []byte("PXEClient:Arch:00007"), OptClientArch: {0, 7}}))
	f.Add(discover(f, Options{OptMessageType: {Request}, OptOverload: {3}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		_, _ = p.Arches()
		_, _ = p.GUID()
		_ = p.UserClasses()
		_, _ = p.MAC()
		out, err := p.Marshal()
		if err != nil {
			return // e.g. names or options that no longer fit one frame
		}
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of our own packet: %v", err)
		}
		if len(q.Options) != len(p.Options) {
			t.Fatalf("options %d → %d", len(p.Options), len(q.Options))
		}
		for c, v := range p.Options {
			if !bytes.Equal(q.Options[c], v) {
				t.Fatalf("option %d changed", c)
			}
		}
	})
}
