package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

func tableCount(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name <> 'schema_migrations'`, schema).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// migrator returns a backend on pool with MigrateOff: what a caller who
// has only a pool builds to call the schema methods.
func migrator(t *testing.T, pool *pgxpool.Pool, schema string) *Backend {
	t.Helper()
	m, err := NewBackend(t.Context(), pool, Options{Schema: schema, Migrate: MigrateOff})
	if err != nil {
		t.Fatalf("New(MigrateOff): %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMigrationsUpDownUp(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	m := migrator(t, pool, schema)

	st, err := m.MigrationStatus(ctx)
	if err != nil || st.Version != 0 || st.Dirty || st.Latest != LatestVersion() || st.Latest == 0 || st.Schema != schema {
		t.Fatalf("status of a missing schema = %+v, %v", st, err)
	}
	if err := m.Migrate(ctx, Up); err != nil {
		t.Fatalf("up: %v", err)
	}
	if st, err := m.MigrationStatus(ctx); err != nil || !st.Current() {
		t.Fatalf("status after up = %+v, %v", st, err)
	}
	if n := tableCount(t, pool, schema); n != 3 {
		t.Errorf("%d tables after up, want 3", n)
	}
	b, err := NewBackend(ctx, pool, Options{Schema: schema, Migrate: MigrateVerify})
	if err != nil {
		t.Fatal(err)
	}
	l1, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: 10e9})
	if err != nil {
		t.Fatal(err)
	}
	// Up again is a no-op.
	if err := m.Migrate(ctx, Up); err != nil {
		t.Fatalf("second up: %v", err)
	}
	if err := m.Migrate(ctx, Down); err != nil {
		t.Fatalf("down: %v", err)
	}
	if st, err := m.MigrationStatus(ctx); err != nil || st.Version != 0 || st.Dirty {
		t.Fatalf("status after down = %+v, %v", st, err)
	}
	if n := tableCount(t, pool, schema); n != 0 {
		t.Errorf("%d tables after down, want 0", n)
	}
	if _, err := b.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Errorf("GetLease on a migrated-down schema: %v, want SchemaMismatch", err)
	}
	// The backend that serves requests migrates too.
	if err := b.Migrate(ctx, Up); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	if _, err := b.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.NotFound {
		t.Errorf("GetLease after up again: %v, want NotFound (an empty schema)", err)
	}
	l2, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: 10e9})
	if err != nil {
		t.Fatal(err)
	}
	// Down destroys the sequence too (documented): tokens restart.
	if l2.Token != 1 || l1.Token != 1 {
		t.Logf("tokens %d then %d", l1.Token, l2.Token)
	}
}

// TestSchemaMethodsRejectBadInput: an unknown direction or version, a
// closed backend, and an invalid schema (at construction) are refused
// before anything reaches the server.
func TestSchemaMethodsRejectBadInput(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	m := migrator(t, pool, srv.Schema(t))
	checkCode(t, m.Migrate(ctx, Direction(9)), contract.InvalidArgument)
	checkCode(t, m.Force(ctx, -2), contract.InvalidArgument)
	checkCode(t, m.Force(ctx, int(LatestVersion())+1), contract.InvalidArgument)
	for _, schema := range []string{"Bad", "pg_x"} {
		_, err := NewBackend(ctx, pool, Options{Schema: schema, Migrate: MigrateOff})
		checkCode(t, err, contract.InvalidArgument)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	checkCode(t, m.Migrate(ctx, Up), contract.Closed)
	checkCode(t, m.Force(ctx, 1), contract.Closed)
	_, err := m.MigrationStatus(ctx)
	checkCode(t, err, contract.Closed)
}

func TestConcurrentOpenersOfAnEmptySchemaAllSucceed(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	// The openers use all three client libraries: the migration driver
	// takes the same transaction-level advisory lock on each.
	drivers := []string{"pgx", "pq", "pgx-stdlib"}
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			b, err := openDSN(ctx, srv.DSN()+"&pool_max_conns=2&schema="+schema+"&driver="+drivers[i%len(drivers)])
			if err == nil {
				_, err = b.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprintf("wf-%d", i), Status: "running"})
				b.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	if st, err := poolMigrationStatus(ctx, newPool(t, srv.DSN()), schema); err != nil || !st.Current() {
		t.Errorf("status = %+v, %v", st, err)
	}
}

func TestSchemaNewerThanCodeIsAMismatch(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	if err := migratePool(ctx, pool, schema, Up); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+quoteIdent(schema)+`.schema_migrations SET version = $1`, LatestVersion()+98); err != nil {
		t.Fatal(err)
	}
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		for _, mode := range []string{"auto", "verify"} {
			_, err := openDSN(ctx, srv.DSN()+"&migrate="+mode+"&schema="+schema+"&driver="+drv)
			if contract.CodeOf(err) != contract.SchemaMismatch {
				t.Errorf("driver=%s migrate=%s: Open = %v, want SchemaMismatch", drv, mode, err)
			} else if !strings.Contains(err.Error(), "newer than this code") {
				t.Errorf("driver=%s migrate=%s: error %q does not say the schema is newer", drv, mode, err)
			}
		}
	}
	if err := migratePool(ctx, pool, schema, Up); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Errorf("Migrate up = %v, want SchemaMismatch", err)
	}
	// migrate=off opens anyway.
	b, err := openDSN(ctx, srv.DSN()+"&migrate=off&schema="+schema)
	if err != nil {
		t.Fatalf("migrate=off: %v", err)
	}
	b.Close()
}

func TestDirtySchemaNamesTheFix(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	if err := migratePool(ctx, pool, schema, Up); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+quoteIdent(schema)+`.schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		for _, mode := range []string{"auto", "verify"} {
			_, err := openDSN(ctx, srv.DSN()+"&migrate="+mode+"&schema="+schema+"&driver="+drv)
			if contract.CodeOf(err) != contract.SchemaMismatch {
				t.Fatalf("driver=%s migrate=%s: Open = %v, want SchemaMismatch", drv, mode, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "dirty") || !strings.Contains(msg, "durable migrate force <version>") {
				t.Errorf("driver=%s migrate=%s: error %q does not name the fix", drv, mode, msg)
			}
		}
	}
	m := migrator(t, pool, schema)
	if err := m.Migrate(ctx, Up); contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "force") {
		t.Errorf("Migrate up on a dirty schema = %v", err)
	}
	// A tool opens the application's DSN unchanged with the migrate mode
	// overridden, whatever the state of the schema: the durable CLI does.
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		tool, err := openBackend(ctx, srv.DSN()+"&schema="+schema+"&driver="+drv, openMode(MigrateOff))
		if err != nil {
			t.Fatalf("driver=%s: Open with MigrateOff on a dirty schema: %v", drv, err)
		}
		if st, err := tool.MigrationStatus(ctx); err != nil || !st.Dirty {
			t.Errorf("driver=%s: status = %+v, %v, want dirty", drv, st, err)
		}
		tool.Close()
	}
	if err := m.Force(ctx, int(LatestVersion())); err != nil {
		t.Fatalf("Force: %v", err)
	}
	b, err := openDSN(ctx, srv.DSN()+"&migrate=verify&schema="+schema)
	if err != nil {
		t.Fatalf("Open after Force: %v", err)
	}
	b.Close()
	if err := m.Force(ctx, 99); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("Force(99) = %v, want InvalidArgument", err)
	}
}

// openMode is the options of an open with migrate mode m.
func openMode(m MigrateMode) contract.OpenOptions { return contract.OpenOptions{Migrate: &m} }

// TestOpenWithMigrateModeChangesOnlyTheMode: the option replaces the DSN's
// migrate mode in openBackend (the driver's OpenWith), in durable.Open and
// in Open (durable.WithMigrateMode),
// and every parameter, migrate included, is still checked.
func TestOpenWithMigrateModeChangesOnlyTheMode(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	exists := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	dsn := srv.DSN() + "&schema=" + schema // migrate=auto by default

	off := openMode(MigrateOff)
	b, err := openBackend(ctx, dsn, off)
	if err != nil {
		t.Fatalf("openBackend(MigrateOff): %v", err)
	}
	b.Close()
	s, err := durable.Open(ctx, dsn, durable.WithMigrateMode(MigrateOff))
	if err != nil {
		t.Fatalf("durable.Open(MigrateOff): %v", err)
	}
	s.Close()
	s, err = Open(ctx, dsn, durable.WithMigrateMode(MigrateOff))
	if err != nil {
		t.Fatalf("Open(MigrateOff): %v", err)
	}
	s.Close()
	if exists() {
		t.Fatal("opening with MigrateOff created the schema")
	}
	_, err = openBackend(ctx, dsn, openMode(MigrateVerify))
	if contract.CodeOf(err) != contract.SchemaMismatch || exists() {
		t.Fatalf("openBackend(MigrateVerify) on a missing schema = %v (schema created: %v), want SchemaMismatch", err, exists())
	}
	_, err = Open(ctx, dsn, durable.WithMigrateMode(MigrateVerify))
	if contract.CodeOf(err) != contract.SchemaMismatch || exists() {
		t.Fatalf("Open(MigrateVerify) on a missing schema = %v (schema created: %v), want SchemaMismatch", err, exists())
	}
	for _, bad := range []string{"&migrate=atuo", "&migrate=off&migrate=auto", "&nosuch=1", "&driver=odbc"} {
		_, err := openBackend(ctx, dsn+bad, off)
		checkCode(t, err, contract.InvalidArgument)
		_, err = durable.Open(ctx, dsn+bad, durable.WithMigrateMode(MigrateOff))
		checkCode(t, err, contract.InvalidArgument)
		_, err = Open(ctx, dsn+bad, durable.WithMigrateMode(MigrateOff))
		checkCode(t, err, contract.InvalidArgument)
	}
	_, err = openBackend(ctx, dsn, openMode(MigrateMode(7)))
	checkCode(t, err, contract.InvalidArgument)
	_, err = durable.Open(ctx, dsn, durable.WithMigrateMode(MigrateMode(7)))
	checkCode(t, err, contract.InvalidArgument)
	_, err = Open(ctx, dsn, durable.WithMigrateMode(MigrateMode(7)))
	checkCode(t, err, contract.InvalidArgument)
	if exists() {
		t.Fatal("an unknown migrate mode created the schema")
	}
	// The override also turns migration on.
	b, err = openBackend(ctx, dsn+"&migrate=off", openMode(MigrateAuto))
	if err != nil {
		t.Fatalf("openBackend(MigrateAuto): %v", err)
	}
	defer b.Close()
	if st, err := b.MigrationStatus(ctx); err != nil || !st.Current() {
		t.Fatalf("status after openBackend(MigrateAuto) = %+v, %v", st, err)
	}
}

// TestVerifyNeedsNoCreatePrivilege opens with migrate=verify as a role
// that may use the tables but create nothing.
func TestVerifyNeedsNoCreatePrivilege(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	role := "durable_app_" + hex.EncodeToString(rnd[:])
	q := quoteIdent(schema)
	if err := migratePool(ctx, pool, schema, Up); err != nil {
		t.Fatal(err)
	}
	setup := fmt.Sprintf(`CREATE ROLE %[1]s LOGIN;
		REVOKE CREATE ON SCHEMA public FROM PUBLIC;
		GRANT USAGE ON SCHEMA %[2]s TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[2]s TO %[1]s;
		GRANT USAGE ON ALL SEQUENCES IN SCHEMA %[2]s TO %[1]s;
		REVOKE SELECT, INSERT, UPDATE, DELETE ON %[2]s.schema_migrations FROM %[1]s;
		GRANT SELECT ON %[2]s.schema_migrations TO %[1]s;`, role, q)
	if err := srv.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %[1]s; DROP ROLE %[1]s`, role))
	})
	var canCreate bool
	if err := pool.QueryRow(ctx, `SELECT has_database_privilege($1, current_database(), 'CREATE') OR has_schema_privilege($1, $2, 'CREATE')`, role, schema).Scan(&canCreate); err != nil || canCreate {
		t.Fatalf("role may create: %v %v", canCreate, err)
	}
	missing := srv.Schema(t)
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		dsn := srv.WithUser(role, "") + "&driver=" + drv
		b, err := openDSN(ctx, dsn+"&migrate=verify&schema="+schema)
		if err != nil {
			t.Fatalf("driver=%s: migrate=verify as a role without CREATE: %v", drv, err)
		}
		if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r-" + drv, Owner: "o", TTL: 10e9}); err != nil {
			t.Errorf("driver=%s: AcquireLease as the app role: %v", drv, err)
		}
		b.Close()
		// auto on a current schema runs no DDL either.
		b, err = openDSN(ctx, dsn+"&migrate=auto&schema="+schema)
		if err != nil {
			t.Fatalf("driver=%s: migrate=auto on a current schema as a role without CREATE: %v", drv, err)
		}
		b.Close()

		// verify on a schema that does not exist fails and creates nothing.
		_, err = openDSN(ctx, dsn+"&migrate=verify&schema="+missing)
		if contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "older") {
			t.Errorf("driver=%s: verify of a missing schema = %v, want SchemaMismatch saying it is older", drv, err)
		}
		var exists bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, missing).Scan(&exists)
		if exists {
			t.Errorf("driver=%s: migrate=verify created the schema", drv)
		}
		// auto on it fails for lack of privilege.
		if _, err := openDSN(ctx, dsn+"&migrate=auto&schema="+missing); err == nil {
			t.Errorf("driver=%s: migrate=auto created a schema as a role without CREATE", drv)
		}
	}
}

// TestMigrateOnDatabaseSQL migrates through database/sql (lib/pq and pgx's
// stdlib) with the Backend methods, as on pgx, and checks that migrating
// leaves no session state (search_path) on the caller's pool: the
// migrations name their schema and change no setting.
func TestMigrateOnDatabaseSQL(t *testing.T) {
	srv := pgtest.Require(t)
	for _, c := range []struct {
		name string
		open func(dsn string) (*sql.DB, error)
	}{
		{"pq", func(dsn string) (*sql.DB, error) {
			c, err := pq.NewConnector(dsn)
			if err != nil {
				return nil, err
			}
			return sql.OpenDB(c), nil
		}},
		{"pgx-stdlib", func(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			db, err := c.open(srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1) // the migrations and the checks share the one connection slot
			searchPath := func() string {
				var p string
				if err := db.QueryRowContext(ctx, `SHOW search_path`).Scan(&p); err != nil {
					t.Fatal(err)
				}
				return p
			}
			before := searchPath()

			m, err := NewBackend(ctx, db, Options{Schema: schema, Migrate: MigrateOff})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			st, err := m.MigrationStatus(ctx)
			if err != nil || st.Version != 0 || st.Dirty {
				t.Fatalf("status of a missing schema = %+v, %v", st, err)
			}
			if err := m.Migrate(ctx, Up); err != nil {
				t.Fatalf("Migrate up: %v", err)
			}
			if p := searchPath(); p != before {
				t.Errorf("search_path after Migrate = %q, want %q: migrating changed the session", p, before)
			}
			if st, err := m.MigrationStatus(ctx); err != nil || !st.Current() {
				t.Fatalf("status after up = %+v, %v", st, err)
			}
			b, err := NewBackend(ctx, db, Options{Schema: schema, Migrate: MigrateVerify})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: 10e9}); err != nil {
				t.Fatal(err)
			}
			if err := b.Migrate(ctx, Down); err != nil {
				t.Fatalf("Backend.Migrate down: %v", err)
			}
			if st, err := b.MigrationStatus(ctx); err != nil || st.Version != 0 {
				t.Fatalf("status after down = %+v, %v", st, err)
			}
			if _, err := b.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.SchemaMismatch {
				t.Errorf("GetLease on a migrated-down schema: %v, want SchemaMismatch", err)
			}
			if err := b.Migrate(ctx, Up); err != nil {
				t.Fatalf("Backend.Migrate up: %v", err)
			}
			if err := b.Force(ctx, int(LatestVersion())); err != nil {
				t.Fatalf("Backend.Force: %v", err)
			}
			if err := m.Force(ctx, 99); contract.CodeOf(err) != contract.InvalidArgument {
				t.Errorf("Force(99) = %v, want InvalidArgument", err)
			}
			if _, err := b.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.NotFound {
				t.Errorf("GetLease after up again: %v, want NotFound", err)
			}
			if p := searchPath(); p != before {
				t.Errorf("search_path at the end = %q, want %q", p, before)
			}
			// migrate=auto through NewBackend on a *sql.DB, on a fresh schema.
			fresh := srv.Schema(t)
			b2, err := NewBackend(ctx, db, Options{Schema: fresh})
			if err != nil {
				t.Fatalf("NewBackend(auto) on an empty schema: %v", err)
			}
			if st, err := b2.MigrationStatus(ctx); err != nil || !st.Current() {
				t.Errorf("status after NewBackend(auto) = %+v, %v", st, err)
			}
			b2.Close()
		})
	}
}
