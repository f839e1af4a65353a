package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
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
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			b, err := Open(ctx, srv.DSN()+"&pool_max_conns=2&schema="+schema)
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
	for _, mode := range []string{"auto", "verify"} {
		_, err := Open(ctx, srv.DSN()+"&migrate="+mode+"&schema="+schema)
		if contract.CodeOf(err) != contract.SchemaMismatch {
			t.Errorf("migrate=%s: Open = %v, want SchemaMismatch", mode, err)
		} else if !strings.Contains(err.Error(), "newer than this code") {
			t.Errorf("migrate=%s: error %q does not say the schema is newer", mode, err)
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
	for _, mode := range []string{"auto", "verify"} {
		_, err := Open(ctx, srv.DSN()+"&migrate="+mode+"&schema="+schema)
		if contract.CodeOf(err) != contract.SchemaMismatch {
			t.Fatalf("migrate=%s: Open = %v, want SchemaMismatch", mode, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "dirty") || !strings.Contains(msg, "durable migrate force <version>") {
			t.Errorf("migrate=%s: error %q does not name the fix", mode, msg)
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
	dsn := srv.WithUser(role, "")
	b, err := Open(ctx, dsn+"&migrate=verify&schema="+schema)
	if err != nil {
		t.Fatalf("migrate=verify as a role without CREATE: %v", err)
	}
	if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: 10e9}); err != nil {
		t.Errorf("AcquireLease as the app role: %v", err)
	}
	b.Close()
	// auto on a current schema runs no DDL either.
	b, err = Open(ctx, dsn+"&migrate=auto&schema="+schema)
	if err != nil {
		t.Fatalf("migrate=auto on a current schema as a role without CREATE: %v", err)
	}
	b.Close()

	// verify on a schema that does not exist fails and creates nothing.
	missing := srv.Schema(t)
	_, err = Open(ctx, dsn+"&migrate=verify&schema="+missing)
	if contract.CodeOf(err) != contract.SchemaMismatch || !strings.Contains(err.Error(), "older") {
		t.Errorf("verify of a missing schema = %v, want SchemaMismatch saying it is older", err)
	}
	var exists bool
	_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, missing).Scan(&exists)
	if exists {
		t.Error("migrate=verify created the schema")
	}
	// auto on it fails for lack of privilege.
	if _, err := Open(ctx, dsn+"&migrate=auto&schema="+missing); err == nil {
		t.Error("migrate=auto created a schema as a role without CREATE")
	}
}
