package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// countingRenewer counts the renewals a memory backend receives, one by
// one and in batches, and can make the batches fail.
type countingRenewer struct {
	*memory.Backend
	single  atomic.Int64
	batches atomic.Int64
	fail    atomic.Bool

	mu    sync.Mutex
	sizes []int
	ttls  map[time.Duration]bool
}

func (c *countingRenewer) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	c.single.Add(1)
	return c.Backend.RenewLease(ctx, l, ttl)
}

func (c *countingRenewer) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	c.batches.Add(1)
	c.mu.Lock()
	c.sizes = append(c.sizes, len(leases))
	if c.ttls == nil {
		c.ttls = map[time.Duration]bool{}
	}
	c.ttls[ttl] = true
	c.mu.Unlock()
	if c.fail.Load() {
		return nil, &contract.Error{Code: contract.Unavailable, Msg: "injected outage"}
	}
	return c.Backend.RenewLeases(ctx, leases, ttl)
}

func (c *countingRenewer) maxBatch() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := 0
	for _, n := range c.sizes {
		m = max(m, n)
	}
	return m
}

// noRenewer hides every optional capability but the tolerance, and counts
// RenewLease calls.
type noRenewer struct {
	contract.Backend
	m      *memory.Backend
	single atomic.Int64
}

func (n *noRenewer) ClockTolerance() time.Duration { return n.m.ClockTolerance() }
func (n *noRenewer) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	n.single.Add(1)
	return n.Backend.RenewLease(ctx, l, ttl)
}

// decliningRenewer has the capability but declines it at run time.
type decliningRenewer struct{ *noRenewer }

func (decliningRenewer) RenewLeases(context.Context, []contract.Lease, time.Duration) ([]contract.LeaseRenewal, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "not here"}
}

func newStoreOn(t *testing.T, b contract.Backend) *durable.Store {
	t.Helper()
	s, err := durable.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acquireN acquires n leases, the last one released (so no longer held).
func acquireN(t *testing.T, s *durable.Store, n int) []durable.Lease {
	t.Helper()
	var out []durable.Lease
	for i := range n {
		l, err := s.AcquireLease(context.Background(), durable.LeaseRequest{Resource: fmt.Sprintf("r-%d", i), Owner: "w", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	if _, err := s.ReleaseLease(context.Background(), out[n-1]); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkOutcomes(t *testing.T, out []durable.LeaseRenewal, leases []durable.Lease, ttl time.Duration) {
	t.Helper()
	if len(out) != len(leases) {
		t.Fatalf("%d outcomes for %d leases", len(out), len(leases))
	}
	for i, o := range out[:len(out)-1] {
		if o.Err != nil || o.Lease.Token != leases[i].Token || o.Lease.ExpiresAt.Sub(leases[i].AcquiredAt) < ttl {
			t.Errorf("outcome %d = %+v, want renewed for %v", i, o, ttl)
		}
	}
	if last := out[len(out)-1]; !errors.Is(last.Err, durable.ErrFenced) {
		t.Errorf("outcome of the released lease = %+v, want ErrFenced", last)
	}
}

func TestRenewLeasesUsesTheCapabilityOnce(t *testing.T) {
	c := &countingRenewer{Backend: memory.NewStorage(memory.Options{}).Backend()}
	s := newStoreOn(t, c)
	leases := acquireN(t, s, 5)
	out, err := s.RenewLeases(context.Background(), leases, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkOutcomes(t, out, leases, 30*time.Second)
	if c.batches.Load() != 1 || c.single.Load() != 0 {
		t.Fatalf("%d batch calls and %d single renewals, want one batch", c.batches.Load(), c.single.Load())
	}
	// A whole-call failure is the batch's error, with no outcomes.
	c.fail.Store(true)
	out, err = s.RenewLeases(context.Background(), leases, 0)
	if !errors.Is(err, durable.ErrUnavailable) || out != nil {
		t.Fatalf("failing batch: %v, %d outcomes", err, len(out))
	}
	if err.(*contract.Error).Op != "RenewLeases" {
		t.Errorf("Op = %q", err.(*contract.Error).Op)
	}
}

func TestRenewLeasesFallsBackToOneRenewalPerLease(t *testing.T) {
	type counted interface {
		contract.Backend
		count() int64
	}
	for name, newB := range map[string]func(m *memory.Backend) counted{
		"without the capability": func(m *memory.Backend) counted { return plainCounter{&noRenewer{Backend: m, m: m}} },
		"declined at run time":   func(m *memory.Backend) counted { return declCounter{decliningRenewer{&noRenewer{Backend: m, m: m}}} },
	} {
		t.Run(name, func(t *testing.T) {
			b := newB(memory.NewStorage(memory.Options{}).Backend())
			s := newStoreOn(t, b)
			leases := acquireN(t, s, 4)
			out, err := s.RenewLeases(context.Background(), leases, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			checkOutcomes(t, out, leases, 20*time.Second)
			if got := b.count(); got != 4 {
				t.Fatalf("%d RenewLease calls, want 4", got)
			}
			// A context that ends is the batch's error.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := s.RenewLeases(ctx, leases, 0); !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled: %v", err)
			}
		})
	}
}

type plainCounter struct{ *noRenewer }

func (p plainCounter) count() int64 { return p.single.Load() }

type declCounter struct{ decliningRenewer }

func (d declCounter) count() int64 { return d.single.Load() }

// runLeases runs n RunWithLease calls on s, each until stop is closed,
// and returns their functions' contexts (in order) and their results.
func runLeases(t *testing.T, s *durable.Store, n int, ttl, every time.Duration, stop <-chan struct{}) ([]context.Context, []durable.Lease, <-chan error) {
	t.Helper()
	ctxs := make([]context.Context, n)
	leases := make([]durable.Lease, n)
	errs := make(chan error, n)
	var started sync.WaitGroup
	started.Add(n)
	for i := range n {
		go func() {
			errs <- s.RunWithLease(context.Background(), durable.LeaseRequest{Resource: fmt.Sprintf("job-%d", i), Owner: "w", TTL: ttl},
				durable.LeaseOptions{RenewEvery: every}, func(ctx context.Context, l durable.Lease) error {
					ctxs[i], leases[i] = ctx, l
					started.Done()
					select {
					case <-stop:
					case <-ctx.Done():
					}
					return nil
				})
		}()
		time.Sleep(3 * time.Millisecond) // acquired at different times
	}
	started.Wait()
	return ctxs, leases, errs
}

func TestRunWithLeaseRenewsAllLeasesOfAStoreInOneCall(t *testing.T) {
	c := &countingRenewer{Backend: memory.NewStorage(memory.Options{}).Backend()}
	s := newStoreOn(t, c)
	const n = 20
	stop := make(chan struct{})
	ctxs, leases, errs := runLeases(t, s, n, 2*time.Second, 40*time.Millisecond, stop)
	time.Sleep(400 * time.Millisecond) // about ten periods
	for i, l := range leases {
		cur, err := s.GetLease(context.Background(), "", l.Resource)
		if err != nil || cur.Token != l.Token || !cur.ExpiresAt.After(l.ExpiresAt) {
			t.Errorf("lease %d not renewed: %+v, %v", i, cur, err)
		}
		if ctxs[i].Err() != nil {
			t.Errorf("lease %d: fn's context ended: %v", i, context.Cause(ctxs[i]))
		}
	}
	close(stop)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	batches, single := c.batches.Load(), c.single.Load()
	// One lease alone would need about ten renewals; twenty of them, in
	// batches, about as many calls (the first round or two align them).
	if single != 0 || batches == 0 || batches > 30 {
		t.Errorf("%d RenewLeases calls and %d RenewLease calls for %d leases over ~10 periods, want a few batches", batches, single, n)
	}
	if got := c.maxBatch(); got != n {
		t.Errorf("largest batch %d, want all %d leases in one call", got, n)
	}
	t.Logf("%d RenewLeases calls, largest %d", batches, c.maxBatch())
}

func TestRunWithLeaseFencedLeaseEndsOnlyItsFunction(t *testing.T) {
	c := &countingRenewer{Backend: memory.NewStorage(memory.Options{}).Backend()}
	s := newStoreOn(t, c)
	stop := make(chan struct{})
	ctxs, leases, errs := runLeases(t, s, 3, 2*time.Second, 20*time.Millisecond, stop)
	// Another party removes lease 1 (as a takeover would): its next
	// renewal is Fenced.
	if ok, err := s.ReleaseLease(context.Background(), leases[1]); err != nil || !ok {
		t.Fatal(ok, err)
	}
	select {
	case <-ctxs[1].Done():
		if !errors.Is(context.Cause(ctxs[1]), durable.ErrFenced) {
			t.Errorf("cause = %v, want ErrFenced", context.Cause(ctxs[1]))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fenced lease's function still runs")
	}
	time.Sleep(100 * time.Millisecond) // more rounds for the others
	for _, i := range []int{0, 2} {
		if ctxs[i].Err() != nil {
			t.Errorf("lease %d's function ended too: %v", i, context.Cause(ctxs[i]))
		}
	}
	close(stop)
	var fenced, ok int
	for range 3 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, durable.ErrFenced):
			fenced++
		default:
			t.Error(err)
		}
	}
	if ok != 2 || fenced != 1 {
		t.Errorf("%d ended normally and %d lost, want 2 and 1", ok, fenced)
	}
}

func TestRunWithLeaseBatchOutageEndsEachFunctionBeforeItsDeadline(t *testing.T) {
	const (
		ttl = 1200 * time.Millisecond
		tol = 200 * time.Millisecond
	)
	c := &countingRenewer{Backend: memory.NewStorage(memory.Options{Tolerance: tol}).Backend()}
	c.fail.Store(true)
	s := newStoreOn(t, c)
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	ctxs, _, _ := runLeases(t, s, 3, ttl, 100*time.Millisecond, stop)
	for i, ctx := range ctxs {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("lease %d's function still runs", i)
		}
		if !errors.Is(context.Cause(ctx), durable.ErrFenced) {
			t.Errorf("lease %d: cause %v", i, context.Cause(ctx))
		}
	}
	// Each ended by its own deadline: TTL − tolerance after its grant was
	// requested, which is after start; the last was requested ~6 ms later.
	if took := time.Since(start); took < ttl-tol || took > ttl {
		t.Errorf("the functions ended %v after start, want within (TTL − tolerance, TTL) = (%v, %v)", took, ttl-tol, ttl)
	}
	if c.batches.Load() < 3 {
		t.Errorf("%d renewal attempts, want retries", c.batches.Load())
	}
}

func TestRunWithLeaseBatchesByTTL(t *testing.T) {
	c := &countingRenewer{Backend: memory.NewStorage(memory.Options{}).Backend()}
	s := newStoreOn(t, c)
	stop := make(chan struct{})
	_, _, errs1 := runLeases(t, s, 2, 2*time.Second, 30*time.Millisecond, stop)
	// Two more on other resources with another TTL.
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			errs <- s.RunWithLease(context.Background(), durable.LeaseRequest{Resource: fmt.Sprintf("other-%d", i), Owner: "w", TTL: 3 * time.Second},
				durable.LeaseOptions{RenewEvery: 30 * time.Millisecond}, func(ctx context.Context, _ durable.Lease) error {
					<-stop
					return nil
				})
		}()
	}
	errs2 := errs
	time.Sleep(200 * time.Millisecond)
	close(stop)
	for range 2 {
		if err := <-errs1; err != nil {
			t.Error(err)
		}
		if err := <-errs2; err != nil {
			t.Error(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ttls[2*time.Second] || !c.ttls[3*time.Second] || len(c.ttls) != 2 {
		t.Errorf("renewal TTLs %v, want each lease renewed with its own TTL", c.ttls)
	}
}

// TestRenewLeasesCountsEachLease: the lease counter sees each lease's
// outcome of a batch, as it would for one RenewLease per lease.
func TestRenewLeasesCountsEachLease(t *testing.T) {
	tel := newTelemetry(t)
	s, err := memory.Open(memory.Options{}, tel.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	leases := acquireN(t, s, 4) // the last one released
	if _, err := s.RenewLeases(context.Background(), leases, 0); err != nil {
		t.Fatal(err)
	}
	ms := tel.collect(t)
	if got := counterValue(t, ms["durable.leases"], "durable.lease.result", "renewed"); got != 3 {
		t.Errorf("durable.leases{result=renewed} = %d, want 3", got)
	}
	if got := counterValue(t, ms["durable.leases"], "durable.lease.result", "fenced"); got != 1 {
		t.Errorf("durable.leases{result=fenced} = %d, want 1", got)
	}
}
