package handoff

import (
	"context"
	"fmt"
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
//   - local: holder and waiter on one Store (the waiter learns of its
//     Store's own release from the Store's watch, as another Store's
//     waiter would; at once, without a round trip, on a backend without
//     one);
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
// on one Store (sub-benchmark 1store), spread over two Stores (2stores)
// and over three (3stores), and reports the share of grants in arrival
// order (inorder-%), the largest gap (maxgap) and, for several Stores, the
// share of grants that went to another Store than the previous grant's
// (switch-%) and each Store's share (store0-%, store1-%, ...).
func BenchmarkFairness(b *testing.B, open Factory, o FairnessOptions) {
	for _, n := range []int{1, 2, 3} {
		name := "1store"
		if n > 1 {
			name = fmt.Sprintf("%dstores", n)
		}
		b.Run(name, func(b *testing.B) {
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
			pct := func(k int) float64 { return 100 * float64(k) / float64(max(r.Grants, 1)) }
			b.ReportMetric(pct(r.InOrder), "inorder-%")
			b.ReportMetric(float64(r.MaxGap), "maxgap")
			if n > 1 {
				b.ReportMetric(pct(r.Switches), "switch-%")
				for i, k := range r.PerStore {
					b.ReportMetric(pct(k), fmt.Sprintf("store%d-%%", i))
				}
			}
		})
	}
}
