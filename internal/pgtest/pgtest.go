// Package pgtest gives tests a real PostgreSQL server: a throwaway cluster
// started once per test binary, or the server named by DURABLE_TEST_DSN.
//
// Use it from TestMain so the cluster is stopped and removed when the tests
// end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and in each test:
//
//	srv := pgtest.Require(t)          // skips (or fails) without a server
//	schema := srv.Schema(t)           // fresh name, dropped at t.Cleanup
//	dsn := srv.DSN()                  // base DSN, trust auth, superuser
//
// # Environment
//
//	DURABLE_TEST_DSN          use this server instead of starting one. It
//	                          must be a postgres:// URL of a role that may
//	                          create schemas and roles.
//	DURABLE_REQUIRE_POSTGRES  "1": a missing server fails the test instead
//	                          of skipping it (set in CI).
//	DURABLE_PG_BIN            directory of initdb and pg_ctl (default: PATH,
//	                          then /usr/lib/postgresql/15/bin).
//
// # The throwaway cluster
//
// initdb refuses to run as root, so when the test runs as root the cluster
// is created and run as the "postgres" user (through runuser, or su). Its
// data directory and Unix socket live in a temporary directory that is
// removed afterwards. The server listens only on 127.0.0.1 on a free port,
// runs with fsync off, and trusts every loopback connection except the role
// [PasswordRole], which must authenticate with a password (SCRAM).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PasswordRole is a login role that must authenticate with
// PasswordRolePassword. It is created on the throwaway cluster (and, when
// possible, on a DURABLE_TEST_DSN server).
const (
	PasswordRole         = "durable_pw"
	PasswordRolePassword = "s3cr3t-Pa55word-do-not-leak"
)

// Server is a running PostgreSQL server.
type Server struct {
	dsn     string // base DSN: superuser, trust auth
	host    string
	port    int
	pwOK    bool // PasswordRole exists
	cluster *cluster
}

var (
	once      sync.Once
	srv       *Server
	startErr  error
	schemaSeq atomic.Int64
)

// Main runs the tests and then stops and removes the throwaway cluster (if
// one was started). It calls os.Exit.
func Main(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			stopCluster()
			os.Exit(130)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	stopCluster()
	os.Exit(code)
}

func stopCluster() {
	stopBouncer()
	if srv != nil && srv.cluster != nil {
		srv.cluster.stop()
	}
}

// Require returns the test server, starting it on first use. Without a
// server it skips t, or fails it when DURABLE_REQUIRE_POSTGRES=1.
func Require(t testing.TB) *Server {
	t.Helper()
	once.Do(func() { srv, startErr = start() })
	if startErr != nil {
		if os.Getenv("DURABLE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("pgtest: PostgreSQL is required (DURABLE_REQUIRE_POSTGRES=1) but unavailable: %v", startErr)
		}
		t.Skipf("pgtest: no PostgreSQL server (set DURABLE_TEST_DSN or install PostgreSQL 15): %v", startErr)
	}
	return srv
}

// DSN returns the base DSN: a postgres:// URL of a superuser that needs no
// password. Append parameters with "&".
func (s *Server) DSN() string { return s.dsn }

// HostPort returns the server's address.
func (s *Server) HostPort() (string, int) { return s.host, s.port }

// PasswordDSN returns a DSN for PasswordRole with its password, or skips t
// when the role could not be created.
func (s *Server) PasswordDSN(t testing.TB) string {
	t.Helper()
	if !s.pwOK {
		if os.Getenv("DURABLE_REQUIRE_POSTGRES") == "1" {
			t.Fatal("pgtest: the password role could not be created on this server (DURABLE_REQUIRE_POSTGRES=1)")
		}
		t.Skip("pgtest: the password role is not available on this server")
	}
	u, _ := url.Parse(s.dsn)
	u.User = url.UserPassword(PasswordRole, PasswordRolePassword)
	return u.String()
}

// WithUser returns the base DSN with another user (and password, if not
// empty).
func (s *Server) WithUser(user, password string) string {
	u, _ := url.Parse(s.dsn)
	if password == "" {
		u.User = url.User(user)
	} else {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// Schema returns a fresh schema name (not created) and drops that schema,
// with everything in it, when t ends.
func (s *Server) Schema(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("dt_%d_%d_%s", os.Getpid(), schemaSeq.Add(1), hex.EncodeToString(b[:]))
	t.Cleanup(func() {
		if t.Failed() && s.cluster != nil {
			t.Logf("pgtest: tail of the server log:\n%s", lastBytes(s.cluster.logTail(), 4<<10))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Exec(ctx, `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`); err != nil {
			t.Errorf("pgtest: dropping schema %s: %v", name, err)
		}
	})
	return name
}

// Exec runs sql (which may hold several statements) as the superuser on a
// new connection.
func (s *Server) Exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Connect opens a new connection as the superuser.
func (s *Server) Connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, s.dsn)
}

// ServerLog returns the tail of the throwaway cluster's log, or "" for a
// DURABLE_TEST_DSN server.
func (s *Server) ServerLog() string {
	if s.cluster == nil {
		return ""
	}
	return s.cluster.logTail()
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func start() (*Server, error) {
	if dsn := os.Getenv("DURABLE_TEST_DSN"); dsn != "" {
		return external(dsn)
	}
	c, err := startCluster()
	if err != nil {
		return nil, err
	}
	s := &Server{
		dsn:     fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port),
		host:    "127.0.0.1",
		port:    c.port,
		cluster: c,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		log := c.logTail()
		c.stop()
		return nil, fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	if err := s.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, PasswordRole, PasswordRolePassword)); err != nil {
		c.stop()
		return nil, fmt.Errorf("creating the password role: %w", err)
	}
	s.pwOK = true
	return s, nil
}

// external uses a server given by DSN.
func external(dsn string) (*Server, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("DURABLE_TEST_DSN must be a postgres:// URL")
	}
	port := 5432
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	s := &Server{dsn: dsn, host: u.Hostname(), port: port}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	// The password role is optional on an external server.
	err = s.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s') THEN
			CREATE ROLE %s LOGIN PASSWORD '%s';
		END IF;
	END $$`, PasswordRole, PasswordRole, PasswordRolePassword))
	s.pwOK = err == nil
	return s, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.dsn)
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// --- the throwaway cluster ---

type cluster struct {
	dir      string // temporary root, removed by stop
	data     string
	logFile  string
	port     int
	asUser   string // "" or "postgres"
	bin      string
	stopOnce sync.Once
}

func findBin() (string, error) {
	if d := os.Getenv("DURABLE_PG_BIN"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	for _, d := range []string{"/usr/lib/postgresql/15/bin", "/usr/local/pgsql/bin"} {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("initdb and pg_ctl not found (set DURABLE_PG_BIN)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startCluster() (*cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	base := os.TempDir()
	if os.Geteuid() == 0 && !traversable(base) {
		base = "/tmp" // the postgres user must reach the data directory
	}
	removeOrphans(bin, base)
	dir, err := os.MkdirTemp(base, "durable-pgtest-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &cluster{dir: dir, data: filepath.Join(dir, "data"), logFile: filepath.Join(dir, "server.log"), bin: bin}
	fail := func(err error) (*cluster, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if os.Geteuid() == 0 {
		c.asUser = "postgres"
		u, err := user.Lookup(c.asUser)
		if err != nil {
			return fail(fmt.Errorf("running as root needs a %q user: %w", c.asUser, err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	if out, err := c.run(filepath.Join(bin, "initdb"), "-D", c.data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	hba := "local all all trust\n" +
		"host all " + PasswordRole + " 127.0.0.1/32 scram-sha-256\n" +
		"host all " + PasswordRole + " ::1/128 scram-sha-256\n" +
		"host all all 127.0.0.1/32 trust\n" +
		"host all all ::1/128 trust\n"
	if err := c.writeFile(filepath.Join(c.data, "pg_hba.conf"), hba); err != nil {
		return fail(err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		c.port = port
		conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"+
			"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 300\n"+
			"shared_buffers = 128MB\npassword_encryption = 'scram-sha-256'\nlog_min_messages = warning\n"+
			"log_min_error_statement = panic\nlog_connections = off\n", port, dir)
		if err := c.writeFile(filepath.Join(c.data, "postgresql.auto.conf"), conf); err != nil {
			return fail(err)
		}
		out, err := c.run(filepath.Join(bin, "pg_ctl"), "-D", c.data, "-l", c.logFile, "-w", "-t", "60", "start")
		if err == nil {
			return c, nil
		}
		lastErr = fmt.Errorf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, c.logTail())
		if !strings.Contains(c.logTail(), "could not bind") && !strings.Contains(c.logTail(), "in use") {
			break
		}
	}
	return fail(lastErr)
}

// traversable reports whether every directory from dir up to / can be
// entered by other users.
func traversable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// removeOrphans stops and removes clusters left by test binaries that died
// without cleaning up (a -timeout panic, SIGKILL).
func removeOrphans(bin, base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, "durable-pgtest-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its owner is alive (or unknown)
		}
		c := &cluster{dir: dir, data: filepath.Join(dir, "data"), bin: bin}
		if os.Geteuid() == 0 {
			c.asUser = "postgres"
		}
		c.stop()
	}
}

// run runs a PostgreSQL program, as c.asUser when set.
func (c *cluster) run(prog string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	switch {
	case c.asUser == "":
		cmd = exec.Command(prog, args...)
	case hasProgram("runuser"):
		cmd = exec.Command("runuser", append([]string{"-u", c.asUser, "--", prog}, args...)...)
	default:
		quoted := make([]string, 0, len(args)+1)
		for _, a := range append([]string{prog}, args...) {
			quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
		}
		cmd = exec.Command("su", "-s", "/bin/sh", c.asUser, "-c", strings.Join(quoted, " "))
	}
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd.CombinedOutput()
}

func hasProgram(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func (c *cluster) writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if c.asUser != "" {
		u, err := user.Lookup(c.asUser)
		if err != nil {
			return err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return os.Chown(path, uid, gid)
	}
	return nil
}

func (c *cluster) logTail() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	const max = 8 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		_, _ = c.run(filepath.Join(c.bin, "pg_ctl"), "-D", c.data, "-m", "immediate", "-w", "-t", "30", "stop")
		_ = os.RemoveAll(c.dir)
	})
}
