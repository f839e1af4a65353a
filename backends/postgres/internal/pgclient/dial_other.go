//go:build !linux

package pgclient

import (
	"syscall"
	"time"
)

// userTimeoutControl does nothing where TCP_USER_TIMEOUT does not exist;
// keepalives and the Store's operation timeout still bound a hung call.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
