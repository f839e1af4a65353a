package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/durable-go/durable/backends/postgres"
)

// TestMigrateProgressPostgres: migrate up reports each phase on stderr,
// including a wait for another migrator's lock; --quiet silences it, and
// a schema already current reports nothing.
func TestMigrateProgressPostgres(t *testing.T) {
	dsn, srv, schema := pgDSN(t)
	ctx := context.Background()

	// Another migrator holds golang-migrate's lock for this schema.
	conn, err := srv.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	key, err := database.GenerateAdvisoryLockId(db, schema, postgres.MigrationsTable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock("+key+")"); err != nil {
		t.Fatal(err)
	}
	var (
		wg                   sync.WaitGroup
		code                 int
		stdout, stderr, seen string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		code, stdout, stderr = invoke(t, "migrate", "up", "--dsn", dsn, "--progress", "100ms")
	}()
	// Release the lock once the CLI is seen waiting for it (the server shows
	// its polling), or after a few seconds anyway.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_try_advisory_xact_lock(%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			seen = "polling"
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // at least one repeated line
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock("+key+")"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if code != 0 || !strings.Contains(stdout, "current") {
		t.Fatalf("migrate up: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if seen == "" {
		t.Fatalf("the CLI was never seen polling for the lock; stderr: %s", stderr)
	}
	t.Logf("stderr:\n%s", stderr)
	prefix := "migrate up: schema " + schema + ": "
	var order []string
	for _, want := range []string{"locking", "waiting for the migration lock", "applying migration 1", "applying migration 2", "committing"} {
		i := strings.Index(stderr, prefix+want)
		if i < 0 {
			t.Fatalf("stderr lacks %q:\n%s", prefix+want, stderr)
		}
		order = append(order, stderr[i:])
	}
	for i := 1; i < len(order); i++ {
		if len(order[i]) > len(order[i-1]) {
			t.Fatalf("phases out of order:\n%s", stderr)
		}
	}
	if !strings.Contains(stderr, "waiting for the migration lock (") {
		t.Fatalf("the wait was not repeated with its duration:\n%s", stderr)
	}

	// Current already: nothing to report. --quiet: nothing either.
	if code, _, errOut := invoke(t, "migrate", "up", "--dsn", dsn); code != 0 || errOut != "" {
		t.Fatalf("up on a current schema: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := invoke(t, "migrate", "down", "--yes", "--quiet", "--dsn", dsn); code != 0 || errOut != "" {
		t.Fatalf("down --quiet: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := invoke(t, "migrate", "up", "--progress", "-1s", "--dsn", dsn); code != exitUsage {
		t.Fatalf("--progress -1s: exit %d, want %d", code, exitUsage)
	}
}

// TestMigrateProgressOnATerminal: one line rewritten in place, with the
// time spent in the phase, ended by a newline.
func TestMigrateProgressOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := newMigrateProgress(&buf, true, time.Second, "up")
	ctx := p.start(context.Background())
	_ = ctx
	p.report(postgres.MigrateStep{Schema: "s", Phase: postgres.PhaseApplying, Version: 2})
	time.Sleep(250 * time.Millisecond)
	p.done()
	out := buf.String()
	if n := strings.Count(out, "\r\x1b[Kmigrate up: schema s: applying migration 2 ("); n < 2 {
		t.Fatalf("want the live line rewritten at least twice, got %d: %q", n, out)
	}
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("want one newline at the end: %q", out)
	}
}
