package handoff

import (
	"context"
	"testing"

	"github.com/durable-go/durable"
)

// Factory returns a new Store on the storage under test: every call a new
// client of the same storage (the same database, the same memory
// Storage), so that two Stores from it see each other's leases. The
// benchmark closes the Stores it opens when b ends (through b.Cleanup, which
// the factory may also use).
type Factory func(tb testing.TB) *durable.Store

// Benchmark measures the hand-off latency on the Stores open makes, in
// three sub-benchmarks of b.N hand-offs each (see [Measure]), and reports
// the median and p99 as the metrics p50-us and p99-us (ns/op includes
// o.Hold and is not the latency):
//
//   - local: holder and waiter on one Store (the Store's own wake, no round
//     trip to learn of the release);
//   - watch: two Stores (the backend's contract.LeaseWatcher, if it has
//     one; the poll floor otherwise);
//   - poll: two Stores, the waiter's without the watcher ([Hide]): the
//     poll floor alone, which is how waiting worked before the watch.
//
// Call it from a backend's benchmark file:
//
//	func BenchmarkHandoff(b *testing.B) { handoff.Benchmark(b, newStore, handoff.Options{}) }
func Benchmark(b *testing.B, open Factory, o Options) {
	o.defaults()
	run := func(name string, stores func(b *testing.B) (holder, waiter *durable.Store)) {
		b.Run(name, func(b *testing.B) {
			holder, waiter := stores(b)
			o := o
			o.Handoffs = b.N
			b.ResetTimer()
			r, err := Measure(context.Background(), holder, waiter, o)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(r.Median().Nanoseconds())/1e3, "p50-us")
			b.ReportMetric(float64(r.P99().Nanoseconds())/1e3, "p99-us")
		})
	}
	run("local", func(b *testing.B) (*durable.Store, *durable.Store) {
		s := open(b)
		return s, s
	})
	run("watch", func(b *testing.B) (*durable.Store, *durable.Store) { return open(b), open(b) })
	run("poll", func(b *testing.B) (*durable.Store, *durable.Store) {
		h, err := Hidden(open(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close() })
		return open(b), h
	})
}

// BenchmarkFairness runs [Fairness] with b.N grants among o.Workers workers
// on one Store (sub-benchmark 1store) and spread over two Stores (2stores),
// and reports the share of grants in arrival order (inorder-%), the largest
// gap (maxgap) and, for two Stores, the first Store's share (store0-%).
func BenchmarkFairness(b *testing.B, open Factory, o FairnessOptions) {
	for _, c := range []struct {
		name string
		n    int
	}{{"1store", 1}, {"2stores", 2}} {
		n := c.n
		b.Run(c.name, func(b *testing.B) {
			stores := make([]*durable.Store, n)
			for i := range stores {
				stores[i] = open(b)
			}
			o := o
			o.Grants = b.N
			b.ResetTimer()
			r, err := Fairness(context.Background(), stores, o)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(100*float64(r.InOrder)/float64(max(r.Grants, 1)), "inorder-%")
			b.ReportMetric(float64(r.MaxGap), "maxgap")
			if n > 1 {
				b.ReportMetric(100*float64(r.PerStore[0])/float64(max(r.Grants, 1)), "store0-%")
			}
		})
	}
}
