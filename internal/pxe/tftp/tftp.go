// Package tftp is a small read-only TFTP server (RFC 1350) with option
// negotiation (RFC 2347) for blksize (RFC 2348), tsize and timeout (RFC
// 2349): enough for PXE firmware to load an iPXE binary. It serves the
// regular files of one directory tree, opened through os.Root so that no
// path, not "..", an absolute path or a symlink, leaves it; writes are
// refused.
package tftp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Opcodes.
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes.
const (
	errNotDefined   = 0
	errNotFound     = 1
	errAccess       = 2
	errIllegalOp    = 4
	errBadOption    = 8
	defaultBlkSize  = 512
	maxBlkSize      = 1468 // one Ethernet frame: 1500 - IP 20 - UDP 8 - TFTP 4
	maxRequestBytes = 512
)

// Transfer is one read request as it ended: served (Err nil) or refused.
type Transfer struct {
	Client   netip.AddrPort
	File     string
	Bytes    int64
	Duration time.Duration
	// Err is why the request was refused or failed; nil when served.
	Err error
}

// Server serves files from Root.
type Server struct {
	// Root is the directory served.
	Root *os.Root
	// LocalIP is the address transfers are sent from (the address the
	// clients were told, siaddr); the zero value lets the system choose.
	LocalIP netip.Addr
	// Timeout before a block is sent again (default 1 s; a client's
	// timeout option overrides it); Retries how often (default 5).
	Timeout time.Duration
	Retries int
	// MaxTransfers bounds concurrent transfers (default 32).
	MaxTransfers int
	// Done, when set, is called once per request that ended.
	Done func(Transfer)

	once sync.Once
	sem  chan struct{}
	wg   sync.WaitGroup
}

func (s *Server) init() {
	s.once.Do(func() {
		if s.Timeout <= 0 {
			s.Timeout = time.Second
		}
		if s.Retries <= 0 {
			s.Retries = 5
		}
		if s.MaxTransfers <= 0 {
			s.MaxTransfers = 32
		}
		s.sem = make(chan struct{}, s.MaxTransfers)
	})
}

// Serve answers requests arriving on conn (port 69) until ctx ends, then
// waits for the transfers in flight.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	s.init()
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	defer s.wg.Wait()
	buf := make([]byte, maxRequestBytes+1)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tftp: %w", err)
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		client := ua.AddrPort()
		client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
		req := append([]byte(nil), buf[:n]...)
		select {
		case s.sem <- struct{}{}:
		default:
			s.refuse(conn, client, "", errNotDefined, errors.New("too many transfers at once"), time.Now())
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			s.handle(ctx, conn, client, req)
		}()
	}
}

// request is a parsed RRQ.
type request struct {
	file, mode string
	opts       map[string]string
}

// parseRequest reads an RRQ or WRQ: filename, mode, then option pairs,
// each NUL-terminated.
func parseRequest(b []byte) (op uint16, r request, err error) {
	if len(b) < 4 {
		return 0, r, errors.New("request shorter than 4 bytes")
	}
	if len(b) > maxRequestBytes {
		return 0, r, fmt.Errorf("request longer than %d bytes", maxRequestBytes)
	}
	op = binary.BigEndian.Uint16(b)
	if op != opRRQ && op != opWRQ {
		return op, r, fmt.Errorf("opcode %d is not a read or write request", op)
	}
	fields := strings.Split(string(b[2:]), "\x00")
	if len(fields) < 3 || fields[len(fields)-1] != "" {
		return op, r, errors.New("request fields are not NUL-terminated")
	}
	fields = fields[:len(fields)-1]
	r.file, r.mode = fields[0], strings.ToLower(fields[1])
	if len(fields)%2 != 0 {
		return op, r, errors.New("an option without a value")
	}
	r.opts = map[string]string{}
	for i := 2; i < len(fields); i += 2 {
		r.opts[strings.ToLower(fields[i])] = fields[i+1]
	}
	return op, r, nil
}

// CleanPath checks a requested file name and returns it relative to the
// root: one leading slash is allowed (firmware often sends "/file"); empty
// names, backslashes, NUL and any "." or ".." element are refused.
func CleanPath(name string) (string, error) {
	p := strings.TrimPrefix(name, "/")
	switch {
	case p == "":
		return "", errors.New("empty file name")
	case strings.ContainsAny(p, "\\\x00"):
		return "", fmt.Errorf("file name %q has a backslash or NUL", name)
	case !fs.ValidPath(p):
		for _, el := range strings.Split(p, "/") {
			if el == ".." {
				return "", fmt.Errorf("file name %q climbs out of the TFTP root", name)
			}
		}
		return "", fmt.Errorf("file name %q is not a clean relative path", name)
	}
	return p, nil
}

type refusal struct {
	code uint16
	err  error
}

func (s *Server) handle(ctx context.Context, listen net.PacketConn, client netip.AddrPort, b []byte) {
	start := time.Now()
	op, req, err := parseRequest(b)
	switch {
	case err != nil:
		s.refuse(listen, client, req.file, errIllegalOp, err, start)
		return
	case op == opWRQ:
		s.refuse(listen, client, req.file, errAccess, errors.New("this TFTP server is read-only"), start)
		return
	case req.mode != "octet":
		s.refuse(listen, client, req.file, errIllegalOp, fmt.Errorf("mode %q: only octet transfers are served", req.mode), start)
		return
	}
	name, err := CleanPath(req.file)
	if err != nil {
		s.refuse(listen, client, req.file, errAccess, err, start)
		return
	}
	f, err := s.Root.Open(name)
	if err != nil {
		code := uint16(errAccess)
		if errors.Is(err, fs.ErrNotExist) {
			code = errNotFound
			err = fmt.Errorf("%s: no such file in the TFTP root", name)
		} else {
			err = fmt.Errorf("%s: %w", name, err)
		}
		s.refuse(listen, client, req.file, code, err, start)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		s.refuse(listen, client, req.file, errAccess, fmt.Errorf("%s is not a regular file", name), start)
		return
	}
	var laddr *net.UDPAddr
	if s.LocalIP.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.LocalIP, 0))
	}
	conn, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(client))
	if err != nil {
		s.done(Transfer{Client: client, File: name, Err: fmt.Errorf("opening a transfer socket: %w", err), Duration: time.Since(start)})
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	t := &transfer{ctx: ctx, conn: conn, blk: defaultBlkSize, timeout: s.Timeout, retries: s.Retries}
	oack, ok := t.negotiate(req.opts, fi.Size())
	n, err := t.send(f, oack, ok)
	if errors.Is(err, errClientAbort) && n == 0 {
		return // a size probe (RRQ with tsize, then ERROR): not a transfer
	}
	s.done(Transfer{Client: client, File: name, Bytes: n, Duration: time.Since(start), Err: err})
}

func (s *Server) refuse(conn net.PacketConn, client netip.AddrPort, file string, code uint16, err error, start time.Time) {
	sendError(conn, net.UDPAddrFromAddrPort(client), code, err.Error())
	s.done(Transfer{Client: client, File: file, Err: err, Duration: time.Since(start)})
}

func (s *Server) done(t Transfer) {
	if s.Done != nil {
		s.Done(t)
	}
}

func sendError(conn net.PacketConn, to net.Addr, code uint16, msg string) {
	if len(msg) > 200 {
		msg = msg[:200]
	}
	b := make([]byte, 4, 5+len(msg))
	binary.BigEndian.PutUint16(b, opERROR)
	binary.BigEndian.PutUint16(b[2:], code)
	b = append(append(b, msg...), 0)
	if to == nil {
		_, _ = conn.(*net.UDPConn).Write(b)
		return
	}
	_, _ = conn.WriteTo(b, to)
}

type transfer struct {
	ctx     context.Context
	conn    *net.UDPConn
	blk     int
	timeout time.Duration
	retries int
}

var errClientAbort = errors.New("the client ended the transfer")

// negotiate answers the options it knows (RFC 2347): the OACK to send, and
// whether there is one.
func (t *transfer) negotiate(opts map[string]string, size int64) ([]byte, bool) {
	var oack []byte
	add := func(k, v string) { oack = append(append(append(append(oack, k...), 0), v...), 0) }
	if v, ok := opts["blksize"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 8 {
			t.blk = min(n, maxBlkSize)
			add("blksize", strconv.Itoa(t.blk))
		}
	}
	if _, ok := opts["tsize"]; ok {
		add("tsize", strconv.FormatInt(size, 10))
	}
	if v, ok := opts["timeout"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 255 {
			t.timeout = time.Duration(n) * time.Second
			add("timeout", v)
		}
	}
	if oack == nil {
		return nil, false
	}
	return append([]byte{0, opOACK}, oack...), true
}

// send runs the transfer: the OACK (acknowledged with block 0) when there
// is one, then the blocks, each sent again on a timeout, the last shorter
// than the block size. It returns the bytes the client acknowledged.
func (t *transfer) send(f io.Reader, oack []byte, hasOACK bool) (int64, error) {
	if hasOACK {
		if err := t.exchange(oack, 0); err != nil {
			return 0, err
		}
	}
	buf := make([]byte, 4+t.blk)
	binary.BigEndian.PutUint16(buf, opDATA)
	var sent int64
	for block := uint16(1); ; block++ {
		n, err := io.ReadFull(f, buf[4:])
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.sendError(errNotDefined, "read error")
			return sent, fmt.Errorf("reading the file: %w", err)
		}
		binary.BigEndian.PutUint16(buf[2:], block)
		if err := t.exchange(buf[:4+n], block); err != nil {
			return sent, err
		}
		sent += int64(n)
		if n < t.blk {
			return sent, nil
		}
	}
}

// exchange sends pkt until the client acknowledges block, ignoring
// duplicate acknowledgements of earlier blocks (no Sorcerer's Apprentice).
func (t *transfer) exchange(pkt []byte, block uint16) error {
	ack := make([]byte, 516)
	for try := 0; try <= t.retries; try++ {
		if err := t.ctx.Err(); err != nil {
			return fmt.Errorf("stopped at block %d: %w", block, err)
		}
		if _, err := t.conn.Write(pkt); err != nil {
			return fmt.Errorf("sending block %d: %w", block, err)
		}
		deadline := time.Now().Add(t.timeout)
		for {
			_ = t.conn.SetReadDeadline(deadline)
			n, err := t.conn.Read(ack)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && time.Now().After(deadline.Add(-time.Millisecond)) {
					break // send again
				}
				return fmt.Errorf("waiting for the acknowledgement of block %d: %w", block, err)
			}
			if n < 4 {
				continue
			}
			switch binary.BigEndian.Uint16(ack) {
			case opACK:
				if binary.BigEndian.Uint16(ack[2:]) == block {
					return nil
				}
			case opERROR:
				return fmt.Errorf("%w at block %d: %s", errClientAbort, block, strings.TrimRight(string(ack[4:n]), "\x00"))
			}
		}
	}
	return fmt.Errorf("no acknowledgement of block %d after %d tries", block, t.retries+1)
}

func (t *transfer) sendError(code uint16, msg string) { sendError(t.conn, nil, code, msg) }
