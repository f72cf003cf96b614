package tftp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

type fixture struct {
	addr  netip.AddrPort
	dir   string
	mu    sync.Mutex
	dones []Transfer
}

func (f *fixture) transfers() []Transfer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Transfer(nil), f.dones...)
}

// start serves a root with a few files on loopback.
func start(t testing.TB, files map[string][]byte) *fixture {
	t.Helper()
	top := t.TempDir()
	dir := filepath.Join(top, "root")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "secret"), []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(), dir: dir}
	s := &Server{Root: root, LocalIP: netip.MustParseAddr("127.0.0.1"), Timeout: 200 * time.Millisecond, Retries: 3,
		Done: func(tr Transfer) { f.mu.Lock(); f.dones = append(f.dones, tr); f.mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		conn.Close()
	})
	return f
}

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCurl fetches files with curl's TFTP client (a real peer), with and
// without a negotiated block size, including a file of a whole number of
// blocks (ends with an empty block).
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed (apt-get install curl)")
	}
	files := map[string][]byte{
		"undionly.kpxe":   random(t, 70_000),
		"exact.bin":       random(t, 512*4),
		"sub/ipxe.efi":    random(t, 1_000_000),
		"empty":           {},
		"x86_64/snp.efi":  random(t, 3),
		"with space.file": []byte("hello"),
	}
	f := start(t, files)
	for name, want := range files {
		for _, blk := range []int{0, 1468} {
			if len(want) == 0 && blk > 0 {
				continue // curl asks tsize and, told 0, ends without acknowledging the OACK
			}
			t.Run(name+"/"+strconv.Itoa(blk), func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "out")
				args := []string{"-sS", "--fail", "-o", out, "tftp://" + f.addr.String() + "/" + strings.ReplaceAll(name, " ", "%20")}
				if blk > 0 {
					args = append(args, "--tftp-blksize", strconv.Itoa(blk))
				} else {
					args = append(args, "--tftp-no-options")
				}
				if b, err := exec.Command(curl, args...).CombinedOutput(); err != nil {
					t.Fatalf("curl: %v: %s", err, b)
				}
				got, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%d bytes back, want %d", len(got), len(want))
				}
			})
		}
	}
	testenv.WaitFor(t, 5*time.Second, "every transfer reported", func() bool {
		n := 0
		for _, tr := range f.transfers() {
			if tr.Err == nil {
				n++
			}
		}
		return n >= 2*len(files)-1
	})
}

// raw sends one request and returns the first answer.
func raw(t *testing.T, to netip.AddrPort, req []byte) (*net.UDPConn, []byte) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.WriteToUDPAddrPort(req, to); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2000)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	return c, buf[:n]
}

func rrq(op uint16, fields ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, op)
	for _, f := range fields {
		b = append(append(b, f...), 0)
	}
	return b
}

func TestRefused(t *testing.T) {
	f := start(t, map[string][]byte{"undionly.kpxe": []byte("ipxe"), "dir/x": []byte("x")})
	cases := []struct {
		name string
		req  []byte
		code uint16
		msg  string
	}{
		{"climb", rrq(opRRQ, "../secret", "octet"), errAccess, "climbs out of the TFTP root"},
		{"climb deeper", rrq(opRRQ, "dir/../../secret", "octet"), errAccess, "climbs out"},
		{"absolute", rrq(opRRQ, "/etc/passwd", "octet"), errNotFound, "no such file"},
		{"symlink out", rrq(opRRQ, "escape", "octet"), errAccess, "escape"},
		{"backslash", rrq(opRRQ, "..\\secret", "octet"), errAccess, "backslash"},
		{"dot", rrq(opRRQ, "./undionly.kpxe", "octet"), errAccess, "not a clean relative path"},
		{"directory", rrq(opRRQ, "dir", "octet"), errAccess, "not a regular file"},
		{"missing", rrq(opRRQ, "pxelinux.0", "octet"), errNotFound, "no such file"},
		{"write", rrq(opWRQ, "undionly.kpxe", "octet"), errAccess, "read-only"},
		{"netascii", rrq(opRRQ, "undionly.kpxe", "netascii"), errIllegalOp, "only octet"},
		{"not a request", rrq(opDATA, "x"), errIllegalOp, "not a read or write request"},
		{"unterminated", []byte{0, 1, 'a', 0, 'o'}, errIllegalOp, "NUL-terminated"},
		{"option without value", rrq(opRRQ, "undionly.kpxe", "octet", "blksize"), errIllegalOp, "without a value"},
		{"short", []byte{0, 1}, errIllegalOp, "shorter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ans := raw(t, f.addr, c.req)
			if len(ans) < 4 || binary.BigEndian.Uint16(ans) != opERROR {
				t.Fatalf("answer %q is not an ERROR", ans)
			}
			if code := binary.BigEndian.Uint16(ans[2:]); code != c.code || !strings.Contains(string(ans[4:]), c.msg) {
				t.Fatalf("error %d %q, want %d ~%q", code, ans[4:], c.code, c.msg)
			}
		})
	}
	testenv.WaitFor(t, 5*time.Second, "every refusal reported", func() bool { return len(f.transfers()) == len(cases) })
	for _, tr := range f.transfers() {
		if tr.Err == nil || tr.Bytes != 0 {
			t.Errorf("refusal reported as %+v", tr)
		}
	}
}

// TestRetransmit: a lost acknowledgement makes the server send the block
// again; a duplicate acknowledgement of an earlier block sends nothing new.
func TestRetransmit(t *testing.T) {
	data := random(t, 600) // two blocks of 512
	f := start(t, map[string][]byte{"f": data})
	c, first := raw(t, f.addr, rrq(opRRQ, "f", "octet"))
	buf := make([]byte, 600)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := c.ReadFromUDPAddrPort(buf) // the same block again: we did not acknowledge
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], first) || binary.BigEndian.Uint16(first[2:]) != 1 {
		t.Fatalf("retransmission differs: block %d", binary.BigEndian.Uint16(buf[2:]))
	}
	ack := func(b uint16) {
		if _, err := c.WriteToUDPAddrPort([]byte{0, opACK, byte(b >> 8), byte(b)}, from); err != nil {
			t.Fatal(err)
		}
	}
	ack(1)
	n, _, err = c.ReadFromUDPAddrPort(buf)
	if err != nil || binary.BigEndian.Uint16(buf[2:]) != 2 || n != 4+88 {
		t.Fatalf("block 2: %d bytes, %v", n, err)
	}
	ack(2)
	testenv.WaitFor(t, 5*time.Second, "the transfer reported", func() bool {
		tr := f.transfers()
		return len(tr) == 1 && tr[0].Err == nil && tr[0].Bytes == 600
	})
}

// TestGivesUp: a client that never acknowledges is given up after the
// retries, reported as a failed transfer.
func TestGivesUp(t *testing.T) {
	f := start(t, map[string][]byte{"f": []byte("data")})
	raw(t, f.addr, rrq(opRRQ, "f", "octet", "tsize", "0"))
	testenv.WaitFor(t, 10*time.Second, "the failure reported", func() bool {
		tr := f.transfers()
		return len(tr) == 1 && tr[0].Err != nil && strings.Contains(tr[0].Err.Error(), "no acknowledgement of block 0")
	})
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{"undionly.kpxe": "undionly.kpxe", "/ipxe.efi": "ipxe.efi", "a/b": "a/b"} {
		if got, err := CleanPath(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "/", "..", "../x", "a/../../x", "a//b", "a/./b", "//x", "x\x00y"} {
		if _, err := CleanPath(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
