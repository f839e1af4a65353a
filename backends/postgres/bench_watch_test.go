package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/handoff"
)

// BenchmarkLeaseWatchPaths measures, on the cluster of BenchmarkLeasePaths
// (fsync on), at 1 and 16 clients, pairs of statements (ns/op per pair,
// pairs/s):
//
//	AcquireRelease         BenchmarkLeasePaths' (nobody watches), for
//	                       comparison in the same run.
//	AcquireReleaseWatched  the same on leases that another backend watches
//	                       (WatchLease, with LISTEN): both statements
//	                       notify.
//	AcquirePermitRelease   AcquirePermit of one of 64 permits of one
//	                       semaphore shared by every client, and its
//	                       release.
//
// Run it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkLeaseWatchPaths -benchtime 3000x ./backends/postgres/
func BenchmarkLeaseWatchPaths(b *testing.B) {
	srv, env := syncedBench(b)
	ctx := b.Context()
	watcher, err := openDSN(ctx, srv.DSN()+"&schema="+env.b.schema+"&migrate=verify")
	if err != nil {
		b.Fatal(err)
	}
	defer watcher.Close()
	be := env.b
	pair := func(ctx context.Context, l contract.Lease, err error) error {
		if err != nil {
			return err
		}
		ok, err := be.ReleaseLease(ctx, l)
		if err == nil && !ok {
			err = fmt.Errorf("ReleaseLease %s: false", l.Resource)
		}
		return err
	}
	ops := []benchOp{
		leasePathOps(env)[0],
		{
			name: "AcquireReleaseWatched", rate: "pairs/s",
			prepare: func(ctx context.Context, p string, _, slots int) error {
				for slot := range slots {
					if _, err := watcher.WatchLease(b.Context(), "bench", fmt.Sprintf("%sh-%d", p, slot)); err != nil {
						return err
					}
				}
				return nil
			},
			durable: func(ctx context.Context, p string, slot, _ int64) error {
				l, err := be.AcquireLease(ctx, contract.LeaseRequest{Scope: "bench", Resource: fmt.Sprintf("%sh-%d", p, slot), Owner: "o", TTL: benchTTL})
				return pair(ctx, l, err)
			},
		},
		{
			name: "AcquirePermitRelease", rate: "pairs/s",
			durable: func(ctx context.Context, p string, _, _ int64) error {
				l, err := be.AcquirePermit(ctx, contract.PermitRequest{Scope: "bench", Resource: p + "sem", Owner: "o", TTL: benchTTL, Permits: 64})
				return pair(ctx, l, err)
			},
		},
	}
	for _, op := range ops {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", op.name, clients), func(b *testing.B) {
				env.run(b, op, clients)
			})
		}
	}
}

// BenchmarkLeaseHandoff measures the hand-off of a lease from its holder
// to a waiter: the time from the holder's ReleaseLease returning to the
// waiter's AcquireLease returning the grant. Two goroutines, each on a
// backend of its own (pgx, LISTEN on), pass one lease back and forth b.N
// times; the holder keeps it 30–50 ms, while the other waits:
//
//	mode=poll   the waiter retries AcquireLease with the backoff of
//	            Store.RunWithLease's Wait (a pause of up to 50 ms,
//	            doubling up to 5 s, full jitter): how every backend waited
//	            before issue 30.
//	mode=watch  the waiter watches the lease (WatchLease) and retries at
//	            each signal, with the same backoff as the floor.
//
// It reports the median and the 99th percentile (p50-ms, p99-ms). Run it
// with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkLeaseHandoff -benchtime 200x ./backends/postgres/
func BenchmarkLeaseHandoff(b *testing.B) {
	srv, env := syncedBench(b)
	ctx := b.Context()
	var peers [2]*Backend
	for i := range peers {
		p, err := openDSN(ctx, srv.DSN()+"&schema="+env.b.schema+"&migrate=verify&pool_max_conns=4")
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		peers[i] = p
	}
	for _, mode := range []string{"poll", "watch"} {
		b.Run("mode="+mode, func(b *testing.B) {
			res := fmt.Sprintf("handoff-%s-%d", mode, env.runs.Add(1))
			req := func(owner int) contract.LeaseRequest {
				return contract.LeaseRequest{Scope: "bench", Resource: res, Owner: fmt.Sprintf("o-%d", owner), TTL: time.Minute}
			}
			var signals [2]<-chan struct{}
			if mode == "watch" {
				for i, p := range peers {
					ch, err := p.WatchLease(b.Context(), "bench", res)
					if err != nil {
						b.Fatal(err)
					}
					signals[i] = ch
				}
				for _, p := range peers {
					awaitListenerB(b, p)
				}
			}
			held, err := peers[0].AcquireLease(ctx, req(0))
			if err != nil {
				b.Fatal(err)
			}
			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				holder, waiter := i%2, (i+1)%2
				released := make(chan time.Time, 1)
				granted := make(chan error, 1)
				var grant contract.Lease
				var at time.Time
				go func() {
					if signals[waiter] != nil {
						drain(signals[waiter])
					}
					delay := 50 * time.Millisecond
					for {
						l, err := peers[waiter].AcquireLease(ctx, req(waiter))
						if err == nil {
							grant, at = l, time.Now()
							granted <- nil
							return
						}
						if contract.CodeOf(err) != contract.LeaseBusy {
							granted <- err
							return
						}
						t := time.NewTimer(rand.N(delay) + time.Microsecond)
						select {
						case <-signals[waiter]: // nil in mode=poll: never
						case <-t.C:
						}
						t.Stop()
						delay = min(2*delay, 5*time.Second)
					}
				}()
				time.Sleep(30*time.Millisecond + rand.N(20*time.Millisecond))
				if ok, err := peers[holder].ReleaseLease(ctx, held); !ok || err != nil {
					b.Fatalf("ReleaseLease = %v, %v", ok, err)
				}
				released <- time.Now()
				if err := <-granted; err != nil {
					b.Fatal(err)
				}
				latencies = append(latencies, at.Sub(<-released))
				held = grant
			}
			b.StopTimer()
			slices.Sort(latencies)
			pct := func(p float64) float64 {
				return float64(latencies[int(p*float64(len(latencies)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}

// awaitListenerB waits until b's LISTEN connection is up.
func awaitListenerB(tb testing.TB, b *Backend) {
	deadline := time.Now().Add(10 * time.Second)
	for b.listenerPID() == 0 {
		if time.Now().After(deadline) {
			tb.Fatal("the LISTEN connection did not come up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// storeFactory opens Stores on one schema of a private cluster with fsync
// on (see syncedBench), each on a pgx pool of its own (LISTEN on): the
// clients of one database that the hand-off harness needs.
func storeFactory(b *testing.B) handoff.Factory {
	srv, env := syncedBench(b)
	return func(tb testing.TB) *durable.Store {
		s, err := Open(context.Background(), srv.DSN()+"&schema="+env.b.schema+"&migrate=verify&pool_max_conns=8")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// BenchmarkStoreHandoff measures the hand-off latency through
// Store.WaitLease on this backend (internal/handoff: from the holder's
// ReleaseLease call to the waiter's WaitLease returning the lease), with
// the holder keeping the lease 5 ms (Hold) or 100 ms (HoldSlow) once the
// waiter waits: local (one Store), watch (two Stores, WatchLease over
// LISTEN/NOTIFY), poll (two Stores, the waiter's without the watch: the
// Store's polling floor alone, as before issue 30). Metrics p50-us,
// p99-us. Run it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkStoreHandoff -benchtime 300x ./backends/postgres/
func BenchmarkStoreHandoff(b *testing.B) {
	open := storeFactory(b)
	b.Run("Hold", func(b *testing.B) { handoff.Benchmark(b, open, handoff.Options{Resource: "h5"}) })
	b.Run("HoldSlow", func(b *testing.B) {
		handoff.Benchmark(b, open, handoff.Options{Resource: "h100", Hold: 100 * time.Millisecond})
	})
}

// BenchmarkStoreFairness: 8 workers cycling on one lease through
// Store.WaitLease, on one Store and spread over two (internal/handoff):
// inorder-% is the share of grants that went to the longest waiter,
// maxgap the most grants others received in a row while one waited. Run
// it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkStoreFairness -benchtime 1000x ./backends/postgres/
func BenchmarkStoreFairness(b *testing.B) {
	handoff.BenchmarkFairness(b, storeFactory(b), handoff.FairnessOptions{Workers: 8, Hold: 50 * time.Microsecond})
}
