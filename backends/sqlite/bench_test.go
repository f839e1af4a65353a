package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
)

// BenchmarkOps measures the fast-path operations on a database file, on
// 1 goroutine and on 16, with synchronous=normal and full, three ways:
//
//   - store: through a *durable.Store on this backend (validation, the
//     operation timeout, telemetry and all): what users get;
//   - backend: the raw *Backend, called with context.Background() like the
//     ceiling: what this package adds to the statements;
//   - ceiling: the same statements in the same BEGIN IMMEDIATE
//     transactions through database/sql on modernc.org/sqlite directly,
//     prepared once per connection, with the same connection layout (one
//     write connection, a pool of read connections) and pragmas: what the
//     backend cannot beat.
//
// Each goroutine works on records of its own (the common case of many
// workers). The backend coalesces writes (the default) unless
// DURABLE_BENCH_COALESCE=off; BenchmarkCoalesce compares the two. See
// BENCHMARKS.md for the command and the figures.
func BenchmarkOps(b *testing.B) {
	for _, op := range benchOps {
		b.Run(op.name, func(b *testing.B) {
			for _, sync := range []string{"normal", "full"} {
				b.Run("sync="+sync, func(b *testing.B) {
					for _, par := range []int{1, 16} {
						for _, impl := range []string{"store", "backend", "ceiling"} {
							b.Run(fmt.Sprintf("%s/g=%d", impl, par), func(b *testing.B) {
								runBenchOp(b, op, impl, Options{Synchronous: sync, Coalesce: os.Getenv("DURABLE_BENCH_COALESCE")}, par)
							})
						}
					}
				})
			}
		})
	}
}

// BenchmarkCoalesce compares coalesced writes (coalesce=on) with one
// transaction per write (coalesce=off) on BenchmarkOps's write operations,
// the two side by side for each operation, synchronous mode, number of
// goroutines and way (store, backend), so that -count=N interleaves them.
// With coalescing on it reports calls/batch, the mean size of the write
// batches. DURABLE_BENCH_IMPL=store or backend runs one way only.
func BenchmarkCoalesce(b *testing.B) {
	impls := []string{"store", "backend"}
	if v := os.Getenv("DURABLE_BENCH_IMPL"); v != "" {
		impls = []string{v}
	}
	for _, op := range benchOps {
		if op.name == "GetWorkflow" {
			continue // a read
		}
		b.Run(op.name, func(b *testing.B) {
			for _, sync := range []string{"normal", "full"} {
				for _, par := range []int{1, 16} {
					for _, impl := range impls {
						for _, co := range []string{"off", "on"} {
							b.Run(fmt.Sprintf("sync=%s/g=%d/%s/coalesce=%s", sync, par, impl, co), func(b *testing.B) {
								runBenchOp(b, op, impl, Options{Synchronous: sync, Coalesce: co}, par)
							})
						}
					}
				}
			}
		})
	}
}

// benchOp is one operation, with a setup per goroutine (its own records)
// and a step for each implementation.
type benchOp struct {
	name    string
	store   func(ctx context.Context, s *durable.Store, id string) (func() error, error)
	backend func(ctx context.Context, b *Backend, id string) (func() error, error)
	ceiling func(ctx context.Context, c *ceiling, id string) (func() error, error)
}

var benchSnapshot = make([]byte, 1024)

var benchOps = []benchOp{
	{
		name: "GetWorkflow",
		store: func(ctx context.Context, s *durable.Store, id string) (func() error, error) {
			if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusRunning, Snapshot: benchSnapshot}); err != nil {
				return nil, err
			}
			return func() error { _, err := s.GetWorkflow(ctx, "", id); return err }, nil
		},
		backend: func(ctx context.Context, b *Backend, id string) (func() error, error) {
			if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: contract.StatusRunning, Snapshot: benchSnapshot}); err != nil {
				return nil, err
			}
			return func() error { _, err := b.GetWorkflow(ctx, "", id); return err }, nil
		},
		ceiling: func(ctx context.Context, c *ceiling, id string) (func() error, error) {
			now := time.Now().UnixMicro()
			if err := c.write(ctx, func(tx *sql.Tx) error {
				_, err := c.w(ctx, tx, sqlCreateWorkflow).ExecContext(ctx, "", id, "", "running", benchSnapshot, now, now)
				return err
			}); err != nil {
				return nil, err
			}
			return func() error {
				var w contract.Workflow
				var sc, st string
				var cr, up int64
				return c.r(ctx, sqlGetWorkflow).QueryRowContext(ctx, "", id).Scan(workflowDest(&w, &sc, &st, &cr, &up)...)
			}, nil
		},
	},
	{
		name: "UpdateWorkflow",
		store: func(ctx context.Context, s *durable.Store, id string) (func() error, error) {
			w, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusRunning})
			if err != nil {
				return nil, err
			}
			return func() error {
				w, err = s.UpdateWorkflow(ctx, durable.Update{ID: id, ExpectStatus: durable.StatusRunning,
					ExpectRevision: w.Revision, Status: durable.StatusRunning, Snapshot: benchSnapshot})
				return err
			}, nil
		},
		backend: func(ctx context.Context, b *Backend, id string) (func() error, error) {
			w, err := b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: contract.StatusRunning})
			if err != nil {
				return nil, err
			}
			return func() error {
				w, err = b.UpdateWorkflow(ctx, contract.Update{ID: id, ExpectStatus: contract.StatusRunning,
					ExpectRevision: w.Revision, Status: contract.StatusRunning, Snapshot: benchSnapshot})
				return err
			}, nil
		},
		ceiling: func(ctx context.Context, c *ceiling, id string) (func() error, error) {
			now := time.Now().UnixMicro()
			if err := c.write(ctx, func(tx *sql.Tx) error {
				_, err := c.w(ctx, tx, sqlCreateWorkflow).ExecContext(ctx, "", id, "", "running", nil, now, now)
				return err
			}); err != nil {
				return nil, err
			}
			rev := int64(1)
			return func() error {
				return c.write(ctx, func(tx *sql.Tx) error {
					var created int64
					now := time.Now().UnixMicro()
					return c.w(ctx, tx, sqlUpdateWorkflow).QueryRowContext(ctx, "", "running", benchSnapshot, now,
						"", id, "running", rev, rev, 0, "", "", "", 0, 0).Scan(&rev, &created)
				})
			}, nil
		},
	},
	{
		name: "ClaimCompleteKey",
		store: func(ctx context.Context, s *durable.Store, id string) (func() error, error) {
			n := 0
			body := make([]byte, 256)
			return func() error {
				n++
				ref := durable.KeyRef{Key: id + "-" + strconv.Itoa(n)}
				c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "sha256:abc", TTL: time.Minute})
				if err != nil {
					return err
				}
				_, err = s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token, Outcome: durable.Outcome{Code: 201, Body: body}})
				return err
			}, nil
		},
		backend: func(ctx context.Context, b *Backend, id string) (func() error, error) {
			n := 0
			body := make([]byte, 256)
			return func() error {
				n++
				ref := contract.KeyRef{Key: id + "-" + strconv.Itoa(n)}
				c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "sha256:abc", TTL: time.Minute})
				if err != nil {
					return err
				}
				_, err = b.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c.Token, Outcome: contract.Outcome{Code: 201, Body: body}, Retain: 24 * time.Hour})
				return err
			}, nil
		},
		ceiling: func(ctx context.Context, c *ceiling, id string) (func() error, error) {
			n := 0
			body := make([]byte, 256)
			return func() error {
				n++
				key, token := id+"-"+strconv.Itoa(n), newToken()
				err := c.write(ctx, func(tx *sql.Tx) error {
					now := time.Now().UnixMicro()
					_, err := c.w(ctx, tx, sqlInsertClaim).ExecContext(ctx, "", key, "sha256:abc", "", token, now+60e6, now)
					return err
				})
				if err != nil {
					return err
				}
				return c.write(ctx, func(tx *sql.Tx) error {
					var fp, wf string
					var created int64
					now := time.Now().UnixMicro()
					header := encodeHeader(nil)
					return c.w(ctx, tx, sqlCompleteKey).QueryRowContext(ctx, 201, header, body, "", now, now+86400e6, "", key, token,
						0, "", "", "", 0, 0).Scan(&fp, &wf, &created)
				})
			}, nil
		},
	},
	{
		name: "RenewLease",
		store: func(ctx context.Context, s *durable.Store, id string) (func() error, error) {
			l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: id, Owner: "o", TTL: time.Minute})
			if err != nil {
				return nil, err
			}
			return func() error { l, err = s.RenewLease(ctx, l, time.Minute); return err }, nil
		},
		backend: func(ctx context.Context, b *Backend, id string) (func() error, error) {
			l, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: id, Owner: "o", TTL: time.Minute})
			if err != nil {
				return nil, err
			}
			return func() error { l, err = b.RenewLease(ctx, l, time.Minute); return err }, nil
		},
		ceiling: func(ctx context.Context, c *ceiling, id string) (func() error, error) {
			var token int64
			if err := c.write(ctx, func(tx *sql.Tx) error {
				now := time.Now().UnixMicro()
				if err := c.w(ctx, tx, sqlAcquireLease).QueryRowContext(ctx, "", id, "o", now, now+60e6, nil, now-1e6).Scan(&token); err != nil {
					return err
				}
				_, err := c.w(ctx, tx, sqlNextToken).ExecContext(ctx, token, token)
				return err
			}); err != nil {
				return nil, err
			}
			return func() error {
				return c.write(ctx, func(tx *sql.Tx) error {
					var acquired int64
					var value []byte
					now := time.Now().UnixMicro()
					return c.w(ctx, tx, sqlRenewLease).QueryRowContext(ctx, now+60e6, "", id, "o", token, now+1e6).Scan(&acquired, &value)
				})
			}, nil
		},
	},
	{
		name: "AcquireReleaseLease",
		store: func(ctx context.Context, s *durable.Store, id string) (func() error, error) {
			return func() error {
				l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: id, Owner: "o", TTL: time.Minute})
				if err != nil {
					return err
				}
				_, err = s.ReleaseLease(ctx, l)
				return err
			}, nil
		},
		backend: func(ctx context.Context, b *Backend, id string) (func() error, error) {
			return func() error {
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: id, Owner: "o", TTL: time.Minute})
				if err != nil {
					return err
				}
				_, err = b.ReleaseLease(ctx, l)
				return err
			}, nil
		},
		ceiling: func(ctx context.Context, c *ceiling, id string) (func() error, error) {
			return func() error {
				var token int64
				if err := c.write(ctx, func(tx *sql.Tx) error {
					now := time.Now().UnixMicro()
					if err := c.w(ctx, tx, sqlAcquireLease).QueryRowContext(ctx, "", id, "o", now, now+60e6, nil, now-1e6).Scan(&token); err != nil {
						return err
					}
					_, err := c.w(ctx, tx, sqlNextToken).ExecContext(ctx, token, token)
					return err
				}); err != nil {
					return err
				}
				return c.write(ctx, func(tx *sql.Tx) error {
					_, err := c.w(ctx, tx, sqlReleaseLease).ExecContext(ctx, "", id, "o", token)
					return err
				})
			}, nil
		},
	},
}

func runBenchOp(b *testing.B, op benchOp, impl string, opts Options, par int) {
	ctx := context.Background()
	opts.Path = filepath.Join(b.TempDir(), "bench.db")
	// Both start from the same file: migrated by a backend that then
	// closed (which checkpoints the WAL).
	bk, err := NewBackend(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	bk.Close()
	var newStep func(id string) (func() error, error)
	var writer *Backend // whose write batches are reported
	switch impl {
	case "store":
		s, err := Open(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		s.As(&writer)
		newStep = func(id string) (func() error, error) { return op.store(ctx, s, id) }
	case "backend":
		bk, err := NewBackend(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer bk.Close()
		writer = bk
		newStep = func(id string) (func() error, error) { return op.backend(ctx, bk, id) }
	default:
		c, err := openCeiling(opts)
		if err != nil {
			b.Fatal(err)
		}
		defer c.close()
		newStep = func(id string) (func() error, error) { return op.ceiling(ctx, c, id) }
	}
	if par == 1 {
		step, err := newStep("g-1")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu, batches := cpuTime(), writer.benchStats()
		for range b.N {
			if err := step(); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu)
		writer.reportBatches(b, batches)
		return
	}
	var n atomic.Int64
	b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu, batches := cpuTime(), writer.benchStats()
	defer writer.reportBatches(b, batches)
	defer reportCPU(b, cpu)
	b.RunParallel(func(pb *testing.PB) {
		step, err := newStep("g-" + strconv.FormatInt(n.Add(1), 10))
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := step(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchStats returns b's write batch counts (b may be nil).
func (bk *Backend) benchStats() coalesce.Stats {
	if bk == nil {
		return coalesce.Stats{}
	}
	return bk.writeStats()
}

// reportBatches reports calls/batch, the mean size of the write batches
// since start, when the backend coalesced any.
func (bk *Backend) reportBatches(b *testing.B, start coalesce.Stats) {
	now := bk.benchStats()
	if n := now.Batches - start.Batches; n > 0 {
		b.ReportMetric(float64(now.Calls-start.Calls)/float64(n), "calls/batch")
	}
}

// reportCPU reports the CPU time per operation since start, every thread
// of the process included (the Go runtime's, the garbage collector's): a
// cost that other processes on the machine disturb far less than the wall
// time of ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

// ceiling runs statements through database/sql on modernc directly: one
// write *sql.DB of one connection whose transactions begin with BEGIN
// IMMEDIATE (the driver's _txlock=immediate), a read pool, the same
// pragmas as the backend, statements prepared once.
type ceiling struct {
	wdb, rdb *sql.DB
	ws, rs   map[string]*sql.Stmt
}

func openCeiling(o Options) (*ceiling, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	wdb, err := sql.Open("sqlite", driverDSN(o, false)+"&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	rdb, err := sql.Open("sqlite", driverDSN(o, true))
	if err != nil {
		return nil, err
	}
	rdb.SetMaxOpenConns(o.Readers)
	rdb.SetMaxIdleConns(o.Readers)
	c := &ceiling{wdb: wdb, rdb: rdb, ws: map[string]*sql.Stmt{}, rs: map[string]*sql.Stmt{}}
	for _, q := range []string{sqlCreateWorkflow, sqlUpdateWorkflow, sqlInsertClaim, sqlCompleteKey, sqlAcquireLease, sqlNextToken, sqlRenewLease, sqlReleaseLease} {
		if c.ws[q], err = wdb.Prepare(q); err != nil {
			return nil, err
		}
	}
	if c.rs[sqlGetWorkflow], err = rdb.Prepare(sqlGetWorkflow); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *ceiling) close() {
	c.wdb.Close()
	c.rdb.Close()
}

// w returns the write statement q in tx (reusing its preparation on the
// one write connection).
func (c *ceiling) w(ctx context.Context, tx *sql.Tx, q string) *sql.Stmt {
	return tx.StmtContext(ctx, c.ws[q])
}

func (c *ceiling) r(_ context.Context, q string) *sql.Stmt { return c.rs[q] }

func (c *ceiling) write(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := c.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// BenchmarkVsCeiling compares the two ways of BenchmarkOps call by call:
// every goroutine alternates one operation through the Store with the
// same operation through the ceiling (each on a database file of its
// own), timing each call, so that both see the same machine load. It
// reports store-µs and ceiling-µs (mean latency per operation, at the
// same concurrency) and ratio, the store's throughput relative to the
// ceiling's (ceiling-µs ÷ store-µs).
func BenchmarkVsCeiling(b *testing.B) {
	for _, op := range benchOps {
		b.Run(op.name, func(b *testing.B) {
			for _, sync := range []string{"normal", "full"} {
				for _, par := range []int{1, 16} {
					b.Run(fmt.Sprintf("sync=%s/g=%d", sync, par), func(b *testing.B) {
						runVsCeiling(b, op, sync, par)
					})
				}
			}
		})
	}
}

func runVsCeiling(b *testing.B, op benchOp, sync string, par int) {
	ctx := context.Background()
	open := func(name string) Options {
		opts := Options{Path: filepath.Join(b.TempDir(), name), Synchronous: sync}
		bk, err := NewBackend(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		bk.Close()
		return opts
	}
	s, err := Open(ctx, open("store.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c, err := openCeiling(open("ceiling.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	var storeNS, ceilNS, calls atomic.Int64
	var n atomic.Int64
	worker := func(pb func() bool) error {
		id := "g-" + strconv.FormatInt(n.Add(1), 10)
		ss, err := op.store(ctx, s, id)
		if err != nil {
			return err
		}
		cs, err := op.ceiling(ctx, c, id)
		if err != nil {
			return err
		}
		var st, ct, k int64
		for i := 0; pb(); i++ {
			// Alternate which goes first, too.
			first, second, fd, sd := ss, cs, &st, &ct
			if i%2 == 1 {
				first, second, fd, sd = cs, ss, &ct, &st
			}
			t0 := time.Now()
			if err := first(); err != nil {
				return err
			}
			t1 := time.Now()
			if err := second(); err != nil {
				return err
			}
			*fd += int64(t1.Sub(t0))
			*sd += int64(time.Since(t1))
			k++
		}
		storeNS.Add(st)
		ceilNS.Add(ct)
		calls.Add(k)
		return nil
	}
	b.ResetTimer()
	if par == 1 {
		i := 0
		if err := worker(func() bool { i++; return i <= b.N }); err != nil {
			b.Fatal(err)
		}
	} else {
		b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			if err := worker(pb.Next); err != nil {
				b.Error(err)
			}
		})
	}
	if k := calls.Load(); k > 0 {
		sm, cm := float64(storeNS.Load())/float64(k), float64(ceilNS.Load())/float64(k)
		b.ReportMetric(sm/1e3, "store-µs")
		b.ReportMetric(cm/1e3, "ceiling-µs")
		b.ReportMetric(cm/sm, "ratio")
	}
}

// BenchmarkAcquirePermit measures AcquirePermit and ReleaseLease on the
// raw backend (synchronous=normal, 1 goroutine) for a semaphore of
// Permits permits of which all but the last are held: the worst case of
// its one range read, which reads every held permit. Compare with
// BenchmarkOps/AcquireReleaseLease/sync=normal/backend/g=1. It reports
// cpu-ns/op as BenchmarkOps does.
func BenchmarkAcquirePermit(b *testing.B) {
	for _, permits := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("permits=%d", permits), func(b *testing.B) {
			ctx := context.Background()
			bk, err := NewBackend(ctx, Options{Path: filepath.Join(b.TempDir(), "bench.db"), Synchronous: "normal"})
			if err != nil {
				b.Fatal(err)
			}
			defer bk.Close()
			req := contract.PermitRequest{Resource: "sem", Owner: "o", TTL: time.Hour, Value: "10.0.0.7:8080", Permits: permits}
			for range permits - 1 {
				if _, err := bk.AcquirePermit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuTime()
			n := 0
			for b.Loop() {
				n++
				l, err := bk.AcquirePermit(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if l.Resource != contract.PermitResource("sem", permits) {
					b.Fatalf("granted %s", l.Resource)
				}
				if _, err := bk.ReleaseLease(ctx, l); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(n), "cpu-ns/op")
		})
	}
}
