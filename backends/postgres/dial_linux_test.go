package postgres

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/pgtest"
)

// TestDialerSetsKeepaliveAndUserTimeout checks the socket options of a
// connection the pgx pool dials from the DSN.
func TestDialerSetsKeepaliveAndUserTimeout(t *testing.T) {
	srv := pgtest.Require(t)
	b, err := openTestBackend(context.Background(), srv.DSN()+"&tcp_keepalive=7s&tcp_user_timeout=4s&pool_max_conns=1", Options{Migrate: MigrateOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conn, err := b.Pool().Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tcp, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
	if !ok {
		t.Fatalf("connection is a %T, want *net.TCPConn", conn.Conn().PgConn().Conn())
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var keepalive, idle, userTimeout int
	var serr error
	raw.Control(func(fd uintptr) {
		keepalive, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		if serr == nil {
			idle, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		}
		if serr == nil {
			userTimeout, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, 0x12 /* TCP_USER_TIMEOUT */)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	if keepalive != 1 || time.Duration(idle)*time.Second != 7*time.Second || userTimeout != 4000 {
		t.Errorf("SO_KEEPALIVE=%d TCP_KEEPIDLE=%ds TCP_USER_TIMEOUT=%dms; want 1, 7s, 4000ms", keepalive, idle, userTimeout)
	}
}
