package talos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// ErrSnapshotTruncated marks an etcd snapshot stream that ended early or
// does not end in etcd's sha256 trailer of what came before it.
var ErrSnapshotTruncated = errors.New("etcd snapshot truncated or corrupt")

// EtcdSnapshot streams an etcd snapshot from a control plane into w and
// returns its size; a truncated stream is an error.
//
// A snapshot is etcd's bbolt database followed by a 32-byte sha256 of it.
// machinery's stream reader turns a cancelled or timed-out stream into a
// clean end of file, so the size alone cannot be trusted: the size must be
// 512·k+32 (talosctl's check) and the trailer must be the sha256 of the
// database. On an error w has received a partial stream the caller must
// throw away (write to a temporary file, rename on success).
func EtcdSnapshot(ctx context.Context, t Target, talosconfig []byte, w io.Writer) (int64, error) {
	var size int64
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
		if err != nil {
			return err
		}
		defer r.Close() //nolint:errcheck
		v := newSnapshotVerifier(w)
		_, err = io.Copy(v, r)
		size = v.n
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return v.check()
	})
	if err != nil {
		return size, fmt.Errorf("etcd snapshot from %s: %w", t, err)
	}
	return size, nil
}

// snapshotVerifier passes a snapshot to w and hashes all but its last 32
// bytes, which it keeps to compare with the hash at the end.
type snapshotVerifier struct {
	w    io.Writer
	h    hash.Hash
	tail []byte // the last up to 32 bytes seen, not hashed yet
	n    int64
}

func newSnapshotVerifier(w io.Writer) *snapshotVerifier {
	return &snapshotVerifier{w: w, h: sha256.New(), tail: make([]byte, 0, sha256.Size)}
}

func (v *snapshotVerifier) Write(p []byte) (int, error) {
	n, err := v.w.Write(p)
	v.n += int64(n)
	v.hashKeepingTail(p[:n])
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

func (v *snapshotVerifier) hashKeepingTail(p []byte) {
	if len(p) >= sha256.Size {
		v.h.Write(v.tail)
		v.h.Write(p[:len(p)-sha256.Size])
		v.tail = append(v.tail[:0], p[len(p)-sha256.Size:]...)
		return
	}
	// fewer than 32 new bytes: hash what falls out of the window
	all := append(slices.Clone(v.tail), p...)
	if over := len(all) - sha256.Size; over > 0 {
		v.h.Write(all[:over])
		all = all[over:]
	}
	v.tail = append(v.tail[:0], all...)
}

func (v *snapshotVerifier) check() error {
	if v.n < sha256.Size || v.n%512 != sha256.Size {
		return fmt.Errorf("%w: %d bytes is not a database of 512-byte blocks and its 32-byte hash", ErrSnapshotTruncated, v.n)
	}
	if !bytes.Equal(v.h.Sum(nil), v.tail) {
		return fmt.Errorf("%w: the sha256 trailer does not match the %d bytes before it", ErrSnapshotTruncated, v.n-sha256.Size)
	}
	return nil
}

// EtcdMembers lists the etcd members' hostnames as a control plane sees them.
func EtcdMembers(ctx context.Context, t Target, talosconfig []byte) ([]string, error) {
	var out []string
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		resp, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return err
		}
		out = out[:0]
		for _, m := range resp.GetMessages() {
			for _, mem := range m.GetMembers() {
				out = append(out, mem.GetHostname())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("etcd members from %s: %w", t, err)
	}
	slices.Sort(out)
	return out, nil
}

// EtcdRemoveMember removes the etcd member named hostname (a control plane
// that died) through the control plane at t, as talosctl etcd
// remove-member does. It reports whether there was such a member.
func EtcdRemoveMember(ctx context.Context, t Target, talosconfig []byte, hostname string) (bool, error) {
	removed := false
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		resp, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return err
		}
		for _, m := range resp.GetMessages() {
			for _, mem := range m.GetMembers() {
				if mem.GetHostname() != hostname {
					continue
				}
				if err := c.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: mem.GetId()}); err != nil {
					return err
				}
				removed = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("removing etcd member %s through %s: %w", hostname, t, err)
	}
	return removed, nil
}
