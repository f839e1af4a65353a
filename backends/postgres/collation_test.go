package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// collationIDs are valid ids whose byte order differs from a linguistic
// order: upper case before lower case, punctuation by its byte.
var collationIDs = []string{"B", "a", "a-b", "ab", "a.b", "Z9", "a_b", "0", "a:b", "A", "b", "aB", "Ab", "a0", "Zz"}

// icuDatabase creates a database whose default collation is ICU's en-US
// and returns a superuser DSN for it. The database is dropped when t ends.
func icuDatabase(t *testing.T, srv *pgtest.Server) string {
	t.Helper()
	ctx := t.Context()
	name := randomName("durable_icu_")
	err := srv.Exec(ctx, `CREATE DATABASE `+name+` TEMPLATE template0 ENCODING 'UTF8'
		LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'`)
	if err != nil {
		// A server built without ICU is a missing capability of the
		// server, not of durable; where Postgres is required (CI, with
		// Debian's PostgreSQL 15, which has ICU) it is a failure.
		if os.Getenv("DURABLE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("the server cannot create an ICU database (DURABLE_REQUIRE_POSTGRES=1): %v", err)
		}
		t.Skipf("the server cannot create an ICU database: %v", err)
	}
	t.Cleanup(func() {
		_ = srv.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
	})
	return withDatabase(t, srv.DSN(), name)
}

// byteOrder returns ids sorted byte-wise, as the memory backend lists them.
func byteOrder(ids []string) []string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}

// listAll pages through ListWorkflows with After, limit at a time.
func listAll(t *testing.T, b *Backend, status contract.Status, limit int) []string {
	t.Helper()
	var ids []string
	after := ""
	for range 100 {
		page, err := b.ListWorkflows(t.Context(), contract.ListQuery{Status: status, After: after, Limit: limit})
		if err != nil {
			t.Fatalf("ListWorkflows(after %q): %v", after, err)
		}
		for _, w := range page {
			ids = append(ids, w.ID)
		}
		if len(page) < limit {
			return ids
		}
		after = page[len(page)-1].ID
	}
	t.Fatal("ListWorkflows never ended")
	return nil
}

// migrateTo migrates schema to exactly version.
func migrateTo(t *testing.T, pool *pgxpool.Pool, schema string, version uint) {
	t.Helper()
	if err := withMigrate(t.Context(), pgclient.FromPool(pool), schema, func(m *migrate.Migrate) error { return m.Migrate(version) }); err != nil {
		t.Fatalf("migrating %s to %d: %v", schema, version, err)
	}
}

// TestListOrderIsBytewiseOnAnICUDatabase runs ListWorkflows, with and
// without a status and paged with After, on a database whose collation is
// ICU en-US, on every client library: the order is byte order, as on the
// memory backend. At schema version 1 (before the migration that sets
// COLLATE "C") the same database orders linguistically, which shows that
// the test can tell.
func TestListOrderIsBytewiseOnAnICUDatabase(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	dsn := icuDatabase(t, srv)
	want := byteOrder(collationIDs)

	// The database really sorts otherwise.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var dbOrder []string
	rows, _ := conn.Query(ctx, `SELECT x FROM unnest($1::text[]) x ORDER BY x`, collationIDs)
	dbOrder, err = pgx.CollectRows(rows, pgx.RowTo[string])
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(dbOrder, want) {
		t.Fatalf("the ICU database sorts byte-wise (%q): the test proves nothing", dbOrder)
	}

	pool := newPool(t, dsn)
	create := func(b *Backend) {
		for i, id := range collationIDs {
			status := contract.Status("running")
			if i%2 == 1 {
				status = "paused"
			}
			if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: status}); err != nil {
				t.Fatalf("CreateWorkflow(%q): %v", id, err)
			}
		}
	}
	var wantRunning, wantPaused []string
	for i, id := range collationIDs {
		if i%2 == 1 {
			wantPaused = append(wantPaused, id)
		} else {
			wantRunning = append(wantRunning, id)
		}
	}
	wantRunning, wantPaused = byteOrder(wantRunning), byteOrder(wantPaused)

	t.Run("Version1OrdersByTheDatabaseCollation", func(t *testing.T) {
		schema := srv.Schema(t) // on the test's main database; dropped with the ICU database
		migrateTo(t, pool, schema, 1)
		b, err := openDSN(ctx, dsn+"&migrate=off&schema="+schema)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		create(b)
		if got := listAll(t, b, "", 100); slices.Equal(got, want) || !slices.Equal(got, dbOrder) {
			t.Errorf("at version 1: %q, want the database's order %q", got, dbOrder)
		}
	})

	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(drv, func(t *testing.T) {
			schema := srv.Schema(t)
			b, err := openDSN(ctx, dsn+"&schema="+schema+"&driver="+drv) // migrate=auto
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			create(b)
			for _, limit := range []int{100, 1, 2, 4} {
				if got := listAll(t, b, "", limit); !slices.Equal(got, want) {
					t.Errorf("limit %d: %q, want byte order %q", limit, got, want)
				}
				if got := listAll(t, b, "running", limit); !slices.Equal(got, wantRunning) {
					t.Errorf("status running, limit %d: %q, want %q", limit, got, wantRunning)
				}
				if got := listAll(t, b, "paused", limit); !slices.Equal(got, wantPaused) {
					t.Errorf("status paused, limit %d: %q, want %q", limit, got, wantPaused)
				}
			}
			// After is a byte-wise bound too, also for an id that is not
			// stored.
			for _, after := range []string{"B", "a", "a-b", "Z", "_", "a-"} {
				page, err := b.ListWorkflows(ctx, contract.ListQuery{After: after, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, w := range page {
					got = append(got, w.ID)
				}
				var exp []string
				for _, id := range want {
					if id > after {
						exp = append(exp, id)
					}
				}
				if !slices.Equal(got, exp) {
					t.Errorf("after %q: %q, want %q", after, got, exp)
				}
			}
		})
	}
}

// TestListStatementsUseTheIndexOrder: on an ICU database, both list
// statements read the index in order (no sort) and stop at the limit.
func TestListStatementsUseTheIndexOrder(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	dsn := icuDatabase(t, srv)
	schema := srv.Schema(t)
	pool := newPool(t, dsn)
	if err := migratePool(ctx, pool, schema, Up); err != nil {
		t.Fatal(err)
	}
	st := newStatements(schema)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := quoteIdent(schema)
	if _, err := conn.Exec(ctx, `INSERT INTO `+q+`.workflows (scope, id, status, revision, created_at, updated_at)
		SELECT 's', 'wf-' || i, CASE WHEN i % 2 = 0 THEN 'running' ELSE 'paused' END, 1, now(), now()
		FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE `+q+`.workflows`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, sql string
		args      []any
		index     string
	}{
		{"listWorkflows", qListWorkflows.sql(st), []any{"s", "wf-1", 10}, "workflows_pkey"},
		{"listWorkflowsByStatus", qListWorkflowsByStatus.sql(st), []any{"s", "wf-1", 10, "running"}, "workflows_scope_status_id"},
	} {
		var plan []byte
		if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+c.sql, c.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var nodes []string
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			nodes = append(nodes, fmt.Sprintf("%v %v", n["Node Type"], n["Index Name"]))
			if kids, ok := n["Plans"].([]any); ok {
				for _, k := range kids {
					walk(k.(map[string]any))
				}
			}
		}
		var doc []map[string]any
		if err := json.Unmarshal(plan, &doc); err != nil {
			t.Fatal(err)
		}
		walk(doc[0]["Plan"].(map[string]any))
		s := strings.Join(nodes, "; ")
		if !strings.Contains(s, "Index Scan "+c.index) || strings.Contains(s, "Sort") {
			t.Errorf("%s: plan %s, want an index scan of %s and no sort", c.name, s, c.index)
		}
	}
}

// columnState describes the columns and indexes of schema, with the
// schema's name taken out, to compare two schemas.
func columnState(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, _ := pool.Query(t.Context(), `
		SELECT format('%s.%s %s collate %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
		              coalesce(co.collname, '-'))
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'i', 'S')
		UNION ALL
		SELECT replace(indexdef, $1, 'SCHEMA') FROM pg_indexes WHERE schemaname = $1
		UNION ALL
		SELECT format('%s %s %s', cl.relname, con.conname, pg_get_constraintdef(con.oid))
		FROM pg_constraint con JOIN pg_class cl ON cl.oid = con.conrelid
		JOIN pg_namespace n ON n.oid = cl.relnamespace WHERE n.nspname = $1
		ORDER BY 1`, schema)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCollationMigrationDownRestoresVersion1: migration 2 sets COLLATE "C"
// on the ordered and indexed identifier columns, changes nothing else, and
// its down migration gives back exactly what version 1 had, data included.
func TestCollationMigrationDownRestoresVersion1(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	dsn := icuDatabase(t, srv)
	pool := newPool(t, dsn)

	v1 := srv.Schema(t)
	migrateTo(t, pool, v1, 1)
	want := columnState(t, pool, v1)

	s := srv.Schema(t)
	migrateTo(t, pool, s, 1)
	var before uint32
	if err := pool.QueryRow(ctx, `SELECT relfilenode FROM pg_class WHERE oid = ($1 || '.workflows')::regclass`, quoteIdent(s)).Scan(&before); err != nil {
		t.Fatal(err)
	}
	b, err := openDSN(ctx, dsn+"&migrate=off&schema="+s)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, id := range collationIDs {
		if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: "running"}); err != nil {
			t.Fatal(err)
		}
	}
	// A lease row as version 1 stores it (this code's AcquireLease needs
	// the columns of migration 6).
	if _, err := pool.Exec(ctx, `INSERT INTO `+quoteIdent(s)+`.leases (scope, resource, owner, token, acquired_at, expires_at)
		VALUES ('', 'r', 'o', nextval('`+quoteIdent(s)+`.lease_tokens'), now(), now() + interval '10 seconds')`); err != nil {
		t.Fatal(err)
	}

	migrateTo(t, pool, s, 2)
	if st, err := poolMigrationStatus(ctx, pool, s); err != nil || st.Version != 2 || st.Dirty {
		t.Fatalf("status after up = %+v, %v", st, err)
	}
	up := columnState(t, pool, s)
	var collated []string
	for _, line := range up {
		if strings.HasSuffix(line, ` collate C`) {
			collated = append(collated, line)
		}
	}
	wantCollated := []string{
		"idempotency_keys.key text collate C", "idempotency_keys.scope text collate C",
		"idempotency_keys_pkey.key text collate C", "idempotency_keys_pkey.scope text collate C",
		"leases.resource text collate C", "leases.scope text collate C",
		"leases_pkey.resource text collate C", "leases_pkey.scope text collate C",
		"workflows.id text collate C", "workflows.scope text collate C", "workflows.status text collate C",
		"workflows_pkey.id text collate C", "workflows_pkey.scope text collate C",
		"workflows_scope_status_id.id text collate C", "workflows_scope_status_id.scope text collate C",
		"workflows_scope_status_id.status text collate C",
	}
	if !slices.Equal(collated, wantCollated) {
		t.Errorf("columns with COLLATE \"C\" after migration 2:\n%s\nwant:\n%s", strings.Join(collated, "\n"), strings.Join(wantCollated, "\n"))
	}
	var after uint32
	if err := pool.QueryRow(ctx, `SELECT relfilenode FROM pg_class WHERE oid = ($1 || '.workflows')::regclass`, quoteIdent(s)).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("migration 2 rewrote the workflows table (relfilenode %d → %d)", before, after)
	}

	if err := withMigrate(ctx, pgclient.FromPool(pool), s, func(m *migrate.Migrate) error { return m.Steps(-1) }); err != nil {
		t.Fatalf("down one step: %v", err)
	}
	if st, err := poolMigrationStatus(ctx, pool, s); err != nil || st.Version != 1 || st.Dirty {
		t.Fatalf("status after down = %+v, %v", st, err)
	}
	if got := columnState(t, pool, s); !slices.Equal(got, want) {
		t.Errorf("after down:\n%s\nversion 1:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got := listAll(t, b, "", 100)
	if len(got) != len(collationIDs) {
		t.Errorf("after down, %d workflows, want %d", len(got), len(collationIDs))
	}
	var owner string
	if err := pool.QueryRow(ctx, `SELECT owner FROM `+quoteIdent(s)+`.leases WHERE scope = '' AND resource = 'r'`).Scan(&owner); err != nil || owner != "o" {
		t.Errorf("after down, the lease's owner = %q, %v", owner, err)
	}
}
