package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// syncedBench starts a private cluster with fsync, full_page_writes and
// synchronous_commit on (the shared test cluster runs with them off, which
// hides the cost of a commit, and of a commit that notifies), and returns
// a backend on a fresh schema with a pgx pool of 20, and its bench
// environment.
func syncedBench(b *testing.B) (*pgtest.Private, *benchEnv) {
	srv := pgtest.StartPrivate(b)
	ctx := context.Background()
	for _, s := range []string{
		`ALTER SYSTEM SET fsync = on`,
		`ALTER SYSTEM SET full_page_writes = on`,
		`ALTER SYSTEM SET synchronous_commit = on`,
		`SELECT pg_reload_conf()`,
	} {
		if err := srv.Exec(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	schema := srv.Schema(b)
	pool, err := pgxpool.New(ctx, srv.DSN()+"&pool_max_conns=20&pool_min_conns=20")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var fsync string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync') || '/' || current_setting('synchronous_commit')`).Scan(&fsync); err != nil || fsync != "on/on" {
		b.Fatalf("fsync/synchronous_commit = %q, %v; want on/on", fsync, err)
	}
	be, err := NewBackend(ctx, pool, Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return srv, &benchEnv{b: be, pool: pool, q: quoteIdent(schema), runs: new(atomic.Int64)}
}

// BenchmarkLeasePaths measures a lease's grant and release, the mutex's
// cycle, on a private cluster with fsync on (see syncedBench), pgx pool of
// 20, at 1 and 16 clients, as pairs of statements (ns/op per pair,
// pairs/s):
//
//	AcquireRelease     each client acquires and releases a lease of its
//	                   own, again and again: after its first grant, every
//	                   grant takes over the released row (the usual path).
//	AcquireReleaseNew  each pair on a resource never used before: the
//	                   grant inserts the row.
//
// Nobody watches these leases, so neither statement notifies. It runs on
// the code before issue 30 too (the same file), which is how BENCHMARKS.md
// compares the two. Run it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkLeasePaths -benchtime 3000x ./backends/postgres/
func BenchmarkLeasePaths(b *testing.B) {
	_, env := syncedBench(b)
	for _, op := range leasePathOps(env) {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", op.name, clients), func(b *testing.B) {
				env.run(b, op, clients)
			})
		}
	}
}

func leasePathOps(e *benchEnv) []benchOp {
	be := e.b
	pair := func(ctx context.Context, resource string) error {
		l, err := be.AcquireLease(ctx, contract.LeaseRequest{Scope: "bench", Resource: resource, Owner: "o", TTL: benchTTL})
		if err != nil {
			return err
		}
		ok, err := be.ReleaseLease(ctx, l)
		if err == nil && !ok {
			err = fmt.Errorf("ReleaseLease %s: false", resource)
		}
		return err
	}
	return []benchOp{
		{
			name: "AcquireRelease", rate: "pairs/s",
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				return pair(ctx, fmt.Sprintf("%sh-%d", p, slot))
			},
		},
		{
			name: "AcquireReleaseNew", rate: "pairs/s",
			durable: func(ctx context.Context, p string, _, i int64) error {
				return pair(ctx, fmt.Sprintf("%sn-%d", p, i))
			},
		},
	}
}
