package postgres

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/golang-migrate/migrate/v4/database"
	pgmigrate "github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

// poolerParams are the DSN parameters of each client through a
// transaction pooler: pooler=transaction (statements run unnamed, WaitKey
// polls).
var poolerParams = map[string]string{
	"pgx":        "&pooler=transaction",
	"pq":         "&driver=pq&pooler=transaction",
	"pgx-stdlib": "&driver=pgx-stdlib&pooler=transaction",
}

var clientDrivers = []string{"pgx", "pq", "pgx-stdlib"}

// freshDatabase creates an empty database and returns its name; it is
// dropped when t ends. Its schema public is the test's alone. Only for
// direct connections: dropping a database that PgBouncer holds server
// connections to (DROP DATABASE … WITH (FORCE) ends them) can crash
// PgBouncer 1.18, which every test shares.
func freshDatabase(t *testing.T, srv *pgtest.Server) string {
	t.Helper()
	name := randomName("durable_mig_")
	if err := srv.Exec(t.Context(), `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	return name
}

// relations returns "name kind" for every table and sequence in schema.
func relations(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT c.relname || ' ' || c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'S', 'p', 'v') ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// poolerNoise keeps the pooler's server connections busy with short
// statements of other clients until t ends, so that consecutive
// transactions (and the statements of a client outside a transaction) of
// a test's client land on different server connections, as in
// production. Without it a lone client gets the same server connection
// back every time and session state seems to survive. The noise stops
// between statements: a statement ended by its context would make pgx
// send a cancel request, and PgBouncer 1.18 can crash when a cancel
// request races with server connections ending.
func poolerNoise(t *testing.T, dsn string) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	for range 6 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, dsn+"&default_query_exec_mode=simple_protocol")
			if err != nil {
				return
			}
			defer conn.Close(context.Background())
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Exec(context.Background(), `SELECT pg_sleep(0.002)`); err != nil {
					return
				}
			}
		})
	}
}

// durableRelations returns the relations of schema named as one of
// durable's (other tests may keep relations of their own in public).
func durableRelations(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	var out []string
	for _, r := range relations(t, pool, schema) {
		name, _, _ := strings.Cut(r, " ")
		if slices.ContainsFunc(wantRelations, func(w string) bool { return strings.HasPrefix(w, name+" ") }) {
			out = append(out, r)
		}
	}
	return out
}

// wantRelations are the relations of a current schema.
var wantRelations = []string{"idempotency_keys r", "lease_tokens S", "leases r", "schema_migrations r", "workflows r"}

// noSQLInError fails t when err's text quotes SQL, a DSN or a password.
func noSQLInError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, s := range []string{"SELECT", "CREATE", "ALTER", "DROP ", "INSERT", "postgres://", pgtest.PasswordRolePassword} {
		if strings.Contains(msg, s) {
			t.Errorf("error %q contains %q", msg, s)
		}
	}
}

// TestMigrateThroughTransactionPooler migrates through PgBouncer in
// transaction mode on every client library, with pooler=transaction and
// with the DSN a new user writes, while other clients keep the
// pooler's server connections busy: every table and the sequence land in
// the named schema and nothing in public, opening through the pooler with
// migrate=verify then succeeds, and Down, Up again and Force work there
// too.
func TestMigrateThroughTransactionPooler(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	srv := bouncer.Server()
	direct := newPool(t, srv.DSN())
	pooled := bouncer.DSN()
	poolerNoise(t, pooled)
	if got := durableRelations(t, direct, "public"); len(got) != 0 {
		t.Fatalf("public holds %q before the test", got)
	}
	defaultParams := map[string]string{"pgx": "", "pq": "&driver=pq", "pgx-stdlib": "&driver=pgx-stdlib"}
	for _, c := range []struct {
		style  string
		params map[string]string
	}{{"pooler=transaction", poolerParams}, {"default", defaultParams}} {
		for _, drv := range clientDrivers {
			t.Run(drv+"/"+c.style, func(t *testing.T) {
				t.Parallel()
				testMigrateThroughPooler(t, bouncer, direct, pooled+c.params[drv])
			})
		}
	}
}

// testMigrateThroughPooler is TestMigrateThroughTransactionPooler for one
// DSN through the pooler.
func testMigrateThroughPooler(t *testing.T, bouncer *pgtest.Bouncer, direct *pgxpool.Pool, base string) {
	ctx := t.Context()
	schema := bouncer.Server().Schema(t)
	dsn := base + "&schema=" + schema
	b, err := openDSN(ctx, dsn+"&migrate=auto")
	if err != nil {
		t.Fatalf("Open(migrate=auto) through the pooler: %v\n%s", err, bouncer.Log())
	}
	b.Close()
	if got := relations(t, direct, schema); !slices.Equal(got, wantRelations) {
		t.Errorf("relations in the schema = %q, want %q", got, wantRelations)
	}
	if got := durableRelations(t, direct, "public"); len(got) != 0 {
		t.Errorf("relations in public = %q, want none of durable's", got)
	}
	if st, err := poolMigrationStatus(ctx, direct, schema); err != nil || !st.Current() {
		t.Errorf("status read directly = %+v, %v", st, err)
	}

	b, err = openDSN(ctx, dsn+"&migrate=verify")
	if err != nil {
		t.Fatalf("Open(migrate=verify) through the pooler: %v", err)
	}
	defer b.Close()
	if missing, elsewhere, err := b.schemaObjects(ctx); err != nil || len(missing) != 0 || len(elsewhere) != 0 {
		t.Errorf("schemaObjects = %q, %q, %v", missing, elsewhere, err)
	}
	// Down, Up and Force run through the same driver.
	if err := b.Migrate(ctx, Down); err != nil {
		t.Fatalf("Migrate(Down) through the pooler: %v", err)
	}
	if got := relations(t, direct, schema); !slices.Equal(got, []string{"schema_migrations r"}) {
		t.Errorf("relations after down = %q", got)
	}
	if st, err := b.MigrationStatus(ctx); err != nil || st.Version != 0 || st.Dirty {
		t.Errorf("status after down = %+v, %v", st, err)
	}
	if err := b.Migrate(ctx, Up); err != nil {
		t.Fatalf("Migrate(Up) through the pooler: %v", err)
	}
	if err := b.Force(ctx, int(LatestVersion())); err != nil {
		t.Fatalf("Force through the pooler: %v", err)
	}
	if got := relations(t, direct, schema); !slices.Equal(got, wantRelations) {
		t.Errorf("relations after up again = %q", got)
	}
	if st, err := b.MigrationStatus(ctx); err != nil || !st.Current() {
		t.Errorf("status after up again = %+v, %v", st, err)
	}
	if got := durableRelations(t, direct, "public"); len(got) != 0 {
		t.Errorf("relations in public = %q, want none of durable's", got)
	}
}

// TestConcurrentMigratorsOfOneSchema: eight processes (each a backend
// with a pool of its own, on the three client libraries in turn) migrate
// one fresh schema at once, directly and through the pooler. All succeed,
// and the schema ends current, clean and complete.
func TestConcurrentMigratorsOfOneSchema(t *testing.T) {
	srv := pgtest.Require(t)
	for _, via := range []string{"direct", "pooler"} {
		t.Run(via, func(t *testing.T) {
			ctx := t.Context()
			base, params := srv.DSN(), map[string]string{"pgx": "", "pq": "&driver=pq", "pgx-stdlib": "&driver=pgx-stdlib"}
			if via == "pooler" {
				base, params = pgtest.RequireBouncer(t).DSN(), poolerParams
				poolerNoise(t, base)
			}
			schema := srv.Schema(t)
			const n = 8
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					drv := clientDrivers[i%len(clientDrivers)]
					<-start
					b, err := openDSN(ctx, base+params[drv]+"&pool_max_conns=2&schema="+schema+"&migrate=auto")
					if err == nil {
						err = b.Close()
					}
					errs[i] = err
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("migrator %d (%s): %v", i, clientDrivers[i%len(clientDrivers)], err)
				}
			}
			pool := newPool(t, srv.DSN())
			if st, err := poolMigrationStatus(ctx, pool, schema); err != nil || !st.Current() {
				t.Errorf("status = %+v, %v", st, err)
			}
			var rows int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+quoteIdent(schema)+`.schema_migrations`).Scan(&rows); err != nil || rows != 1 {
				t.Errorf("version table has %d rows, %v", rows, err)
			}
			if got := relations(t, pool, schema); !slices.Equal(got, wantRelations) {
				t.Errorf("relations = %q, want %q", got, wantRelations)
			}
		})
	}
}

// oldMigrator takes golang-migrate's session-level migration lock for
// schema the way earlier versions of this package did (golang-migrate's
// postgres driver, on a connection of its own), and returns its driver.
func oldMigrator(t *testing.T, dsn, schema string) database.Driver {
	t.Helper()
	c, err := pq.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	drv, err := pgmigrate.WithInstance(db, &pgmigrate.Config{SchemaName: schema, MigrationsTable: MigrationsTable})
	if err != nil {
		t.Fatalf("golang-migrate's postgres driver: %v", err)
	}
	return drv
}

// advisoryWaiters counts server processes waiting for the advisory lock key.
func advisoryWaiters(t *testing.T, pool *pgxpool.Pool, key int64) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND (classid::bigint << 32) | objid::bigint = $1 AND objsubid = 1`, key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrationLockSerializesWithOlderVersions: the migration lock is the
// key golang-migrate's postgres driver (what earlier versions used) takes
// for the session, taken here for the transaction, so each waits for the
// other. A wait ends when the context does (Canceled) or runs out
// (Unavailable), leaving no server process queued for the lock.
func TestMigrationLockSerializesWithOlderVersions(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+quoteIdent(schema)); err != nil {
		t.Fatal(err)
	}
	var dbName string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	key, err := migrationLockKey(dbName, schema)
	if err != nil {
		t.Fatal(err)
	}
	old := oldMigrator(t, srv.DSN(), schema)
	if err := old.Lock(); err != nil {
		t.Fatal(err)
	}
	for _, drv := range clientDrivers {
		m, err := openBackend(ctx, srv.DSN()+"&schema="+schema+"&driver="+drv, openMode(MigrateOff))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()

		// A deadline: the wait runs out.
		dctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		t0 := time.Now()
		err = m.Migrate(dctx, Up)
		cancel()
		if contract.CodeOf(err) != contract.Unavailable || !strings.Contains(err.Error(), "migration lock") {
			t.Errorf("%s: Migrate while an older version holds the lock = %v, want Unavailable (migration lock)", drv, err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%s: Migrate returned after %s, past its deadline", drv, d)
		}
		noSQLInError(t, err)

		// A cancellation: the wait ends at once.
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		t0 = time.Now()
		err = m.Migrate(cctx, Up)
		if contract.CodeOf(err) != contract.Canceled {
			t.Errorf("%s: Migrate cancelled while waiting for the lock = %v, want Canceled", drv, err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%s: Migrate returned %s after it was cancelled", drv, d)
		}
		waitFor(t, func() bool { return advisoryWaiters(t, pool, key) == 0 })
		if st, err := poolMigrationStatus(ctx, pool, schema); err != nil || st.Version != 0 || st.Dirty {
			t.Errorf("%s: status after the waits = %+v, %v", drv, st, err)
		}
	}

	// The lock comes free: a waiting migration proceeds.
	m := migrator(t, pool, schema)
	done := make(chan error, 1)
	go func() { done <- m.Migrate(ctx, Up) }()
	select {
	case err := <-done:
		t.Fatalf("Migrate returned while an older version held the lock: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := old.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Migrate after the lock came free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Migrate did not proceed after the lock came free")
	}
	if st, err := m.MigrationStatus(ctx); err != nil || !st.Current() {
		t.Errorf("status = %+v, %v", st, err)
	}

	// And the other way round: while a migration holds the lock, an older
	// version's migrator waits for it.
	d := newTxDriver(ctx, pgclient.FromPool(pool), schema, false)
	defer d.Close()
	if err := d.Lock(); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { locked <- old.Lock() }()
	select {
	case err := <-locked:
		t.Fatalf("the older migrator took the lock while a migration held it: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := d.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
		_ = old.Unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("the older migrator did not get the lock after the migration released it")
	}
}

// TestMigrationDriverCloseEndsTheTransaction: a driver closed while it
// holds the lock rolls its transaction back, so the lock is free again;
// methods that need the lock fail without it.
func TestMigrationDriverCloseEndsTheTransaction(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	d := newTxDriver(ctx, pgclient.FromPool(pool), schema, false)
	if _, _, err := d.Version(); !errors.Is(err, database.ErrNotLocked) {
		t.Errorf("Version without the lock = %v", err)
	}
	if err := d.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := d.Lock(); err == nil {
		t.Error("a second Lock succeeded")
	}
	if err := d.SetVersion(1, false); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Rolled back: the schema (created under the lock) is gone, and the
	// lock is free.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d2 := newTxDriver(lctx, pgclient.FromPool(pool), schema, false)
	defer d2.Close()
	if err := d2.Lock(); err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	if v, dirty, err := d2.Version(); err != nil || v != -1 || dirty {
		t.Errorf("Version after a closed driver's SetVersion = %d, %v, %v; want -1 (rolled back)", v, dirty, err)
	}
	if err := d2.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := d2.Unlock(); err == nil {
		t.Error("a second Unlock succeeded")
	}
	if err := d2.Drop(); err == nil {
		t.Error("Drop succeeded")
	}
	if _, err := d2.Open("postgres://x"); err == nil {
		t.Error("Open succeeded")
	}
}
