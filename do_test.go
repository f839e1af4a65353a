package durable_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// The tests of Do run in synctest bubbles: time is simulated, so claims
// expire and renewals tick without real sleeping, and synctest.Test fails
// the test if any goroutine (such as a renewal loop) is still blocked when
// the test function returns.

// faulty wraps a backend and injects failures into key operations.
type faulty struct {
	contract.Backend
	claimHang     atomic.Bool // ClaimKey blocks until its context ends
	claimCalls    atomic.Int64
	completeFails atomic.Int64 // fail this many CompleteKey calls with Unavailable
	completeHang  atomic.Bool  // CompleteKey blocks until its context ends
	completeCalls atomic.Int64
	renewErr      atomic.Pointer[error]
	renewCalls    atomic.Int64
	releaseHang   atomic.Bool // ReleaseKey blocks until its context ends
	releaseCalls  atomic.Int64
}

// hang blocks until ctx ends, as a call to a store that never answers.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (f *faulty) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	f.claimCalls.Add(1)
	if f.claimHang.Load() {
		return contract.Claim{}, hang(ctx)
	}
	return f.Backend.ClaimKey(ctx, req)
}

func (f *faulty) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	f.completeCalls.Add(1)
	if f.completeHang.Load() {
		return contract.KeyRecord{}, hang(ctx)
	}
	if f.completeFails.Add(-1) >= 0 {
		return contract.KeyRecord{}, &contract.Error{Code: contract.Unavailable, Msg: "injected"}
	}
	return f.Backend.CompleteKey(ctx, c)
}

func (f *faulty) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	f.renewCalls.Add(1)
	if p := f.renewErr.Load(); p != nil {
		return contract.KeyRecord{}, *p
	}
	return f.Backend.RenewKey(ctx, k, token, ttl)
}

func (f *faulty) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	f.releaseCalls.Add(1)
	if f.releaseHang.Load() {
		return false, hang(ctx)
	}
	return f.Backend.ReleaseKey(ctx, k, token)
}

func (f *faulty) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return f.Backend.(contract.KeyWaiter).WaitKey(ctx, k)
}

func newFaulty(t *testing.T, opts ...durable.Option) (*durable.Store, *faulty) {
	t.Helper()
	f := &faulty{Backend: memory.NewStorage(memory.Options{}).Backend()}
	s, err := durable.New(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, f
}

func newMemStore(t *testing.T, opts ...durable.Option) *durable.Store {
	t.Helper()
	s, err := memory.Open(memory.Options{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var doReq = durable.ClaimRequest{
	KeyRef:      durable.KeyRef{Scope: "tenant-1", Key: "charge-1"},
	Fingerprint: "sha256:aaaa",
	TTL:         time.Second,
}

// counter returns an fn that counts its runs and returns outcome.
func counter(runs *atomic.Int64, outcome durable.Outcome) func(context.Context) (durable.Outcome, error) {
	return func(context.Context) (durable.Outcome, error) {
		runs.Add(1)
		return outcome, nil
	}
}

func assertReleased(t *testing.T, s *durable.Store, k durable.KeyRef) {
	t.Helper()
	if rec, err := s.GetKey(context.Background(), k); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("GetKey after release = %+v, %v; want ErrNotFound", rec, err)
	}
}

func checkCode(t *testing.T, err error, code durable.Code) {
	t.Helper()
	if got := durable.CodeOf(err); got != code {
		t.Fatalf("error %v has code %q, want %q", err, got, code)
	}
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	want := durable.Outcome{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1"}`), Ref: "ch_1"}

	t.Run("FirstCallRunsAndRetryReplays", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			var runs atomic.Int64
			first, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want))
			if err != nil {
				t.Fatal(err)
			}
			if first.Replayed || first.Outcome.Code != 201 || string(first.Outcome.Body) != string(want.Body) || first.Record.State != durable.KeyCompleted {
				t.Fatalf("first call = %+v", first)
			}
			second, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, durable.Outcome{Code: 500}))
			if err != nil {
				t.Fatal(err)
			}
			if !second.Replayed || second.Outcome.Code != 201 || string(second.Outcome.Body) != string(want.Body) ||
				second.Outcome.Ref != "ch_1" || second.Outcome.Header["Content-Type"][0] != "application/json" {
				t.Fatalf("retry = %+v", second)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("fn ran %d times, want 1", n)
			}
		})
	})

	t.Run("ErrorReleasesSoRetryRuns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			boom := errors.New("boom")
			_, err := s.Do(ctx, doReq, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) { return durable.Outcome{}, boom })
			if err != boom {
				t.Fatalf("Do = %v, want fn's error unchanged", err)
			}
			assertReleased(t, s, doReq.KeyRef)
			var runs atomic.Int64
			res, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want))
			if err != nil || res.Replayed || runs.Load() != 1 {
				t.Fatalf("retry = %+v, %v (runs %d); want a fresh run", res, err, runs.Load())
			}
		})
	})

	t.Run("PanicReleasesAndPropagates", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			func() {
				defer func() {
					if r := recover(); r != "kaboom" {
						t.Fatalf("recovered %v, want the fn's panic value", r)
					}
				}()
				s.Do(ctx, doReq, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) { panic("kaboom") })
				t.Fatal("Do returned after fn panicked")
			}()
			assertReleased(t, s, doReq.KeyRef)
			var runs atomic.Int64
			if res, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); err != nil || res.Replayed || runs.Load() != 1 {
				t.Fatalf("retry = %+v, %v; want a fresh run", res, err)
			}
		})
	})

	t.Run("GoexitReleases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.Do(ctx, doReq, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) {
					runtime.Goexit()
					return durable.Outcome{}, nil
				})
			}()
			<-done
			assertReleased(t, s, doReq.KeyRef)
		})
	})

	t.Run("RenewsClaimWhileSlowFnRuns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, f := newFaulty(t)
			var runs atomic.Int64
			started, finish := make(chan struct{}), make(chan struct{})
			type result struct {
				res durable.DoResult
				err error
			}
			out := make(chan result)
			go func() {
				res, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
					runs.Add(1)
					close(started)
					<-finish
					return want, ctx.Err()
				})
				out <- result{res, err}
			}()
			<-started
			time.Sleep(10 * doReq.TTL) // ten TTLs: the claim lives only if it was renewed
			c, err := s.ClaimKey(ctx, doReq)
			if err != nil || c.Kind != durable.ClaimInFlight {
				t.Fatalf("claim during slow fn = %v, %v; want in-flight", c.Kind, err)
			}
			if _, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); !errors.Is(err, durable.ErrInFlight) {
				t.Fatalf("concurrent Do = %v, want ErrInFlight", err)
			}
			if n := f.renewCalls.Load(); n < 25 {
				t.Fatalf("%d renewals in 10 TTLs, want about 30 (every TTL/3)", n)
			}
			close(finish)
			r := <-out
			if r.err != nil || r.res.Replayed || runs.Load() != 1 {
				t.Fatalf("slow Do = %+v, %v (runs %d)", r.res, r.err, runs.Load())
			}
		})
	})

	// kinds are the two paths of Do: a backend that may hang (Do's own
	// timers bound each call) and one that reports contract.InProcess (no
	// per-call timers; see do_inprocess_test.go). The subtests that loop
	// over them must hold on both.
	kinds := []struct {
		name string
		new  func(t *testing.T) (*durable.Store, *faulty)
	}{
		{"MayHang", func(t *testing.T) (*durable.Store, *faulty) { return newFaulty(t) }},
		{"InProcess", func(t *testing.T) (*durable.Store, *faulty) { s, b := newInProc(t); return s, b.faulty }},
	}

	for _, k := range kinds {
		t.Run("RenewEveryIsHonoured/"+k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, f := k.new(t)
				_, err := s.Do(ctx, doReq, durable.DoOptions{RenewEvery: 100 * time.Millisecond}, func(context.Context) (durable.Outcome, error) {
					time.Sleep(1050 * time.Millisecond)
					return want, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if n := f.renewCalls.Load(); n != 10 {
					t.Fatalf("%d renewals in 1.05s at 100ms, want 10", n)
				}
			})
		})
	}

	t.Run("LostClaimCancelsFn", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, f := newFaulty(t)
			fenced := error(&contract.Error{Code: contract.Fenced, Msg: "injected"})
			f.renewErr.Store(&fenced)
			var cause error
			_, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				<-ctx.Done()
				cause = context.Cause(ctx)
				return durable.Outcome{}, ctx.Err()
			})
			if !errors.Is(cause, durable.ErrFenced) {
				t.Fatalf("fn's context cause = %v, want ErrFenced", cause)
			}
			if !errors.Is(err, durable.ErrFenced) || !errors.Is(err, context.Canceled) {
				t.Fatalf("Do = %v, want ErrFenced wrapping fn's error", err)
			}
			if n := f.releaseCalls.Load(); n != 0 {
				t.Fatalf("Do released a lost claim %d times", n)
			}
		})
	})

	for _, k := range kinds {
		t.Run("TransientRenewalErrorsAreRetried/"+k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, f := k.new(t)
				unavailable := error(&contract.Error{Code: contract.Unavailable, Msg: "injected"})
				f.renewErr.Store(&unavailable)
				res, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
					time.Sleep(700 * time.Millisecond) // renewals fail from 333ms on
					f.renewErr.Store(nil)
					time.Sleep(1500 * time.Millisecond) // past the first TTL: alive only if renewed
					return want, context.Cause(ctx)
				})
				if err != nil || res.Replayed || f.renewCalls.Load() < 5 {
					t.Fatalf("Do = %+v, %v after %d renewals", res, err, f.renewCalls.Load())
				}
			})
		})
	}

	t.Run("NoRenewalWithinTTLCancelsFn", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, f := newFaulty(t)
			unavailable := error(&contract.Error{Code: contract.Unavailable, Msg: "injected"})
			f.renewErr.Store(&unavailable)
			start := time.Now()
			var cause error
			var after time.Duration
			_, err := s.Do(ctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				<-ctx.Done()
				cause, after = context.Cause(ctx), time.Since(start)
				return want, nil // even a success cannot be trusted now
			})
			if !errors.Is(cause, durable.ErrFenced) || after != doReq.TTL {
				t.Fatalf("fn's context ended after %v with %v; want ErrFenced after one TTL", after, cause)
			}
			// The claim was not proven lost at the store, so Do tries to
			// store the outcome; the memory store still accepts the token.
			if err != nil {
				t.Fatalf("Do = %v", err)
			}
		})
	})

	t.Run("WaitsForInFlightAndReplays", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			holder, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: doReq.KeyRef, Fingerprint: doReq.Fingerprint, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			var res durable.DoResult
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err = s.Do(ctx, doReq, durable.DoOptions{Wait: true}, counter(&runs, durable.Outcome{Code: 500}))
			}()
			time.Sleep(5 * time.Second)
			synctest.Wait()
			select {
			case <-done:
				t.Fatal("Do returned while the key was in flight")
			default:
			}
			if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: doReq.KeyRef, Token: holder.Token, Outcome: want}); err != nil {
				t.Fatal(err)
			}
			<-done
			if err != nil || !res.Replayed || res.Outcome.Code != 201 || runs.Load() != 0 {
				t.Fatalf("Do = %+v, %v (runs %d); want the holder's outcome", res, err, runs.Load())
			}
		})
	})

	t.Run("RunsAfterHolderReleases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			holder, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: doReq.KeyRef, Fingerprint: doReq.Fingerprint, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			var res durable.DoResult
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err = s.Do(ctx, doReq, durable.DoOptions{Wait: true}, counter(&runs, want))
			}()
			synctest.Wait()
			if ok, err := s.ReleaseKey(ctx, doReq.KeyRef, holder.Token); !ok || err != nil {
				t.Fatal(ok, err)
			}
			<-done
			if err != nil || res.Replayed || runs.Load() != 1 {
				t.Fatalf("Do = %+v, %v (runs %d); want its own run", res, err, runs.Load())
			}
		})
	})

	t.Run("ReclaimsAbandonedClaim", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			// A holder that crashed: it never renews, completes or releases.
			if _, err := s.ClaimKey(ctx, doReq); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var runs atomic.Int64
			res, err := s.Do(ctx, doReq, durable.DoOptions{Wait: true}, counter(&runs, want))
			if err != nil || res.Replayed || runs.Load() != 1 {
				t.Fatalf("Do = %+v, %v (runs %d); want a run after reclaiming", res, err, runs.Load())
			}
			if waited := time.Since(start); waited < doReq.TTL {
				t.Fatalf("reclaimed after %v, before the holder's claim expired", waited)
			}
		})
	})

	t.Run("WaitForBoundReturnsErrInFlight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			if _, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: doReq.KeyRef, Fingerprint: doReq.Fingerprint, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var runs atomic.Int64
			res, err := s.Do(ctx, durable.ClaimRequest{KeyRef: doReq.KeyRef, Fingerprint: doReq.Fingerprint, TTL: time.Hour},
				durable.DoOptions{MaxWait: 3 * time.Second}, counter(&runs, want))
			if !errors.Is(err, durable.ErrInFlight) || errors.Is(err, durable.ErrLeaseBusy) {
				t.Fatalf("Do = %v, want ErrInFlight", err)
			}
			if waited := time.Since(start); waited != 3*time.Second {
				t.Fatalf("waited %v, want 3s", waited)
			}
			if runs.Load() != 0 || res.Record.State != durable.KeyClaimed {
				t.Fatalf("runs %d, record %+v", runs.Load(), res.Record)
			}
		})
	})

	t.Run("WithoutWaitReturnsErrInFlightAtOnce", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			if _, err := s.ClaimKey(ctx, doReq); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var runs atomic.Int64
			_, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want))
			if !errors.Is(err, durable.ErrInFlight) || time.Since(start) != 0 || runs.Load() != 0 {
				t.Fatalf("Do = %v after %v (runs %d)", err, time.Since(start), runs.Load())
			}
		})
	})

	t.Run("ContextEndsWhileWaiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			if _, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: doReq.KeyRef, Fingerprint: doReq.Fingerprint, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var runs atomic.Int64
			_, err := s.Do(wctx, doReq, durable.DoOptions{Wait: true}, counter(&runs, want))
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, durable.ErrInFlight) || runs.Load() != 0 {
				t.Fatalf("Do = %v (runs %d), want the context's error", err, runs.Load())
			}
			checkCode(t, err, contract.Canceled)
		})
	})

	t.Run("OtherFingerprintConflicts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			var runs atomic.Int64
			if _, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); err != nil {
				t.Fatal(err)
			}
			other := doReq
			other.Fingerprint = "sha256:bbbb"
			_, err := s.Do(ctx, other, durable.DoOptions{}, counter(&runs, want))
			if !errors.Is(err, durable.ErrKeyConflict) || runs.Load() != 1 {
				t.Fatalf("Do = %v (runs %d), want ErrKeyConflict", err, runs.Load())
			}
		})
	})

	for _, k := range kinds {
		t.Run("CompletionRetriedOnRetryableError/"+k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, f := k.new(t)
				f.completeFails.Store(2)
				var runs atomic.Int64
				start := time.Now()
				res, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want))
				if err != nil || res.Record.State != durable.KeyCompleted || f.completeCalls.Load() != 3 {
					t.Fatalf("Do = %+v, %v after %d completions", res, err, f.completeCalls.Load())
				}
				// The pauses between attempts: 50ms, then 100ms.
				if took := time.Since(start); took != 150*time.Millisecond {
					t.Fatalf("Do took %v, want 150ms of pauses", took)
				}
			})
		})
	}

	for _, k := range kinds {
		t.Run("CompletionFailureKeepsClaimAndReturnsOutcome/"+k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, f := k.new(t)
				f.completeFails.Store(1 << 30)
				var runs atomic.Int64
				start := time.Now()
				res, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want))
				if !errors.Is(err, durable.ErrUnavailable) {
					t.Fatalf("Do = %v, want ErrUnavailable", err)
				}
				// Retried, with growing pauses, for the default bound of 10 s.
				if took := time.Since(start); took < 9*time.Second || took > 10*time.Second {
					t.Fatalf("Do gave up after %v, want within the 10 s default bound and not much earlier", took)
				}
				if n := f.completeCalls.Load(); n < 5 {
					t.Fatalf("%d completion attempts, want retries", n)
				}
				if res.Outcome.Code != 201 || res.Replayed || !res.Record.CreatedAt.IsZero() {
					t.Fatalf("result = %+v, want fn's outcome and no record", res)
				}
				// fn ran: the claim is kept, not released, so a retry does not
				// run fn again while the claim lives...
				if n := f.releaseCalls.Load(); n != 0 {
					t.Fatalf("Do released the claim of a fn that ran (%d releases)", n)
				}
				if rec, err := s.GetKey(ctx, doReq.KeyRef); err != nil || rec.State != durable.KeyClaimed {
					t.Fatalf("GetKey = %+v, %v; want the claim kept", rec, err)
				}
				if _, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); !errors.Is(err, durable.ErrInFlight) || runs.Load() != 1 {
					t.Fatalf("retry within the TTL = %v (runs %d), want ErrInFlight without a run", err, runs.Load())
				}
				// ...until it expires (the documented residual hazard): then a
				// retry reclaims the key and runs fn again.
				f.completeFails.Store(0)
				time.Sleep(doReq.TTL)
				if res, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); err != nil || res.Replayed || runs.Load() != 2 {
					t.Fatalf("retry after the TTL = %+v, %v (runs %d), want a second run", res, err, runs.Load())
				}
			})
		})
	}

	for _, k := range kinds {
		t.Run("ClaimRenewedWhileCompletionIsRetried/"+k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, f := k.new(t)
				// Seven failures span 3.55 s of pauses: more than three TTLs.
				f.completeFails.Store(7)
				var runs atomic.Int64
				var res durable.DoResult
				var err error
				done := make(chan struct{})
				go func() {
					defer close(done)
					res, err = s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want))
				}()
				time.Sleep(3 * doReq.TTL)
				renewals := f.renewCalls.Load()
				// Alive only if renewed: unrenewed, it expired two TTLs ago.
				if c, err := s.ClaimKey(ctx, doReq); err != nil || c.Kind != durable.ClaimInFlight {
					t.Fatalf("claim while the completion is retried = %v, %v; want in flight", c.Kind, err)
				}
				if _, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); !errors.Is(err, durable.ErrInFlight) {
					t.Fatalf("concurrent Do = %v, want ErrInFlight", err)
				}
				<-done
				if err != nil || res.Replayed || res.Record.State != durable.KeyCompleted || runs.Load() != 1 || f.completeCalls.Load() != 8 {
					t.Fatalf("Do = %+v, %v (runs %d, %d completions)", res, err, runs.Load(), f.completeCalls.Load())
				}
				if renewals < 6 {
					t.Fatalf("%d renewals in 3 TTLs, want about 9 (every TTL/3)", renewals)
				}
				if rep, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, want)); err != nil || !rep.Replayed || runs.Load() != 1 {
					t.Fatalf("retry = %+v, %v (runs %d), want a replay", rep, err, runs.Load())
				}
			})
		})
	}

	t.Run("CompleteWithinBoundsAHungCompletion", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, f := newFaulty(t)
			f.completeHang.Store(true)
			var runs atomic.Int64
			start := time.Now()
			res, err := s.Do(ctx, doReq, durable.DoOptions{CompleteWithin: 2 * time.Second, CallTimeout: 500 * time.Millisecond}, counter(&runs, want))
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("Do took %v, want at most CompleteWithin (2s)", took)
			}
			if !errors.Is(err, context.DeadlineExceeded) || res.Outcome.Code != 201 {
				t.Fatalf("Do = %+v, %v; want fn's outcome and a timeout", res, err)
			}
			// Each attempt timed out after CallTimeout and was retried.
			if n := f.completeCalls.Load(); n < 3 {
				t.Fatalf("%d completion attempts, want timed-out attempts retried", n)
			}
			if rec, err := s.GetKey(ctx, doReq.KeyRef); err != nil || rec.State != durable.KeyClaimed || f.releaseCalls.Load() != 0 {
				t.Fatalf("GetKey = %+v, %v (%d releases); want the claim kept", rec, err, f.releaseCalls.Load())
			}
		})
	})

	t.Run("CallTimeoutBoundsAHungClaim", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, f := newFaulty(t)
			f.claimHang.Store(true)
			var runs atomic.Int64
			start := time.Now()
			_, err := s.Do(ctx, doReq, durable.DoOptions{CallTimeout: 2 * time.Second}, counter(&runs, want))
			if took := time.Since(start); took != 2*time.Second {
				t.Fatalf("Do took %v, want CallTimeout (2s)", took)
			}
			if !errors.Is(err, context.DeadlineExceeded) || runs.Load() != 0 {
				t.Fatalf("Do = %v (runs %d), want a timeout and no run", err, runs.Load())
			}
		})
	})

	t.Run("CompleteWithinBoundsAHungRelease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, f := newFaulty(t)
			f.releaseHang.Store(true)
			boom := errors.New("boom")
			start := time.Now()
			_, err := s.Do(ctx, doReq, durable.DoOptions{CompleteWithin: time.Second}, func(context.Context) (durable.Outcome, error) {
				return durable.Outcome{}, boom
			})
			if took := time.Since(start); err != boom || took > time.Second {
				t.Fatalf("Do = %v after %v, want fn's error within CompleteWithin (1s)", err, took)
			}
		})
	})

	t.Run("OversizedOutcomeKeepsClaim", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t, durable.WithMaxBodyBytes(8))
			var runs atomic.Int64
			res, err := s.Do(ctx, doReq, durable.DoOptions{}, counter(&runs, durable.Outcome{Code: 200, Body: make([]byte, 9)}))
			if !errors.Is(err, durable.ErrInvalidArgument) || len(res.Outcome.Body) != 9 {
				t.Fatalf("Do = %+v, %v; want ErrInvalidArgument with fn's outcome", res, err)
			}
			if rec, err := s.GetKey(ctx, doReq.KeyRef); err != nil || rec.State != durable.KeyClaimed {
				t.Fatalf("GetKey = %+v, %v; want the claim of a fn that ran kept", rec, err)
			}
		})
	})

	t.Run("CallerGoneStillReleases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			cctx, cancel := context.WithCancel(ctx)
			_, err := s.Do(cctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				cancel()
				<-ctx.Done()
				return durable.Outcome{}, ctx.Err()
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Do = %v, want context.Canceled", err)
			}
			assertReleased(t, s, doReq.KeyRef)
		})
	})

	t.Run("CallerGoneAfterSuccessStillCompletes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			cctx, cancel := context.WithCancel(ctx)
			res, err := s.Do(cctx, doReq, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
				cancel() // the effect happened; the caller left afterwards
				return want, nil
			})
			if err != nil || res.Record.State != durable.KeyCompleted {
				t.Fatalf("Do = %+v, %v", res, err)
			}
			if rec, err := s.GetKey(ctx, doReq.KeyRef); err != nil || rec.State != durable.KeyCompleted {
				t.Fatalf("GetKey = %+v, %v; want completed", rec, err)
			}
		})
	})

	t.Run("RetainSetsExpiry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			var runs atomic.Int64
			res, err := s.Do(ctx, doReq, durable.DoOptions{Retain: time.Hour}, counter(&runs, want))
			if err != nil {
				t.Fatal(err)
			}
			if d := res.Record.ExpiresAt.Sub(res.Record.CompletedAt); d != time.Hour {
				t.Fatalf("retained for %v, want 1h", d)
			}
		})
	})

	t.Run("ConcurrentCallsRunOnce", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore(t)
			var runs atomic.Int64
			var wg sync.WaitGroup
			results := make([]durable.DoResult, 20)
			errs := make([]error, 20)
			for i := range results {
				wg.Go(func() {
					results[i], errs[i] = s.Do(ctx, doReq, durable.DoOptions{Wait: true}, func(context.Context) (durable.Outcome, error) {
						runs.Add(1)
						time.Sleep(3 * time.Second) // longer than the TTL: renewed
						return want, nil
					})
				})
			}
			wg.Wait()
			replays := 0
			for i, r := range results {
				if errs[i] != nil || string(r.Outcome.Body) != string(want.Body) {
					t.Fatalf("call %d = %+v, %v", i, r, errs[i])
				}
				if r.Replayed {
					replays++
				}
			}
			if runs.Load() != 1 || replays != 19 {
				t.Fatalf("fn ran %d times with %d replays; want 1 and 19", runs.Load(), replays)
			}
		})
	})
}

func TestDoRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s := newMemStore(t)
	ok := func(context.Context) (durable.Outcome, error) {
		t.Fatal("fn ran on bad input")
		return durable.Outcome{}, nil
	}
	badKey := doReq
	badKey.Key = "no spaces allowed"
	noFP := doReq
	noFP.Fingerprint = ""
	shortTTL := doReq
	shortTTL.TTL = 500 * time.Millisecond
	cases := []struct {
		name string
		req  durable.ClaimRequest
		fn   func(context.Context) (durable.Outcome, error)
		opts durable.DoOptions
	}{
		{"NilFn", doReq, nil, durable.DoOptions{}},
		{"NegativeMaxWait", doReq, ok, durable.DoOptions{MaxWait: -time.Second}},
		{"NegativeRenew", doReq, ok, durable.DoOptions{RenewEvery: -time.Second}},
		{"RenewNotShorterThanTTL", doReq, ok, durable.DoOptions{RenewEvery: doReq.TTL}},
		{"NegativeRetain", doReq, ok, durable.DoOptions{Retain: -time.Second}},
		{"NegativeCompleteWithin", doReq, ok, durable.DoOptions{CompleteWithin: -time.Second}},
		{"NegativeCallTimeout", doReq, ok, durable.DoOptions{CallTimeout: -time.Second}},
		{"BadKey", badKey, ok, durable.DoOptions{}},
		{"NoFingerprint", noFP, ok, durable.DoOptions{}},
		{"TTLTooShort", shortTTL, ok, durable.DoOptions{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Do(ctx, c.req, c.opts, c.fn)
			checkCode(t, err, contract.InvalidArgument)
		})
	}
}

func TestErrInFlightIsDistinct(t *testing.T) {
	if errors.Is(durable.ErrInFlight, durable.ErrLeaseBusy) || durable.CodeOf(durable.ErrInFlight) != contract.InFlight {
		t.Fatal("ErrInFlight must have its own code and not match ErrLeaseBusy")
	}
	s := newMemStore(t)
	ctx := context.Background()
	req := durable.LeaseRequest{Resource: "r", Owner: "a", TTL: time.Minute}
	if _, err := s.AcquireLease(ctx, req); err != nil {
		t.Fatal(err)
	}
	_, err := s.AcquireLease(ctx, req)
	if !errors.Is(err, durable.ErrLeaseBusy) || errors.Is(err, durable.ErrInFlight) {
		t.Fatalf("a busy lease (%v) must not match ErrInFlight", err)
	}
	if wrapped := fmt.Errorf("charging: %w", durable.ErrInFlight); !errors.Is(wrapped, durable.ErrInFlight) {
		t.Fatal("a wrapped ErrInFlight does not match")
	}
}

func ExampleStore_Do() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	charges := 0
	charge := func(ctx context.Context) (durable.Outcome, error) {
		charges++ // the side effect that must happen once
		return durable.Outcome{Code: 201, Body: []byte(`{"charge":"ch_1"}`)}, nil
	}
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "order-7-charge"}, Fingerprint: "sha256:order-7"}

	first, _ := store.Do(ctx, req, durable.DoOptions{}, charge)
	retry, _ := store.Do(ctx, req, durable.DoOptions{}, charge) // e.g. after a lost reply
	fmt.Println(first.Replayed, string(first.Outcome.Body))
	fmt.Println(retry.Replayed, string(retry.Outcome.Body))
	fmt.Println("charges:", charges)
	// Output:
	// false {"charge":"ch_1"}
	// true {"charge":"ch_1"}
	// charges: 1
}
