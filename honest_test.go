package durable_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// countingRenewals counts lease renewals on top of the memory backend.
type countingRenewals struct {
	contract.Backend
	renews atomic.Int64
}

func (c *countingRenewals) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	c.renews.Add(1)
	return c.Backend.RenewLease(ctx, l, ttl)
}

// TestRunWithLeaseStopsOnGoexit: a function that calls runtime.Goexit (as
// t.FailNow does) must stop the keep-alive and release the lease; it used
// to be renewed forever.
func TestRunWithLeaseStopsOnGoexit(t *testing.T) {
	ctx := context.Background()
	st := memory.NewStorage(memory.Options{})
	cb := &countingRenewals{Backend: st.Backend()}
	s, err := durable.New(cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunWithLease(ctx, req, durable.LeaseOptions{RenewEvery: 10 * time.Millisecond}, func(context.Context, durable.Lease) error {
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	if _, err := s.GetLease(ctx, "", "job"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("lease kept after Goexit: %v", err)
	}
	n := cb.renews.Load()
	time.Sleep(50 * time.Millisecond) // five renewal periods
	if m := cb.renews.Load(); m != n {
		t.Fatalf("renewals went on after Goexit: %d then %d", n, m)
	}
}

// hangingBackend never answers: every call blocks until its context ends,
// as on a connection whose server stopped sending bytes.
type hangingBackend struct{ contract.Backend }

func (h hangingBackend) ClaimKey(ctx context.Context, _ contract.ClaimRequest) (contract.Claim, error) {
	<-ctx.Done()
	// A real backend cannot know whether the request was applied.
	return contract.Claim{}, &contract.Error{Code: contract.OutcomeUnknown, Msg: "no answer", Err: ctx.Err()}
}

func (h hangingBackend) GetKey(ctx context.Context, _ contract.KeyRef) (contract.KeyRecord, error) {
	<-ctx.Done()
	return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
}

// TestOperationTimeoutBoundsHungCalls: a call whose context has no deadline
// returns after the Store's operation timeout with a code that tells the
// truth (the caller cancelled nothing), instead of hanging forever.
func TestOperationTimeoutBoundsHungCalls(t *testing.T) {
	s, err := durable.New(hangingBackend{memory.NewStorage(memory.Options{}).Backend()}, durable.WithOperationTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = s.ClaimKey(context.Background(), durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "f"})
	if !errors.Is(err, durable.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ClaimKey = %v, want OutcomeUnknown wrapping DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("ClaimKey returned after %v", el)
	}
	if !strings.Contains(err.Error(), "operation timeout") {
		t.Errorf("message %q does not name the operation timeout", err)
	}
	// A read cut short by the Store's timeout is Unavailable, not Canceled:
	// the caller's context did not end.
	_, err = s.GetKey(context.Background(), durable.KeyRef{Key: "k"})
	if !errors.Is(err, durable.ErrUnavailable) || !durable.Retryable(err) {
		t.Fatalf("GetKey = %v, want retryable Unavailable", err)
	}
	// The caller's own earlier deadline still wins and stays Canceled.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = s.GetKey(ctx, durable.KeyRef{Key: "k"})
	if !errors.Is(err, durable.ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetKey with the caller's deadline = %v, want Canceled", err)
	}
	if _, err := memory.Open(memory.Options{}, durable.WithOperationTimeout(0)); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("WithOperationTimeout(0) = %v", err)
	}
}

// withoutWaiter hides the memory backend's KeyWaiter, so WaitKey polls.
type withoutWaiter struct{ contract.Backend }

// TestCloseWakesWaiters: WaitKey, and Do waiting for another caller's
// claim, return ErrClosed as soon as the Store is closed, whether the
// backend waits (memory's KeyWaiter) or the Store polls.
func TestCloseWakesWaiters(t *testing.T) {
	for name, wrap := range map[string]func(contract.Backend) contract.Backend{
		"KeyWaiter": func(b contract.Backend) contract.Backend { return b },
		"Polling":   func(b contract.Backend) contract.Backend { return withoutWaiter{b} },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := memory.NewStorage(memory.Options{})
			holder, _ := durable.New(st.Backend())
			defer holder.Close()
			ref := durable.KeyRef{Key: "k"}
			if _, err := holder.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "f"}); err != nil {
				t.Fatal(err)
			}
			s, _ := durable.New(wrap(st.Backend()))
			errs := make(chan error, 2)
			go func() {
				_, err := s.WaitKey(ctx, ref)
				errs <- err
			}()
			go func() {
				_, err := s.Do(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "f"}, durable.DoOptions{Wait: true}, func(context.Context) (durable.Outcome, error) {
					return durable.Outcome{}, errors.New("must not run")
				})
				errs <- err
			}()
			time.Sleep(20 * time.Millisecond) // let both start waiting
			s.Close()
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, durable.ErrClosed) {
						t.Errorf("waiter returned %v, want ErrClosed", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a waiter did not wake on Close")
				}
			}
		})
	}
}

// TestMemoryBackendCloseWakesWaitKey checks the backend's own duty, without
// the Store in between.
func TestMemoryBackendCloseWakesWaitKey(t *testing.T) {
	ctx := context.Background()
	st := memory.NewStorage(memory.Options{})
	ref := contract.KeyRef{Key: "k"}
	if _, err := st.Backend().ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "f", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	b := st.Backend()
	errc := make(chan error, 1)
	go func() {
		_, err := b.WaitKey(ctx, ref)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, contract.ErrClosed) {
			t.Fatalf("WaitKey = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitKey did not wake on Close")
	}
}

// TestWaitKeyMaxWait: without a deadline, WaitKey gives up after the
// Store's max wait and says the key is still in flight.
func TestWaitKeyMaxWait(t *testing.T) {
	ctx := context.Background()
	st := memory.NewStorage(memory.Options{})
	s, _ := durable.New(st.Backend(), durable.WithMaxWait(30*time.Millisecond))
	defer s.Close()
	ref := durable.KeyRef{Key: "k"}
	if _, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.WaitKey(ctx, ref)
	if !errors.Is(err, durable.ErrInFlight) || errors.Is(err, durable.ErrLeaseBusy) {
		t.Fatalf("WaitKey = %v, want ErrInFlight (still in flight)", err)
	}
}

// TestTTLMustExceedTolerance: a lease or claim TTL that leaves the holder
// less than 1 s beyond the clock tolerance is rejected, naming the minimum,
// instead of being granted dead on arrival.
func TestTTLMustExceedTolerance(t *testing.T) {
	ctx := context.Background()
	s, _ := memory.Open(memory.Options{Tolerance: 2 * time.Second})
	defer s.Close()
	if got := s.MinTTL(); got != 3*time.Second {
		t.Fatalf("MinTTL = %v, want 3s", got)
	}
	_, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o", TTL: 2 * time.Second})
	if !errors.Is(err, durable.ErrInvalidArgument) || !strings.Contains(err.Error(), "3s") {
		t.Fatalf("AcquireLease with TTL = tolerance: %v, want InvalidArgument naming 3s", err)
	}
	_, err = s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "f", TTL: 2500 * time.Millisecond})
	if !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("ClaimKey with TTL below the minimum: %v", err)
	}
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewLease(ctx, l, 2*time.Second); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("RenewLease below the minimum: %v", err)
	}
	// At the minimum the fence is valid at once and renewals succeed.
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateWorkflow(ctx, durable.Update{ID: "w", ExpectStatus: durable.StatusPending, Status: durable.StatusRunning, Fence: l.Fence()}); err != nil {
		t.Fatalf("fenced write right after a minimum-TTL grant: %v", err)
	}
	if _, err := s.RenewLease(ctx, l, 3*time.Second); err != nil {
		t.Fatalf("renewal of a minimum-TTL lease: %v", err)
	}
}
