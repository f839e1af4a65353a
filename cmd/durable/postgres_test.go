package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pgDSN returns a DSN for a fresh schema on the test server.
func pgDSN(t *testing.T) (string, *pgtest.Server, string) {
	t.Helper()
	srv := pgtest.Require(t)
	schema := srv.Schema(t)
	return srv.DSN() + "&schema=" + schema, srv, schema
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := invoke(t, args...)
	if code != 0 {
		t.Fatalf("durable %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// runExit runs the CLI and fails the test unless it exits with want.
func runExit(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out, errOut := invoke(t, args...)
	if code != want {
		t.Fatalf("durable %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

func TestMigrateCommandsPostgres(t *testing.T) {
	dsn, srv, schema := pgDSN(t)
	ctx := context.Background()

	// A schema behind exits 3, like every schema that needs attention.
	out := runExit(t, exitSchema, "migrate", "--dsn", dsn, "status")
	if !strings.Contains(out, "version 0") || !strings.Contains(out, "behind") {
		t.Fatalf("fresh status: %q", out)
	}
	m := jsonDoc(t, exitSchema, "migrate", "status", "--dsn", dsn)
	hasFields(t, m, "schema", "version", "latest", "dirty", "state", "current", "advice")
	if m["state"] != "behind" || m["version"] != 0.0 {
		t.Fatalf("status --json: %v", m)
	}
	m = jsonDoc(t, exitSchema, "doctor", "--dsn", dsn)
	hasFields(t, m, "ok", "checks")
	if m["ok"] != false {
		t.Fatalf("doctor --json on a schema behind: %v", m)
	}
	// A command whose store refuses to open for the schema exits 3 too.
	if code, _, errOut := invoke(t, "inspect", "workflow", "w", "--dsn", dsn+"&migrate=verify"); code != exitSchema {
		t.Fatalf("inspect on a schema behind with migrate=verify: exit %d, want %d: %s", code, exitSchema, errOut)
	}
	// Flags after the subcommand, as the README writes it.
	out = mustRun(t, "migrate", "up", "--dsn", dsn)
	if !strings.Contains(out, "current") {
		t.Fatalf("up: %q", out)
	}
	mustRun(t, "migrate", "status", "--dsn", dsn)
	if m := jsonDoc(t, 0, "migrate", "up", "--dsn", dsn); m["state"] != "current" || m["current"] != true {
		t.Fatalf("up --json: %v", m)
	}
	// The schema works: open a store with migrate=verify.
	s, err := durable.Open(ctx, dsn+"&migrate=verify")
	if err != nil {
		t.Fatalf("verify after up: %v", err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if code, _, errOut := invoke(t, "migrate", "--dsn", dsn, "down"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("down without --yes: %d %q", code, errOut)
	}
	out = mustRun(t, "migrate", "--dsn", dsn, "--yes", "down")
	if !strings.Contains(out, "version 0") {
		t.Fatalf("down: %q", out)
	}
	mustRun(t, "migrate", "--dsn", dsn, "up")

	// A migration that failed halfway leaves the schema dirty: status fails
	// and names the fix; force repairs the record.
	if err := srv.Exec(ctx, `UPDATE "`+schema+`".schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	code, out, _ := invoke(t, "migrate", "--dsn", dsn, "status")
	if code != exitSchema || !strings.Contains(out, "dirty") || !strings.Contains(out, "durable migrate force") {
		t.Fatalf("dirty status: %d %q", code, out)
	}
	code, out, _ = invoke(t, "doctor", "--dsn", dsn)
	if code != exitSchema || !strings.Contains(out, "FAIL  schema") {
		t.Fatalf("doctor on a dirty schema: %d %q", code, out)
	}
	latest := strconv.Itoa(int(postgres.LatestVersion()))
	out = mustRun(t, "migrate", "--dsn", dsn, "force", latest)
	if !strings.Contains(out, "version "+latest) || !strings.Contains(out, "current") {
		t.Fatalf("force: %q", out)
	}
	for _, args := range [][]string{
		{"migrate", "--dsn", dsn},
		{"migrate", "--dsn", dsn, "sideways"},
		{"migrate", "--dsn", dsn, "force"},
		{"migrate", "--dsn", dsn, "force", "x"},
		{"migrate", "--dsn", "memory://", "up"},
	} {
		if code, _, _ := invoke(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args[1:], code)
		}
	}
}

func TestDoctorPostgres(t *testing.T) {
	dsn, _, _ := pgDSN(t)
	code, out, _ := invoke(t, "doctor", "--dsn", dsn)
	if code != exitSchema || !strings.Contains(out, "FAIL  schema") || !strings.Contains(out, "durable migrate up") {
		t.Fatalf("doctor before migrating: %d %q", code, out)
	}
	mustRun(t, "migrate", "--dsn", dsn, "up")
	out = mustRun(t, "doctor", "--dsn", dsn)
	for _, want := range []string{"ok    connect      PostgreSQL 15", "ok    schema", "ok    clock", "ok    listen"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
}

func TestDoctorNeverPrintsPassword(t *testing.T) {
	srv := pgtest.Require(t)
	// A wrong password for a real role, and a refused port.
	bad := srv.PasswordDSN(t)
	if i := strings.Index(bad, "@"); i > 0 {
		if j := strings.LastIndex(bad[:i], ":"); j > 0 {
			bad = bad[:j+1] + "wrong-hunter2" + bad[i:]
		}
	}
	if !strings.Contains(bad, "wrong-hunter2") {
		t.Fatalf("could not put a wrong password into the DSN")
	}
	for _, dsn := range []string{bad, "postgres://admin:hunter2-secret@127.0.0.1:1/db?connect_timeout=2"} {
		code, out, errOut := invoke(t, "doctor", "--dsn", dsn)
		all := out + errOut
		if code != 1 || strings.Contains(all, "hunter2") || strings.Contains(all, "postgres://") {
			t.Fatalf("doctor: exit %d, output:\n%s", code, all)
		}
		if !strings.Contains(all, "hint:") {
			t.Fatalf("no hint:\n%s", all)
		}
	}
}

func TestCleanupInspectBenchPostgres(t *testing.T) {
	dsn, _, _ := pgDSN(t)
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn) // migrate=auto
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"done-1", "done-2", "done-3"} {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	tenant := durable.TenantScope("acme")
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{Scope: tenant, ID: "order-1", Status: durable.StatusRunning, Snapshot: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k1"}, Fingerprint: "sha256:x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
		Outcome: durable.Outcome{Code: 202, Body: []byte("ok"), Ref: "pay_1"}}); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, "inspect", "--dsn", dsn, "--tenant", "acme", "workflow", "order-1")
	if !strings.Contains(out, `"hello"`) || !strings.Contains(out, "running") {
		t.Fatalf("inspect workflow: %q", out)
	}
	var k keyOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "--dsn", dsn, "--json", "key", "k1")), &k); err != nil ||
		k.Outcome == nil || k.Outcome.Code != 202 || k.Outcome.Ref != "pay_1" || string(k.Outcome.Body) != "ok" {
		t.Fatalf("inspect key: %+v %v", k, err)
	}
	var lo leaseOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "--dsn", dsn, "--json", "lease", "job")), &lo); err != nil || lo.Token != l.Token {
		t.Fatalf("inspect lease: %+v %v", lo, err)
	}

	var page workflowListOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "workflows", "--limit", "2", "--json", "--dsn", dsn)), &page); err != nil ||
		len(page.Workflows) != 2 || page.Next != "done-2" {
		t.Fatalf("inspect workflows: %+v %v", page, err)
	}
	var page2 workflowListOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "workflows", "--after", page.Next, "--json", "--dsn", dsn)), &page2); err != nil ||
		len(page2.Workflows) != 1 || page2.Workflows[0].ID != "done-3" || page2.Next != "" {
		t.Fatalf("inspect workflows, page 2: %+v %v", page2, err)
	}
	out = mustRun(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--dry-run")
	if !strings.Contains(out, "would delete: 3 workflows, 0 keys, 0 leases") {
		t.Fatalf("dry run: %q", out)
	}
	code, out, errOut := invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--batch", "2", "--progress", "0")
	if code != 0 || !strings.Contains(out, "deleted: 3 workflows") || !strings.Contains(errOut, "batch 2:") {
		t.Fatalf("cleanup: %d %q %q", code, out, errOut)
	}
	if _, err := s.GetWorkflow(ctx, tenant, "order-1"); err != nil {
		t.Fatalf("cleanup removed a running workflow: %v", err)
	}

	code, out, errOut = invoke(t, "bench", "--dsn", dsn, "--concurrency", "2", "--duration", "500ms", "--progress", "200ms")
	if code != 0 || !strings.Contains(out, "UpdateWorkflow") || !strings.Contains(out, "p99") {
		t.Fatalf("bench: %d %q %q", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] != "operation" && f[len(f)-1] != "0" {
			t.Errorf("bench reported errors: %q", line)
		}
	}
}

// TestMigrateAndDoctorOnEveryDriver runs the schema commands through each
// client library the DSN can choose.
func TestMigrateAndDoctorOnEveryDriver(t *testing.T) {
	for _, driver := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(driver, func(t *testing.T) {
			dsn, _, _ := pgDSN(t)
			dsn += "&driver=" + driver + "&application_name=durable%20cli%20test"
			out := mustRun(t, "migrate", "--dsn", dsn, "up")
			if !strings.Contains(out, "current") {
				t.Fatalf("up: %q", out)
			}
			out = mustRun(t, "doctor", "--dsn", dsn)
			for _, want := range []string{"ok    connect", "ok    schema", "ok    clock", "ok    listen"} {
				if !strings.Contains(out, want) {
					t.Errorf("doctor output lacks %q:\n%s", want, out)
				}
			}
			mustRun(t, "migrate", "--dsn", dsn, "force", "1")
			out = mustRun(t, "migrate", "--dsn", dsn, "--yes", "down")
			if !strings.Contains(out, "version 0") {
				t.Fatalf("down: %q", out)
			}
		})
	}
}

// TestSchemaCommandsReadTheDSNAsTheApplicationDoes: migrate and doctor open
// the DSN through the backend's own parser, so a "+" in a password or a
// parameter reaches the server as a plus sign for them as for the
// application (an earlier copy of the DSN handling in the CLI turned it
// into a space), on every client library.
func TestSchemaCommandsReadTheDSNAsTheApplicationDoes(t *testing.T) {
	p := pgtest.StartPrivate(t)
	ctx := context.Background()
	const password = "pa+ss w+rd"
	if err := p.Exec(ctx, `ALTER ROLE `+pgtest.PasswordRole+` SUPERUSER PASSWORD '`+password+`'`); err != nil {
		t.Fatal(err)
	}
	host, port := p.HostPort()
	base := fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", pgtest.PasswordRole, net.JoinHostPort(host, strconv.Itoa(port)))
	for _, c := range []struct{ name, dsn string }{
		// In the query, "+" is a plus sign (libpq's reading) and %20 a space.
		{"QueryParameter", base + "&password=pa+ss%20w+rd"},
		// In the userinfo, the same.
		{"Userinfo", strings.Replace(base, "@", ":pa+ss%20w+rd@", 1)},
	} {
		for _, driver := range []string{"pgx", "pq", "pgx-stdlib"} {
			t.Run(c.name+"/"+driver, func(t *testing.T) {
				schema := p.Schema(t)
				dsn := c.dsn + "&driver=" + driver + "&schema=" + schema + "&application_name=durable+cli"
				out := runExit(t, exitSchema, "migrate", "--dsn", dsn, "status")
				if !strings.Contains(out, "schema "+schema+": version 0") {
					t.Fatalf("status: %q", out)
				}
				// The application opens the same DSN, migrating.
				s, err := durable.Open(ctx, dsn)
				if err != nil {
					t.Fatalf("the application's durable.Open: %v", err)
				}
				s.Close()
				out = mustRun(t, "doctor", "--dsn", dsn)
				if !strings.Contains(out, "ok    schema") {
					t.Fatalf("doctor: %q", out)
				}
				mustRun(t, "migrate", "--dsn", dsn, "up")
			})
		}
	}
	// The wrong password fails for both, so the checks above mean something.
	bad := base + "&password=pa%20ss%20w%20rd"
	if _, err := durable.Open(ctx, bad); contract.CodeOf(err) != contract.PermissionDenied {
		t.Fatalf("durable.Open with a wrong password = %v, want PermissionDenied", err)
	}
	if code, out, errOut := invoke(t, "migrate", "--dsn", bad, "status"); code != 1 || !strings.Contains(errOut, "password") {
		t.Fatalf("migrate status with a wrong password: %d %q %q", code, out, errOut)
	}
}

// TestSchemaCommandsRejectWhatTheApplicationRejects: the CLI no longer
// overwrites the DSN's migrate parameter, so a typo in it (or any other
// parameter) fails in migrate and doctor as it fails in the application.
func TestSchemaCommandsRejectWhatTheApplicationRejects(t *testing.T) {
	dsn, _, _ := pgDSN(t)
	for _, bad := range []string{"&migrate=atuo", "&migrate=off&migrate=auto", "&listen=maybe", "&nosuch=1"} {
		if _, err := durable.Open(context.Background(), dsn+bad); contract.CodeOf(err) != contract.InvalidArgument {
			t.Fatalf("durable.Open(%s) = %v, want InvalidArgument", bad, err)
		}
		code, _, errOut := invoke(t, "migrate", "--dsn", dsn+bad, "status")
		if code != 1 || !strings.Contains(errOut, "hint: check the DSN") {
			t.Errorf("migrate status with %s: exit %d, %q", bad, code, errOut)
		}
		code, out, _ := invoke(t, "doctor", "--dsn", dsn+bad)
		if code != 1 || !strings.Contains(out, "FAIL  connect") {
			t.Errorf("doctor with %s: exit %d, %q", bad, code, out)
		}
	}
	// migrate=verify or auto in the DSN does not stop the schema commands:
	// they open without touching the schema whatever the mode.
	for _, mode := range []string{"verify", "auto"} {
		out := runExit(t, exitSchema, "migrate", "--dsn", dsn+"&migrate="+mode, "status")
		if !strings.Contains(out, "version 0") {
			t.Errorf("migrate=%s: status %q, want the schema untouched at version 0", mode, out)
		}
	}
}

func TestSchemaCommandsOnABackendWithoutSchema(t *testing.T) {
	for _, sub := range []string{"up", "status"} {
		code, _, errOut := invoke(t, "migrate", "--dsn", "memory://", sub)
		if code != 2 || !strings.Contains(errOut, "no schema") {
			t.Errorf("migrate %s on memory: exit %d, %q", sub, code, errOut)
		}
	}
	out := mustRun(t, "doctor", "--dsn", "memory://")
	if !strings.Contains(out, "ok    connect      store answers") {
		t.Errorf("doctor on memory: %q", out)
	}
}

// TestCommandsThroughPgBouncer runs migrate, doctor and bench through
// PgBouncer in transaction mode with the DSN a new user writes, on pgx and
// on lib/pq (where pooler=transaction must be said): the tables land in the
// named schema, doctor approves, bench has no errors.
func TestCommandsThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	srv := bouncer.Server()
	for _, extra := range []string{"", "&driver=pq&pooler=transaction"} {
		t.Run("params="+extra, func(t *testing.T) {
			schema := srv.Schema(t)
			dsn := bouncer.DSN() + "&schema=" + schema + extra
			out := mustRun(t, "migrate", "--dsn", dsn, "up")
			if !strings.Contains(out, "current") {
				t.Fatalf("up: %q", out)
			}
			conn, err := srv.Connect(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var inSchema, inPublic int
			if err := conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE n.nspname = $1), count(*) FILTER (WHERE n.nspname = 'public')
				FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE c.relname IN ('workflows', 'idempotency_keys', 'leases', 'lease_tokens')`, schema).Scan(&inSchema, &inPublic); err != nil {
				t.Fatal(err)
			}
			if inSchema != 4 || inPublic != 0 {
				t.Fatalf("%d of 4 objects in the schema, %d in public", inSchema, inPublic)
			}
			out = mustRun(t, "doctor", "--dsn", dsn)
			for _, want := range []string{"ok    pooler", "ok    query-mode", "ok    schema", "ok    listen"} {
				if !strings.Contains(out, want) {
					t.Errorf("doctor output lacks %q:\n%s", want, out)
				}
			}
			code, out, errOut := invoke(t, "bench", "--dsn", dsn, "--concurrency", "2", "--duration", "500ms", "--progress", "200ms")
			if code != 0 || !strings.Contains(out, "UpdateWorkflow") {
				t.Fatalf("bench: %d %q %q", code, out, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) >= 7 && f[0] != "operation" && f[len(f)-1] != "0" {
					t.Errorf("bench reported errors through the pooler: %q", line)
				}
			}
		})
	}
}

// TestMigrateSQLAppliedByAnotherTool: the SQL 'migrate sql' prints for the
// DSN's schema, applied by another tool that records the version in
// schema_migrations as golang-migrate does, passes migrate=verify.
func TestMigrateSQLAppliedByAnotherTool(t *testing.T) {
	dsn, srv, schema := pgDSN(t)
	ctx := context.Background()
	up := mustRun(t, "migrate", "sql", "up", "--dsn", dsn)
	if !strings.Contains(up, `"`+schema+`".workflows`) {
		t.Fatalf("sql for the DSN's schema: %q", up)
	}
	latest := postgres.LatestVersion()
	// The schema itself is the user's to create, as the tool connects.
	if err := srv.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS "`+schema+`"`); err != nil {
		t.Fatal(err)
	}
	if err := srv.Exec(ctx, up+fmt.Sprintf(`; CREATE TABLE %q.schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
		INSERT INTO %q.schema_migrations VALUES (%d, false)`, schema, schema, latest)); err != nil {
		t.Fatal(err)
	}
	s, err := durable.Open(ctx, dsn+"&migrate=verify")
	if err != nil {
		t.Fatalf("migrate=verify after applying the printed SQL: %v", err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	mustRun(t, "migrate", "status", "--dsn", dsn)
	// And the down SQL removes it all.
	down := mustRun(t, "migrate", "sql", "down", "--dsn", dsn)
	if err := srv.Exec(ctx, down); err != nil {
		t.Fatalf("down SQL: %v", err)
	}
}
