package durable

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
)

// The poll floor of WaitLease and WaitPermit: while a lease stays busy the
// head of a queue asks again after a random pause in (0, p], p starting at
// waitFloorFirst and doubling up to waitFloorMax, whatever the wake-ups.
// It catches what no signal reports: an expiry, a backend without
// contract.LeaseWatcher, or one that cannot see another process's changes.
const (
	waitFloorFirst = 50 * time.Millisecond
	waitFloorMax   = time.Second
)

// WaitLease acquires the lease req asks for, as [Store.AcquireLease] does,
// waiting while it is held for as long as ctx allows. There is no default
// bound: give ctx a deadline (or use [Store.RunWithLease] with MaxWait).
//
// It returns the lease, or an error: with Code Canceled when ctx ends first
// (errors.Is(err, ctx.Err()) holds), ErrClosed when the Store is closed
// meanwhile, ErrInvalidArgument for a request AcquireLease would reject, or
// the first final error of an attempt (its Op names the call that failed,
// "AcquireLease"). An ErrUnavailable or ErrOutcomeUnknown answer is retried
// after a pause, as RunWithLease retries it; after ErrOutcomeUnknown the
// grant may have applied, and the lease then reads as busy until that
// grant expires (see contract.OutcomeUnknown).
//
// # Waking
//
// A waiter asks the backend again as soon as it learns the lease may be
// free: when this Store's own ReleaseLease, DeleteRecord or Cleanup frees
// it (at once, without a round trip); when the backend's watch signals a
// change (contract.LeaseWatcher: another Store or process released or
// deleted it); and at the poll floor, a jittered pause starting at 50 ms
// and doubling up to 1 s, which also notices a lease that expired without
// being released. The watch is registered before every attempt whose busy
// answer the waiter then waits on, so a release that lands between a busy
// answer and the wait is never missed. (A waiter that finds no other
// waiter of its Store on the resource makes its first attempt without it,
// since a free lease needs no watch; a busy answer is followed by the
// watch and a second attempt.)
// One backend watch per (scope, resource) serves every waiter of the
// Store, and ends when the last waiter leaves. Without the capability, or
// when it declines with ErrUnimplemented, the Store's own releases and the
// floor wake the waiter: the same results, later. A watch that fails to
// register is tried again, in the background, at most once a second.
//
// # Order
//
// Within one Store the WaitLease calls on one (scope, resource) form a
// first-in, first-out queue, in the order they entered it (after
// validation): only the head of the queue asks the backend, and when it is
// granted, or leaves because its ctx ended, the next one becomes head at
// once and asks at once (after registering the watch, if the queue has
// none yet). So a waiter is granted before every waiter of the same Store
// that arrived after it, and waits for no more than the grants of those
// that arrived before it, plus leases taken by calls that do not queue
// (AcquireLease, RunWithLease without Wait) and by other Stores.
//
// Across Stores (processes) there is no order: every release wakes the
// head of each Store's queue that hears of it, and the heads race;
// whichever attempt the backend applies first wins. The Store that
// released wakes its own head first, without a round trip, so a Store
// whose own waiters keep taking the lease over tends to keep it, and
// another Store's waiter may wait for many grants (docs/BENCHMARKS.md
// measures it: streaks of hundreds of grants on memory). No bound across
// Stores is promised.
func (s *Store) WaitLease(ctx context.Context, req LeaseRequest) (Lease, error) {
	req, v := s.checkLeaseRequest("WaitLease", req)
	if err := s.begin(ctx, &v); err != nil {
		return Lease{}, err
	}
	w := s.leaseWait(v.op, req, defaultWaitFloor)
	l, _, _, err := s.waitLease(ctx, w)
	return l, err
}

// WaitPermit acquires one of req.Permits permits of the semaphore on
// req.Resource, as [Store.AcquirePermit] does, waiting while all of them
// are held for as long as ctx allows. Everything [Store.WaitLease] says
// holds, with the semaphore's resource in place of the lease's: the
// Store's own releases of any permit wake its waiters at once, the
// backend's watch is on the semaphore's resource (it signals a change of
// any permit), and the waiter waits while every permit is held.
//
// Order: within one Store, WaitPermit calls on one (scope, resource) queue
// in arrival order and only the head of the queue asks the backend, even
// when several permits are free; each grant makes the next waiter head at
// once, so free permits go to the waiters in arrival order, one round trip
// each. Across Stores there is no order, as for WaitLease.
//
// The queue of WaitPermit on a resource is not the queue of WaitLease on
// the same resource: a plain lease on "R" and the permits "R#n" are
// different leases.
func (s *Store) WaitPermit(ctx context.Context, req PermitRequest) (Lease, error) {
	req, v := s.checkPermitRequest("WaitPermit", req)
	if err := s.begin(ctx, &v); err != nil {
		return Lease{}, err
	}
	w := s.permitWait(v.op, req, defaultWaitFloor)
	l, _, _, err := s.waitLease(ctx, w)
	return l, err
}

// Permits returns the stored leases of permits 1 to permits of the
// semaphore on (scope, resource), for operators: each permit's lease as
// GetLease returns it (compare ExpiresAt with the time to see whether it
// is live), in permit order; permits with no stored lease are left out. It
// makes one GetLease call per permit.
func (s *Store) Permits(ctx context.Context, scope Scope, resource string, permits int) ([]Lease, error) {
	v := validator{op: "Permits"}
	v.scope(scope)
	v.ident("resource", resource)
	if permits < 1 || permits > contract.MaxPermits {
		v.fail("permits must be within 1 and 1000")
	}
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	var out []Lease
	for n := 1; n <= permits; n++ {
		l, err := s.GetLease(ctx, scope, contract.PermitResource(resource, n))
		switch {
		case err == nil:
			out = append(out, l)
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

// defaultWaitFloor is WaitLease's and WaitPermit's poll floor.
var defaultWaitFloor = backoff{first: waitFloorFirst, max: waitFloorMax, jitter: true}

// waitKind tells a slot's two queues apart.
type waitKind uint8

const (
	waitForLease  waitKind = iota // WaitLease on the resource
	waitForPermit                 // WaitPermit on the resource (the semaphore)
)

// waitSpec is one wait: which queue, how to attempt, the poll floor.
type waitSpec struct {
	op      string
	owner   string // for the test hook
	key     slotKey
	kind    waitKind
	floor   backoff
	attempt func(ctx context.Context) (Lease, error)
}

func (s *Store) leaseWait(op string, req LeaseRequest, floor backoff) waitSpec {
	return waitSpec{op: op, owner: req.Owner, key: slotKey{req.Scope, req.Resource}, kind: waitForLease, floor: floor,
		attempt: func(ctx context.Context) (Lease, error) { return s.AcquireLease(ctx, req) }}
}

func (s *Store) permitWait(op string, req PermitRequest, floor backoff) waitSpec {
	return waitSpec{op: op, owner: req.Owner, key: slotKey{req.Scope, req.Resource}, kind: waitForPermit, floor: floor,
		attempt: func(ctx context.Context) (Lease, error) { return s.AcquirePermit(ctx, req) }}
}

// waitLease queues the caller and attempts sp until granted. It returns
// the lease and the local time its granting request was sent. Otherwise
// err says why not (with Code Canceled wrapping ctx's error when ctx
// ended, Closed when the Store closed, or an attempt's final error), and
// last is the last attempt's busy or retryable error (nil if it never
// attempted).
func (s *Store) waitLease(ctx context.Context, sp waitSpec) (l Lease, sent time.Time, last, err error) {
	r := &s.waits
	me := &waiter{wake: make(chan struct{}, 1)}
	slot, fresh, floor := r.enqueue(sp, me)
	if slot == nil {
		return Lease{}, time.Time{}, nil, s.closedErr(sp.op)
	}
	defer r.leave(slot, sp.kind, me)
	pause := max(floor.first, 1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	ended := func() error {
		if s.closed.Load() && ctx.Err() == nil {
			return s.closedErr(sp.op)
		}
		return &contract.Error{Code: contract.Canceled, Op: sp.op, Err: ctx.Err()}
	}
	for {
		// Wait to be the head of the queue: only the head asks.
		for !r.isHead(slot, sp.kind, me) {
			select {
			case <-me.wake:
			case <-ctx.Done():
				return Lease{}, time.Time{}, last, ended()
			case <-s.done:
				return Lease{}, time.Time{}, last, ended()
			}
		}
		// Before the attempt that a wait would rely on, the watch is
		// registered: a release after the attempt then leaves a signal.
		// The very first attempt of a new queue goes without it, since
		// a lease that is free needs no watch; a busy answer is followed
		// by the watch and a second attempt before any wait.
		watched := true
		if fresh {
			fresh, watched = false, false
		} else if ready := r.watch(s, slot); ready != nil {
			select {
			case <-ready:
			case <-ctx.Done():
				return Lease{}, time.Time{}, last, ended()
			case <-s.done:
				return Lease{}, time.Time{}, last, ended()
			}
		}
		// Signals before this point are answered by the attempt itself.
		select {
		case <-me.wake:
		default:
		}
		at := time.Now()
		got, aerr := sp.attempt(ctx)
		switch {
		case aerr == nil:
			return got, at, nil, nil
		case ctx.Err() != nil:
			return Lease{}, time.Time{}, last, ended()
		case errors.Is(aerr, ErrLeaseBusy) || Retryable(aerr):
			last = aerr
		default:
			return Lease{}, time.Time{}, aerr, aerr
		}
		if !watched && errors.Is(aerr, ErrLeaseBusy) {
			continue // register the watch, then ask again before waiting
		}
		d := pause
		if floor.jitter {
			d = time.Duration(rand.Int64N(int64(pause))) + 1
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-me.wake:
		case <-timer.C:
		case <-ctx.Done():
			return Lease{}, time.Time{}, last, ended()
		case <-s.done:
			return Lease{}, time.Time{}, last, ended()
		}
		pause = min(2*pause, max(floor.max, 1))
	}
}

// closedErr is the error of a call ended by Close.
func (s *Store) closedErr(op string) error {
	return &contract.Error{Code: contract.Closed, Op: op, Msg: "store is closed"}
}

// --- the Store's wait queues ---

// slotKey names what is waited for: a lease's resource, or a semaphore's.
type slotKey struct {
	scope    Scope
	resource string
}

// waitRegistry holds a Store's wait queues, one slot per (scope, resource)
// with waiters, each with the one backend watch its waiters share.
//
// Lock order: waitRegistry.mu is a leaf lock; nothing is called under it
// but channel sends that cannot block and context cancellations.
type waitRegistry struct {
	mu     sync.Mutex
	slots  map[slotKey]*waitSlot
	closed bool

	// Test knobs (export_test.go): a poll floor replacing every other,
	// and a hook called under mu with each arrival's queue position.
	floor     *backoff
	onEnqueue func(sp waitSpec, pos int)
}

// watchState is where a slot's backend watch stands.
type watchState uint8

const (
	watchNone        watchState = iota // never asked for
	watchPending                       // WatchLease is running
	watchActive                        // signals arrive; forward runs
	watchUnsupported                   // Unimplemented: the floor alone, for the slot's life
	watchFailed                        // it failed: the floor alone until retryAt
)

// waitSlot is the queues on one (scope, resource) and their watch.
type waitSlot struct {
	key     slotKey
	queues  [2][]*waiter // by waitKind, in arrival order; the head is [0]
	state   watchState
	ready   chan struct{}      // closed when a pending registration ends
	retry   bool               // the pending registration is a retry: nobody waits for it
	retryAt time.Time          // after a failure, the earliest retry
	cancel  context.CancelFunc // ends the watch; nil when there is none
	gone    bool               // removed from the registry
}

// waiter is one call waiting in a queue. wake (room for one) is signalled
// when it becomes head, and, while it is head, when the lease may be free.
type waiter struct {
	wake chan struct{}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// enqueue appends w to the queue of sp and reports whether it created the
// slot (so no watch exists yet), and the poll floor to use. It returns a
// nil slot once the Store is closed.
func (r *waitRegistry) enqueue(sp waitSpec, w *waiter) (slot *waitSlot, fresh bool, floor backoff) {
	r.mu.Lock()
	defer r.mu.Unlock()
	floor = sp.floor
	if r.floor != nil {
		floor = *r.floor
	}
	if r.closed {
		return nil, false, floor
	}
	key, kind := sp.key, sp.kind
	if r.slots == nil {
		r.slots = map[slotKey]*waitSlot{}
	}
	slot = r.slots[key]
	if slot == nil {
		slot = &waitSlot{key: key}
		r.slots[key] = slot
		fresh = true
	}
	slot.queues[kind] = append(slot.queues[kind], w)
	if r.onEnqueue != nil {
		r.onEnqueue(sp, len(slot.queues[kind])-1)
	}
	return slot, fresh, floor
}

// isHead reports whether w is the head of its queue.
func (r *waitRegistry) isHead(slot *waitSlot, kind waitKind, w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slot.queues[kind][0] == w
}

// leave removes w from its queue. When w was the head the next waiter is
// head from now on and is woken; the last waiter of a slot ends its watch.
func (r *waitRegistry) leave(slot *waitSlot, kind waitKind, w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := slot.queues[kind]
	i := slices.Index(q, w)
	slot.queues[kind] = slices.Delete(q, i, i+1)
	if i == 0 && len(slot.queues[kind]) > 0 {
		notify(slot.queues[kind][0].wake)
	}
	if len(slot.queues[waitForLease]) == 0 && len(slot.queues[waitForPermit]) == 0 {
		slot.gone = true
		delete(r.slots, slot.key)
		if slot.cancel != nil {
			slot.cancel()
			slot.cancel = nil
		}
	}
}

// watch makes sure a watch is registered, or being registered, for slot.
// It returns a channel to wait on before attempting, or nil when there is
// nothing to wait for (a watch is active, or the floor is all there is).
func (r *waitRegistry) watch(s *Store, slot *waitSlot) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch slot.state {
	case watchNone:
		return r.startWatchLocked(s, slot, false)
	case watchPending:
		if slot.retry {
			return nil
		}
		return slot.ready
	case watchFailed:
		if !time.Now().Before(slot.retryAt) {
			r.startWatchLocked(s, slot, true)
		}
	}
	return nil
}

// startWatchLocked starts registering slot's backend watch in the
// background and returns the channel closed when it is done. The watch
// lives until the slot is removed or the Store closes; registering it is
// bounded by the operation timeout. r.mu must be held.
func (r *waitRegistry) startWatchLocked(s *Store, slot *waitSlot, retry bool) <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	slot.state, slot.ready, slot.retry, slot.cancel = watchPending, ready, retry, cancel
	if r.closed {
		cancel()
	}
	go func() {
		t := time.AfterFunc(s.cfg.opTimeout, cancel)
		ch, err := s.WatchLease(ctx, slot.key.scope, slot.key.resource)
		late := !t.Stop()
		r.mu.Lock()
		defer r.mu.Unlock()
		defer close(ready)
		switch {
		case slot.gone || r.closed:
			cancel() // nobody waits any more
		case err == nil && !late:
			slot.state = watchActive
			go r.forward(ctx, slot, ch)
		case CodeOf(err) == contract.Unimplemented:
			slot.state = watchUnsupported
			cancel()
			slot.cancel = nil
		default:
			slot.state = watchFailed
			slot.retryAt = time.Now().Add(waitFloorMax)
			cancel()
			slot.cancel = nil
		}
	}()
	return ready
}

// forward passes the signals of slot's watch to the heads of its queues
// until the watch ends.
func (r *waitRegistry) forward(ctx context.Context, slot *waitSlot, ch <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			r.mu.Lock()
			slot.wakeLocked(waitForLease)
			slot.wakeLocked(waitForPermit)
			r.mu.Unlock()
		}
	}
}

// wakeLocked wakes the head of one queue of the slot.
func (slot *waitSlot) wakeLocked(kind waitKind) {
	if q := slot.queues[kind]; len(q) > 0 {
		notify(q[0].wake)
	}
}

// changed wakes this Store's waiters for the lease on (scope, resource),
// which the Store itself may just have freed: WaitLease's queue on it, or,
// for a permit, WaitPermit's queue on its semaphore.
func (r *waitRegistry) changed(scope Scope, resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if base, _, ok := contract.SplitPermit(resource); ok {
		if slot := r.slots[slotKey{scope, base}]; slot != nil {
			slot.wakeLocked(waitForPermit)
		}
		return
	}
	if slot := r.slots[slotKey{scope, resource}]; slot != nil {
		slot.wakeLocked(waitForLease)
	}
}

// changedAll wakes the head of every queue (after a Cleanup that deleted
// leases, which does not say which).
func (r *waitRegistry) changedAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, slot := range r.slots {
		slot.wakeLocked(waitForLease)
		slot.wakeLocked(waitForPermit)
	}
}

// close ends every watch; the waiters see the Store's done channel.
func (r *waitRegistry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, slot := range r.slots {
		if slot.cancel != nil {
			slot.cancel()
			slot.cancel = nil
		}
	}
}
