package control

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer accepts a peer that runs as this process's user (SO_PEERCRED).
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errPeer
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if cred.Uid != uint32(os.Getuid()) {
		return fmt.Errorf("%w (uid %d)", errPeer, cred.Uid)
	}
	return nil
}
