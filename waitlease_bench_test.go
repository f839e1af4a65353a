package durable_test

import (
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/handoff"
)

// memFactory opens Stores on one memory Storage, each its own client (with
// the backend's in-process lease watch).
func memFactory() handoff.Factory {
	st := memory.NewStorage(memory.Options{})
	return func(tb testing.TB) *durable.Store {
		s, err := durable.New(st.Backend())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}
}

// BenchmarkHandoff: the hand-off latency on memory (see docs/BENCHMARKS.md):
// local (one Store), watch (two Stores, the backend's watch), poll (two
// Stores, the waiter's without the watch), the holder keeping the lease
// 1 ms once the waiter waits.
func BenchmarkHandoff(b *testing.B) {
	handoff.Benchmark(b, memFactory(), handoff.Options{Hold: time.Millisecond})
}

// BenchmarkHandoffSlowHolder is BenchmarkHandoff with a holder that keeps
// the lease 100 ms: a polling waiter's pauses have grown by then.
func BenchmarkHandoffSlowHolder(b *testing.B) {
	handoff.Benchmark(b, memFactory(), handoff.Options{Hold: 100 * time.Millisecond})
}

// BenchmarkFairness: 8 workers cycling on one lease through one Store and
// through two.
func BenchmarkFairness(b *testing.B) {
	handoff.BenchmarkFairness(b, memFactory(), handoff.FairnessOptions{Workers: 8, Hold: 50 * time.Microsecond})
}
