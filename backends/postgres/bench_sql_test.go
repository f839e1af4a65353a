package postgres

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkSQLDrivers runs GetWorkflow and UpdateWorkflow on the three
// client libraries, interleaved: every sub-benchmark prepares the same work
// for each driver and then runs 20 rounds, each round running a twentieth
// of b.N on every driver in turn, so that drift of the shared machine hits
// all of them alike. Each backend has a pool of 20 connections. It reports
//
//	ns/op               pgx (driver=pgx)
//	<driver>-ns/op      each driver's time per operation
//	<driver>/pgx        pgx-ns/op ÷ <driver>-ns/op: the driver's throughput
//	                    relative to pgx (1.0 = as fast)
//
// Run it with
//
//	go test -run '^$' -bench BenchmarkSQLDrivers -benchtime 3000x -count 5 ./backends/postgres/
//
// DURABLE_BENCH_FSYNC=on turns fsync and synchronous_commit on in the
// benchmark's server first (pgtest runs its cluster with both off).
func BenchmarkSQLDrivers(b *testing.B) {
	srv := pgtest.Require(b)
	dsn := srv.DSN() + "&pool_max_conns=20"
	interleaved(b, srv, []benchRoute{
		{"pgx", dsn + "&driver=pgx"},
		{"pq", dsn + "&driver=pq"},
		{"pgx-stdlib", dsn + "&driver=pgx-stdlib"},
	}, []string{"GetWorkflow", "UpdateWorkflow"}, []int{1, 16})
}

// BenchmarkDefaultPool compares, at 16 clients, the pool a DSN without
// pool_max_conns gets with pools of 4 (the default before issue 17) and 16
// connections, on each client library, interleaved as BenchmarkSQLDrivers
// does (ratios are to the first route of each driver: the default).
//
//	go test -run '^$' -bench BenchmarkDefaultPool -benchtime 3000x -count 5 ./backends/postgres/
func BenchmarkDefaultPool(b *testing.B) {
	srv := pgtest.Require(b)
	for _, driver := range []string{"pgx", "pq", "pgx-stdlib"} {
		b.Run("driver="+driver, func(b *testing.B) {
			dsn := srv.DSN() + "&driver=" + driver
			interleaved(b, srv, []benchRoute{
				{"default", dsn},
				{"4", dsn + "&pool_max_conns=4"},
				{"16", dsn + "&pool_max_conns=16"},
			}, []string{"UpdateWorkflow", "GetWorkflow"}, []int{16})
		})
	}
}

// interleaved runs the named operations at each number of clients on every
// route, in rounds (see BenchmarkSQLDrivers), on one fresh migrated schema.
func interleaved(b *testing.B, srv *pgtest.Server, routes []benchRoute, names []string, clients []int) {
	ctx := context.Background()
	if os.Getenv("DURABLE_BENCH_FSYNC") == "on" {
		benchFsyncOn(b, srv)
	}
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
	envs := make([]*benchEnv, len(routes))
	ops := make([]map[string]benchOp, len(routes))
	for i, r := range routes {
		be, err := openDSN(ctx, r.dsn+"&migrate=verify&schema="+schema)
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		envs[i] = &benchEnv{b: be, pool: pool, q: quoteIdent(schema), runs: runs, noRaw: true}
		ops[i] = map[string]benchOp{}
		for _, op := range benchOps(envs[i]) {
			ops[i][op.name] = op
		}
	}
	for _, name := range names {
		for _, n := range clients {
			b.Run(fmt.Sprintf("%s/clients=%d", name, n), func(b *testing.B) {
				runInterleaved(b, routes, envs, ops, name, n)
			})
		}
	}
}

func runInterleaved(b *testing.B, routes []benchRoute, envs []*benchEnv, ops []map[string]benchOp, name string, clients int) {
	ctx := context.Background()
	type side struct {
		op     benchOp
		dp, wp string
		d      time.Duration
	}
	sides := make([]*side, len(routes))
	warm := 4 * clients
	for i := range routes {
		run := envs[i].runs.Add(1)
		s := &side{op: ops[i][name], dp: fmt.Sprintf("d%d-", run), wp: fmt.Sprintf("w%d-", run)}
		if s.op.prepare != nil {
			if err := s.op.prepare(ctx, s.dp, b.N, clients); err != nil {
				b.Fatalf("prepare: %v", err)
			}
			if err := s.op.prepare(ctx, s.wp, warm, clients); err != nil {
				b.Fatalf("prepare: %v", err)
			}
		}
		sides[i] = s
	}
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
	for _, s := range sides {
		work(s.wp, s.op.durable, 0, int64(warm))
	}
	b.ResetTimer()
	b.StopTimer()
	n := int64(b.N)
	for round := range int64(benchRounds) {
		from, to := n*round/benchRounds, n*(round+1)/benchRounds
		for _, s := range sides {
			s.d += work(s.dp, s.op.durable, from, to)
		}
	}
	base := sides[0].d
	for i, s := range sides {
		b.ReportMetric(float64(s.d.Nanoseconds())/float64(b.N), routes[i].name+"-ns/op")
		if i > 0 {
			b.ReportMetric(float64(base)/float64(s.d), routes[i].name+"/"+routes[0].name)
		}
	}
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "ns/op")
}

// benchFsyncOn turns fsync and synchronous_commit on in srv (pgtest's
// cluster runs with both off) until b ends.
func benchFsyncOn(b *testing.B, srv *pgtest.Server) {
	ctx := context.Background()
	for _, sql := range []string{`ALTER SYSTEM SET fsync = on`, `ALTER SYSTEM SET synchronous_commit = on`, `SELECT pg_reload_conf()`} {
		if err := srv.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, sql := range []string{`ALTER SYSTEM SET fsync = off`, `ALTER SYSTEM SET synchronous_commit = off`, `SELECT pg_reload_conf()`} {
			_ = srv.Exec(ctx, sql)
		}
	})
	time.Sleep(200 * time.Millisecond) // let every backend process see the reload
}
