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

func TestMigrationsUpDownUp(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)

	st, err := MigrationStatus(ctx, pool, schema)
	if err != nil || st.Version != 0 || st.Dirty || st.Latest != LatestVersion() || st.Latest == 0 {
		t.Fatalf("status of a missing schema = %+v, %v", st, err)
	}
	if err := Migrate(ctx, pool, schema, Up); err != nil {
		t.Fatalf("up: %v", err)
	}
	if st, err := MigrationStatus(ctx, pool, schema); err != nil || !st.Current() {
		t.Fatalf("status after up = %+v, %v", st, err)
	}
	if n := tableCount(t, pool, schema); n != 3 {
		t.Errorf("%d tables after up, want 3", n)
	}
	b, err := New(ctx, pool, Options{Schema: schema, Migrate: MigrateVerify})
	if err != nil {
		t.Fatal(err)
	}
	l1, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: 10e9})
	if err != nil {
		t.Fatal(err)
	}
	// Up again is a no-op.
	if err := Migrate(ctx, pool, schema, Up); err != nil {
		t.Fatalf("second up: %v", err)
	}
	if err := Migrate(ctx, pool, schema, Down); err != nil {
		t.Fatalf("down: %v", err)
	}
	if st, err := MigrationStatus(ctx, pool, schema); err != nil || st.Version != 0 || st.Dirty {
		t.Fatalf("status after down = %+v, %v", st, err)
	}
	if n := tableCount(t, pool, schema); n != 0 {
		t.Errorf("%d tables after down, want 0", n)
	}
	if _, err := b.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Errorf("GetLease on a migrated-down schema: %v, want SchemaMismatch", err)
	}
	if err := Migrate(ctx, pool, schema, Up); err != nil {
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

func TestConcurrentOpenersOfAnEmptySchemaAllSucceed(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	// The openers use all three client libraries: golang-migrate's pgx/v5
	// and postgres drivers take the same advisory lock.
	drivers := []string{"pgx", "pq", "pgx-stdlib"}
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			b, err := Open(ctx, srv.DSN()+"&pool_max_conns=2&schema="+schema+"&driver="+drivers[i%len(drivers)])
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
	pool := newPool(t, srv.DSN())
	if st, err := MigrationStatus(ctx, pool, schema); err != nil || !st.Current() {
		t.Errorf("status = %+v, %v", st, err)
	}
}

func TestSchemaNewerThanCodeIsAMismatch(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	if err := Migrate(ctx, pool, schema, Up); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+quoteIdent(schema)+`.schema_migrations SET version = $1`, LatestVersion()+98); err != nil {
		t.Fatal(err)
	}
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		for _, mode := range []string{"auto", "verify"} {
			_, err := Open(ctx, srv.DSN()+"&migrate="+mode+"&schema="+schema+"&driver="+drv)
			if contract.CodeOf(err) != contract.SchemaMismatch {
				t.Errorf("driver=%s migrate=%s: Open = %v, want SchemaMismatch", drv, mode, err)
			} else if !strings.Contains(err.Error(), "newer than this code") {
				t.Errorf("driver=%s migrate=%s: error %q does not say the schema is newer", drv, mode, err)
			}
		}
	}
	if err := Migrate(ctx, pool, schema, Up); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Errorf("Migrate up = %v, want SchemaMismatch", err)
	}
	// migrate=off opens anyway.
	b, err := Open(ctx, srv.DSN()+"&migrate=off&schema="+schema)
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
	if err := Migrate(ctx, pool, schema, Up); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+quoteIdent(schema)+`.schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		for _, mode := range []string{"auto", "verify"} {
			_, err := Open(ctx, srv.DSN()+"&migrate="+mode+"&schema="+schema+"&driver="+drv)
			if contract.CodeOf(err) != contract.SchemaMismatch {
				t.Fatalf("driver=%s migrate=%s: Open = %v, want SchemaMismatch", drv, mode, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "dirty") || !strings.Contains(msg, "durable migrate force <version>") {
				t.Errorf("driver=%s migrate=%s: error %q does not name the fix", drv, mode, msg)
			}
		}
	}
	if err := Migrate(ctx, pool, schema, Up); contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "force") {
		t.Errorf("Migrate up on a dirty schema = %v", err)
	}
	if err := Force(ctx, pool, schema, int(LatestVersion())); err != nil {
		t.Fatalf("Force: %v", err)
	}
	b, err := Open(ctx, srv.DSN()+"&migrate=verify&schema="+schema)
	if err != nil {
		t.Fatalf("Open after Force: %v", err)
	}
	b.Close()
	if err := Force(ctx, pool, schema, 99); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("Force(99) = %v, want InvalidArgument", err)
	}
	if err := Migrate(ctx, pool, "Bad", Up); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("Migrate(bad schema) = %v, want InvalidArgument", err)
	}
	if _, err := MigrationStatus(ctx, pool, "pg_x"); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("MigrationStatus(bad schema) = %v, want InvalidArgument", err)
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
	if err := Migrate(ctx, pool, schema, Up); err != nil {
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
		b, err := Open(ctx, dsn+"&migrate=verify&schema="+schema)
		if err != nil {
			t.Fatalf("driver=%s: migrate=verify as a role without CREATE: %v", drv, err)
		}
		if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r-" + drv, Owner: "o", TTL: 10e9}); err != nil {
			t.Errorf("driver=%s: AcquireLease as the app role: %v", drv, err)
		}
		b.Close()
		// auto on a current schema runs no DDL either.
		b, err = Open(ctx, dsn+"&migrate=auto&schema="+schema)
		if err != nil {
			t.Fatalf("driver=%s: migrate=auto on a current schema as a role without CREATE: %v", drv, err)
		}
		b.Close()

		// verify on a schema that does not exist fails and creates nothing.
		_, err = Open(ctx, dsn+"&migrate=verify&schema="+missing)
		if contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "older") {
			t.Errorf("driver=%s: verify of a missing schema = %v, want SchemaMismatch saying it is older", drv, err)
		}
		var exists bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, missing).Scan(&exists)
		if exists {
			t.Errorf("driver=%s: migrate=verify created the schema", drv)
		}
		// auto on it fails for lack of privilege.
		if _, err := Open(ctx, dsn+"&migrate=auto&schema="+missing); err == nil {
			t.Errorf("driver=%s: migrate=auto created a schema as a role without CREATE", drv)
		}
	}
}

// TestMigrateDBUpDownUp migrates through database/sql (lib/pq and pgx's
// stdlib) with the package functions and the Backend methods, and checks
// that the connection the migrations ran on (search_path changed) never
// goes back to the caller's pool.
func TestMigrateDBUpDownUp(t *testing.T) {
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

			st, err := MigrationStatusDB(ctx, db, schema)
			if err != nil || st.Version != 0 || st.Dirty {
				t.Fatalf("status of a missing schema = %+v, %v", st, err)
			}
			if err := MigrateDB(ctx, db, schema, Up); err != nil {
				t.Fatalf("MigrateDB up: %v", err)
			}
			if p := searchPath(); p != before {
				t.Errorf("search_path after MigrateDB = %q, want %q: the migration connection went back to the pool", p, before)
			}
			if st, err := MigrationStatusDB(ctx, db, schema); err != nil || !st.Current() {
				t.Fatalf("status after up = %+v, %v", st, err)
			}
			b, err := NewFromDB(ctx, db, Options{Schema: schema, Migrate: MigrateVerify})
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
			if err := ForceDB(ctx, db, schema, 99); contract.CodeOf(err) != contract.InvalidArgument {
				t.Errorf("ForceDB(99) = %v, want InvalidArgument", err)
			}
			if _, err := b.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.NotFound {
				t.Errorf("GetLease after up again: %v, want NotFound", err)
			}
			if p := searchPath(); p != before {
				t.Errorf("search_path at the end = %q, want %q", p, before)
			}
			// migrate=auto through NewFromDB on a fresh schema.
			fresh := srv.Schema(t)
			b2, err := NewFromDB(ctx, db, Options{Schema: fresh})
			if err != nil {
				t.Fatalf("NewFromDB(auto) on an empty schema: %v", err)
			}
			if st, err := b2.MigrationStatus(ctx); err != nil || !st.Current() {
				t.Errorf("status after NewFromDB(auto) = %+v, %v", st, err)
			}
			b2.Close()
		})
	}
	// nil handles are rejected, not dereferenced.
	ctx := t.Context()
	if err := Migrate(ctx, nil, "s", Up); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("Migrate(nil pool) = %v", err)
	}
	if err := MigrateDB(ctx, nil, "s", Up); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("MigrateDB(nil db) = %v", err)
	}
	if _, err := MigrationStatus(ctx, nil, "s"); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("MigrationStatus(nil pool) = %v", err)
	}
	if _, err := MigrationStatusDB(ctx, nil, "s"); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("MigrationStatusDB(nil db) = %v", err)
	}
	if err := Force(ctx, nil, "s", 1); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("Force(nil pool) = %v", err)
	}
	if err := ForceDB(ctx, nil, "s", 1); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("ForceDB(nil db) = %v", err)
	}
}
