package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// preparedOnConn returns how many named prepared statements the backend's
// only connection holds (pool_max_conns=1) and how many distinct texts
// they have, asking on that connection without preparing anything.
func preparedOnConn(t *testing.T, ctx context.Context, b *Backend) (n, distinct int) {
	t.Helper()
	const q = `SELECT count(*), count(DISTINCT statement) FROM pg_catalog.pg_prepared_statements`
	var err error
	switch {
	case b.Pool() != nil:
		err = b.Pool().QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&n, &distinct)
	case pgclient.IsStdlib(b.DB()):
		err = b.DB().QueryRowContext(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&n, &distinct)
	default: // lib/pq sends a statement without arguments as a simple query
		err = b.DB().QueryRowContext(ctx, q).Scan(&n, &distinct)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n, distinct
}

// TestStatementsArePreparedOncePerConnection runs every fast-path step twice
// on a backend with one connection, on each DSN client, and reads the
// server's list of the connection's prepared statements: every statement
// with arguments is prepared once, on its first run, and never again.
// (lib/pq used to send every statement unnamed, parsed and planned on every
// call.)
func TestStatementsArePreparedOncePerConnection(t *testing.T) {
	srv := pgtest.Require(t)
	enablePQPrepare(t)
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			b, err := c.open(ctx, srv.DSN()+"&pool_max_conns=1", Options{
				Schema: schema, Clock: newTestClock(), Migrate: MigrateOff, Listen: ListenOff,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			rec := &recordingQuerier{querier: b.q}
			b.q = rec
			steps := fastPathSteps(t, ctx, b, func() { rec.take() })
			before, _ := preparedOnConn(t, ctx, b)
			withArgs := map[string]bool{}
			var counts [2]int
			for pass := range 2 {
				if pass == 1 {
					if _, err := admin.Exec(ctx, `TRUNCATE `+quoteIdent(schema)+`.workflows, `+quoteIdent(schema)+`.idempotency_keys, `+quoteIdent(schema)+`.leases`); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range steps {
					rec.take()
					if err := s.op(); err != nil {
						t.Fatalf("pass %d: %s: %v", pass+1, s.name, err)
					}
					for _, text := range rec.take() {
						if strings.Contains(text, "$1") {
							withArgs[text] = true
						}
					}
				}
				n, distinct := preparedOnConn(t, ctx, b)
				if n != distinct {
					t.Errorf("pass %d: %d prepared statements for %d texts: a statement was prepared twice", pass+1, n, distinct)
				}
				counts[pass] = n - before
			}
			if counts[0] < len(withArgs) || counts[1] != counts[0] {
				t.Errorf("prepared statements: %d after the first pass, %d after the second, for %d statements with arguments; want %d both times",
					counts[0], counts[1], len(withArgs), len(withArgs))
			}
		})
	}
}

// TestPoolerTransactionNeverPrepares: with pooler=transaction no client
// leaves a named prepared statement on its connection, whatever it runs.
func TestPoolerTransactionNeverPrepares(t *testing.T) {
	srv := pgtest.Require(t)
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			b, err := c.open(ctx, srv.DSN()+"&pool_max_conns=1&pooler=transaction", Options{
				Schema: schema, Clock: newTestClock(), Migrate: MigrateOff, Listen: ListenOff, Pooler: PoolerTransaction,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, s := range fastPathSteps(t, ctx, b, func() {}) {
				if err := s.op(); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
			}
			if n, _ := preparedOnConn(t, ctx, b); n != 0 {
				t.Errorf("%d named prepared statements with pooler=transaction, want 0", n)
			}
		})
	}
}

// TestLibPQPreparesOnlyOnDirectConnections: behind a transaction pooler
// that pooler=auto cannot see on lib/pq, each connection finds out for
// itself (its session key does not name the server process) and runs its
// statements unnamed: lib/pq numbers its statements per connection, so a
// named one could run as another client's statement of the same name.
func TestLibPQPreparesOnlyOnDirectConnections(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	enablePQPrepare(t)
	srv := bouncer.Server()
	for _, route := range []struct {
		name   string
		dsn    string
		direct bool
	}{{"direct", srv.DSN(), true}, {"pgbouncer", bouncer.DSN(), false}} {
		t.Run(route.name, func(t *testing.T) {
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			b, err := openDSN(ctx, route.dsn+"&driver=pq&listen=off&pool_max_conns=4&migrate=verify&schema="+schema)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			// Several clients, so that statements move between server
			// sessions behind the pooler.
			errc := make(chan error, 8)
			for i := range 8 {
				go func() {
					id := "wf-" + string(rune('a'+i))
					_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: "s0"})
					for j := 0; err == nil && j < 20; j++ {
						if _, err = b.GetWorkflow(ctx, "", id); err == nil {
							_, err = b.UpdateWorkflow(ctx, contract.Update{ID: id, ExpectStatus: "s0", Status: "s0", Snapshot: []byte{byte(j)}})
						}
					}
					errc <- err
				}()
			}
			for range 8 {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			conn, err := b.DB().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var direct, prepared bool
			if err := conn.Raw(func(dc any) error {
				d, n := pgclient.PreparedOn(b.q, dc)
				direct, prepared = d, n > 0
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if direct != route.direct || prepared != route.direct {
				t.Errorf("a connection: direct %v, prepared statements %v; want %v", direct, prepared, route.direct)
			}
		})
	}
}

// enablePQPrepare keeps lib/pq's prepared statements on (see
// pgclient.PQPrepare) until t ends, whatever another test does.
func enablePQPrepare(t *testing.T) {
	pgclient.PQPrepare.Add(1)
	t.Cleanup(func() { pgclient.PQPrepare.Add(-1) })
}
