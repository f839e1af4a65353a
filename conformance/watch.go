package conformance

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Watching leases (Store.WatchLease, the optional LeaseWatcher). After
// WatchLease returns, every grant, release or deletion of the lease, or of
// any permit of a plain resource, made through any client, leaves a
// signal. Signals may be spurious, so no scenario asserts that none came;
// they wait for one with signalGuard, a bound for correctness, not speed.
func watchScenarios() []scenario {
	return []scenario{
		{"ReleaseSignals", 0, testWatchReleaseSignals},
		{"GrantSignals", 0, testWatchGrantSignals},
		{"DeleteRecordSignals", 0, testWatchDeleteRecordSignals},
		{"CleanupSignals", needClock, testWatchCleanupSignals},
		{"TakeoverSignals", needClock, testWatchTakeoverSignals},
		{"PermitChangesSignalTheResource", 0, testWatchPermitChangesSignalTheResource},
		{"ChangesThroughAnotherClientSignal", 0, testWatchAnotherClient},
		{"WatchEndsWithItsContext", 0, testWatchEndsWithItsContext},
		{"NeverMissesARelease", 0, testWatchNeverMissesARelease},
	}
}

// signalGuard bounds the wait for a signal that must come. A correct
// backend signals in milliseconds; this is about correctness.
const signalGuard = 10 * time.Second

// watch starts a watch through s that lasts until the scenario ends,
// skipping the scenario when the backend has no LeaseWatcher.
func (e *env) watch(s *durable.Store, scope contract.Scope, resource string) <-chan struct{} {
	e.t.Helper()
	ch, err := s.WatchLease(e.ctx, scope, resource)
	if contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend does not implement contract.LeaseWatcher (optional): Store.WatchLease returns Unimplemented, and waiting for a lease polls")
	}
	noErr(e.t, err, fmt.Sprintf("WatchLease(%q, %q)", scope, resource))
	if ch == nil {
		e.t.Fatalf("WatchLease(%q, %q) returned a nil channel and no error", scope, resource)
	}
	return ch
}

// drain discards a pending signal (a spurious one, or one of an earlier
// change).
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// awaitSignal waits up to signalGuard for a signal on ch.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) bool {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Errorf("the watch's channel was closed instead of signalling %s", what)
			return false
		}
		return true
	case <-time.After(signalGuard):
		t.Errorf("no signal within %v after %s", signalGuard, what)
		return false
	}
}

func testWatchReleaseSignals(t *testing.T, e *env) {
	s := e.open()
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	ch := e.watch(s, "", "res-1")
	for i := range 3 {
		drain(ch)
		release(t, e, s, l)
		awaitSignal(t, ch, fmt.Sprintf("ReleaseLease (round %d)", i))
		l = mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	}
	// In a scope, the same.
	req := e.leaseReq("res-1", "owner-1")
	req.Scope = "scope-a"
	l = mustAcquire(t, e.ctx, s, req)
	sch := e.watch(s, "scope-a", "res-1")
	drain(sch)
	release(t, e, s, l)
	awaitSignal(t, sch, "ReleaseLease in a scope")
}

func testWatchGrantSignals(t *testing.T, e *env) {
	s := e.open()
	ch := e.watch(s, "", "res-1")
	drain(ch)
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	awaitSignal(t, ch, "AcquireLease of a free lease")
	release(t, e, s, l)
	awaitSignal(t, ch, "ReleaseLease")
	drain(ch)
	mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-2"))
	awaitSignal(t, ch, "AcquireLease after a release")
}

func testWatchDeleteRecordSignals(t *testing.T, e *env) {
	s := e.open()
	if _, err := s.DeleteRecord(e.ctx, contract.KindWorkflow, "", "wf-none"); contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend does not implement contract.RecordDeleter (optional): Store.DeleteRecord returns Unimplemented")
	}
	mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	ch := e.watch(s, "", "res-1")
	drain(ch)
	found, err := s.DeleteRecord(e.ctx, contract.KindLease, "", "res-1")
	noErr(t, err, "DeleteRecord")
	if !found {
		t.Fatalf("DeleteRecord of the held lease = false")
	}
	awaitSignal(t, ch, "DeleteRecord of the lease")
}

func testWatchCleanupSignals(t *testing.T, e *env) {
	s := e.open()
	mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	ch := e.watch(s, "", "res-1")
	e.advance(e.pastTakeover())
	drain(ch)
	cleanupLeases(t, e, s, 1)
	awaitSignal(t, ch, "Cleanup deleted the expired lease")
}

func testWatchTakeoverSignals(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	ch := e.watch(s, "", "res-1")
	e.advance(e.pastTakeover())
	drain(ch)
	mustAcquire(t, e.ctx, other, e.leaseReq("res-1", "owner-2"))
	awaitSignal(t, ch, "a takeover of the expired lease")
}

func testWatchPermitChangesSignalTheResource(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	base := e.watch(s, "", "sem")
	one := e.watch(s, "", contract.PermitResource("sem", 2))
	drain(base)
	a := mustPermit(t, e, other, e.permitReq("sem", "owner-1", 3))
	awaitSignal(t, base, "AcquirePermit granted sem#1 (watching sem)")
	drain(base)
	drain(one)
	b := mustPermit(t, e, other, e.permitReq("sem", "owner-2", 3))
	awaitSignal(t, base, "AcquirePermit granted sem#2 (watching sem)")
	awaitSignal(t, one, "AcquirePermit granted sem#2 (watching sem#2)")
	drain(base)
	drain(one)
	release(t, e, other, b)
	awaitSignal(t, base, "ReleaseLease of sem#2 (watching sem)")
	awaitSignal(t, one, "ReleaseLease of sem#2 (watching sem#2)")
	drain(base)
	release(t, e, other, a)
	awaitSignal(t, base, "ReleaseLease of sem#1 (watching sem)")
	if _, err := s.DeleteRecord(e.ctx, contract.KindLease, "", "res-none"); contract.CodeOf(err) != contract.Unimplemented {
		c := mustPermit(t, e, other, e.permitReq("sem", "owner-3", 3))
		drain(base)
		found, err := other.DeleteRecord(e.ctx, contract.KindLease, "", c.Resource)
		noErr(t, err, "DeleteRecord of a permit")
		if !found {
			t.Errorf("DeleteRecord of the held %s = false", c.Resource)
		}
		awaitSignal(t, base, "DeleteRecord of "+c.Resource+" (watching sem)")
	}
}

func testWatchAnotherClient(t *testing.T, e *env) {
	stores := e.openN(3)
	ch := e.watch(stores[0], "", "res-1")
	drain(ch)
	l := mustAcquire(t, e.ctx, stores[1], e.leaseReq("res-1", "owner-1"))
	awaitSignal(t, ch, "AcquireLease through another client")
	drain(ch)
	release(t, e, stores[2], l)
	awaitSignal(t, ch, "ReleaseLease through a third client")
	drain(ch)
	p := mustPermit(t, e, stores[1], e.permitReq("res-1", "owner-2", 2))
	awaitSignal(t, ch, "AcquirePermit through another client")
	drain(ch)
	release(t, e, stores[2], p)
	awaitSignal(t, ch, "ReleaseLease of a permit through a third client")
}

func testWatchEndsWithItsContext(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	ctx, cancel := context.WithCancel(e.ctx)
	ch, err := s.WatchLease(ctx, "", "res-1")
	if contract.CodeOf(err) == contract.Unimplemented {
		cancel()
		e.skipf("the backend does not implement contract.LeaseWatcher (optional): Store.WatchLease returns Unimplemented, and waiting for a lease polls")
	}
	noErr(t, err, "WatchLease")
	cancel()
	// Changes after the watch ended: nothing breaks, the channel is not
	// closed (a pending or spurious signal is allowed).
	for i := range 20 {
		l := mustAcquire(t, e.ctx, other, e.leaseReq("res-1", fmt.Sprintf("owner-%d", i)))
		release(t, e, other, l)
	}
	for range 2 {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("the channel of a watch whose context ended was closed; the contract says it is dropped, not closed")
			}
		default:
		}
	}
	// Watches that start and end many times do not disturb a live one.
	for range 50 {
		ctx, cancel := context.WithCancel(e.ctx)
		if _, err := s.WatchLease(ctx, "", "res-1"); err != nil {
			cancel()
			t.Fatalf("WatchLease: %v", err)
		}
		cancel()
	}
	live := e.watch(other, "", "res-1")
	drain(live)
	mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-last"))
	awaitSignal(t, live, "AcquireLease after other watches ended")
}

// testWatchNeverMissesARelease races the release with the WatchLease call
// round after round; whenever the release began after WatchLease returned,
// the signal must come. The first rounds release only after WatchLease
// returned, so that every run checks some.
func testWatchNeverMissesARelease(t *testing.T, e *env) {
	watcher, holder := e.open(), e.open()
	const rounds = 60
	checked := 0
	for i := range rounds {
		res := fmt.Sprintf("res-%d", i)
		l := mustAcquire(t, e.ctx, holder, e.leaseReq(res, "owner-1"))
		var seq atomic.Int64
		var watchedAt, releasedAt int64
		var ch <-chan struct{}
		var werr, rerr error
		var ok bool
		ctx, cancel := context.WithCancel(e.ctx)
		if i < 5 {
			ch, werr = watcher.WatchLease(ctx, "", res)
			watchedAt = seq.Add(1)
			releasedAt = seq.Add(1)
			ok, rerr = holder.ReleaseLease(e.ctx, l)
		} else {
			race(2, func(j int) {
				if j == 0 {
					ch, werr = watcher.WatchLease(ctx, "", res)
					watchedAt = seq.Add(1)
					return
				}
				if i%2 == 0 {
					time.Sleep(time.Duration(i%7) * 50 * time.Microsecond)
				}
				releasedAt = seq.Add(1)
				ok, rerr = holder.ReleaseLease(e.ctx, l)
			})
		}
		if contract.CodeOf(werr) == contract.Unimplemented {
			cancel()
			e.skipf("the backend does not implement contract.LeaseWatcher (optional): Store.WatchLease returns Unimplemented, and waiting for a lease polls")
		}
		noErr(t, werr, "WatchLease")
		noErr(t, rerr, "ReleaseLease")
		if !ok {
			cancel()
			t.Fatalf("round %d: ReleaseLease = false for the holder", i)
		}
		if releasedAt > watchedAt {
			checked++
			if !awaitSignal(t, ch, fmt.Sprintf("round %d: a ReleaseLease that began after WatchLease returned", i)) {
				cancel()
				return
			}
		}
		cancel()
	}
	t.Logf("%d of %d rounds released after WatchLease returned, and were signalled", checked, rounds)
}
