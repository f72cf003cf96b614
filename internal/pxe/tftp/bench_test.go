package tftp

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// BenchmarkTransfer fetches an iPXE-sized file (850 kB, ipxe.efi) over
// loopback with a lock-step client, blksize 1468: the server's share of a
// TFTP boot.
func BenchmarkTransfer(b *testing.B) {
	data := make([]byte, 850_528)
	f := start(b, map[string][]byte{"ipxe.efi": data})
	b.SetBytes(int64(len(data)))
	buf := make([]byte, 2000)
	for b.Loop() {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = c.WriteToUDPAddrPort(rrq(opRRQ, "ipxe.efi", "octet", "blksize", "1468"), f.addr)
		got := 0
		for {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				b.Fatal(err)
			}
			var blk uint16
			switch binary.BigEndian.Uint16(buf) {
			case opOACK:
			case opDATA:
				blk = binary.BigEndian.Uint16(buf[2:])
				got += n - 4
			default:
				b.Fatalf("opcode %d", binary.BigEndian.Uint16(buf))
			}
			_, _ = c.WriteToUDPAddrPort([]byte{0, opACK, byte(blk >> 8), byte(blk)}, from)
			if binary.BigEndian.Uint16(buf) == opDATA && n-4 < 1468 {
				break
			}
		}
		c.Close()
		if got != len(data) {
			b.Fatalf("%d bytes", got)
		}
	}
}
