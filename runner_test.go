package durable_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

func memStore(t *testing.T, opts memory.Options) (*durable.Store, *memory.Storage) {
	t.Helper()
	st := memory.NewStorage(opts)
	s, err := durable.New(st.Backend())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st
}

func TestRunWithLeaseRenewsAndReleases(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	req := durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Second}
	var seen durable.Lease
	err := s.RunWithLease(ctx, req, durable.LeaseOptions{RenewEvery: 20 * time.Millisecond}, func(ctx context.Context, l durable.Lease) error {
		seen = l
		first, err := s.GetLease(ctx, "", "job")
		if err != nil {
			return err
		}
		time.Sleep(120 * time.Millisecond) // several renewal periods
		later, err := s.GetLease(ctx, "", "job")
		if err != nil {
			return err
		}
		if later.Token != l.Token || !later.ExpiresAt.After(first.ExpiresAt) {
			t.Errorf("lease not renewed: first %+v later %+v", first, later)
		}
		// Writes fenced with the lease succeed while it is held.
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Status: durable.StatusRunning}); err != nil {
			return err
		}
		_, err = s.UpdateWorkflow(ctx, durable.Update{ID: "w", ExpectStatus: durable.StatusRunning, Status: durable.StatusRunning, Fence: l.Fence()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen.Owner != "w1" || seen.Token <= 0 {
		t.Fatalf("fn got lease %+v", seen)
	}
	if _, err := s.GetLease(ctx, "", "job"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("lease not released: %v", err)
	}
}

func TestRunWithLeaseBusyAndWait(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	held, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	req := durable.LeaseRequest{Resource: "job", Owner: "w2", TTL: 5 * time.Second}
	called := false
	err = s.RunWithLease(ctx, req, durable.LeaseOptions{}, func(context.Context, durable.Lease) error { called = true; return nil })
	if !errors.Is(err, durable.ErrLeaseBusy) || called {
		t.Fatalf("busy: err=%v called=%v", err, called)
	}

	// With Wait, the runner gets the lease once the holder releases it.
	go func() {
		time.Sleep(30 * time.Millisecond)
		s.ReleaseLease(context.Background(), held)
	}()
	var got durable.Lease
	err = s.RunWithLease(ctx, req, durable.LeaseOptions{Wait: true, MaxBackoff: 10 * time.Millisecond}, func(_ context.Context, l durable.Lease) error {
		got = l
		return nil
	})
	if err != nil || got.Token <= held.Token {
		t.Fatalf("wait: err=%v lease=%+v", err, got)
	}

	// Waiting honours the context.
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 40*time.Millisecond)
	defer cancel()
	err = s.RunWithLease(cctx, req, durable.LeaseOptions{Wait: true, MaxBackoff: 10 * time.Millisecond}, func(context.Context, durable.Lease) error {
		t.Error("fn ran without the lease")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with deadline: %v", err)
	}

	// MaxWait bounds the wait (and implies Wait): the lease is still busy.
	start := time.Now()
	err = s.RunWithLease(ctx, req, durable.LeaseOptions{MaxWait: 40 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}, func(context.Context, durable.Lease) error {
		t.Error("fn ran without the lease")
		return nil
	})
	if waited := time.Since(start); !errors.Is(err, durable.ErrLeaseBusy) || waited < 40*time.Millisecond {
		t.Fatalf("wait with MaxWait = %v after %v, want ErrLeaseBusy after 40ms", err, waited)
	}
}

func TestRunWithLeaseRejectedRenewalCancelsFunction(t *testing.T) {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, _ := memStore(t, memory.Options{Clock: clock, Tolerance: time.Second})
	req := durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: 10 * time.Second}
	started := make(chan durable.Lease)
	errc := make(chan error, 1)
	var cause error
	go func() {
		errc <- s.RunWithLease(ctx, req, durable.LeaseOptions{RenewEvery: 5 * time.Millisecond}, func(fctx context.Context, l durable.Lease) error {
			started <- l
			<-fctx.Done()
			cause = context.Cause(fctx)
			return fctx.Err()
		})
	}()
	old := <-started
	// The holder stalls past its lease (on the store clock) and another
	// worker takes over; the holder's next renewal is rejected.
	clock.Advance(12 * time.Second)
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w2", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, durable.ErrFenced) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want fenced joined with the function's context error", err)
		}
		if !errors.Is(cause, durable.ErrFenced) {
			t.Fatalf("function's context cause = %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("function still running after its renewal was rejected")
	}
	// The runner's release must not remove the new owner's lease.
	if l, err := s.GetLease(ctx, "", "job"); err != nil || l.Owner != "w2" || l.Token <= old.Token {
		t.Fatalf("new owner's lease: %+v, %v", l, err)
	}
}

// failingRenewals makes every RenewLease fail as if the network were down.
type failingRenewals struct {
	contract.Backend
	renews atomic.Int64
}

func (f *failingRenewals) RenewLease(context.Context, contract.Lease, time.Duration) (contract.Lease, error) {
	f.renews.Add(1)
	return contract.Lease{}, &contract.Error{Code: contract.Unavailable, Msg: "injected outage"}
}

func TestRunWithLeaseFunctionEndsBeforeTakeoverIsPossible(t *testing.T) {
	st := memory.NewStorage(memory.Options{Tolerance: 200 * time.Millisecond}) // system clock
	testFunctionEndsBeforeTakeover(t, st.Backend(), st.Backend())
}

// testFunctionEndsBeforeTakeover runs a lease holder whose renewals all fail
// against a competitor that polls for the lease on the same storage, and
// checks that the holder's function context ends before the competitor
// gets the lease. Both backends must judge expiry on a real clock.
func testFunctionEndsBeforeTakeover(t *testing.T, holderBackend, otherBackend contract.Backend) {
	ctx := context.Background()
	fb := &failingRenewals{Backend: holderBackend}
	holder, err := durable.New(fb)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := durable.New(otherBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var (
		mu         sync.Mutex
		fnEnded    time.Time
		takeoverAt time.Time
	)
	acquired := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- holder.RunWithLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: 1200 * time.Millisecond},
			durable.LeaseOptions{RenewEvery: 100 * time.Millisecond},
			func(fctx context.Context, _ durable.Lease) error {
				close(acquired)
				<-fctx.Done()
				mu.Lock()
				fnEnded = time.Now()
				mu.Unlock()
				return nil
			})
	}()
	select {
	case <-acquired:
	case err := <-done:
		t.Fatalf("RunWithLease returned before running: %v", err)
	}
	// A competitor polls until it can take over.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := other.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w2", TTL: 1200 * time.Millisecond})
		if err == nil {
			mu.Lock()
			takeoverAt = time.Now()
			mu.Unlock()
			break
		}
		if !errors.Is(err, durable.ErrLeaseBusy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	err = <-done
	if !errors.Is(err, durable.ErrFenced) {
		t.Fatalf("err = %v, want the lease reported lost", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fnEnded.IsZero() || !fnEnded.Before(takeoverAt) {
		t.Fatalf("function context ended at %v, takeover at %v: two owners overlapped", fnEnded, takeoverAt)
	}
	if fb.renews.Load() == 0 {
		t.Fatal("no renewal was attempted")
	}
}

func TestRunWithLeaseReturnsFunctionErrorAndReleasesOnPanic(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	req := durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Second}
	boom := errors.New("boom")
	if err := s.RunWithLease(ctx, req, durable.LeaseOptions{}, func(context.Context, durable.Lease) error { return boom }); err != boom {
		t.Fatalf("err = %v, want fn's error unchanged", err)
	}
	func() {
		defer func() {
			if p := recover(); p != "kaboom" {
				t.Fatalf("recovered %v", p)
			}
		}()
		s.RunWithLease(ctx, req, durable.LeaseOptions{}, func(context.Context, durable.Lease) error { panic("kaboom") })
	}()
	if _, err := s.GetLease(ctx, "", "job"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("lease kept after panic: %v", err)
	}
	for name, o := range map[string]durable.LeaseOptions{
		"RenewTooSlow": {RenewEvery: time.Second}, // req.TTL is 1s
		"NegRenew":     {RenewEvery: -1},
		"NegMaxWait":   {MaxWait: -1},
		"NegBackoff":   {MaxBackoff: -1},
	} {
		if err := s.RunWithLease(ctx, req, o, func(context.Context, durable.Lease) error { return nil }); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
