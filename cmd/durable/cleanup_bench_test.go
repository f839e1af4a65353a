package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/durable-go/durable"
)

// TestCleanupMillionRowsPostgres measures 'durable cleanup' on many
// terminal workflows inserted with generate_series. Off unless
// DURABLE_CLEANUP_BENCH_ROWS is set (docs/BENCHMARKS.md records the run):
//
//	DURABLE_CLEANUP_BENCH_ROWS=1000000 DURABLE_CLEANUP_BENCH_BATCH=1000 \
//	  go test -count=1 -run TestCleanupMillionRowsPostgres -v ./cmd/durable/
func TestCleanupMillionRowsPostgres(t *testing.T) {
	rows, _ := strconv.Atoi(os.Getenv("DURABLE_CLEANUP_BENCH_ROWS"))
	if rows <= 0 {
		t.Skip("set DURABLE_CLEANUP_BENCH_ROWS to run")
	}
	batch := os.Getenv("DURABLE_CLEANUP_BENCH_BATCH")
	if batch == "" {
		batch = strconv.Itoa(durable.DefaultCleanupLimit)
	}
	dsn, srv, schema := pgDSN(t)
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn) // migrate=auto
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := srv.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.workflows (scope, id, status, revision, snapshot, created_at, updated_at)
		SELECT '', 'wf-' || g, 'succeeded', 1, '\x7b7d'::bytea, now() - interval '30 days', now() - interval '30 days'
		FROM generate_series(1, %d) g; ANALYZE %q.workflows`, schema, rows, schema)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "24h", "--batch", batch, "--progress", "5s", "--json")
	t.Logf("stderr:\n%s", errOut)
	var res cleanupOut
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Workflows != rows {
		t.Fatalf("cleanup: exit %d, %q", code, out)
	}
	t.Logf("deleted %d workflows in %d batches of %s, %.1fs, %.0f records/s", res.Workflows, res.Batches, batch, res.Seconds, res.PerSecond)
}
