package durable_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// On an in-process backend (contract.InProcess) Do arms no timers or
// contexts of its own for single store calls: one timer both renews the
// claim and watches its proven validity, and the CompleteWithin timer is
// armed only for a retry. These tests repeat the behaviour that TestDo
// checks through faulty (a backend that may hang, so Do's full machinery
// is used) on one that reports InProcess, so both paths keep the same
// promises.

// inproc is faulty reporting InProcess: its injected failures return at
// once (its Hang switches must not be used, as an in-process backend
// cannot hang). It can also fail releases.
type inproc struct {
	*faulty
	releaseFails atomic.Int64 // fail this many ReleaseKey calls with Unavailable
}

func (*inproc) InProcess() bool { return true }

func (b *inproc) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	if b.releaseFails.Add(-1) >= 0 {
		b.faulty.releaseCalls.Add(1)
		return false, &contract.Error{Code: contract.Unavailable, Msg: "injected"}
	}
	return b.faulty.ReleaseKey(ctx, k, token)
}

func newInProc(t *testing.T, opts ...durable.Option) (*durable.Store, *inproc) {
	t.Helper()
	_, f := newFaulty(t)
	b := &inproc{faulty: f}
	s, err := durable.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, b
}

func TestDoInProcess(t *testing.T) {
	ctx := context.Background()
	want := durable.Outcome{Code: 201, Body: []byte(`{"id":"ch_1"}`)}

	t.Run("RenewsClaimWhileSlowFnRuns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			var runs atomic.Int64
			res, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				runs.Add(1)
				time.Sleep(10 * doReq.TTL) // ten TTLs: the claim lives only if it was renewed
				if c, err := s.ClaimKey(context.Background(), doReq); err != nil || c.Kind != durable.ClaimInFlight {
					t.Errorf("claim during slow fn = %v, %v; want in flight", c.Kind, err)
				}
				return want, context.Cause(ctx)
			})
			if err != nil || res.Replayed || res.Record.State != durable.KeyCompleted || runs.Load() != 1 {
				t.Fatalf("slow Do = %+v, %v (runs %d)", res, err, runs.Load())
			}
			if n := b.renewCalls.Load(); n < 25 {
				t.Fatalf("%d renewals in 10 TTLs, want about 30 (every TTL/3)", n)
			}
		})
	})

	t.Run("RejectedRenewalCancelsFn", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			fenced := error(&contract.Error{Code: contract.Fenced, Msg: "injected"})
			b.renewErr.Store(&fenced)
			start := time.Now()
			var cause error
			var after time.Duration
			_, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				<-ctx.Done()
				cause, after = context.Cause(ctx), time.Since(start)
				return durable.Outcome{}, ctx.Err()
			})
			if !errors.Is(cause, durable.ErrFenced) || after != doReq.TTL/3 {
				t.Fatalf("fn's context ended after %v with %v; want ErrFenced at the first renewal (TTL/3)", after, cause)
			}
			if !errors.Is(err, durable.ErrFenced) || !errors.Is(err, context.Canceled) {
				t.Fatalf("Do = %v, want ErrFenced wrapping fn's error", err)
			}
			if n := b.releaseCalls.Load(); n != 0 {
				t.Fatalf("Do released a lost claim %d times", n)
			}
		})
	})

	t.Run("NoRenewalWithinTTLCancelsFn", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			unavailable := error(&contract.Error{Code: contract.Unavailable, Msg: "injected"})
			b.renewErr.Store(&unavailable)
			start := time.Now()
			var cause error
			var after time.Duration
			_, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				<-ctx.Done()
				cause, after = context.Cause(ctx), time.Since(start)
				return want, nil
			})
			// Exactly one TTL (the memory backend's tolerance is 0): the
			// one timer fires at the end of the proven validity even
			// though the retry schedule would fire later.
			if !errors.Is(cause, durable.ErrFenced) || after != doReq.TTL {
				t.Fatalf("fn's context ended after %v with %v; want ErrFenced after one TTL", after, cause)
			}
			if err != nil {
				t.Fatalf("Do = %v", err)
			}
		})
	})

	t.Run("LastRenewalExtendsValidity", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			unavailable := error(&contract.Error{Code: contract.Unavailable, Msg: "injected"})
			start := time.Now()
			var cause error
			var after time.Duration
			_, err := s.Do(ctx, doReq, durable.DoOptions{RenewEvery: 400 * time.Millisecond}, func(ctx context.Context) (durable.Outcome, error) {
				time.Sleep(500 * time.Millisecond) // one renewal succeeded, at 400ms
				b.renewErr.Store(&unavailable)
				<-ctx.Done()
				cause, after = context.Cause(ctx), time.Since(start)
				return want, nil
			})
			if !errors.Is(cause, durable.ErrFenced) || after != 400*time.Millisecond+doReq.TTL {
				t.Fatalf("fn's context ended after %v with %v; want ErrFenced one TTL after the last successful renewal (1.4s)", after, cause)
			}
			if err != nil {
				t.Fatalf("Do = %v", err)
			}
		})
	})

	t.Run("FnReturningEarlyLeavesNoTimer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			var runs atomic.Int64
			if _, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * doReq.TTL)
			if n := b.renewCalls.Load(); n != 0 {
				t.Fatalf("%d renewals after Do returned, want 0", n)
			}
		})
	})

	t.Run("ShortCompleteWithinBoundsRetries", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			b.completeFails.Store(1 << 30)
			var runs atomic.Int64
			start := time.Now()
			_, err := s.Do(ctx, doReq, durable.DoOptions{CompleteWithin: 120 * time.Millisecond}, counter(&runs, want))
			// Attempts at 0 and 50ms; the pause after the second would
			// end at 150ms, past the bound of 120ms.
			if took := time.Since(start); !errors.Is(err, durable.ErrUnavailable) || took != 120*time.Millisecond || b.completeCalls.Load() != 2 {
				t.Fatalf("Do = %v after %v and %d attempts; want ErrUnavailable at CompleteWithin (120ms) after 2", err, took, b.completeCalls.Load())
			}
		})
	})

	t.Run("ReleaseRetriedWithinCompleteWithin", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			b.releaseFails.Store(2)
			boom := errors.New("boom")
			fail := func(context.Context) (durable.Outcome, error) { return durable.Outcome{}, boom }
			if _, err := s.Do(ctx, doReq, durable.DoOptions{}, fail); err != boom {
				t.Fatalf("Do = %v, want fn's error unchanged", err)
			}
			assertReleased(t, s, doReq.KeyRef)

			// A release that keeps failing gives up after CompleteWithin;
			// the claim then expires.
			b.releaseFails.Store(1 << 30)
			start := time.Now()
			if _, err := s.Do(ctx, doReq, durable.DoOptions{CompleteWithin: time.Second}, fail); err != boom {
				t.Fatalf("Do = %v, want fn's error unchanged", err)
			}
			if took := time.Since(start); took != time.Second {
				t.Fatalf("Do gave up releasing after %v, want CompleteWithin (1s)", took)
			}
		})
	})

	t.Run("CancelledContextRunsNothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			var runs atomic.Int64
			_, err := s.Do(cctx, doReq, durable.DoOptions{CallTimeout: time.Second}, counter(&runs, want))
			if !errors.Is(err, context.Canceled) || runs.Load() != 0 || b.claimCalls.Load() != 0 {
				t.Fatalf("Do = %v (runs %d, %d claims), want context.Canceled and no call", err, runs.Load(), b.claimCalls.Load())
			}
			checkCode(t, err, contract.Canceled)
		})
	})

	t.Run("FnRunsUnderCallersContext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, _ := newInProc(t)
			type key struct{}
			cctx, cancel := context.WithCancel(context.WithValue(ctx, key{}, "v"))
			_, err := s.Do(cctx, doReq, durable.DoOptions{CallTimeout: time.Second}, func(ctx context.Context) (durable.Outcome, error) {
				if ctx.Value(key{}) != "v" {
					t.Error("fn's context lacks the caller's values")
				}
				cancel()
				<-ctx.Done() // ends only if it follows the caller's
				return durable.Outcome{}, ctx.Err()
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Do = %v, want context.Canceled", err)
			}
			assertReleased(t, s, doReq.KeyRef) // released though the caller left
		})
	})

	t.Run("CallerGoneAfterSuccessStillCompletes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			b.completeFails.Store(1) // the retry too runs after the caller left
			cctx, cancel := context.WithCancel(ctx)
			res, err := s.Do(cctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				cancel()
				return want, nil
			})
			if err != nil || res.Record.State != durable.KeyCompleted || b.completeCalls.Load() != 2 {
				t.Fatalf("Do = %+v, %v after %d completions", res, err, b.completeCalls.Load())
			}
		})
	})

	t.Run("MaxWaitAndCallTimeoutBoundTheClaims", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, b := newInProc(t)
			held := durable.ClaimRequest{KeyRef: doReq.KeyRef, Fingerprint: doReq.Fingerprint, TTL: time.Hour}
			if _, err := s.ClaimKey(ctx, held); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var runs atomic.Int64
			res, err := s.Do(ctx, held, durable.DoOptions{MaxWait: 3 * time.Second, CallTimeout: time.Second}, counter(&runs, want))
			if !errors.Is(err, durable.ErrInFlight) || runs.Load() != 0 || res.Record.State != durable.KeyClaimed {
				t.Fatalf("Do = %+v, %v (runs %d), want ErrInFlight with the holder's record", res, err, runs.Load())
			}
			if waited := time.Since(start); waited != 3*time.Second {
				t.Fatalf("waited %v, want MaxWait (3s)", waited)
			}
			if n := b.claimCalls.Load(); n < 2 {
				t.Fatalf("%d claims, want the first and one after the wait", n)
			}
		})
	})
}

// TestDoInProcessAllocations guards the in-process fast path: Do on the
// memory backend arms no per-call timeout contexts or timers. The bound is
// generous (about 12 today, plus what the race detector adds); the full
// machinery (claim timeout, completion bound, attempt timeout, a second
// timer) costs about 15 more.
func TestDoInProcessAllocations(t *testing.T) {
	s := newMemStore(t)
	ctx := context.Background()
	out := durable.Outcome{Code: 200, Body: []byte("ok")}
	fn := func(context.Context) (durable.Outcome, error) { return out, nil }
	opts := durable.DoOptions{CallTimeout: 5 * time.Second, CompleteWithin: 5 * time.Second}
	keys := make([]durable.ClaimRequest, 200)
	for i := range keys {
		keys[i] = durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k-" + strconv.Itoa(i)}, Fingerprint: "fp"}
	}
	i := 0
	allocs := testing.AllocsPerRun(len(keys)-1, func() {
		res, err := s.Do(ctx, keys[i], opts, fn)
		if err != nil || res.Replayed {
			t.Fatalf("Do = %+v, %v", res, err)
		}
		i++
	})
	if allocs > 24 {
		t.Fatalf("Do on memory allocated %.0f times per first execution, want at most 24", allocs)
	}
	t.Logf("%.0f allocations per first execution", allocs)
}
