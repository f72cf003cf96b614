//go:build !linux

package control

import "net"

// checkPeer: without SO_PEERCRED the socket's mode (0600) alone keeps
// other users out.
func checkPeer(net.Conn) error { return nil }
