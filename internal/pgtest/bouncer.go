package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Bouncer is a PgBouncer in transaction pooling mode in front of a Server:
// what most production fleets run. It is started once per test binary, on
// a free loopback port, as the "postgres" user when the test runs as root
// (PgBouncer refuses to run as root), and stopped by Main.
//
// Its pool is deliberately small (default_pool_size 4), so consecutive
// statements of one client connection land on different server
// connections often, and session state (prepared statements, SET,
// LISTEN) visibly does not survive.
type Bouncer struct {
	srv    *Server
	port   int
	dir    string
	bin    string
	asUser string

	mu   sync.Mutex // guards proc and done across restarts
	proc *exec.Cmd
	done chan struct{}
	// stopping: stop was called, so an exit is expected.
	stopping atomic.Bool
	ready    atomic.Bool // it answered once: a later exit is a crash
	restarts atomic.Int32
}

// maxRestarts bounds how often a crashed PgBouncer is started again.
const maxRestarts = 3

// start starts the PgBouncer process on b's configuration. If it exits
// while b is not being stopped, which PgBouncer 1.18 has been seen to do
// under load ("server in bad state"), its log is printed and it is started
// again on the same port, so that one crash fails the statements in flight
// rather than every later test through the pooler.
func (b *Bouncer) start() error {
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	var cmd *exec.Cmd
	switch {
	case b.asUser != "" && hasProgram("runuser"):
		cmd = exec.Command("runuser", "-u", b.asUser, "--", b.bin, ini)
	case b.asUser != "":
		cmd = exec.Command("su", "-s", "/bin/sh", b.asUser, "-c", "exec "+b.bin+" "+ini)
	default:
		cmd = exec.Command(b.bin, ini)
	}
	cmd.Dir = b.dir
	done := make(chan struct{})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping.Load() {
		return errors.New("pgbouncer is being stopped")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	b.proc, b.done = cmd, done
	go func() {
		err := cmd.Wait()
		close(done)
		if b.stopping.Load() || !b.ready.Load() {
			return
		}
		n := b.restarts.Add(1)
		fmt.Fprintf(os.Stderr, "pgtest: pgbouncer exited unexpectedly (%v); its log:\n%s\n", err, b.Log())
		if n > maxRestarts {
			fmt.Fprintf(os.Stderr, "pgtest: pgbouncer crashed %d times; not starting it again\n", n)
			return
		}
		time.Sleep(100 * time.Millisecond) // let the port go
		if err := b.start(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: restarting pgbouncer: %v\n", err)
		}
	}()
	return nil
}

var (
	bouncerOnce sync.Once
	bouncer     *Bouncer
	bouncerErr  error
)

// RequireBouncer returns the test PgBouncer in front of the test server,
// starting both on first use. Without pgbouncer (Debian package
// "pgbouncer") it skips t, or fails it when DURABLE_REQUIRE_POSTGRES=1:
// CI installs it.
func RequireBouncer(t testing.TB) *Bouncer {
	t.Helper()
	s := Require(t)
	bouncerOnce.Do(func() { bouncer, bouncerErr = startBouncer(s) })
	if bouncerErr != nil {
		if os.Getenv("DURABLE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("pgtest: PgBouncer is required (DURABLE_REQUIRE_POSTGRES=1) but unavailable: %v", bouncerErr)
		}
		t.Skipf("pgtest: no PgBouncer (install the pgbouncer package): %v", bouncerErr)
	}
	return bouncer
}

// DSN returns the base DSN through the pooler, as the server's DSN but for
// host and port, without pooler=…: append it (or not) with "&".
func (b *Bouncer) DSN() string {
	u, _ := url.Parse(b.srv.dsn)
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return u.String()
}

// Server returns the server behind the pooler.
func (b *Bouncer) Server() *Server { return b.srv }

// Log returns the tail of PgBouncer's log.
func (b *Bouncer) Log() string {
	data, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	if err != nil {
		return "(no pgbouncer log: " + err.Error() + ")"
	}
	return lastBytes(string(data), 8<<10)
}

func findBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("pgbouncer not found")
}

func startBouncer(s *Server) (*Bouncer, error) {
	bin, err := findBouncer()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "durable-pgbouncer-")
	if err != nil {
		return nil, err
	}
	asUser := ""
	if os.Geteuid() == 0 {
		asUser = "postgres"
		u, err := user.Lookup(asUser)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	su, _ := url.Parse(s.dsn)
	user := su.User.Username()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		// ignore_startup_parameters lists what drivers commonly send
		// (pgx sends none of these by default); anything else a client
		// sends at connect is refused, as in a stock installation.
		conf := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 4
max_client_conn = 1000
max_db_connections = 40
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
log_connections = 0
log_disconnections = 0
server_reset_query =
`, s.host, s.port, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
		files := map[string]string{
			"pgbouncer.ini": conf,
			"users.txt":     fmt.Sprintf("%q \"\"\n%q %q\n", user, PasswordRole, PasswordRolePassword),
		}
		for name, content := range files {
			c := &cluster{asUser: asUser}
			if err := c.writeFile(filepath.Join(dir, name), content); err != nil {
				_ = os.RemoveAll(dir)
				return nil, err
			}
		}
		b := &Bouncer{srv: s, port: port, dir: dir, bin: bin, asUser: asUser}
		if err := b.start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		if err := b.waitReady(); err == nil {
			b.ready.Store(true)
			return b, nil
		} else {
			lastErr = fmt.Errorf("%w\npgbouncer log:\n%s", err, b.Log())
		}
		b.stop(false)
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// waitReady waits until a query through the pooler answers.
func (b *Bouncer) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	for {
		select {
		case <-done:
			return errors.New("pgbouncer exited")
		default:
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer not ready: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the pooler; remove also deletes its directory.
func (b *Bouncer) stop(remove bool) {
	b.stopping.Store(true)
	b.mu.Lock()
	proc, done := b.proc, b.done
	b.mu.Unlock()
	if proc != nil && proc.Process != nil {
		// SIGTERM: PgBouncer exits at once (SIGINT would wait for clients).
		_ = proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			// runuser did not pass the signal on: end PgBouncer itself.
			if pid, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.pid")); err == nil {
				if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil && n > 0 {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
			_ = proc.Process.Kill()
			<-done
		}
	}
	if remove {
		_ = os.RemoveAll(b.dir)
	}
}

func stopBouncer() {
	if bouncer != nil {
		bouncer.stop(true)
	}
}
