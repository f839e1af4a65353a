package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestBouncerRestartsAfterACrash: a PgBouncer that dies under the tests is
// started again on the same port, so one crash does not fail every later
// test through the pooler.
func TestBouncerRestartsAfterACrash(t *testing.T) {
	b := RequireBouncer(t)
	ctx := t.Context()
	query := func() error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, b.DSN())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var one int
		return conn.QueryRow(cctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&one)
	}
	if err := query(); err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.pid"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := query()
		if err == nil && b.restarts.Load() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PgBouncer did not come back after a crash (restarts %d): %v", b.restarts.Load(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
