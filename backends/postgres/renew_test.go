package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestRenewLeasesOnEveryClient renews a full batch (contract.MaxRenewBatch
// leases, in two scopes, with every identifier character, some no longer
// held, one given twice) in one call on every client library: the arrays
// travel as text on all of them.
func TestRenewLeasesOnEveryClient(t *testing.T) {
	srv := pgtest.Require(t)
	for _, c := range []testClient{tcPgx, tcPQ, tcPQDB, tcStdlib, tcStdDB} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			now := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			b, err := c.open(ctx, srv.DSN(), Options{Schema: schema, Migrate: MigrateVerify, Listen: ListenOff, Clock: contract.ClockFunc(clock)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()

			const n = contract.MaxRenewBatch - 1
			leases := make([]contract.Lease, 0, n+1)
			for i := range n {
				scope := contract.Scope("")
				if i%3 == 1 {
					scope = "tenant_1.a:b-c"
				}
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: fmt.Sprintf("Res_%d.x:y-z", i), Owner: "worker-1", TTL: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, l)
			}
			leases = append(leases, leases[0]) // a duplicate
			// Not held any more: a released lease, another owner's grant,
			// and a lease named in the wrong scope.
			if ok, err := b.ReleaseLease(ctx, leases[5]); err != nil || !ok {
				t.Fatal(ok, err)
			}
			leases[6].Owner = "worker-2"
			leases[9].Scope = "tenant_1.a:b-c" // held unscoped (9 % 3 == 0)
			fenced := map[int]bool{5: true, 6: true, 9: true}

			mu.Lock()
			now = now.Add(3 * time.Second)
			mu.Unlock()
			ttl := 90*time.Second + 500*time.Millisecond
			out, err := b.RenewLeases(ctx, leases, ttl)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(leases) {
				t.Fatalf("%d outcomes for %d leases", len(out), len(leases))
			}
			for i, o := range out {
				switch {
				case fenced[i]:
					if contract.CodeOf(o.Err) != contract.Fenced {
						t.Errorf("outcome %d = %+v, want Fenced", i, o)
					}
				case o.Err != nil || o.Lease.Token != leases[i].Token || o.Lease.Scope != leases[i].Scope ||
					o.Lease.Resource != leases[i].Resource || !o.Lease.ExpiresAt.Equal(now.Add(ttl)) ||
					!o.Lease.AcquiredAt.Equal(leases[i].AcquiredAt) || o.Lease.ExpiresAt.Location() != time.UTC:
					t.Errorf("outcome %d = %+v, want %+v renewed to %v", i, o, leases[i], now.Add(ttl))
				}
			}
			got, err := b.GetLease(ctx, leases[1].Scope, leases[1].Resource)
			if err != nil || !got.ExpiresAt.Equal(now.Add(ttl)) {
				t.Errorf("stored lease %+v, %v", got, err)
			}
			got, err = b.GetLease(ctx, "", leases[9].Resource)
			if err != nil || !got.ExpiresAt.Equal(leases[9].ExpiresAt) {
				t.Errorf("the unscoped lease named in another scope was renewed: %+v, %v", got, err)
			}
		})
	}
}

// TestRenewLeasesErrorsDoNotLeak: a batch that fails (the context ends
// while it runs) says so without SQL, arguments or identifiers.
func TestRenewLeasesErrorsDoNotLeak(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.RenewLeases(ctx, []contract.Lease{{Scope: "secret-scope", Resource: "secret-res", Owner: "secret-owner", Token: 12345}}, time.Minute)
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range []string{"secret", "12345", "UPDATE", "unnest", "{"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains %q", err.Error(), s)
		}
	}
}

// benchLeases acquires n leases for one worker on be and returns them.
func benchLeases(tb testing.TB, ctx context.Context, be *Backend, n int) []contract.Lease {
	tb.Helper()
	out := make([]contract.Lease, n)
	for i := range out {
		l, err := be.AcquireLease(ctx, contract.LeaseRequest{Resource: fmt.Sprintf("job-%04d", i), Owner: "worker-1", TTL: time.Hour})
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = l
	}
	return out
}

// tracedBackend opens a backend on a 4-connection pgx pool whose
// statements tr counts.
func tracedBackend(tb testing.TB, tr *countingTracer) *Backend {
	tb.Helper()
	srv := pgtest.Require(tb)
	ctx := context.Background()
	schema := srv.Schema(tb)
	cfg, err := pgxpool.ParseConfig(srv.DSN() + "&pool_max_conns=4&pool_min_conns=4")
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	be, err := NewBackend(ctx, pool, Options{Schema: schema, Listen: ListenOff})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = be.Close() })
	return be
}

// BenchmarkLeaseRenewalRound is one renewal round of a worker holding
// 1,000 leases: before, 1,000 RenewLease calls one after the other; after,
// one RenewLeases call. It reports the statements the round sends (counted
// by a pgx tracer) and its wall time. Run it with
//
//	go test -run '^$' -bench BenchmarkLeaseRenewalRound -benchtime 20x -count 5 ./backends/postgres/
func BenchmarkLeaseRenewalRound(b *testing.B) {
	tr := &countingTracer{}
	be := tracedBackend(b, tr)
	ctx := context.Background()
	leases := benchLeases(b, ctx, be, 1000)
	round := map[string]func() error{
		"RenewLease×1000": func() error {
			for _, l := range leases {
				if _, err := be.RenewLease(ctx, l, time.Hour); err != nil {
					return err
				}
			}
			return nil
		},
		"RenewLeases": func() error {
			out, err := be.RenewLeases(ctx, leases, time.Hour)
			for _, o := range out {
				if err == nil && o.Err != nil {
					err = o.Err
				}
			}
			return err
		},
	}
	for _, name := range []string{"RenewLease×1000", "RenewLeases"} {
		b.Run(name, func(b *testing.B) {
			if err := round[name](); err != nil { // warm the statement caches
				b.Fatal(err)
			}
			tr.reset()
			b.ResetTimer()
			for range b.N {
				if err := round[name](); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n, _, _ := tr.counts()
			b.ReportMetric(float64(n)/float64(b.N), "statements/round")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/round")
		})
	}
}

// hideRenewer hides the backend's LeaseRenewer: the Store falls back to
// one RenewLease per lease, as RunWithLease renewed before batching.
type hideRenewer struct{ contract.Backend }

func (h hideRenewer) ClockTolerance() time.Duration {
	return h.Backend.(contract.ToleranceReporter).ClockTolerance()
}

// BenchmarkRunWithLeaseKeepAlive runs a worker holding 1,000 leases with
// RunWithLease (TTL 5 s, renewed every second) for 5 s per iteration and
// reports the statements per second its keep-alive sends, with the
// batched renewal and with the capability hidden (one RenewLease per lease
// and round, as before). Run it with
//
//	go test -run '^$' -bench BenchmarkRunWithLeaseKeepAlive -benchtime 1x ./backends/postgres/
func BenchmarkRunWithLeaseKeepAlive(b *testing.B) {
	for _, batched := range []bool{false, true} {
		name := map[bool]string{false: "RenewLease-per-lease", true: "RenewLeases"}[batched]
		b.Run(name, func(b *testing.B) {
			tr := &countingTracer{}
			var be contract.Backend = tracedBackend(b, tr)
			if !batched {
				be = hideRenewer{be}
			}
			s, err := durable.New(be)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const n, window = 1000, 5 * time.Second
			for range b.N {
				stop := make(chan struct{})
				var started, done sync.WaitGroup
				started.Add(n)
				done.Add(n)
				errs := make(chan error, n)
				for i := range n {
					go func() {
						defer done.Done()
						err := s.RunWithLease(context.Background(), durable.LeaseRequest{Resource: fmt.Sprintf("job-%04d", i), Owner: "worker-1", TTL: 5 * time.Second},
							durable.LeaseOptions{RenewEvery: time.Second}, func(ctx context.Context, _ durable.Lease) error {
								started.Done()
								select {
								case <-stop:
									return nil
								case <-ctx.Done():
									return ctx.Err()
								}
							})
						if err != nil {
							errs <- err
						}
					}()
				}
				started.Wait()
				tr.reset()
				start := time.Now()
				time.Sleep(window)
				renewals, _, qs := tr.counts()
				elapsed := time.Since(start)
				close(stop)
				done.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				rounds := 0
				for _, q := range qs {
					if strings.Contains(q, "unnest(") {
						rounds++
					}
				}
				b.ReportMetric(float64(renewals)/elapsed.Seconds(), "statements/s")
				b.ReportMetric(float64(rounds)/elapsed.Seconds(), "batches/s")
			}
		})
	}
}
