package redis

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/handoff"
	"github.com/durable-go/durable/internal/redistest"
)

// Hand-off latency and fairness (internal/handoff) on Redis: a node and a
// 3-master cluster, both appendfsync everysec, so that the figures show
// how the waiter learns of a release rather than the disk's fsync. Each
// Store the factory opens is its own durable.Open (its own client and
// pub/sub connection) on one fresh prefix. BENCHMARKS.md records the
// figures and the commands.

// handoffTargets calls fn with a factory per target.
func handoffTargets(b *testing.B, fn func(b *testing.B, open handoff.Factory)) {
	for _, on := range []string{"node", "cluster"} {
		b.Run("on="+on, func(b *testing.B) {
			var dsn string
			if on == "node" {
				dsn = redistest.Start(b, redistest.Options{AppendFsync: "everysec"}).URL() + "/?prefix=" + freshPrefix()
			} else {
				dsn = redistest.StartCluster(b, redistest.ClusterOptions{Masters: 3, Node: redistest.Options{AppendFsync: "everysec"}}).DSN() + "&prefix=" + freshPrefix()
			}
			fn(b, func(tb testing.TB) *durable.Store {
				s, err := durable.Open(context.Background(), dsn)
				if err != nil {
					tb.Fatal(err)
				}
				tb.Cleanup(func() { _ = s.Close() })
				return s
			})
		})
	}
}

// BenchmarkHandoff: release to the waiter's grant, the holder keeping the
// lease 1 ms once the waiter waits: local (one Store), watch (two Stores:
// the backend's pub/sub watch), poll (two Stores, the waiter's without
// the watch: how waiting worked before issue 30).
func BenchmarkHandoff(b *testing.B) {
	handoffTargets(b, func(b *testing.B, open handoff.Factory) {
		handoff.Benchmark(b, open, handoff.Options{Hold: time.Millisecond})
	})
}

// BenchmarkHandoffSlowHolder is BenchmarkHandoff with a holder that keeps
// the lease 100 ms.
func BenchmarkHandoffSlowHolder(b *testing.B) {
	handoffTargets(b, func(b *testing.B, open handoff.Factory) {
		handoff.Benchmark(b, open, handoff.Options{Hold: 100 * time.Millisecond})
	})
}

// BenchmarkFairness: 8 workers cycling on one lease through one Store and
// through two.
func BenchmarkFairness(b *testing.B) {
	handoffTargets(b, func(b *testing.B, open handoff.Factory) {
		handoff.BenchmarkFairness(b, open, handoff.FairnessOptions{Workers: 8, Hold: 50 * time.Microsecond})
	})
}
