package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/sqlite"
)

// sqliteDSN is a DSN of a new database file for one test.
func sqliteDSN(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "cli.db") + "?synchronous=normal"
}

// latestSQLite is the SQLite schema's latest version, as the CLI prints it.
var latestSQLite = strconv.FormatUint(uint64(sqlite.LatestVersion()), 10)

// TestSQLiteMigrate: migrate status, up, down and force on a sqlite DSN,
// with the exit codes of Postgres (3 while the schema is not current).
func TestSQLiteMigrate(t *testing.T) {
	dsn := sqliteDSN(t)
	code, out, errOut := invoke(t, "migrate", "status", "--dsn", dsn)
	if code != exitSchema || !strings.Contains(out, "schema main: version 0, latest "+latestSQLite+", behind") {
		t.Fatalf("status of a new file: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut := invoke(t, "migrate", "up", "--dsn", dsn); code != 0 || !strings.Contains(out, "version "+latestSQLite+", latest "+latestSQLite+", current") {
		t.Fatalf("up: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = invoke(t, "migrate", "status", "--json", "--dsn", dsn)
	var st migrateOut
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Current || st.Schema != "main" {
		t.Fatalf("status --json: exit %d, %q", code, out)
	}
	// The store works on the migrated file.
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn+"&migrate=verify")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if code, _, _ := invoke(t, "migrate", "down", "--dsn", dsn); code != exitUsage {
		t.Errorf("down without --yes: exit %d", code)
	}
	if code, out, errOut := invoke(t, "migrate", "down", "--yes", "--dsn", dsn); code != 0 || !strings.Contains(out, "version 0") {
		t.Fatalf("down: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut := invoke(t, "migrate", "force", latestSQLite, "--dsn", dsn); code != 0 || !strings.Contains(out, "version "+latestSQLite+", latest "+latestSQLite+", current") {
		t.Fatalf("force: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := invoke(t, "migrate", "force", "7", "--dsn", dsn); code == 0 || !strings.Contains(errOut, "version must be within") {
		t.Fatalf("force 7: exit %d, %q", code, errOut)
	}
}

// TestSQLiteSchemaCommandsOnADirtyFile: migrate status and doctor open a
// dirty database (which the application refuses to open) without touching
// it, whatever the DSN's migrate mode, and force repairs it.
func TestSQLiteSchemaCommandsOnADirtyFile(t *testing.T) {
	dsn := sqliteDSN(t)
	if code, _, errOut := invoke(t, "migrate", "up", "--dsn", dsn); code != 0 {
		t.Fatalf("up: exit %d, %q", code, errOut)
	}
	path := strings.TrimPrefix(strings.TrimSuffix(dsn, "?synchronous=normal"), "sqlite://")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE schema_migrations SET dirty = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := durable.Open(context.Background(), dsn); !errors.Is(err, durable.ErrSchemaMismatch) {
		t.Fatalf("the application's open of a dirty file = %v, want SchemaMismatch", err)
	}
	for _, mode := range []string{"auto", "verify", "off"} {
		code, out, errOut := invoke(t, "migrate", "status", "--dsn", dsn+"&migrate="+mode)
		if code != exitSchema || !strings.Contains(out, "schema main: version "+latestSQLite+", latest "+latestSQLite+", dirty") {
			t.Fatalf("migrate=%s: status of a dirty file: exit %d, %q %q", mode, code, out, errOut)
		}
		code, out, _ = invoke(t, "doctor", "--dsn", dsn+"&migrate="+mode)
		if code != exitSchema || !strings.Contains(out, "FAIL  schema       main is dirty at version "+latestSQLite) {
			t.Fatalf("migrate=%s: doctor on a dirty file: exit %d\n%s", mode, code, out)
		}
	}
	var dirty bool
	if err := db.QueryRow(`SELECT dirty FROM schema_migrations`).Scan(&dirty); err != nil || !dirty {
		t.Fatalf("the schema commands changed the dirty flag: %v, %v", dirty, err)
	}
	if code, out, errOut := invoke(t, "migrate", "force", latestSQLite, "--dsn", dsn); code != 0 || !strings.Contains(out, "version "+latestSQLite+", latest "+latestSQLite+", current") {
		t.Fatalf("force: exit %d, %q %q", code, out, errOut)
	}
}

// TestSQLiteDoctor: doctor's checks on a sqlite DSN; exit 3 when only the
// schema is behind.
func TestSQLiteDoctor(t *testing.T) {
	dsn := sqliteDSN(t)
	code, out, _ := invoke(t, "doctor", "--dsn", dsn)
	if code != exitSchema || !strings.Contains(out, "FAIL  schema") || !strings.Contains(out, "ok    journal      journal_mode=wal, synchronous=normal") {
		t.Fatalf("doctor on a new file: exit %d\n%s", code, out)
	}
	if code, _, _ := invoke(t, "migrate", "up", "--dsn", dsn); code != 0 {
		t.Fatal("migrate up failed")
	}
	code, out, _ = invoke(t, "doctor", "--json", "--dsn", dsn)
	var d doctorOut
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || !d.OK || len(d.Checks) != 4 {
		t.Fatalf("doctor: exit %d\n%s", code, out)
	}
	for _, c := range d.Checks {
		if strings.Contains(c.Detail, "cli.db") {
			t.Errorf("check %s prints the path: %q", c.Name, c.Detail)
		}
	}
}

// TestSQLiteInspectCleanupBench: inspect, cleanup and bench on a sqlite
// DSN (opened with migrate=auto by the application first).
func TestSQLiteInspectCleanupBench(t *testing.T) {
	dsn := sqliteDSN(t)
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"a-done", "b-done", "c-live"} {
		status := durable.StatusSucceeded
		if strings.HasSuffix(id, "live") {
			status = durable.StatusRunning
		}
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k1"}, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k1"}, Token: c.Token, Outcome: durable.Outcome{Code: 201, Body: []byte("made")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r1", Owner: "me", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"inspect", "workflows"}, []string{"a-done", "b-done", "c-live"}},
		{[]string{"inspect", "workflow", "c-live"}, []string{"running"}},
		{[]string{"inspect", "keys"}, []string{"k1", "completed", "201"}},
		{[]string{"inspect", "leases", "--held"}, []string{"r1", "me"}},
		{[]string{"cleanup", "--dry-run", "--terminal-age", "0s"}, []string{"would delete: 2 workflows"}},
		{[]string{"cleanup", "--terminal-age", "0s"}, []string{"deleted: 2 workflows"}},
		{[]string{"inspect", "workflows"}, []string{"c-live"}},
	} {
		code, out, errOut := invoke(t, append(tc.args, "--dsn", dsn)...)
		if code != 0 {
			t.Errorf("%v: exit %d, %q %q", tc.args, code, out, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	code, out, errOut := invoke(t, "bench", "--dsn", dsn, "--concurrency", "2", "--duration", "300ms", "--progress", "100ms")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s %s", code, out, errOut)
	}
	for _, op := range benchOps {
		if !strings.Contains(out, op) {
			t.Errorf("bench report lacks %s:\n%s", op, out)
		}
	}
	// A bad parameter is refused, without echoing the DSN.
	code, _, errOut = invoke(t, "inspect", "workflows", "--dsn", dsn+"&secret=hunter2")
	if code != 1 || !strings.Contains(errOut, `unknown sqlite DSN parameter "secret"`) || strings.Contains(errOut, "hunter2") || strings.Contains(errOut, "cli.db") {
		t.Errorf("bad parameter: exit %d, %q", code, errOut)
	}
}

// TestSQLiteMigrateSQL: 'migrate sql' prints the SQLite migrations for a
// sqlite DSN.
func TestSQLiteMigrateSQL(t *testing.T) {
	dsn := sqliteDSN(t)
	code, out, errOut := invoke(t, "migrate", "sql", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "-- durable migration 1 (init), up, schema main") || !strings.Contains(out, "CREATE TABLE lease_tokens") {
		t.Fatalf("sql: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = invoke(t, "migrate", "sql", "down", "--json", "--dsn", dsn)
	var m migrateSQLOut
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil || m.Table != "schema_migrations" || len(m.Migrations) != int(sqlite.LatestVersion()) || !strings.Contains(m.Migrations[len(m.Migrations)-1].SQL, "DROP TABLE leases") {
		t.Fatalf("sql down --json: exit %d, %q", code, out)
	}
	if code, _, errOut := invoke(t, "migrate", "sql", "--version", "9", "--dsn", dsn); code != exitUsage || !strings.Contains(errOut, "the latest is "+latestSQLite) {
		t.Fatalf("sql --version 9: exit %d, %q", code, errOut)
	}
}
