package durable_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/handoff"
)

// neverPoll is a poll floor no test waits out: a waiter that misses its
// wake-up hangs until its context ends, and the test fails.
const neverPoll = time.Hour

// hiddenStore is a Store on a memory Storage without its LeaseWatcher
// (handoff.Hide): only the Store's own releases wake its waiters, and
// changes made through st's other clients tell it nothing.
func hiddenStore(t *testing.T, opts memory.Options) (*durable.Store, *memory.Storage) {
	t.Helper()
	st := memory.NewStorage(opts)
	s, err := durable.New(handoff.Hide(st.Backend()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st
}

// arrivals records the order in which waiters of a Store enter its queues.
type arrivals struct {
	mu   sync.Mutex
	cond *sync.Cond
	seen []arrival
}

type arrival struct {
	resource string
	permit   bool
	owner    string
	pos      int
}

func watchArrivals(s *durable.Store) *arrivals {
	a := &arrivals{}
	a.cond = sync.NewCond(&a.mu)
	durable.OnWaitEnqueue(s, func(resource string, permit bool, owner string, pos int) {
		a.mu.Lock()
		a.seen = append(a.seen, arrival{resource, permit, owner, pos})
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	return a
}

// waitFor blocks until owner has entered a queue, and returns its position.
func (a *arrivals) waitFor(owner string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for _, x := range a.seen {
			if x.owner == owner {
				return x.pos
			}
		}
		a.cond.Wait()
	}
}

func mustAcquire(t *testing.T, s *durable.Store, req durable.LeaseRequest) durable.Lease {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testOrder queues waiters one after the other behind a held lease and
// checks that they are granted in arrival order when the holder (on the
// Store release) lets go.
func testOrder(t *testing.T, waitOn, release *durable.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	durable.SetWaitFloor(waitOn, neverPoll)
	arr := watchArrivals(waitOn)
	const n = 10
	held := mustAcquire(t, release, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		owner := fmt.Sprintf("w%d", i)
		wg.Go(func() {
			l, err := waitOn.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: owner, TTL: time.Minute})
			if err != nil {
				t.Errorf("%s: %v", owner, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			runtime.Gosched() // give later waiters a chance to overtake, if they could
			if _, err := waitOn.ReleaseLease(context.Background(), l); err != nil {
				t.Error(err)
			}
		})
		if pos := arr.waitFor(owner); pos != i {
			t.Fatalf("%s entered at position %d, want %d", owner, pos, i)
		}
	}
	if _, err := release.ReleaseLease(ctx, held); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want arrival order 0..%d", order, n-1)
		}
	}
	if len(order) != n {
		t.Fatalf("%d of %d waiters granted", len(order), n)
	}
}

func TestWaitLeaseGrantsInArrivalOrder(t *testing.T) {
	t.Run("released by the same Store", func(t *testing.T) {
		s, _ := hiddenStore(t, memory.Options{})
		testOrder(t, s, s)
		// Without a watch its own releases woke the waiters at once.
		if n := durable.WaitFallbacks(s); n != 0 {
			t.Fatalf("%d fallback wakes without a watch", n)
		}
	})
	t.Run("released by another Store", func(t *testing.T) {
		stores, _, _, _ := watchingStores(t, memory.Options{}, 2)
		testOrder(t, stores[0], stores[1])
	})
}

// TestWaitLeaseWaiterNotStarved: while goroutines of the same Store cycle
// WaitLease and ReleaseLease on one lease as fast as they can, a waiter
// arriving among them is granted after at most the grants of those queued
// ahead of it when it arrived (its position), plus the one grant that may
// have been made but not yet logged when it arrived. Counted, not timed.
func TestWaitLeaseWaiterNotStarved(t *testing.T) {
	s, _ := hiddenStore(t, memory.Options{})
	durable.SetWaitFloor(s, neverPoll)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	var log []string // "E <owner> <pos>" on arrival, "G <owner>" on grant
	durable.OnWaitEnqueue(s, func(_ string, _ bool, owner string, pos int) {
		mu.Lock()
		log = append(log, fmt.Sprintf("E %s %d", owner, pos))
		mu.Unlock()
	})
	grant := func(owner string) {
		mu.Lock()
		log = append(log, "G "+owner)
		mu.Unlock()
	}

	const cyclers = 4
	var cycles atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range cyclers {
		owner := fmt.Sprintf("c%d", c)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "hot", Owner: owner, TTL: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				grant(owner)
				cycles.Add(1)
				if _, err := s.ReleaseLease(context.Background(), l); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// busy waits until the cyclers have made n more grants, so that each
	// waiter arrives while they are cycling.
	busy := func(n int64) {
		for from := cycles.Load(); cycles.Load() < from+n; {
			runtime.Gosched()
		}
	}
	const rounds = 30
	for r := range rounds {
		busy(2 * cyclers)
		owner := fmt.Sprintf("w%d", r)
		l, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "hot", Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		grant(owner)
		if _, err := s.ReleaseLease(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()

	// Check every waiter's grants-before-its-own against its position.
	worst := 0
	for r := range rounds {
		owner := fmt.Sprintf("w%d", r)
		arrived, pos, others := -1, 0, 0
		for i, e := range log {
			var who string
			var p int
			if n, _ := fmt.Sscanf(e, "E %s %d", &who, &p); n == 2 && who == owner {
				arrived, pos = i, p
				continue
			}
			if arrived < 0 || len(e) < 2 || e[0] != 'G' {
				continue
			}
			if e[2:] == owner {
				break
			}
			others++
		}
		if arrived < 0 {
			t.Fatalf("%s never arrived", owner)
		}
		if pos > cyclers {
			t.Errorf("%s arrived at position %d with %d other waiters", owner, pos, cyclers)
		}
		if others > pos+1 {
			t.Errorf("%s, arriving at position %d, waited for %d other grants", owner, pos, others)
		}
		worst = max(worst, others)
	}
	t.Logf("%d waiters among %d cyclers (%d cycles): at most %d grants to others before each", rounds, cyclers, cycles.Load(), worst)

}

// TestWaitLeaseNeverMissesRelease races a waiter's arrival against the
// release it waits for (before, during and after) many times, with the
// poll floor out of reach: only a wake-up can deliver the lease.
func TestWaitLeaseNeverMissesRelease(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 50
	}
	cases := []struct {
		name string
		// stores returns the waiter's Store and the holder's.
		stores func(t *testing.T) (waiter, holder *durable.Store)
		// busyQueue keeps another waiter in the slot (a WaitPermit on the
		// same resource), so that the watch is already registered when
		// the waiter arrives.
		busyQueue bool
	}{
		{"same Store, local wake only", func(t *testing.T) (*durable.Store, *durable.Store) {
			s, _ := hiddenStore(t, memory.Options{})
			return s, s
		}, false},
		{"other Store, backend watch", func(t *testing.T) (*durable.Store, *durable.Store) {
			stores, _, _, _ := watchingStores(t, memory.Options{}, 2)
			return stores[0], stores[1]
		}, false},
		{"other Store, memory's own watch", func(t *testing.T) (*durable.Store, *durable.Store) {
			st := memory.NewStorage(memory.Options{})
			var stores []*durable.Store
			for range 2 {
				s, err := durable.New(st.Backend())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				stores = append(stores, s)
			}
			return stores[0], stores[1]
		}, false},
		{"other Store, watch already registered", func(t *testing.T) (*durable.Store, *durable.Store) {
			stores, _, _, _ := watchingStores(t, memory.Options{}, 2)
			return stores[0], stores[1]
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			waiter, holder := c.stores(t)
			durable.SetWaitFloor(waiter, neverPoll)
			ctx := context.Background()
			req := durable.LeaseRequest{Resource: "r", Owner: "holder", TTL: time.Minute}
			if c.busyQueue {
				p, err := holder.AcquirePermit(ctx, durable.PermitRequest{Resource: "r", Owner: "p", TTL: time.Minute, Permits: 1})
				if err != nil {
					t.Fatal(err)
				}
				pctx, pcancel := context.WithCancel(ctx)
				pdone := make(chan struct{})
				go func() {
					defer close(pdone)
					waiter.WaitPermit(pctx, durable.PermitRequest{Resource: "r", Owner: "pw", TTL: time.Minute, Permits: 1})
				}()
				t.Cleanup(func() { pcancel(); <-pdone; holder.ReleaseLease(ctx, p) })
				for durable.WaitSlots(waiter) == 0 {
					runtime.Gosched()
				}
			}
			for r := range rounds {
				held := mustAcquire(t, holder, req)
				delay := rand.IntN(3) // 0: release first, 1: race, 2: wait first
				got := make(chan error, 1)
				start := func() {
					go func() {
						wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
						l, err := waiter.WaitLease(wctx, durable.LeaseRequest{Resource: "r", Owner: "waiter", TTL: time.Minute})
						if err == nil {
							_, err = waiter.ReleaseLease(ctx, l)
						}
						got <- err
					}()
				}
				switch delay {
				case 0:
					holder.ReleaseLease(ctx, held)
					start()
				case 1:
					start()
					for range rand.IntN(20) {
						runtime.Gosched()
					}
					holder.ReleaseLease(ctx, held)
				case 2:
					start()
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					holder.ReleaseLease(ctx, held)
				}
				if err := <-got; err != nil {
					t.Fatalf("round %d (case %d): the waiter missed the release: %v", r, delay, err)
				}
			}
		})
	}
}

// countBusy counts the ErrLeaseBusy answers of its AcquireLease.
type countBusy struct {
	contract.Backend
	answers atomic.Int64
}

func (c *countBusy) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := c.Backend.AcquireLease(ctx, req)
	if errors.Is(err, contract.ErrLeaseBusy) {
		c.answers.Add(1)
	}
	return l, err
}

// TestWaitLeaseCancelPassesHeadship: when the head of the queue leaves
// because its context ended, the next waiter becomes head at once and asks
// at once, so it gets a lease that was freed without any signal.
func TestWaitLeaseCancelPassesHeadship(t *testing.T) {
	st := memory.NewStorage(memory.Options{})
	busy := &countBusy{Backend: handoff.Hide(st.Backend())}
	s, err := durable.New(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := mustAcquire(t, s, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})

	c1, cancel1 := context.WithCancel(ctx)
	e1 := make(chan error, 1)
	go func() {
		_, err := s.WaitLease(c1, durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Minute})
		e1 <- err
	}()
	arr.waitFor("w1")
	e2 := make(chan error, 1)
	var l2 durable.Lease
	go func() {
		var err error
		l2, err = s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w2", TTL: time.Minute})
		e2 <- err
	}()
	if pos := arr.waitFor("w2"); pos != 1 {
		t.Fatalf("w2 at position %d", pos)
	}
	// w1 asks twice (before and after its try at a watch), then waits.
	for busy.answers.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	// Free the lease behind the Store's back: no wake-up reaches anyone.
	if ok, err := st.Backend().ReleaseLease(ctx, held); !ok || err != nil {
		t.Fatal(ok, err)
	}
	cancel1()
	if err := <-e1; !errors.Is(err, context.Canceled) || !errors.Is(err, durable.ErrCanceled) {
		t.Fatalf("w1: %v, want a cancellation", err)
	}
	if err := <-e2; err != nil {
		t.Fatalf("w2: %v", err)
	}
	if l2.Owner != "w2" || l2.Token <= held.Token {
		t.Fatalf("w2 got %+v", l2)
	}
}

// TestWaitLeaseCloseWakesWaiters: Close ends the head and the queued
// waiters with ErrClosed, and the shared watch ends.
func TestWaitLeaseCloseWakesWaiters(t *testing.T) {
	stores, _, hub, _ := watchingStores(t, memory.Options{}, 2)
	s, other := stores[0], stores[1]
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	mustAcquire(t, other, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})
	if _, err := other.AcquirePermit(context.Background(), durable.PermitRequest{Resource: "sem", Owner: "holder", TTL: time.Minute, Permits: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 4)
	for i := range 3 {
		owner := fmt.Sprintf("w%d", i)
		go func() {
			_, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: owner, TTL: time.Minute})
			errs <- err
		}()
		arr.waitFor(owner)
	}
	go func() {
		_, err := s.WaitPermit(ctx, durable.PermitRequest{Resource: "sem", Owner: "p", TTL: time.Minute, Permits: 1})
		errs <- err
	}()
	arr.waitFor("p")
	for hub.live.Load() < 2 { // both watches registered
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-errs; !errors.Is(err, durable.ErrClosed) {
			t.Fatalf("waiter ended with %v, want ErrClosed", err)
		}
	}
	for hub.live.Load() != 0 {
		time.Sleep(time.Millisecond) // the watches end (the test's deadline bounds this)
	}
	if _, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "late", TTL: time.Minute}); !errors.Is(err, durable.ErrClosed) {
		t.Fatalf("WaitLease after Close: %v", err)
	}
}

// TestWaitLeaseSharesOneWatch: the waiters of one Store on one resource
// share one backend watch, only the head asks the backend, and the watch
// ends with the last waiter.
func TestWaitLeaseSharesOneWatch(t *testing.T) {
	stores, backends, hub, _ := watchingStores(t, memory.Options{}, 2)
	s, other := stores[0], stores[1]
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := mustAcquire(t, other, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})

	const n = 8
	got := make(chan durable.Lease, n)
	for i := range n {
		owner := fmt.Sprintf("w%d", i)
		go func() {
			l, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: owner, TTL: time.Minute})
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		arr.waitFor(owner)
	}
	// The head asked once without the watch, registered it, asked again.
	for backends[0].attempts.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for attempts that should not happen
	if a := backends[0].attempts.Load(); a != 2 {
		t.Fatalf("%d AcquireLease calls from %d queued waiters, want 2 (the head's)", a, n)
	}
	if r, l := hub.registered.Load(), hub.live.Load(); r != 1 || l != 1 {
		t.Fatalf("%d watches registered, %d live; want 1 shared", r, l)
	}
	// Hand the lease down the queue, each release made by the other
	// Store, so that only the backend's watch tells s.
	prev := held
	for range n {
		if _, err := other.ReleaseLease(ctx, prev); err != nil {
			t.Fatal(err)
		}
		prev = <-got
	}
	if _, err := other.ReleaseLease(ctx, prev); err != nil {
		t.Fatal(err)
	}
	if r := hub.registered.Load(); r != 1 {
		t.Fatalf("%d watches registered for one queue", r)
	}
	for hub.live.Load() != 0 || durable.WaitSlots(s) != 0 {
		time.Sleep(time.Millisecond) // the last waiter ended the watch
	}
}

// declining implements LeaseWatcher but declines it at run time.
type declining struct{ *memory.Backend }

func (declining) WatchLease(context.Context, contract.Scope, string) (<-chan struct{}, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "not here"}
}

// failingWatch implements LeaseWatcher and fails.
type failingWatch struct {
	*memory.Backend
	calls atomic.Int64
}

func (f *failingWatch) WatchLease(context.Context, contract.Scope, string) (<-chan struct{}, error) {
	f.calls.Add(1)
	return nil, &contract.Error{Code: contract.Unavailable, Msg: "down"}
}

// TestWaitLeasePollsWithoutWatch: without a watch the floor delivers a
// release made elsewhere, whether the capability is missing, declined or
// failing.
func TestWaitLeasePollsWithoutWatch(t *testing.T) {
	for _, c := range []struct {
		name string
		b    func(*memory.Storage) contract.Backend
	}{
		{"missing", func(st *memory.Storage) contract.Backend { return handoff.Hide(st.Backend()) }},
		{"declined", func(st *memory.Storage) contract.Backend { return declining{st.Backend()} }},
		{"failing", func(st *memory.Storage) contract.Backend { return &failingWatch{Backend: st.Backend()} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := memory.NewStorage(memory.Options{})
			s, err := durable.New(c.b(st))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			durable.SetWaitFloor(s, 2*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			raw := st.Backend()
			held, err := raw.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(20 * time.Millisecond)
				raw.ReleaseLease(context.Background(), held)
			}()
			l, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w", TTL: time.Minute})
			if err != nil || l.Token <= held.Token {
				t.Fatalf("got %+v, %v", l, err)
			}
		})
	}
}

// TestWaitLeaseRetriesFailedWatch: a watch that failed to register is
// registered again while the waiter polls, and then delivers releases.
func TestWaitLeaseRetriesFailedWatch(t *testing.T) {
	stores, backends, hub, _ := watchingStores(t, memory.Options{}, 2)
	s, other := stores[0], stores[1]
	backends[0].failWatch.Store(1)
	durable.SetWaitFloor(s, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := mustAcquire(t, other, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})
	got := make(chan error, 1)
	go func() {
		_, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w", TTL: time.Minute})
		got <- err
	}()
	// The first registration fails; about a second later one succeeds.
	for hub.live.Load() != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if r := hub.registered.Load(); r != 2 {
		t.Fatalf("%d registrations, want the failed one and its retry", r)
	}
	if _, err := other.ReleaseLease(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// flaky fails its first AcquireLease calls with a given error.
type flaky struct {
	*memory.Backend
	fails atomic.Int64
	err   error
}

func (f *flaky) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	if f.fails.Add(-1) >= 0 {
		return contract.Lease{}, f.err
	}
	return f.Backend.AcquireLease(ctx, req)
}

func TestWaitLeaseRetriesRetryableAndReturnsFinalErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := &flaky{Backend: memory.NewStorage(memory.Options{}).Backend(), err: &contract.Error{Code: contract.Unavailable, Msg: "blip"}}
	f.fails.Store(3)
	s, err := durable.New(f)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	durable.SetWaitFloor(s, time.Millisecond)
	if _, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatalf("retryable errors not retried: %v", err)
	}

	f.err = &contract.Error{Code: contract.PermissionDenied, Msg: "no grant"}
	f.fails.Store(1)
	if _, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job2", Owner: "w", TTL: time.Minute}); !errors.Is(err, durable.ErrPermissionDenied) {
		t.Fatalf("final error: %v", err)
	}

	// Invalid input fails before queueing; a context that ended, at once.
	if _, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "bad resource", Owner: "w"}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("invalid: %v", err)
	}
	if _, err := s.WaitPermit(ctx, durable.PermitRequest{Resource: "sem", Owner: "w", Permits: 0}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("invalid permits: %v", err)
	}
	dead, c := context.WithCancel(ctx)
	c()
	if _, err := s.WaitLease(dead, durable.LeaseRequest{Resource: "job3", Owner: "w"}); !errors.Is(err, durable.ErrCanceled) {
		t.Fatalf("ended context: %v", err)
	}
}

// TestWaitLeaseWokenByDeleteAndCleanup: the Store's own DeleteRecord and
// Cleanup wake its waiters at once.
func TestWaitLeaseWokenByDeleteAndCleanup(t *testing.T) {
	clock := memory.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, st := hiddenStore(t, memory.Options{Clock: clock})
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	raw := st.Backend() // grants behind the Store's back: no local wake from them

	held, _ := raw.AcquireLease(ctx, durable.LeaseRequest{Resource: "a", Owner: "h", TTL: time.Minute})
	done := make(chan error, 1)
	go func() {
		_, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "a", Owner: "w1", TTL: time.Minute})
		done <- err
	}()
	arr.waitFor("w1")
	if ok, err := s.DeleteRecord(ctx, durable.KindLease, "", held.Resource); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after DeleteRecord: %v", err)
	}

	raw.AcquireLease(ctx, durable.LeaseRequest{Resource: "b", Owner: "h", TTL: 2 * time.Second})
	go func() {
		_, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "b", Owner: "w2", TTL: time.Minute})
		done <- err
	}()
	arr.waitFor("w2")
	clock.Advance(3 * time.Second) // expired: nothing signals that
	res, err := s.Cleanup(ctx, durable.CleanupRequest{})
	if err != nil || res.Leases == 0 {
		t.Fatal(res, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after Cleanup: %v", err)
	}
}

// TestWaitPermitArrivalOrder: permits go to the Store's waiters in arrival
// order, never more than Permits at once, each a permit's lease.
func TestWaitPermitArrivalOrder(t *testing.T) {
	s, _ := hiddenStore(t, memory.Options{})
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const permits, n = 3, 9
	req := func(owner string) durable.PermitRequest {
		return durable.PermitRequest{Resource: "pool", Owner: owner, TTL: time.Minute, Permits: permits}
	}
	var first []durable.Lease
	for i := range permits {
		l, err := s.AcquirePermit(ctx, req(fmt.Sprint("h", i)))
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, l)
	}
	type grant struct {
		i int
		l durable.Lease
	}
	grants := make(chan grant, n)
	for i := range n {
		owner := fmt.Sprint("w", i)
		go func() {
			l, err := s.WaitPermit(ctx, req(owner))
			if err != nil {
				t.Error(err)
			}
			grants <- grant{i, l}
		}()
		arr.waitFor(owner)
	}
	// Free one permit at a time: each goes to the next waiter in order.
	live := first
	var lastToken int64
	for want := range n {
		if _, err := s.ReleaseLease(ctx, live[0]); err != nil {
			t.Fatal(err)
		}
		live = live[1:]
		g := <-grants
		if g.i != want {
			t.Fatalf("permit went to w%d, want w%d (arrival order)", g.i, want)
		}
		if base, _, ok := contract.SplitPermit(g.l.Resource); !ok || base != "pool" || g.l.Token <= lastToken {
			t.Fatalf("grant %+v", g.l)
		}
		lastToken = g.l.Token
		live = append(live, g.l)
		held, err := s.Permits(ctx, "", "pool", permits)
		if err != nil || len(held) != permits {
			t.Fatalf("Permits: %d leases, %v", len(held), err)
		}
	}
	// Permits freed together go to the next waiters in arrival order, one
	// after the other, without further signals; the rest keep waiting.
	for i := n; i < n+permits+1; i++ {
		owner := fmt.Sprint("w", i)
		go func() {
			l, err := s.WaitPermit(ctx, req(owner))
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
			grants <- grant{i, l}
		}()
		arr.waitFor(owner)
	}
	for _, l := range live {
		if _, err := s.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	// The goroutines may report in any order; the tokens say the order
	// of the grants.
	together := make([]grant, permits)
	for i := range together {
		together[i] = <-grants
	}
	slices.SortFunc(together, func(a, b grant) int { return cmp.Compare(a.l.Token, b.l.Token) })
	for k, g := range together {
		if g.i != n+k || g.l.Token == 0 {
			t.Fatalf("grants in token order %+v, want w%d..w%d", together, n, n+permits-1)
		}
	}
	select {
	case g := <-grants:
		t.Fatalf("w%d got %+v with every permit held", g.i, g.l)
	case <-time.After(20 * time.Millisecond):
	}
	cancel() // the last waiter leaves
	if g := <-grants; g.i != n+permits || g.l.Token != 0 {
		t.Fatalf("last waiter: %+v", g)
	}
}

func TestPermitsListsStoredPermits(t *testing.T) {
	s, _ := memStore(t, memory.Options{})
	ctx := context.Background()
	var ls []durable.Lease
	for i := range 3 {
		l, err := s.AcquirePermit(ctx, durable.PermitRequest{Resource: "sem", Owner: fmt.Sprint("o", i), TTL: time.Minute, Permits: 5})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	s.ReleaseLease(ctx, ls[1])
	got, err := s.Permits(ctx, "", "sem", 5)
	if err != nil || len(got) != 2 || got[0] != ls[0] || got[1] != ls[2] {
		t.Fatalf("Permits = %+v, %v; want permits 1 and 3", got, err)
	}
	for _, bad := range []int{0, contract.MaxPermits + 1} {
		if _, err := s.Permits(ctx, "", "sem", bad); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Fatalf("permits %d: %v", bad, err)
		}
	}
	if _, err := s.Permits(ctx, "", "sem#1", 1); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("a permit's name as the semaphore: %v", err)
	}
}

func TestRunWithPermit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, _ := memStore(t, memory.Options{})
	req := func(owner string) durable.PermitRequest {
		return durable.PermitRequest{Resource: "pool", Owner: owner, TTL: time.Second, Permits: 2}
	}
	// Two run at once; a third is busy without Wait, and waits with it.
	in := make(chan durable.Lease, 2)
	out := make(chan struct{})
	errs := make(chan error, 3)
	for _, o := range []string{"a", "b"} {
		go func() {
			errs <- s.RunWithPermit(ctx, req(o), durable.LeaseOptions{RenewEvery: 20 * time.Millisecond}, func(ctx context.Context, l durable.Lease) error {
				in <- l
				<-out
				// Renewed meanwhile, same token.
				now, err := s.GetLease(ctx, "", l.Resource)
				if err != nil || now.Token != l.Token || !now.ExpiresAt.After(l.ExpiresAt) {
					return fmt.Errorf("permit not kept alive: %+v %v", now, err)
				}
				return nil
			})
		}()
	}
	a, b := <-in, <-in
	if a.Resource == b.Resource {
		t.Fatalf("two holders of %s", a.Resource)
	}
	err := s.RunWithPermit(ctx, req("c"), durable.LeaseOptions{}, func(context.Context, durable.Lease) error { return nil })
	if !errors.Is(err, durable.ErrLeaseBusy) {
		t.Fatalf("third holder without Wait: %v", err)
	}
	err = s.RunWithPermit(ctx, req("c"), durable.LeaseOptions{MaxWait: 30 * time.Millisecond}, func(context.Context, durable.Lease) error { return nil })
	if !errors.Is(err, durable.ErrLeaseBusy) {
		t.Fatalf("third holder with MaxWait: %v", err)
	}
	go func() {
		errs <- s.RunWithPermit(ctx, req("c"), durable.LeaseOptions{Wait: true}, func(_ context.Context, l durable.Lease) error {
			if l.Owner != "c" {
				return fmt.Errorf("got %+v", l)
			}
			return nil
		})
	}()
	time.Sleep(50 * time.Millisecond) // several renewals
	close(out)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if held, err := s.Permits(ctx, "", "pool", 2); err != nil || len(held) != 0 {
		t.Fatalf("permits not released: %+v %v", held, err)
	}
	if err := s.RunWithPermit(ctx, durable.PermitRequest{Resource: "pool", Owner: "x", Permits: 2}, durable.LeaseOptions{}, nil); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("nil fn: %v", err)
	}
}

// TestRunWithLeaseWaitsInQueue: RunWithLease with Wait takes its turn in
// the Store's queue, behind an earlier WaitLease, and is woken by the
// release without polling.
func TestRunWithLeaseWaitsInQueue(t *testing.T) {
	s, _ := hiddenStore(t, memory.Options{})
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := mustAcquire(t, s, durable.LeaseRequest{Resource: "job", Owner: "h", TTL: time.Minute})
	order := make(chan string, 2)
	go func() {
		l, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "first", TTL: time.Minute})
		if err != nil {
			t.Error(err)
		}
		order <- "first"
		s.ReleaseLease(ctx, l)
	}()
	arr.waitFor("first")
	done := make(chan error, 1)
	go func() {
		done <- s.RunWithLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "second", TTL: time.Minute}, durable.LeaseOptions{Wait: true},
			func(context.Context, durable.Lease) error { order <- "second"; return nil })
	}()
	arr.waitFor("second")
	s.ReleaseLease(ctx, held)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a, b := <-order, <-order; a != "first" || b != "second" {
		t.Fatalf("order %s, %s", a, b)
	}
}

// laggingWatch is a memory client whose watch passes each signal on after
// a random delay of 0.5 to 1.5 ms, as a watch over a network would (a
// Postgres NOTIFY, an etcd watch): the same in distribution for every
// watch, the Store's own included.
type laggingWatch struct{ *memory.Backend }

func (l laggingWatch) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	in, err := l.Backend.WatchLease(ctx, scope, resource)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-in:
			}
			time.Sleep(500*time.Microsecond + rand.N(time.Millisecond))
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

// TestWaitLeaseNoHeadStartAcrossStores: two Stores on one memory Storage,
// two workers each, cycle on one lease (WaitLease, hold 50 µs,
// ReleaseLease). Each release lets both Stores' heads race on equal terms
// (the releasing Store's head hears of it through the watch, as the
// other's does), so about half the grants go to the other Store than the
// previous one, and a worker waits a handful of grants. If the releasing
// Store woke its own head at once, its head would win nearly every race
// behind a watch with a network's latency (1 of 400 grants crossed Stores
// that way, and a worker waited hundreds), and most races on memory's own
// watch without -race (about 1 %; with -race, about a third).
func TestWaitLeaseNoHeadStartAcrossStores(t *testing.T) {
	for _, c := range []struct {
		name string
		wrap func(*memory.Backend) contract.Backend
	}{
		{"memory's watch", func(b *memory.Backend) contract.Backend { return b }},
		{"a watch with latency", func(b *memory.Backend) contract.Backend { return laggingWatch{b} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st := memory.NewStorage(memory.Options{})
			var stores []*durable.Store
			for range 2 {
				s, err := durable.New(c.wrap(st.Backend()))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				stores = append(stores, s)
			}
			const grants = 400
			// The hold lets every worker be back in its queue before the
			// next release (without it one goroutine can take and release
			// the lease many times before the scheduler runs the others,
			// and the count measures the scheduler).
			r, err := handoff.Fairness(ctx, stores, handoff.FairnessOptions{Workers: 4, Grants: grants, Hold: 50 * time.Microsecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v; fallback wakes: %d, %d", r, durable.WaitFallbacks(stores[0]), durable.WaitFallbacks(stores[1]))
			// Expected: about 200 of 400 (the standard deviation is 10).
			if r.Switches < grants/5 {
				t.Errorf("%d of %d grants went to the other Store than the previous grant's, want at least %d: %v", r.Switches, grants, grants/5, r)
			}
			for i, n := range r.PerStore {
				if n < grants/5 {
					t.Errorf("Store %d got %d of %d grants: %v", i, n, grants, r)
				}
			}
			// A worker at the head of its queue wins each release with
			// probability about 1/2, so it waits a handful of grants.
			if r.MaxGap > grants/4 {
				t.Errorf("a worker waited %d grants: %v", r.MaxGap, r)
			}
		})
	}
}

// silentWatch is a memory client whose watch registers but never
// signals: every signal of it is lost.
type silentWatch struct {
	*memory.Backend
	busy *sync.Map // owner → struct{}: the owners that have been told LeaseBusy
}

func (silentWatch) WatchLease(ctx context.Context, _ contract.Scope, _ string) (<-chan struct{}, error) {
	return make(chan struct{}), nil
}

func (w silentWatch) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := w.Backend.AcquireLease(ctx, req)
	if contract.CodeOf(err) == contract.LeaseBusy {
		w.busy.Store(req.Owner, struct{}{})
	}
	return l, err
}

// TestWaitLeaseOwnReleaseWithLostSignal: with an active watch the Store's
// own release leaves its head to the watch's signal; when that signal is
// lost, the fallback timer wakes the head (after at most 50 ms), where the
// poll floor (an hour here) would not.
func TestWaitLeaseOwnReleaseWithLostSignal(t *testing.T) {
	b := silentWatch{memory.NewStorage(memory.Options{}).Backend(), &sync.Map{}}
	s, err := durable.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	durable.SetWaitFloor(s, neverPoll)
	arr := watchArrivals(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A waiter for the semaphore on "job" keeps the slot, and its watch,
	// for the whole test.
	if _, err := b.AcquirePermit(ctx, contract.PermitRequest{Resource: "job", Owner: "p", TTL: time.Minute, Permits: 1}); err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		s.WaitPermit(kctx, durable.PermitRequest{Resource: "job", Owner: "keeper", TTL: time.Minute, Permits: 1})
	}()
	defer func() { kcancel(); <-kept }()
	for !durable.WaitWatchActive(s, "", "job") {
		time.Sleep(time.Millisecond)
	}
	for round := range 3 {
		held := mustAcquire(t, s, durable.LeaseRequest{Resource: "job", Owner: "holder", TTL: time.Minute})
		owner := fmt.Sprintf("w%d", round)
		got := make(chan error, 1)
		go func() {
			l, err := s.WaitLease(ctx, durable.LeaseRequest{Resource: "job", Owner: owner, TTL: time.Minute})
			if err == nil {
				_, err = s.ReleaseLease(ctx, l)
			}
			got <- err
		}()
		arr.waitFor(owner)
		// Release only once the waiter has been told busy: a release
		// between its arrival in the queue and its first attempt would let
		// that attempt take the lease with no wake at all.
		for _, busy := b.busy.Load(owner); !busy; _, busy = b.busy.Load(owner) {
			time.Sleep(time.Millisecond)
		}
		if _, err := s.ReleaseLease(ctx, held); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The waiter's own release woke nobody: the queue was empty.
		if n := durable.WaitFallbacks(s); n != round+1 {
			t.Fatalf("round %d: %d fallback wakes, want %d", round, n, round+1)
		}
	}
}
