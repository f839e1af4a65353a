package memory_test

import (
	"context"
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
