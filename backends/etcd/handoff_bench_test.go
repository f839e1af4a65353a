package etcd

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// BenchmarkHandOff measures a lease's hand-off latency on a 3-member
// cluster: a holder (its own etcd client) holds the lease for a random
// 200–1000 ms while a waiter (another client) waits for it, then releases
// it; the latency is from the start of the release call to the return of
// the waiter's grant. Waiters:
//
//	RunWithLease  Store.RunWithLease with Wait: however the Store waits
//	              (Store.WaitLease, woken by WatchLease, since issue 30)
//	WatchLease    a waiter driven by the backend's watch by hand:
//	              AcquireLease, and on LeaseBusy wait for WatchLease's
//	              signal (set up before the first attempt) and try again
//
// Metrics: p50-µs and p99-µs (nearest rank) of the latency, max-µs; ns/op
// is one whole round (hold included). See BENCHMARKS.md.
func BenchmarkHandOff(b *testing.B) {
	c := startCluster(b, 3)
	open := func() *durable.Store {
		be, err := NewBackend(c.client(b), Options{Prefix: "handoff"})
		if err != nil {
			b.Fatal(err)
		}
		s, err := durable.New(be)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	holder, waiter := open(), open()
	const ttl = 30 * time.Second
	var run int
	for _, mode := range []string{"RunWithLease", "WatchLease"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			run++
			var lat []time.Duration
			for i := range b.N {
				req := contract.LeaseRequest{Resource: fmt.Sprintf("h%d-%d", run, i), TTL: ttl}
				hreq := req
				hreq.Owner = "holder"
				l, err := holder.AcquireLease(ctx, hreq)
				if err != nil {
					b.Fatal(err)
				}
				req.Owner = "waiter"
				got := make(chan time.Time, 1)
				errc := make(chan error, 1)
				go func() {
					errc <- waitFor(ctx, waiter, mode, req, got)
				}()
				time.Sleep(200*time.Millisecond + rand.N(800*time.Millisecond))
				t0 := time.Now()
				if ok, err := holder.ReleaseLease(ctx, l); err != nil || !ok {
					b.Fatalf("release: %v, %v", ok, err)
				}
				if err := <-errc; err != nil {
					b.Fatalf("waiter: %v", err)
				}
				lat = append(lat, (<-got).Sub(t0))
			}
			slices.Sort(lat)
			q := func(p float64) float64 { // nearest rank
				return float64(lat[max(0, int(math.Ceil(p*float64(len(lat))))-1)].Microseconds())
			}
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
		})
	}
}

// waitFor waits for req's lease as mode says, sends the time it was
// granted on got, and releases it.
func waitFor(ctx context.Context, s *durable.Store, mode string, req contract.LeaseRequest, got chan<- time.Time) error {
	if mode == "RunWithLease" {
		return s.RunWithLease(ctx, req, durable.LeaseOptions{Wait: true}, func(context.Context, contract.Lease) error {
			got <- time.Now()
			return nil
		})
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := s.WatchLease(wctx, req.Scope, req.Resource)
	if err != nil {
		return err
	}
	for {
		l, err := s.AcquireLease(ctx, req)
		if err == nil {
			got <- time.Now()
			_, err = s.ReleaseLease(ctx, l)
			return err
		}
		if contract.CodeOf(err) != contract.LeaseBusy {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
