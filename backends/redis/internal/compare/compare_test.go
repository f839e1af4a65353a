package compare

// Run from the repository root (go.work lists this module):
//
//	go test -run '^$' -bench . -benchtime 3s ./backends/redis/internal/compare/
//
// For rounds, run it several times with DURABLE_COMPARE_ROTATE=0, 1, 2, …:
// each round then starts with another contender (see rotated).
//
// Each benchmark starts its own node (appendonly yes, noeviction) with
// appendfsync always, then one with everysec, and runs acquire+release
// pairs at 1 client (a plain loop) and 16 (RunParallel with
// SetParallelism(16/GOMAXPROCS)), each client on a lock of its own:
//
//   - durable: Store.AcquireLease then Store.ReleaseLease (one script
//     each; the grant takes a new fencing token), with the DSN's defaults
//     (coalesce=on: every script on the backend's shared connection, the
//     scripts of clients that send at the same time in one write);
//   - durable-coalesce-pipeline: the same with coalesce=pipeline (the
//     scripts that wait while 4 pipelines are in flight go out in one,
//     each pipeline on a pooled connection);
//   - durable-coalesce-off: the same with coalesce=off (every script
//     alone on a pooled connection, as redsync and redislock send theirs);
//   - redsync: Mutex.LockContext then UnlockContext (SET NX PX, then a
//     compare-and-delete script), one pool;
//   - redislock: Client.Obtain then Lock.Release (a script each).
//
// durable goes through durable.Open with a redis:// DSN, as an
// application does; redsync and redislock get a go-redis client with its
// defaults on the same node.

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/redis"
	"github.com/durable-go/durable/internal/redistest"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

const ttl = 30 * time.Second

// pair is one client's acquire+release of its own lock.
type pair func(ctx context.Context) error

// contender makes the pairs of one library on a node.
type contender struct {
	name string
	make func(tb testing.TB, srv *redistest.Server) func(client int) pair
}

var seq atomic.Int64

// The fenced floor's scripts (see contenders).
var (
	floorAcquire = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`)
	floorRelease = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// durablePairs makes durable's pairs on a Store opened with the DSN
// parameters params ("" for the defaults).
func durablePairs(params string) func(tb testing.TB, srv *redistest.Server) func(int) pair {
	return func(tb testing.TB, srv *redistest.Server) func(int) pair {
		prefix := "cmp" + strconv.FormatInt(seq.Add(1), 10)
		s, err := durable.Open(context.Background(), "redis://"+srv.Addr()+"/0?prefix="+prefix+params)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		return func(c int) pair {
			req := durable.LeaseRequest{Scope: "bench", Resource: "r" + strconv.Itoa(c), Owner: "o" + strconv.Itoa(c), TTL: ttl}
			return func(ctx context.Context) error {
				l, err := s.AcquireLease(ctx, req)
				if err != nil {
					return err
				}
				if ok, err := s.ReleaseLease(ctx, l); err != nil || !ok {
					return errors.Join(errors.New("durable: release failed"), err)
				}
				return nil
			}
		}
	}
}

func contenders() []contender {
	return []contender{
		{"durable", durablePairs("")},
		{"durable-coalesce-pipeline", durablePairs("&coalesce=pipeline")},
		{"durable-coalesce-off", durablePairs("&coalesce=off")},
		{"redsync", func(tb testing.TB, srv *redistest.Server) func(int) pair {
			rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			tb.Cleanup(func() { _ = rdb.Close() })
			rs := redsync.New(rsgoredis.NewPool(rdb))
			prefix := "rs" + strconv.FormatInt(seq.Add(1), 10) + ":"
			return func(c int) pair {
				m := rs.NewMutex(prefix+strconv.Itoa(c), redsync.WithExpiry(ttl))
				return func(ctx context.Context) error {
					if err := m.LockContext(ctx); err != nil {
						return err
					}
					if ok, err := m.UnlockContext(ctx); err != nil || !ok {
						return errors.Join(errors.New("redsync: unlock failed"), err)
					}
					return nil
				}
			}
		}},
		// The floor of any fenced lock on Redis: the grant must take a
		// token from a counter and set the lock in one atomic step, so it
		// is a script (INCR and SET NX PX), not redsync's or redislock's
		// single SET NX; the release compares and deletes, as theirs do.
		// No request id, no record of the grant's times, no listing: what
		// durable's lease adds to this is its own cost.
		{"fenced-floor", func(tb testing.TB, srv *redistest.Server) func(int) pair {
			rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			tb.Cleanup(func() { _ = rdb.Close() })
			prefix := "ff" + strconv.FormatInt(seq.Add(1), 10) + ":"
			return func(c int) pair {
				keys := []string{prefix + "{" + strconv.Itoa(c) + "}:l", prefix + "{" + strconv.Itoa(c) + "}:t"}
				owner := "o" + strconv.Itoa(c)
				return func(ctx context.Context) error {
					tok, err := floorAcquire.Run(ctx, rdb, keys, owner, ttl.Milliseconds()).Int64()
					if err != nil {
						return err
					}
					if tok == 0 {
						return errors.New("fenced-floor: lock busy")
					}
					n, err := floorRelease.Run(ctx, rdb, keys[:1], owner+":"+strconv.FormatInt(tok, 10)).Int64()
					if err == nil && n != 1 {
						err = errors.New("fenced-floor: release failed")
					}
					return err
				}
			}
		}},
		{"redislock", func(tb testing.TB, srv *redistest.Server) func(int) pair {
			rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			tb.Cleanup(func() { _ = rdb.Close() })
			lc := redislock.New(rdb)
			prefix := "rl" + strconv.FormatInt(seq.Add(1), 10) + ":"
			return func(c int) pair {
				key := prefix + strconv.Itoa(c)
				return func(ctx context.Context) error {
					l, err := lc.Obtain(ctx, key, ttl, nil)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
			}
		}},
	}
}

// run runs b.N pairs over n clients and reports pairs/s.
func run(b *testing.B, n int, mk func(int) pair) {
	ctx := context.Background()
	pairs := make([]pair, n)
	for c := range pairs {
		pairs[c] = mk(c)
		if err := pairs[c](ctx); err != nil { // warm up: connections, scripts
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	if n == 1 {
		for i := 0; i < b.N; i++ {
			if err := pairs[0](ctx); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		p := n / runtime.GOMAXPROCS(0)
		if p < 1 || p*runtime.GOMAXPROCS(0) != n {
			b.Skipf("%d clients need GOMAXPROCS to divide %d (it is %d)", n, n, runtime.GOMAXPROCS(0))
		}
		b.SetParallelism(p)
		var next atomic.Int64
		var once sync.Once
		b.RunParallel(func(pb *testing.PB) {
			pr := pairs[int(next.Add(1)-1)%n]
			for pb.Next() {
				if err := pr(ctx); err != nil {
					once.Do(func() { b.Error(err) })
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkAcquireRelease: acquire+release pairs of durable, redsync and
// redislock on the same node, per fsync setting and client count.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, fsync := range []string{"always", "everysec"} {
		b.Run("fsync="+fsync, func(b *testing.B) {
			srv := redistest.Start(b, redistest.Options{AppendFsync: fsync})
			for _, n := range []int{1, 16} {
				b.Run("clients="+strconv.Itoa(n), func(b *testing.B) {
					for _, c := range rotated(contenders()) {
						b.Run(c.name, func(b *testing.B) { run(b, n, c.make(b, srv)) })
					}
				})
			}
		})
	}
}

// rotated returns cs rotated left by DURABLE_COMPARE_ROTATE (default 0),
// so that rounds of the benchmark can each start with another contender:
// the first to run on a fresh node, in a fresh process, may pay for
// warming both.
func rotated(cs []contender) []contender {
	k, _ := strconv.Atoi(os.Getenv("DURABLE_COMPARE_ROTATE"))
	k = ((k % len(cs)) + len(cs)) % len(cs)
	return append(cs[k:], cs[:k]...)
}

// TestPairs: every contender's pair works on a node (so that CI, which
// does not run benchmarks, still runs this module's code), and durable's
// grants fence: each pair's token is above the previous one.
func TestPairs(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	for _, c := range contenders() {
		mk := c.make(t, srv)
		for client := 0; client < 2; client++ {
			p := mk(client)
			for i := 0; i < 3; i++ {
				if err := p(ctx); err != nil {
					t.Fatalf("%s, client %d, pair %d: %v", c.name, client, i, err)
				}
			}
		}
	}
	s, err := durable.Open(ctx, "redis://"+srv.Addr()+"/0?prefix=fence")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last int64
	for i := 0; i < 5; i++ {
		l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		if _, err := s.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}
