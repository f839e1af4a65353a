package postgres

import (
	"context"
	"math/rand/v2"
	"os"
	"regexp"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/pgtest"
)

// BenchmarkClientCost runs each operation of the ceiling through the
// backend, and its raw floor, from 16 goroutines (b.SetParallelism) with
// allocations reported, for finding what the backend spends on the client
// beyond the floor with -benchmem, -cpuprofile and -memprofile:
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkClientCost -benchmem -benchtime 2000x ./backends/postgres/
//
// cpu-µs/op is the CPU time (user and system) of the test process per
// operation: the client's cost, without the server's.
//
// DURABLE_CEILING_OPS picks operations as for BenchmarkCeiling. The
// server's settings are the harness's (fsync off), so writes cost less
// server time than in BenchmarkCeiling; the client's cost is the same.
func BenchmarkClientCost(b *testing.B) {
	srv := pgtest.Require(b)
	ctx := context.Background()
	c := newCeiling(b, srv, 20)
	only, err := regexp.Compile(os.Getenv("DURABLE_CEILING_OPS"))
	if err != nil {
		b.Fatalf("DURABLE_CEILING_OPS: %v", err)
	}
	for _, op := range c.ops() {
		if !only.MatchString(op.name) {
			continue
		}
		s := c.capture(b, ctx, op)
		b.Run(op.name+"/durable", func(b *testing.B) {
			var client atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8) // 16 goroutines on 2 CPUs
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				id := int(client.Add(1)-1) % 64
				for pb.Next() {
					if err := op.run(ctx, id, rand.Int64N(1<<62)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(op.name+"/raw", func(b *testing.B) {
			conns := make(chan *rawConn, 16) // dialed outside the timer
			for range 16 {
				rc, err := c.dialRaw(ctx, s.raw)
				if err != nil {
					b.Fatal(err)
				}
				defer rc.pc.Close(ctx)
				conns <- rc
			}
			var client atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				id := int(client.Add(1)-1) % 64
				rc := <-conns
				for pb.Next() {
					if err := rc.run(id, 1+rand.Int64N(1_000_000_000_000_000)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// reportCPU starts counting the process's CPU time; the function it
// returns reports it per operation.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() {
		b.ReportMetric(float64((processCPU(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
