package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkFastPath measures every fast-path operation of the backend at 1
// and 16 concurrent clients (goroutines sharing one backend and its pool,
// each running operations back to back),
// and in the same benchmark raw pgx running the identical statement with
// the identical arguments on the same pool. It reports
//
//	ns/op        the backend (the timer covers only the backend's run)
//	pgx-ns/op    raw pgx
//	ratio        pgx-ns/op ÷ ns/op: the backend's throughput relative to
//	             raw pgx (1.0 = no overhead; the target is ≥ 0.9)
//
// Run it with
//
//	go test -run '^$' -bench BenchmarkFastPath -benchtime 2000x ./backends/postgres/
//
// Each run works on fresh records, so b.N units of work (claims to
// complete, leases to release, …) are prepared outside the timer.
func BenchmarkFastPath(b *testing.B) {
	srv := pgtest.Require(b)
	ctx := context.Background()
	schema := srv.Schema(b)
	pool, err := pgxpool.New(ctx, srv.DSN()+"&pool_max_conns=20&pool_min_conns=20")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	be, err := NewBackend(ctx, pool, Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	env := &benchEnv{b: be, pool: pool, q: quoteIdent(schema), runs: new(atomic.Int64)}
	for _, op := range benchOps(env) {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", op.name, clients), func(b *testing.B) {
				env.run(b, op, clients)
			})
		}
	}
}

type benchEnv struct {
	b     *Backend
	pool  *pgxpool.Pool // for preparing records, and raw pgx
	q     string        // quoted schema
	runs  *atomic.Int64 // numbers runs, for fresh record names
	noRaw bool          // measure the backend only
}

// BenchmarkClients measures every fast-path operation of the backend on
// each client library, side by side: driver=pgx (pgx's pool), driver=pq
// (lib/pq through database/sql, binary_parameters=yes) and
// driver=pgx-stdlib (pgx's stdlib through database/sql), each with a pool
// of 20 connections, at 1 and 16 concurrent clients. ns/op is the
// backend's time per operation (the same workloads as BenchmarkFastPath).
// Run it with
//
//	go test -run '^$' -bench BenchmarkClients -benchtime 2000x -count 5 ./backends/postgres/
func BenchmarkClients(b *testing.B) {
	srv := pgtest.Require(b)
	dsn := srv.DSN()
	sideBySide(b, srv, "driver", []benchRoute{
		{"pgx", dsn + "&driver=pgx"},
		{"pq", dsn + "&driver=pq"},
		{"pgx-stdlib", dsn + "&driver=pgx-stdlib"},
	})
}

// BenchmarkPgBouncer compares the fast-path operations directly against
// PostgreSQL and through PgBouncer in transaction mode (pgtest's: pool size
// 4 per database and user), on pgx and lib/pq. "direct-exec" isolates the
// cost of pgx's exec mode (unnamed statements, text format) from that of
// the extra hop.
func BenchmarkPgBouncer(b *testing.B) {
	bouncer := pgtest.RequireBouncer(b)
	srv := bouncer.Server()
	sideBySide(b, srv, "route", []benchRoute{
		{"direct", srv.DSN()},
		{"direct-exec", srv.DSN() + "&pooler=transaction"},
		{"pgbouncer", bouncer.DSN()},
		{"direct-pq", srv.DSN() + "&driver=pq"},
		{"pgbouncer-pq", bouncer.DSN() + "&driver=pq&pooler=transaction"},
	})
}

// benchRoute is one way of reaching the server: a name and a base DSN.
type benchRoute struct{ name, dsn string }

// sideBySide runs every fast-path operation at 1 and 16 clients on each
// route, one after the other, on one fresh migrated schema of srv; the
// sub-benchmarks are named operation/clients=N/label=route.
func sideBySide(b *testing.B, srv *pgtest.Server, label string, routes []benchRoute) {
	ctx := context.Background()
	schema := srv.Schema(b)
	pool, err := pgxpool.New(ctx, srv.DSN()+"&pool_max_conns=4")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if err := migratePool(ctx, pool, schema, Up); err != nil {
		b.Fatal(err)
	}
	runs := new(atomic.Int64)
	envs, ops := map[string]*benchEnv{}, map[string][]benchOp{}
	for _, r := range routes {
		be, err := openDSN(ctx, r.dsn+"&pool_max_conns=20&migrate=verify&schema="+schema)
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		envs[r.name] = &benchEnv{b: be, pool: pool, q: quoteIdent(schema), runs: runs, noRaw: true}
		ops[r.name] = benchOps(envs[r.name])
	}
	for i, op := range ops[routes[0].name] {
		for _, clients := range []int{1, 16} {
			for _, r := range routes {
				b.Run(fmt.Sprintf("%s/clients=%d/%s=%s", op.name, clients, label, r.name), func(b *testing.B) {
					envs[r.name].run(b, ops[r.name][i], clients)
				})
			}
		}
	}
}

// benchOp is one operation: prepare makes n units of work for a run named
// by prefix (and slots per-client records), then durable and raw each do
// unit i on behalf of client slot.
type benchOp struct {
	name    string
	prepare func(ctx context.Context, prefix string, n, slots int) error
	durable func(ctx context.Context, prefix string, slot, i int64) error
	raw     func(ctx context.Context, prefix string, slot, i int64) error // nil: none
	rawName string                                                        // the raw metric's name: "pgx" when empty
	rate    string                                                        // when set, also report durable units per second under this name
}

const benchTTL = time.Hour

func (e *benchEnv) exec(ctx context.Context, sql string, args ...any) error {
	_, err := e.pool.Exec(ctx, sql, args...)
	return err
}

// benchRounds interleaves the backend's and raw pgx's runs, so that
// warm-up (statements prepared on each connection) and drift hit both alike.
const benchRounds = 20

func (e *benchEnv) run(b *testing.B, op benchOp, clients int) {
	ctx := context.Background()
	run := e.runs.Add(1)
	dp, rp, wp := fmt.Sprintf("d%d-", run), fmt.Sprintf("r%d-", run), fmt.Sprintf("w%d-", run)
	warm := 4 * clients
	if op.prepare != nil {
		for _, p := range []struct {
			prefix string
			n      int
		}{{dp, b.N}, {rp, b.N}, {wp, 2 * warm}} {
			if err := op.prepare(ctx, p.prefix, p.n, clients); err != nil {
				b.Fatalf("prepare: %v", err)
			}
		}
	}
	// work runs units [from, to) of f on clients goroutines.
	work := func(prefix string, f func(context.Context, string, int64, int64) error, from, to int64) time.Duration {
		var next atomic.Int64
		next.Store(from)
		var wg sync.WaitGroup
		var failed atomic.Value
		start := time.Now()
		for slot := range int64(clients) {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= to {
						return
					}
					if err := f(ctx, prefix, slot, i); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
			})
		}
		wg.Wait()
		d := time.Since(start)
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		return d
	}
	// Warm every connection the clients use, for both.
	noRaw := e.noRaw || op.raw == nil
	work(wp, op.durable, 0, int64(warm))
	if !noRaw {
		work(wp, op.raw, int64(warm), int64(2*warm))
	}
	b.ResetTimer()
	b.StopTimer()
	var d, r time.Duration
	n := int64(b.N)
	for round := range int64(benchRounds) {
		from, to := n*round/benchRounds, n*(round+1)/benchRounds
		b.StartTimer()
		d += work(dp, op.durable, from, to)
		b.StopTimer()
		if !noRaw {
			r += work(rp, op.raw, from, to)
		}
	}
	if !noRaw {
		name := op.rawName
		if name == "" {
			name = "pgx"
		}
		b.ReportMetric(float64(r.Nanoseconds())/float64(b.N), name+"-ns/op")
		b.ReportMetric(float64(r)/float64(d), "ratio")
	}
	if op.rate != "" && d > 0 {
		b.ReportMetric(float64(b.N)/d.Seconds(), op.rate)
	}
}

func benchOps(e *benchEnv) []benchOp {
	be, st, q := e.b, e.b.st, e.q
	ttl := seconds(benchTTL)
	tol := be.tolSecs
	scope := "bench"
	wfID := func(prefix string, slot int64) string { return fmt.Sprintf("%swf-%d", prefix, slot) }
	slotWorkflows := func(ctx context.Context, prefix string, _, slots int) error {
		return e.exec(ctx, `INSERT INTO `+q+`.workflows (scope, id, status, revision, snapshot, created_at, updated_at)
			SELECT $1, $2 || 'wf-' || g, 'running', 1, '\x0102'::bytea, now(), now() FROM generate_series(0, $3::int - 1) g`,
			scope, prefix, slots)
	}
	// claims makes n claimed keys <prefix>k-<i> with token t-<i>, and one
	// per slot <prefix>s-<slot>.
	claims := func(ctx context.Context, prefix string, n, slots int) error {
		return e.exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, state, token, lease_until, created_at)
			SELECT $1, $2 || 'k-' || g, 'fp', 'claimed', 't-' || g, now() + interval '1 hour', now() FROM generate_series(0, $3::int - 1) g
			UNION ALL
			SELECT $1, $2 || 's-' || g, 'fp', 'claimed', 't-' || g, now() + interval '1 hour', now() FROM generate_series(0, $4::int - 1) g`,
			scope, prefix, n, slots)
	}
	// leases makes n leases <prefix>l-<i> with token i+1, and one per slot
	// <prefix>s-<slot> with token slot+1, all held by owner "o".
	leases := func(ctx context.Context, prefix string, n, slots int) error {
		return e.exec(ctx, `INSERT INTO `+q+`.leases (scope, resource, owner, token, acquired_at, expires_at)
			SELECT $1, $2 || 'l-' || g, 'o', g + 1, now(), now() + interval '1 hour' FROM generate_series(0, $3::int - 1) g
			UNION ALL
			SELECT $1, $2 || 's-' || g, 'o', g + 1, now(), now() + interval '1 hour' FROM generate_series(0, $4::int - 1) g`,
			scope, prefix, n, slots)
	}
	keyRef := func(key string) contract.KeyRef { return contract.KeyRef{Scope: contract.Scope(scope), Key: key} }
	rawRow := func(ctx context.Context, sql string, args []any, dest ...any) error {
		return e.pool.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	snapshot := []byte("snapshot bytes of a small workflow state")

	return []benchOp{
		{
			name: "CreateWorkflow",
			durable: func(ctx context.Context, p string, _, i int64) error {
				_, err := be.CreateWorkflow(ctx, contract.Workflow{Scope: contract.Scope(scope), ID: fmt.Sprintf("%sc-%d", p, i), Status: "running", Snapshot: snapshot})
				return err
			},
			raw: func(ctx context.Context, p string, _, i int64) error {
				var created time.Time
				return rawRow(ctx, qCreateWorkflow.sql(st), []any{nil, scope, fmt.Sprintf("%sc-%d", p, i), "", "running", snapshot}, &created)
			},
		},
		{
			name:    "GetWorkflow",
			prepare: slotWorkflows,
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				_, err := be.GetWorkflow(ctx, contract.Scope(scope), wfID(p, slot))
				return err
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r workflowRow
				return rawRow(ctx, qGetWorkflow.sql(st), []any{scope, wfID(p, slot)}, r.dest()...)
			},
		},
		{
			name:    "UpdateWorkflow",
			prepare: slotWorkflows,
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				_, err := be.UpdateWorkflow(ctx, contract.Update{Scope: contract.Scope(scope), ID: wfID(p, slot), ExpectStatus: "running", Status: "running", Snapshot: snapshot})
				return err
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r workflowRow
				var applied, fenceOK bool
				return rawRow(ctx, qUpdateWorkflow.sql(st), []any{nil, tol, scope, wfID(p, slot), "running", int64(0), nil, nil, nil, "running", "", snapshot},
					append([]any{&applied, &fenceOK}, r.dest()...)...)
			},
		},
		{
			// A page of 10 in a scope of its own (the same work for both).
			name: "ListWorkflows",
			prepare: func(ctx context.Context, prefix string, _, _ int) error {
				return e.exec(ctx, `INSERT INTO `+q+`.workflows (scope, id, status, revision, snapshot, created_at, updated_at)
					SELECT $1, 'wf-' || g, 'running', 1, $2::bytea, now(), now() FROM generate_series(0, 9) g`,
					prefix+"list", snapshot)
			},
			durable: func(ctx context.Context, p string, _, _ int64) error {
				_, err := be.ListWorkflows(ctx, contract.ListQuery{Scope: contract.Scope(p + "list"), Limit: 10})
				return err
			},
			raw: func(ctx context.Context, p string, _, _ int64) error {
				rows, err := e.pool.Query(ctx, qListWorkflows.sql(st), p+"list", "", 10)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var r workflowRow
					if err := rows.Scan(r.dest()...); err != nil {
						return err
					}
				}
				return rows.Err()
			},
		},
		{
			name: "ClaimKey",
			durable: func(ctx context.Context, p string, _, i int64) error {
				_, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: keyRef(fmt.Sprintf("%sn-%d", p, i)), Fingerprint: "fp", TTL: benchTTL})
				return err
			},
			raw: func(ctx context.Context, p string, _, i int64) error {
				var r claimKeyRow
				return rawRow(ctx, qClaimKey.sql(st), []any{nil, tol, scope, fmt.Sprintf("%sn-%d", p, i), "fp", "", newToken(), ttl}, r.dest()...)
			},
		},
		{
			name:    "CompleteKey",
			prepare: claims,
			durable: func(ctx context.Context, p string, _, i int64) error {
				_, err := be.CompleteKey(ctx, contract.Completion{KeyRef: keyRef(fmt.Sprintf("%sk-%d", p, i)), Token: fmt.Sprintf("t-%d", i),
					Outcome: contract.Outcome{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: snapshot}, Retain: benchTTL})
				return err
			},
			raw: func(ctx context.Context, p string, _, i int64) error {
				var r keyRow
				var applied, tokenOK, live, fenceOK bool
				header := encodeHeader(map[string][]string{"Content-Type": {"application/json"}})
				return rawRow(ctx, qCompleteKey.sql(st), []any{nil, tol, scope, fmt.Sprintf("%sk-%d", p, i), fmt.Sprintf("t-%d", i), int64(201), header,
					snapshot, "", ttl, nil, nil, nil, be.channel}, append([]any{&applied, &tokenOK, &live, &fenceOK}, r.dest()...)...)
			},
		},
		{
			name:    "RenewKey",
			prepare: claims,
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				_, err := be.RenewKey(ctx, keyRef(fmt.Sprintf("%ss-%d", p, slot)), fmt.Sprintf("t-%d", slot), benchTTL)
				return err
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r keyRow
				return rawRow(ctx, qRenewKey.sql(st), []any{nil, scope, fmt.Sprintf("%ss-%d", p, slot), fmt.Sprintf("t-%d", slot), ttl}, r.dest()...)
			},
		},
		{
			name:    "ReleaseKey",
			prepare: claims,
			durable: func(ctx context.Context, p string, _, i int64) error {
				ok, err := be.ReleaseKey(ctx, keyRef(fmt.Sprintf("%sk-%d", p, i)), fmt.Sprintf("t-%d", i))
				if err == nil && !ok {
					err = fmt.Errorf("ReleaseKey %d: false", i)
				}
				return err
			},
			raw: func(ctx context.Context, p string, _, i int64) error {
				var n int64
				return rawRow(ctx, qReleaseKey.sql(st), []any{scope, fmt.Sprintf("%sk-%d", p, i), fmt.Sprintf("t-%d", i), be.channel}, &n)
			},
		},
		{
			name:    "GetKey",
			prepare: claims,
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				_, err := be.GetKey(ctx, keyRef(fmt.Sprintf("%ss-%d", p, slot)))
				return err
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r keyRow
				return rawRow(ctx, qGetKey.sql(st), []any{nil, scope, fmt.Sprintf("%ss-%d", p, slot)}, r.dest()...)
			},
		},
		{
			name: "AcquireLease",
			durable: func(ctx context.Context, p string, _, i int64) error {
				_, err := be.AcquireLease(ctx, contract.LeaseRequest{Scope: contract.Scope(scope), Resource: fmt.Sprintf("%sa-%d", p, i), Owner: "o", TTL: benchTTL})
				return err
			},
			raw: func(ctx context.Context, p string, _, i int64) error {
				var r grantRow
				return rawRow(ctx, qAcquireLease.sql(st), []any{nil, tol, scope, fmt.Sprintf("%sa-%d", p, i), "o", ttl, nil, be.channel, leaseNotifyPayload(contract.Scope(scope), fmt.Sprintf("%sa-%d", p, i))}, r.dest()...)
			},
		},
		{
			name:    "RenewLease",
			prepare: leases,
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				_, err := be.RenewLease(ctx, contract.Lease{Scope: contract.Scope(scope), Resource: fmt.Sprintf("%ss-%d", p, slot), Owner: "o", Token: slot + 1}, benchTTL)
				return err
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r leaseRow
				return rawRow(ctx, qRenewLease.sql(st), []any{nil, tol, scope, fmt.Sprintf("%ss-%d", p, slot), "o", slot + 1, ttl}, r.dest()...)
			},
		},
		{
			name:    "ReleaseLease",
			prepare: leases,
			durable: func(ctx context.Context, p string, _, i int64) error {
				ok, err := be.ReleaseLease(ctx, contract.Lease{Scope: contract.Scope(scope), Resource: fmt.Sprintf("%sl-%d", p, i), Owner: "o", Token: i + 1})
				if err == nil && !ok {
					err = fmt.Errorf("ReleaseLease %d: false", i)
				}
				return err
			},
			raw: func(ctx context.Context, p string, _, i int64) error {
				var r releaseRow
				return rawRow(ctx, qReleaseLease.sql(st), []any{nil, scope, fmt.Sprintf("%sl-%d", p, i), "o", i + 1, be.channel, leaseNotifyPayload(contract.Scope(scope), fmt.Sprintf("%sl-%d", p, i))}, r.dest()...)
			},
		},
		{
			name:    "GetLease",
			prepare: leases,
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				_, err := be.GetLease(ctx, contract.Scope(scope), fmt.Sprintf("%ss-%d", p, slot))
				return err
			},
			raw: func(ctx context.Context, p string, slot, _ int64) error {
				var r leaseRow
				return rawRow(ctx, qGetLease.sql(st), []any{scope, fmt.Sprintf("%ss-%d", p, slot)}, r.dest()...)
			},
		},
	}
}

// BenchmarkKeyPaths measures the idempotency-key paths of issue 17 on a
// private cluster with fsync, full_page_writes and synchronous_commit on
// (the shared test cluster runs with them off, which hides the cost of a
// commit), pgx pool of 20, at 1 and 16 clients:
//
//	Replay         ClaimKey on a completed key (every client retry), each
//	               client on a key of its own, against GetKey of the same
//	               row in the same run: getkey-ns/op is GetKey's time,
//	               ratio = GetKey's ns/op ÷ the replay's (the replay's
//	               throughput relative to a plain primary-key read).
//	ReplayHot      the same, every client on one key.
//	ClaimComplete  a new claim and its completion (two statements; no
//	               waiter): ns/op per pair, pairs/s.
//	ClaimCompleteTx  the same, the completion stored in a transaction:
//	               BeginTx, CompleteKeyTx, Commit (BEGIN, the statement
//	               and COMMIT: three round trips where CompleteKey takes
//	               one).
//
// Run it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkKeyPaths -benchtime 2000x ./backends/postgres/
func BenchmarkKeyPaths(b *testing.B) {
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
	defer pool.Close()
	var fsync string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync') || '/' || current_setting('synchronous_commit')`).Scan(&fsync); err != nil || fsync != "on/on" {
		b.Fatalf("fsync/synchronous_commit = %q, %v; want on/on", fsync, err)
	}
	be, err := NewBackend(ctx, pool, Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	env := &benchEnv{b: be, pool: pool, q: quoteIdent(schema), runs: new(atomic.Int64)}
	for _, op := range keyPathOps(env) {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", op.name, clients), func(b *testing.B) {
				env.run(b, op, clients)
			})
		}
	}
}

func keyPathOps(e *benchEnv) []benchOp {
	be, q := e.b, e.q
	scope := "bench"
	keyRef := func(key string) contract.KeyRef { return contract.KeyRef{Scope: contract.Scope(scope), Key: key} }
	header := encodeHeader(map[string][]string{"Content-Type": {"application/json"}})
	body := []byte(`{"id":"an order","status":"created"}`)
	// completed makes one completed key <prefix>s-<slot> per slot.
	completed := func(ctx context.Context, prefix string, _, slots int) error {
		return e.exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, state, token, created_at, completed_at, expires_at,
				outcome_code, outcome_header, outcome_body, outcome_ref)
			SELECT $1, $2 || 's-' || g, 'fp', 'completed', 't-' || g, now(), now(), now() + interval '1 hour', 201, $4::bytea, $5::bytea, ''
			FROM generate_series(0, $3::int - 1) g`,
			scope, prefix, slots, header, body)
	}
	replay := func(key func(p string, slot int64) string) func(context.Context, string, int64, int64) error {
		return func(ctx context.Context, p string, slot, _ int64) error {
			c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: keyRef(key(p, slot)), Fingerprint: "fp", TTL: benchTTL})
			if err == nil && c.Kind != contract.ClaimCompleted {
				err = fmt.Errorf("replay: claim kind %v, want completed", c.Kind)
			}
			return err
		}
	}
	get := func(key func(p string, slot int64) string) func(context.Context, string, int64, int64) error {
		return func(ctx context.Context, p string, slot, _ int64) error {
			r, err := be.GetKey(ctx, keyRef(key(p, slot)))
			if err == nil && r.State != contract.KeyCompleted {
				err = fmt.Errorf("GetKey: state %v, want completed", r.State)
			}
			return err
		}
	}
	own := func(p string, slot int64) string { return fmt.Sprintf("%ss-%d", p, slot) }
	hot := func(p string, _ int64) string { return p + "s-0" }
	pair := func(ctx context.Context, key string) error {
		c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: keyRef(key), Fingerprint: "fp", TTL: benchTTL})
		if err != nil {
			return err
		}
		if c.Kind != contract.ClaimNew {
			return fmt.Errorf("claim %s: kind %v, want new", key, c.Kind)
		}
		_, err = be.CompleteKey(ctx, contract.Completion{KeyRef: keyRef(key), Token: c.Token,
			Outcome: contract.Outcome{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}, Retain: benchTTL})
		return err
	}
	// pairTx is pair with the completion in a transaction of its own.
	pairTx := func(ctx context.Context, key string) error {
		c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: keyRef(key), Fingerprint: "fp", TTL: benchTTL})
		if err != nil {
			return err
		}
		if c.Kind != contract.ClaimNew {
			return fmt.Errorf("claim %s: kind %v, want new", key, c.Kind)
		}
		tx, err := be.BeginTx(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err = be.CompleteKeyTx(ctx, tx, contract.Completion{KeyRef: keyRef(key), Token: c.Token,
			Outcome: contract.Outcome{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}, Retain: benchTTL}); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	return []benchOp{
		{name: "Replay", prepare: completed, durable: replay(own), raw: get(own), rawName: "getkey"},
		{name: "ReplayHot", prepare: completed, durable: replay(hot), raw: get(hot), rawName: "getkey"},
		{
			name: "ClaimComplete", rate: "pairs/s",
			durable: func(ctx context.Context, p string, _, i int64) error {
				return pair(ctx, fmt.Sprintf("%sp-%d", p, i))
			},
		},
		{
			name: "ClaimCompleteTx", rate: "pairs/s",
			durable: func(ctx context.Context, p string, _, i int64) error {
				return pairTx(ctx, fmt.Sprintf("%st-%d", p, i))
			},
		},
	}
}
