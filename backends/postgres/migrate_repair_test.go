package postgres

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// applyUpFiles runs the up migrations of MigrationFiles(schema) on pool,
// as plain SQL, outside any version table.
func applyUpFiles(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	files, err := MigrationFiles(schema)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(files, migrationDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".up.sql") {
			continue
		}
		data, err := fs.ReadFile(files, path.Join(migrationDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), string(data)); err != nil {
			t.Fatalf("%s on %s: %v", e.Name(), schema, err)
		}
	}
}

// recordVersion creates schema with a version table that records version
// (and dirty), and nothing else: what an older version left in the schema
// when it migrated through a transaction pooler.
func recordVersion(t *testing.T, pool *pgxpool.Pool, schema string, version uint, dirty bool) {
	t.Helper()
	q := quoteIdent(schema)
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE IF NOT EXISTS `+q+`.schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `DELETE FROM `+q+`.schema_migrations`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+q+`.schema_migrations VALUES ($1, $2)`, int64(version), dirty); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationRepairsTheStateOfThePoolerBug: an older version migrating
// through a transaction pooler recorded the latest version in the schema's
// version table but created the tables in public. The version alone says
// current; migrate=verify explains what is missing and where it is, and
// migrate up (and migrate=auto) creates the objects in the schema, on
// every client library, directly and through the pooler, leaving the
// misplaced copies alone.
func TestMigrationRepairsTheStateOfThePoolerBug(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	openAuto := func(ctx context.Context, dsn string) error {
		b, err := openDSN(ctx, dsn+"&migrate=auto")
		if err == nil {
			b.Close()
		}
		return err
	}
	migrateUp := func(ctx context.Context, dsn string) error {
		b, err := openBackend(ctx, dsn, openMode(MigrateOff))
		if err != nil {
			return err
		}
		defer b.Close()
		return b.Migrate(ctx, Up)
	}
	// run breaks a fresh schema as the bug did, with the objects in
	// elsewhere (on pool), checks the explanation and repairs it through
	// base.
	run := func(t *testing.T, pool *pgxpool.Pool, elsewhere, base string, repair func(ctx context.Context, dsn string) error) {
		schema := srv.Schema(t)
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+quoteIdent(schema)+` CASCADE`) })
		recordVersion(t, pool, schema, LatestVersion(), false)
		elsewhereBefore := relations(t, pool, elsewhere)
		dsn := base + "&schema=" + schema
		if st, err := poolMigrationStatus(ctx, pool, schema); err != nil || !st.Current() {
			t.Fatalf("the version table alone says %+v, %v; want current", st, err)
		}

		_, err := openDSN(ctx, dsn+"&migrate=verify")
		if contract.CodeOf(err) != contract.SchemaMismatch {
			t.Fatalf("Open(migrate=verify) = %v, want SchemaMismatch", err)
		}
		msg := err.Error()
		for _, want := range []string{schema, "workflows", "idempotency_keys", "leases", "lease_tokens", strconv.Quote(elsewhere), "durable migrate up"} {
			if !strings.Contains(msg, want) {
				t.Errorf("verify's error %q does not name %q", msg, want)
			}
		}
		noSQLInError(t, err)
		b, err := openBackend(ctx, dsn, openMode(MigrateOff))
		if err != nil {
			t.Fatal(err)
		}
		missing, others, err := b.schemaObjects(ctx)
		b.Close()
		if err != nil || len(missing) != len(schemaObjectList) || !slices.Contains(others, elsewhere) {
			t.Errorf("schemaObjects = %q, %q, %v; want all %d missing, found in %q", missing, others, err, len(schemaObjectList), elsewhere)
		}

		if err := repair(ctx, dsn); err != nil {
			t.Fatalf("repair: %v", err)
		}
		if got := relations(t, pool, schema); !slices.Equal(got, wantRelations) {
			t.Errorf("relations after the repair = %q, want %q", got, wantRelations)
		}
		if got := relations(t, pool, elsewhere); !slices.Equal(got, elsewhereBefore) {
			t.Errorf("%s after the repair = %q, want it untouched (%q)", elsewhere, got, elsewhereBefore)
		}
		b, err = openDSN(ctx, dsn+"&migrate=verify")
		if err != nil {
			t.Fatalf("Open(migrate=verify) after the repair: %v", err)
		}
		defer b.Close()
		if st, err := b.MigrationStatus(ctx); err != nil || !st.Current() {
			t.Errorf("status after the repair = %+v, %v", st, err)
		}
		if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "wf", Status: "running"}); err != nil {
			t.Errorf("CreateWorkflow after the repair: %v", err)
		}
	}

	// Directly, in a database of its own, with the objects in public.
	db := freshDatabase(t, srv)
	dsn := withDatabase(t, srv.DSN(), db)
	pool := newPool(t, dsn)
	applyUpFiles(t, pool, "public")
	if got := relations(t, pool, "public"); len(got) != 4 {
		t.Fatalf("public holds %q", got)
	}
	for _, drv := range clientDrivers {
		params := map[string]string{"pgx": "", "pq": "&driver=pq", "pgx-stdlib": "&driver=pgx-stdlib"}[drv]
		t.Run(drv+"/auto", func(t *testing.T) { run(t, pool, "public", dsn+params, openAuto) })
		t.Run(drv+"/migrate-up", func(t *testing.T) { run(t, pool, "public", dsn+params, migrateUp) })
	}

	// Through the pooler, in the shared database (see freshDatabase), with
	// the objects in a schema standing in for public.
	t.Run("pooler", func(t *testing.T) {
		bouncer := pgtest.RequireBouncer(t)
		pooled := bouncer.DSN()
		poolerNoise(t, pooled)
		pool := newPool(t, srv.DSN())
		standIn := srv.Schema(t)
		if _, err := pool.Exec(ctx, `CREATE SCHEMA `+quoteIdent(standIn)); err != nil {
			t.Fatal(err)
		}
		applyUpFiles(t, pool, standIn)
		for _, drv := range clientDrivers {
			t.Run(drv, func(t *testing.T) { run(t, pool, standIn, pooled+poolerParams[drv], migrateUp) })
		}
	})
}

// TestMigrationDoesNotRepairAPartialSchema: when only some objects of the
// recorded version exist, verify and migrate up fail with SchemaMismatch
// naming what is missing, and change nothing; a dirty version is not
// repaired either, even with every object missing.
func TestMigrationDoesNotRepairAPartialSchema(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	q := quoteIdent(schema)
	b, err := openDSN(ctx, srv.DSN()+"&schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "kept", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE `+q+`.leases; DROP SEQUENCE `+q+`.lease_tokens`); err != nil {
		t.Fatal(err)
	}
	for _, drv := range clientDrivers {
		dsn := srv.DSN() + "&schema=" + schema + "&driver=" + drv
		_, err := openDSN(ctx, dsn+"&migrate=verify")
		if contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "lacks table leases and sequence lease_tokens") ||
			!strings.Contains(err.Error(), "partly") {
			t.Errorf("%s: verify of a partial schema = %v", drv, err)
		}
		noSQLInError(t, err)
		_, err = openDSN(ctx, dsn+"&migrate=auto")
		if contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "leases") {
			t.Errorf("%s: migrate=auto on a partial schema = %v, want SchemaMismatch", drv, err)
		}
		m, err := openBackend(ctx, dsn, openMode(MigrateOff))
		if err != nil {
			t.Fatal(err)
		}
		err = m.Migrate(ctx, Up)
		m.Close()
		if contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "by hand") {
			t.Errorf("%s: migrate up on a partial schema = %v, want SchemaMismatch", drv, err)
		}
	}
	if got := relations(t, pool, schema); !slices.Equal(got, []string{"idempotency_keys r", "schema_migrations r", "workflows r"}) {
		t.Errorf("relations = %q: the failed repairs changed the schema", got)
	}
	if _, err := b.GetWorkflow(ctx, "", "kept"); err != nil {
		t.Errorf("the workflow written before: %v", err)
	}
	if st, err := b.MigrationStatus(ctx); err != nil || !st.Current() {
		t.Errorf("status = %+v, %v", st, err)
	}
	// Down cannot run either: the objects it reverts are missing.
	if err := b.Migrate(ctx, Down); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Errorf("migrate down on a partial schema = %v, want SchemaMismatch", err)
	}

	// Dropping the rest (as the message says) lets migrate up repair it.
	if _, err := pool.Exec(ctx, `DROP TABLE `+q+`.workflows, `+q+`.idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, Up); err != nil {
		t.Fatalf("migrate up once every object is gone: %v", err)
	}
	if got := relations(t, pool, schema); !slices.Equal(got, wantRelations) {
		t.Errorf("relations after the repair = %q", got)
	}

	// A dirty version is not repaired, even with every object missing.
	dirty := srv.Schema(t)
	recordVersion(t, pool, dirty, LatestVersion(), true)
	m := migrator(t, pool, dirty)
	if err := m.Migrate(ctx, Up); contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "dirty") {
		t.Errorf("migrate up of a dirty schema without objects = %v, want SchemaMismatch (dirty)", err)
	}
	if got := relations(t, pool, dirty); !slices.Equal(got, []string{"schema_migrations r"}) {
		t.Errorf("relations of the dirty schema = %q", got)
	}
}

// columnCollation returns the collation of schema.table.column.
func columnCollation(t *testing.T, pool *pgxpool.Pool, schema, table, column string) string {
	t.Helper()
	var coll string
	err := pool.QueryRow(t.Context(), `SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = ($1 || '.' || $2)::regclass AND a.attname = $3`, quoteIdent(schema), table, column).Scan(&coll)
	if err != nil {
		t.Fatal(err)
	}
	return coll
}

// TestFailedMigrationLeavesTheVersionUnchanged: a migration that fails
// (here, on objects in its way) rolls back everything since the lock,
// earlier statements of the same file and earlier files of the same run
// included: the version is the one before, never dirty, on every client
// library.
func TestFailedMigrationLeavesTheVersionUnchanged(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	for _, drv := range clientDrivers {
		t.Run(drv, func(t *testing.T) {
			// From nothing: a table of the first migration is in the way
			// (the sequence, created before it, is rolled back too).
			schema := srv.Schema(t)
			q := quoteIdent(schema)
			if _, err := pool.Exec(ctx, `CREATE SCHEMA `+q+`; CREATE TABLE `+q+`.workflows (x int)`); err != nil {
				t.Fatal(err)
			}
			m, err := openBackend(ctx, srv.DSN()+"&schema="+schema+"&driver="+drv, openMode(MigrateOff))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			err = m.Migrate(ctx, Up)
			if err == nil || contract.CodeOf(err) == contract.OutcomeUnknown || !strings.Contains(err.Error(), "42P07") {
				t.Errorf("Migrate(Up) with a table in the way = %v, want a failure naming SQLSTATE 42P07", err)
			}
			noSQLInError(t, err)
			if st, err := m.MigrationStatus(ctx); err != nil || st.Version != 0 || st.Dirty {
				t.Errorf("status after the failure = %+v, %v; want version 0, clean", st, err)
			}
			if got := relations(t, pool, schema); !slices.Equal(got, []string{"workflows r"}) {
				t.Errorf("relations after the failure = %q, want only the table in the way", got)
			}

			// From version 1: 000002's last statement fails (a view
			// depends on a column it changes), after its first ones
			// changed other tables.
			schema = srv.Schema(t)
			q = quoteIdent(schema)
			migrateTo(t, pool, schema, 1)
			if _, err := pool.Exec(ctx, `CREATE VIEW `+q+`.lease_view AS SELECT resource FROM `+q+`.leases`); err != nil {
				t.Fatal(err)
			}
			m2, err := openBackend(ctx, srv.DSN()+"&schema="+schema+"&driver="+drv, openMode(MigrateOff))
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			err = m2.Migrate(ctx, Up)
			if err == nil || contract.CodeOf(err) == contract.OutcomeUnknown {
				t.Errorf("Migrate(Up) with a view in the way = %v, want a failure", err)
			}
			noSQLInError(t, err)
			if st, err := m2.MigrationStatus(ctx); err != nil || st.Version != 1 || st.Dirty {
				t.Errorf("status after the failure = %+v, %v; want version 1, clean", st, err)
			}
			if c := columnCollation(t, pool, schema, "workflows", "id"); c != "default" {
				t.Errorf("workflows.id collation after the failed migration = %q, want default (rolled back)", c)
			}
			if _, err := pool.Exec(ctx, `DROP VIEW `+q+`.lease_view`); err != nil {
				t.Fatal(err)
			}
			if err := m2.Migrate(ctx, Up); err != nil {
				t.Fatalf("Migrate(Up) once the view is gone: %v", err)
			}
			if c := columnCollation(t, pool, schema, "workflows", "id"); c != "C" {
				t.Errorf("workflows.id collation after migrating = %q, want C", c)
			}
		})
	}
}
