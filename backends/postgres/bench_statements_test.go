package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The lease statements as they were before issue 30 (commit 98688da),
// with {schema} for the quoted schema: BenchmarkLeaseStatementsBeforeAfter
// runs them beside the current ones. They run on a schema of version 6 as
// on one of version 5 (they name no column of migration 6).
const (
	beforeAcquireLease = `INSERT INTO {schema}.leases AS l (scope, resource, owner, token, acquired_at, expires_at, released)
SELECT $3::text, $4::text, $5::text, nextval('{schema}.lease_tokens'::regclass), c.now,
       c.now + make_interval(secs => $6::float8), false
FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
ON CONFLICT (scope, resource) DO UPDATE SET
  owner = excluded.owner, token = nextval('{schema}.lease_tokens'::regclass),
  acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released = false
WHERE l.released OR l.expires_at < excluded.acquired_at - make_interval(secs => $2::float8)
RETURNING l.owner, l.token, l.acquired_at, l.expires_at`
	beforeReleaseLease = `UPDATE {schema}.leases l SET released = true, expires_at = least(l.expires_at, c.now)
FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
WHERE l.scope = $2::text AND l.resource = $3::text AND l.owner = $4::text AND l.token = $5::bigint
  AND NOT l.released
RETURNING l.token`
	beforeRenewLease = `UPDATE {schema}.leases l SET expires_at = c.now + make_interval(secs => $7::float8)
FROM (SELECT coalesce($1::timestamptz, now()) AS now, make_interval(secs => $2::float8) AS tol) c
WHERE l.scope = $3::text AND l.resource = $4::text AND l.owner = $5::text AND l.token = $6::bigint
  AND NOT l.released AND l.expires_at > c.now + c.tol
RETURNING l.owner, l.token, l.acquired_at, l.expires_at`
	beforeGetLease = `SELECT l.owner, l.token, l.acquired_at, l.expires_at FROM {schema}.leases l
WHERE l.scope = $1::text AND l.resource = $2::text AND NOT l.released`
)

// BenchmarkLeaseStatementsBeforeAfter runs each lease statement as the
// backend sends it now (ns/op) and as it sent it before issue 30
// (before-ns/op), both through raw pgx on one pool and one schema, in 20
// interleaved rounds (so that machine drift hits both alike), at 1 and 16
// clients; ratio is before-ns/op ÷ ns/op (1.00: no slower). The new
// statements carry a value (none here) and the NOTIFY channel; nobody
// watches these leases, so they do not notify.
//
//	AcquireRelease  a grant and its release, each client on a lease of its
//	                own (after the first, every grant takes over the
//	                released row): two statements per op.
//	Acquire         a grant of a resource never used before (the insert).
//	Renew, Get      RenewLease and GetLease of a held lease.
//
// With DURABLE_BENCH_SYNC=1 it runs on a private cluster with fsync on
// (see syncedBench) instead of the shared test cluster. Run it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkLeaseStatementsBeforeAfter -benchtime 3000x -count 5 ./backends/postgres/
func BenchmarkLeaseStatementsBeforeAfter(b *testing.B) {
	var env *benchEnv
	if pgtestSynced() {
		_, env = syncedBench(b)
	} else {
		srv := pgtest.Require(b)
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, srv.DSN()+"&pool_max_conns=20&pool_min_conns=20")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		be, err := NewBackend(ctx, pool, Options{Schema: srv.Schema(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		env = &benchEnv{b: be, pool: pool, q: quoteIdent(be.schema), runs: new(atomic.Int64)}
	}
	for _, op := range leaseStatementOps(env) {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", op.name, clients), func(b *testing.B) {
				env.run(b, op, clients)
			})
		}
	}
}

func pgtestSynced() bool { return os.Getenv("DURABLE_BENCH_SYNC") == "1" }

func leaseStatementOps(e *benchEnv) []benchOp {
	be, q := e.b, e.q
	old := func(s string) string { return strings.ReplaceAll(s, "{schema}", q) }
	oldAcquire, oldRelease, oldRenew, oldGet := old(beforeAcquireLease), old(beforeReleaseLease), old(beforeRenewLease), old(beforeGetLease)
	const scope = "bench"
	ttl, tol := seconds(benchTTL), be.tolSecs
	newAcquire := func(ctx context.Context, res string) (int64, error) {
		var r grantRow
		err := e.pool.QueryRow(ctx, qAcquireLease.sql(be.st), nil, tol, scope, res, "o", ttl, nil, be.channel, leaseNotifyPayload(scope, res)).Scan(r.dest()...)
		return r.token, err
	}
	oldAcquireRow := func(ctx context.Context, res string) (int64, error) {
		var r leaseRow
		err := e.pool.QueryRow(ctx, oldAcquire, nil, tol, scope, res, "o", ttl).Scan(&r.owner, &r.token, &r.acquired, &r.expires)
		return r.token, err
	}
	newRelease := func(ctx context.Context, res string, token int64) error {
		var r releaseRow
		return e.pool.QueryRow(ctx, qReleaseLease.sql(be.st), nil, scope, res, "o", token, be.channel, leaseNotifyPayload(scope, res)).Scan(r.dest()...)
	}
	oldReleaseRow := func(ctx context.Context, res string, token int64) error {
		var t int64
		return e.pool.QueryRow(ctx, oldRelease, nil, scope, res, "o", token).Scan(&t)
	}
	pair := func(acquire func(context.Context, string) (int64, error), release func(context.Context, string, int64) error) func(context.Context, string, int64, int64) error {
		return func(ctx context.Context, p string, slot, _ int64) error {
			res := fmt.Sprintf("%sh-%d", p, slot)
			token, err := acquire(ctx, res)
			if err != nil {
				return fmt.Errorf("acquire %s: %w", res, err)
			}
			return release(ctx, res, token)
		}
	}
	fresh := func(acquire func(context.Context, string) (int64, error)) func(context.Context, string, int64, int64) error {
		return func(ctx context.Context, p string, _, i int64) error {
			_, err := acquire(ctx, fmt.Sprintf("%sn-%d", p, i))
			return err
		}
	}
	// held makes one lease <prefix>s-<slot> per slot, token slot+1.
	held := func(ctx context.Context, prefix string, _, slots int) error {
		return e.exec(ctx, `INSERT INTO `+q+`.leases (scope, resource, owner, token, acquired_at, expires_at)
			SELECT $1, $2 || 's-' || g, 'o', g + 1, now(), now() + interval '1 hour' FROM generate_series(0, $3::int - 1) g`,
			scope, prefix, slots)
	}
	return []benchOp{
		{name: "AcquireRelease", durable: pair(newAcquire, newRelease), raw: pair(oldAcquireRow, oldReleaseRow), rawName: "before"},
		{name: "Acquire", durable: fresh(newAcquire), raw: fresh(oldAcquireRow), rawName: "before"},
		{
			name: "Renew", prepare: held, rawName: "before",
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				var r leaseRow
				return e.pool.QueryRow(ctx, qRenewLease.sql(be.st), nil, tol, scope, fmt.Sprintf("%ss-%d", p, slot), "o", slot+1, ttl).Scan(r.dest()...)
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r leaseRow
				return e.pool.QueryRow(ctx, oldRenew, nil, tol, scope, fmt.Sprintf("%ss-%d", p, slot), "o", slot+1, ttl).Scan(&r.owner, &r.token, &r.acquired, &r.expires)
			},
		},
		{
			name: "Get", prepare: held, rawName: "before",
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				var r leaseRow
				return e.pool.QueryRow(ctx, qGetLease.sql(be.st), scope, fmt.Sprintf("%ss-%d", p, slot)).Scan(r.dest()...)
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r leaseRow
				return e.pool.QueryRow(ctx, oldGet, scope, fmt.Sprintf("%ss-%d", p, slot)).Scan(&r.owner, &r.token, &r.acquired, &r.expires)
			},
		},
	}
}
