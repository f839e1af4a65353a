package pgclient

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT socket option (not in package
// syscall).
const tcpUserTimeout = 0x12

// userTimeoutControl sets TCP_USER_TIMEOUT on TCP sockets before they
// connect; Unix sockets are left alone.
func userTimeoutControl(d time.Duration) func(network, address string, c syscall.RawConn) error {
	ms := int(d.Milliseconds())
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
		})
		if err != nil {
			return err
		}
		return serr
	}
}
