package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/redistest"
)

func TestMain(m *testing.M) {
	// TestWorkerPoolSQLiteCommand runs the test binary as the command.
	if os.Getenv("WORKERPOOL_RUN_MAIN") == "1" {
		os.Args = append([]string{"workerpool"}, strings.Fields(os.Getenv("WORKERPOOL_ARGS"))...)
		main()
		os.Exit(0)
	}
	pgtest.Main(m)
}

func checkTrace(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{
		"submit order-1 (attempt 2): 201 order-1 replayed=true",
		"every retry replayed",
		"worker-frozen  leased order-1 (token 1)",
		"worker-frozen  woke up; its stale write to order-1 was rejected",
		"each step applied exactly once",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}

func TestWorkerPoolMemory(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, "memory://workerpool-test?tolerance=250ms", 5, 3); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkTrace(t, out.String())
}

// TestWorkerPoolSQLite runs the example on a SQLite file with the
// backend's defaults (tolerance 1 s, synchronous=full).
func TestWorkerPoolSQLite(t *testing.T) {
	var out bytes.Buffer
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "workerpool.db")
	if err := run(context.Background(), &out, dsn, 4, 2); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkTrace(t, out.String())
}

// TestWorkerPoolSQLiteCommand runs the command as `go run
// ./examples/workerpool -dsn sqlite://./workerpool.db` does, flags and
// all (the test binary stands in for the built command), in a directory
// of its own.
func TestWorkerPoolSQLiteCommand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "WORKERPOOL_RUN_MAIN=1", "WORKERPOOL_ARGS=-dsn sqlite://./workerpool.db -orders 3 -workers 2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkTrace(t, string(out))
	if _, err := os.Stat(filepath.Join(cmd.Dir, "workerpool.db")); err != nil {
		t.Errorf("the relative DSN made no file in the working directory: %v", err)
	}
}

// TestWorkerPoolPostgres runs the example as the README shows it, with the
// Postgres backend's defaults (tolerance 1 s): its leases used to be
// shorter than the tolerance allows, and every fenced step failed.
func TestWorkerPoolPostgres(t *testing.T) {
	srv := pgtest.Require(t)
	dsn := srv.DSN() + "&schema=" + srv.Schema(t)
	var out bytes.Buffer
	if err := run(context.Background(), &out, dsn, 4, 2); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkTrace(t, out.String())
}

// TestWorkerPoolThroughPgBouncer runs the example behind PgBouncer in
// transaction mode, with the DSN a new user writes: the schema is migrated
// through the pooler and the pooler detected.
func TestWorkerPoolThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	dsn := bouncer.DSN() + "&schema=" + bouncer.Server().Schema(t)
	var out bytes.Buffer
	if err := run(context.Background(), &out, dsn, 4, 2); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkTrace(t, out.String())
}

// TestWorkerPoolRedis runs the example on a private redis-server node
// (AOF on, appendfsync always, noeviction) with the backend's defaults.
func TestWorkerPoolRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	if err := run(context.Background(), &out, "redis://"+srv.Addr()+"/0", 4, 2); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkTrace(t, out.String())
}

// TestWorkerPoolRedisCommand runs the command as `go run
// ./examples/workerpool -dsn redis://127.0.0.1:PORT/0` does, flags and
// all (the test binary stands in for the built command), on a node of its
// own: the blank import registers the scheme.
func TestWorkerPoolRedisCommand(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "WORKERPOOL_RUN_MAIN=1",
		"WORKERPOOL_ARGS=-dsn redis://"+srv.Addr()+"/0 -orders 3 -workers 2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkTrace(t, string(out))
}
