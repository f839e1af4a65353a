package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Private is a throwaway cluster of one test's own, independent of the
// shared server that Require returns, for tests that stop, restart or
// otherwise disturb the server (fault injection). It is created from the
// PostgreSQL binaries like the shared cluster (as the "postgres" user when
// the test runs as root), listens only on 127.0.0.1, and has the role
// [PasswordRole] with SCRAM authentication. DURABLE_TEST_DSN does not apply:
// a private cluster is never an external server.
//
// The embedded *Server gives DSN, PasswordDSN, HostPort, Exec, Connect,
// Schema, NewProxy and ServerLog.
type Private struct {
	*Server
	mu sync.Mutex // serializes Stop, Start, Restart and Close
}

var (
	privMu  sync.Mutex
	privAll = map[*Private]struct{}{}
)

// StartPrivate starts a private cluster, stopped and removed when t ends.
// Without PostgreSQL binaries it skips t, or fails it when
// DURABLE_REQUIRE_POSTGRES=1 (the convention of Require).
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	p, err := startPrivate()
	if err != nil {
		if os.Getenv("DURABLE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("pgtest: a private PostgreSQL cluster is required (DURABLE_REQUIRE_POSTGRES=1) but could not be started: %v", err)
		}
		t.Skipf("pgtest: no private PostgreSQL cluster (install PostgreSQL 15 or set DURABLE_PG_BIN): %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func startPrivate() (*Private, error) {
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
	// Acknowledged commits must survive a restart: the shared cluster runs
	// with synchronous_commit off, which only matters after a crash, but a
	// fault test must not depend on that.
	for _, sql := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, PasswordRole, PasswordRolePassword),
		`GRANT CREATE ON DATABASE postgres TO ` + PasswordRole,
		`ALTER SYSTEM SET synchronous_commit = on`,
		`SELECT pg_reload_conf()`,
	} {
		if err := s.Exec(ctx, sql); err != nil {
			c.stop()
			return nil, fmt.Errorf("setting up the private cluster: %w", err)
		}
	}
	s.pwOK = true
	p := &Private{Server: s}
	privMu.Lock()
	privAll[p] = struct{}{}
	privMu.Unlock()
	return p, nil
}

// StopAllPrivate stops and removes every private cluster still running, for
// a TestMain's signal handler.
func StopAllPrivate() {
	privMu.Lock()
	all := make([]*Private, 0, len(privAll))
	for p := range privAll {
		all = append(all, p)
	}
	privMu.Unlock()
	for _, p := range all {
		p.Close()
	}
}

func (p *Private) pgCtl(args ...string) error {
	c := p.cluster
	full := append([]string{"-D", c.data, "-l", c.logFile, "-w", "-t", "60"}, args...)
	out, err := c.run(filepath.Join(c.bin, "pg_ctl"), full...)
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// Restart restarts the server with pg_ctl restart -m mode ("fast",
// "smart" or "immediate") and waits until it accepts connections again.
func (p *Private) Restart(mode string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.pgCtl("-m", mode, "restart"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.waitReady(ctx)
}

// Stop stops the server with pg_ctl stop -m mode; Start starts it again.
func (p *Private) Stop(mode string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pgCtl("-m", mode, "stop")
}

// Start starts a stopped server and waits until it accepts connections.
func (p *Private) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.pgCtl("start"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.waitReady(ctx)
}

// Close stops the server and removes its directory. It is idempotent.
func (p *Private) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	privMu.Lock()
	delete(privAll, p)
	privMu.Unlock()
	p.cluster.stop()
}
