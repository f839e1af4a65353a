package pgclient

import (
	"context"
	"net"
	"time"
)

// Defaults of the connection settings (DSN parameters connect_timeout,
// tcp_keepalive and tcp_user_timeout).
const (
	// DefaultConnectTimeout bounds establishing one connection (TCP, TLS
	// and authentication) when the DSN has no connect_timeout.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultTCPKeepalive is the idle time before the first keepalive probe
	// on a connection; probes follow every third of it, and three
	// unanswered ones drop the connection. A server whose machine vanished
	// is noticed within about twice this time even while nothing is sent.
	DefaultTCPKeepalive = 15 * time.Second
	// DefaultTCPUserTimeout is how long data sent on a connection may stay
	// unacknowledged before the kernel drops the connection (Linux's
	// TCP_USER_TIMEOUT; ignored elsewhere).
	DefaultTCPUserTimeout = 30 * time.Second
)

// DialSettings are the TCP settings of every connection the backend dials
// itself (Open with any driver). A zero duration turns that setting off.
type DialSettings struct {
	Keepalive   time.Duration
	UserTimeout time.Duration
}

// DefaultDialSettings returns the settings of a DSN that sets neither
// tcp_keepalive nor tcp_user_timeout.
func DefaultDialSettings() DialSettings {
	return DialSettings{Keepalive: DefaultTCPKeepalive, UserTimeout: DefaultTCPUserTimeout}
}

// dialer returns a net.Dialer with the settings applied.
func (s DialSettings) dialer() *net.Dialer {
	d := &net.Dialer{}
	if s.Keepalive > 0 {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: s.Keepalive, Interval: max(s.Keepalive/3, time.Second), Count: 3}
	} else {
		d.KeepAlive = -1
	}
	if s.UserTimeout > 0 {
		d.Control = userTimeoutControl(s.UserTimeout)
	}
	return d
}

// pqDialer adapts a net.Dialer to lib/pq's Dialer and DialerContext.
type pqDialer struct{ d *net.Dialer }

func (p pqDialer) Dial(network, address string) (net.Conn, error) {
	return p.d.Dial(network, address)
}

func (p pqDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.d.DialContext(ctx, network, address)
}

func (p pqDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return p.d.DialContext(ctx, network, address)
}
