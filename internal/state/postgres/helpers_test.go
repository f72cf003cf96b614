package postgres

import (
	"fmt"
	"net"
	"strconv"
)

func fmtAny(v any) string { return fmt.Sprint(v) }

// freeClosedPort is a loopback port nothing listens on.
func freeClosedPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return strconv.Itoa(port), nil
}
