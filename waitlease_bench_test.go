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
// Stores, the waiter's without the watch).
func BenchmarkHandoff(b *testing.B) {
	handoff.Benchmark(b, memFactory(), handoff.Options{Hold: time.Millisecond})
}

// BenchmarkFairness: 8 workers cycling on one lease through one Store and
// through two.
func BenchmarkFairness(b *testing.B) {
	handoff.BenchmarkFairness(b, memFactory(), handoff.FairnessOptions{Workers: 8, Hold: 50 * time.Microsecond})
}
