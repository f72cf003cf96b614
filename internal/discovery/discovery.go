// Package discovery finds Talos machines on the local network: it dials the
// apid port of every address in a few configured ranges, with bounded
// concurrency and a short timeout, and hands each address that answers to a
// probe that reads the machine (package talos reads a node in maintenance
// mode). It never dials an address outside the configured ranges, and it
// refuses ranges that are not local (private, link-local, loopback, IPv6
// ULA or link-local) or larger than a /22, so that a typo cannot make it
// sweep the internet or a large network.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultPort         = 50000 // Talos apid
	MaxConcurrency      = 64
	DefaultTimeout      = time.Second
	DefaultProbeTimeout = 10 * time.Second
	// MinPrefixBits4 and MinPrefixBits6 bound a range to 1024 addresses.
	MinPrefixBits4 = 22
	MinPrefixBits6 = 118
)

// allowed are the ranges a scan may cover.
var allowed = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
}

// ParseCIDR parses and checks one range: it must lie inside a private,
// link-local or loopback range (IPv6: ULA or link-local) and hold at most
// 1024 addresses (IPv4 /22, IPv6 /118). Host bits are cleared
// ("192.168.1.7/24" is 192.168.1.0/24); a bare address is a /32 or /128.
func ParseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		p, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(s); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("discovery cidr %q: not a CIDR such as 192.168.1.0/24", s)
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("discovery cidr %q: zones are not supported", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("discovery cidr %q: write IPv4-mapped ranges in IPv4 form", s)
	}
	p = p.Masked()
	ok := false
	for _, a := range allowed {
		if a.prefix.Addr().BitLen() == p.Addr().BitLen() && p.Bits() >= a.prefix.Bits() && a.prefix.Contains(p.Addr()) {
			ok = true
			break
		}
	}
	if !ok {
		return netip.Prefix{}, fmt.Errorf("discovery cidr %q: not a private, link-local or loopback range (allowed: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16, 127.0.0.0/8, fc00::/7, fe80::/10)", s)
	}
	minBits := MinPrefixBits4
	if p.Addr().Is6() {
		minBits = MinPrefixBits6
	}
	if p.Bits() < minBits {
		return netip.Prefix{}, fmt.Errorf("discovery cidr %q: too large, at most a /%d (1024 addresses) per range", s, minBits)
	}
	return p, nil
}

// ParseCIDRs parses every range (see ParseCIDR); the first bad one is the
// error.
func ParseCIDRs(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := ParseCIDR(c)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Hosts lists the addresses of p a scan dials, in order: every address
// except, for IPv4 ranges of /30 and larger, the network and broadcast
// addresses, and, for IPv6 ranges larger than /127, the subnet-router
// anycast (first) address.
func Hosts(p netip.Prefix) []netip.Addr {
	p = p.Masked()
	skipFirst, skipLast := false, false
	if p.Addr().Is4() && p.Bits() <= 30 {
		skipFirst, skipLast = true, true
	}
	if p.Addr().Is6() && p.Bits() < 127 {
		skipFirst = true
	}
	var out []netip.Addr
	for a := p.Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
		out = append(out, a)
	}
	if skipFirst && len(out) > 0 {
		out = out[1:]
	}
	if skipLast && len(out) > 0 {
		out = out[:len(out)-1]
	}
	return out
}

// Options configure a scan. T is what the probe reads from a machine.
type Options[T any] struct {
	// Port is dialled on every address; default DefaultPort.
	Port int
	// Concurrency bounds the dials (and probes) in flight; default and
	// maximum MaxConcurrency.
	Concurrency int
	// Timeout bounds each dial; default DefaultTimeout.
	Timeout time.Duration
	// ProbeTimeout bounds each probe; default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Dial opens the test connection; default a net.Dialer. Tests inject
	// one to count dials.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Probe reads the machine at endpoint ("host:port") once it answered.
	// nil: answering addresses are reported without reading them.
	Probe func(ctx context.Context, endpoint string) (T, error)
}

func (o *Options[T]) defaults() error {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Port < 1 || o.Port > 65535 {
		return fmt.Errorf("discovery: port %d out of range 1-65535", o.Port)
	}
	if o.Concurrency == 0 {
		o.Concurrency = MaxConcurrency
	}
	if o.Concurrency < 1 || o.Concurrency > MaxConcurrency {
		return fmt.Errorf("discovery: concurrency %d out of range 1-%d", o.Concurrency, MaxConcurrency)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.Timeout < 0 || o.ProbeTimeout < 0 {
		return errors.New("discovery: timeouts must be positive")
	}
	if o.Dial == nil {
		d := &net.Dialer{}
		o.Dial = d.DialContext
	}
	return nil
}

// Found is one address that answered.
type Found[T any] struct {
	Address  netip.Addr
	Endpoint string // "host:port" as dialled
	Machine  T      // what the probe read (zero when Err is set)
	Err      error  // the probe's error, if it failed
}

// Report is the outcome of a scan.
type Report[T any] struct {
	// Found holds the addresses that answered, sorted by address.
	Found []Found[T]
	// Scanned is the number of addresses dialled.
	Scanned int
}

// Machines returns the machines read without error, in address order.
func (r Report[T]) Machines() []T {
	var out []T
	for _, f := range r.Found {
		if f.Err == nil {
			out = append(out, f.Machine)
		}
	}
	return out
}

// Scan dials every host address of cidrs (see ParseCIDR and Hosts; an
// address in several ranges once) and probes those that answer. Bad input
// is an error before anything is dialled; when ctx ends the scan stops and
// returns what it found so far with ctx's error.
func Scan[T any](ctx context.Context, cidrs []string, opts Options[T]) (Report[T], error) {
	if err := opts.defaults(); err != nil {
		return Report[T]{}, err
	}
	prefixes, err := ParseCIDRs(cidrs)
	if err != nil {
		return Report[T]{}, err
	}
	seen := map[netip.Addr]bool{}
	var addrs []netip.Addr
	for _, p := range prefixes {
		for _, a := range Hosts(p) {
			if !seen[a] {
				seen[a] = true
				addrs = append(addrs, a)
			}
		}
	}

	work := make(chan netip.Addr)
	var (
		mu      sync.Mutex
		found   []Found[T]
		scanned int
		wg      sync.WaitGroup
	)
	for range min(opts.Concurrency, max(len(addrs), 1)) {
		wg.Go(func() {
			for a := range work {
				f, ok := scanOne(ctx, a, &opts)
				mu.Lock()
				scanned++
				if ok {
					found = append(found, f)
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, a := range addrs {
		select {
		case work <- a:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	slices.SortFunc(found, func(a, b Found[T]) int { return a.Address.Compare(b.Address) })
	rep := Report[T]{Found: found, Scanned: scanned}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("discovery scan: %w", err)
	}
	return rep, nil
}

// scanOne dials a; when it answers, it probes it.
func scanOne[T any](ctx context.Context, a netip.Addr, opts *Options[T]) (Found[T], bool) {
	endpoint := net.JoinHostPort(a.String(), strconv.Itoa(opts.Port))
	dctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	conn, err := opts.Dial(dctx, "tcp", endpoint)
	cancel()
	if err != nil {
		return Found[T]{}, false
	}
	_ = conn.Close()
	f := Found[T]{Address: a, Endpoint: endpoint}
	if opts.Probe == nil {
		return f, true
	}
	pctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	defer cancel()
	m, err := opts.Probe(pctx, endpoint)
	if err != nil {
		f.Err = fmt.Errorf("reading %s: %w", endpoint, err)
		return f, true
	}
	f.Machine = m
	return f, true
}
