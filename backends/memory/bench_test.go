package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
)

func benchStore(b *testing.B) *durable.Store {
	b.Helper()
	s, err := memory.Open(memory.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkUpdateWorkflow measures one compare-and-set with a 1 KiB snapshot
// through the Store (validation included). In parallel, each goroutine
// updates its own workflow, the common case of many workers.
func BenchmarkUpdateWorkflow(b *testing.B) {
	ctx := context.Background()
	snap := make([]byte, 1024)
	b.Run("Single", func(b *testing.B) {
		s := benchStore(b)
		w, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Status: durable.StatusRunning})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			w, err = s.UpdateWorkflow(ctx, durable.Update{ID: "w", ExpectStatus: durable.StatusRunning,
				ExpectRevision: w.Revision, Status: durable.StatusRunning, Snapshot: snap})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		s := benchStore(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			id := "w-" + strconv.FormatInt(n.Add(1), 10)
			w, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusRunning})
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				w, err = s.UpdateWorkflow(ctx, durable.Update{ID: id, ExpectStatus: durable.StatusRunning,
					ExpectRevision: w.Revision, Status: durable.StatusRunning, Snapshot: snap})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkClaimComplete measures ClaimKey followed by CompleteKey on a fresh
// key: the write path of an idempotent request.
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	body := make([]byte, 256)
	run := func(s *durable.Store, key string) error {
		c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: key}, Fingerprint: "sha256:abc", TTL: time.Minute})
		if err != nil {
			return err
		}
		_, err = s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
			Outcome: durable.Outcome{Code: 201, Body: body}})
		return err
	}
	b.Run("Single", func(b *testing.B) {
		s := benchStore(b)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := run(s, "k-"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		s := benchStore(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := run(s, "k-"+strconv.FormatInt(n.Add(1), 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkAcquireRelease measures AcquireLease followed by ReleaseLease.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	run := func(s *durable.Store, res string) error {
		l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: res, Owner: "worker-1", TTL: 30 * time.Second})
		if err != nil {
			return err
		}
		_, err = s.ReleaseLease(ctx, l)
		return err
	}
	b.Run("Single", func(b *testing.B) {
		s := benchStore(b)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := run(s, "r"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		s := benchStore(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			res := "r-" + strconv.FormatInt(n.Add(1), 10)
			for pb.Next() {
				if err := run(s, res); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkGetWorkflow measures a read of a workflow with a 64-byte
// snapshot. In parallel each goroutine reads its own workflow: shards are
// locked independently, so this shows how the store scales across cores.
func BenchmarkGetWorkflow(b *testing.B) {
	ctx := context.Background()
	snap := make([]byte, 64)
	b.Run("Single", func(b *testing.B) {
		s := benchStore(b)
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Snapshot: snap}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := s.GetWorkflow(ctx, "", "w"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		s := benchStore(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			id := "w-" + strconv.FormatInt(n.Add(1), 10)
			if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Snapshot: snap}); err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if _, err := s.GetWorkflow(ctx, "", id); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// listSizes are the store sizes of the listing benchmarks.
var listSizes = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"10k", 10_000}, {"100k", 100_000}}

// benchID is the ID of the i-th row: fixed width, so byte order is numeric
// order. Rows are inserted in a shuffled order (see shuffled), so an index
// gets inserts all over its range, not only appends.
func benchID(prefix string, i int) string {
	return fmt.Sprintf("%s-%08d", prefix, i)
}

// shuffled returns 0..n-1 in a fixed pseudo-random order.
func shuffled(n int) []int {
	p := rand.New(rand.NewPCG(1, 2)).Perm(n)
	return p
}

// fillWorkflows creates n workflows in the default scope; every tenth is
// pending, the rest running, so a filter on pending matches 10% of rows.
func fillWorkflows(b *testing.B, s *durable.Store, n int) {
	b.Helper()
	ctx := context.Background()
	for _, i := range shuffled(n) {
		st := durable.StatusRunning
		if i%10 == 0 {
			st = durable.StatusPending
		}
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: benchID("wf", i), Status: st}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListWorkflows measures one page of 100 workflows in a scope of
// 1k, 10k or 100k rows, from cursors spread over the scope. "Status" filters
// on a status that 10% of the rows have. The cost of a page should not grow
// with the number of rows in the scope (beyond a log factor).
func BenchmarkListWorkflows(b *testing.B) {
	ctx := context.Background()
	const limit = 100
	for _, size := range listSizes {
		s := benchStore(b)
		fillWorkflows(b, s, size.n)
		for _, filter := range []struct {
			name   string
			status durable.Status
			every  int // one matching row in every
		}{{"All", "", 1}, {"Status", durable.StatusPending, 10}} {
			// Cursors whose page is full: starts of the first matching rows.
			var cursors []string
			for i := 0; i+limit*filter.every <= size.n; i += filter.every * 37 {
				after := ""
				if i > 0 {
					after = benchID("wf", i-filter.every)
				}
				cursors = append(cursors, after)
			}
			b.Run(size.name+"/"+filter.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					ws, err := s.ListWorkflows(ctx, durable.ListQuery{Status: filter.status, After: cursors[i%len(cursors)], Limit: limit})
					if err != nil {
						b.Fatal(err)
					}
					if len(ws) != limit {
						b.Fatalf("page of %d rows, want %d", len(ws), limit)
					}
				}
			})
		}
	}
}

// BenchmarkCreateWorkflow measures CreateWorkflow on a scope that already
// holds 100k workflows, with IDs spread over the scope's range. The store
// is refilled to 100k rows (off the clock) every 100k creates, so it holds
// between 100k and 200k rows.
func BenchmarkCreateWorkflow(b *testing.B) {
	ctx := context.Background()
	const n = 100_000
	var s *durable.Store
	refill := func() {
		s = benchStore(b)
		fillWorkflows(b, s, n)
	}
	b.Run("100k", func(b *testing.B) {
		b.StopTimer()
		refill()
		order := shuffled(n)
		b.ReportAllocs()
		b.StartTimer()
		for i := 0; i < b.N; i++ {
			if i > 0 && i%n == 0 {
				b.StopTimer()
				refill()
				b.StartTimer()
			}
			// Between existing IDs: wf-00000042 < wf-00000042x < wf-00000043.
			id := benchID("wf", order[i%n]) + "x"
			if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusRunning}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListRecords measures one page of 100 keys or leases in a scope of
// 100k, from cursors spread over the scope. Keys/Completed filters on a
// state that 10% of the keys have.
func BenchmarkListRecords(b *testing.B) {
	ctx := context.Background()
	const n, limit = 100_000, 100
	s := benchStore(b)
	for _, i := range shuffled(n) {
		c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: benchID("k", i)}, Fingerprint: "sha256:abc", TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
				Outcome: durable.Outcome{Code: 201}, Retain: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: benchID("r", i), Owner: "o", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	run := func(name string, every int, list func(after string) (int, error)) {
		var cursors []string
		for i := 0; i+limit*every <= n; i += every * 37 {
			cursors = append(cursors, "")
			if i > 0 {
				cursors[len(cursors)-1] = benchID(name[:1], i-every)
			}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				got, err := list(cursors[i%len(cursors)])
				if err != nil {
					b.Fatal(err)
				}
				if got != limit {
					b.Fatalf("page of %d rows, want %d", got, limit)
				}
			}
		})
	}
	run("Keys/All", 1, func(after string) (int, error) {
		ks, err := s.ListKeys(ctx, durable.KeyListQuery{After: after, Limit: limit})
		return len(ks), err
	})
	run("Keys/Completed", 10, func(after string) (int, error) {
		ks, err := s.ListKeys(ctx, durable.KeyListQuery{State: durable.KeyCompleted, After: after, Limit: limit})
		return len(ks), err
	})
	run("Leases/Held", 1, func(after string) (int, error) {
		ls, err := s.ListLeases(ctx, durable.LeaseListQuery{Held: true, After: after, Limit: limit})
		return len(ls), err
	})
}
