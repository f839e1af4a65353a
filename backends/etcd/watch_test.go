package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// signalWait is how long a test waits for a signal that must come (a
// bound on a hang, not a performance figure), quiet how long it watches
// for one that should not.
const (
	signalWait = 10 * time.Second
	quiet      = 300 * time.Millisecond
)

func mustSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(signalWait):
		t.Fatalf("no signal after %s", what)
	}
}

// noSignal fails if a signal arrives within quiet. A signal the contract
// allows (spurious) would fail it too: it is used only where this backend
// promises silence.
func noSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("a signal after %s", what)
	case <-time.After(quiet):
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// waitWatches waits until the backend runs n lease watches.
func waitWatches(t *testing.T, be *Backend, n int64) {
	t.Helper()
	deadline := time.Now().Add(signalWait)
	for be.watches.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d lease watches running, want %d", be.watches.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchLease watches leases through one etcd client and changes them
// through another (as another process would): grants, releases,
// deletions, cleanups, takeovers and busy markers ending on etcd's timer
// signal, for the lease itself and, on a plain resource, for its permits;
// renewals and other resources' changes do not; the watch ends with its
// context or the backend.
func TestWatchLease(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	cliW, cliO := c.client(t), c.client(t)
	open := func(cli *clientv3.Client) (*Backend, *durable.Store) {
		be, err := NewBackend(cli, Options{Prefix: "watch"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := durable.New(be)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return be, s
	}
	wb, ws := open(cliW)
	_, other := open(cliO)
	const ttl = 30 * time.Second
	acquire := func(res string) contract.Lease {
		t.Helper()
		l, err := other.AcquireLease(ctx, contract.LeaseRequest{Scope: "sc", Resource: res, Owner: "o", TTL: ttl, Value: "addr"})
		if err != nil {
			t.Fatalf("AcquireLease(%s): %v", res, err)
		}
		return l
	}
	release := func(l contract.Lease) {
		t.Helper()
		if ok, err := other.ReleaseLease(ctx, l); err != nil || !ok {
			t.Fatalf("ReleaseLease(%s) = %v, %v", l.Resource, ok, err)
		}
	}
	watch := func(ctx context.Context, res string) <-chan struct{} {
		t.Helper()
		ch, err := ws.WatchLease(ctx, "sc", res)
		if err != nil {
			t.Fatalf("WatchLease(%s): %v", res, err)
		}
		return ch
	}

	t.Run("Lease", func(t *testing.T) {
		ch := watch(ctx, "R")
		noSignal(t, ch, "nothing happened")
		l := acquire("R")
		mustSignal(t, ch, "a grant")
		l, err := other.RenewLease(ctx, l, ttl)
		if err != nil {
			t.Fatal(err)
		}
		noSignal(t, ch, "a renewal")
		// Other resources, and other scopes, are not watched.
		for _, res := range []string{"R2", "RX", "R-1", "R.1", "R:1", "Q", "S"} {
			release(acquire(res))
		}
		if _, err := other.AcquireLease(ctx, contract.LeaseRequest{Scope: "other", Resource: "R", Owner: "o", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		noSignal(t, ch, "other resources' changes")
		release(l)
		mustSignal(t, ch, "a release")
		// DeleteRecord.
		acquire("R")
		mustSignal(t, ch, "a grant")
		if ok, err := other.DeleteRecord(ctx, contract.KindLease, "sc", "R"); err != nil || !ok {
			t.Fatal(ok, err)
		}
		mustSignal(t, ch, "DeleteRecord")
		// The busy marker ending on etcd's timer (the lease is free to
		// take over), then Cleanup, then a takeover.
		acquire("R")
		mustSignal(t, ch, "a grant")
		revokeMarker(t, cliO, wb.key(nsLeaseHold, "sc", "R"))
		noSignal(t, ch, "the holder key's end")
		revokeMarker(t, cliO, wb.key(nsLeaseBusy, "sc", "R"))
		mustSignal(t, ch, "the busy marker's end")
		res, err := other.Cleanup(ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour})
		if err != nil || res.Leases == 0 {
			t.Fatalf("Cleanup = %+v, %v", res, err)
		}
		mustSignal(t, ch, "Cleanup")
		acquire("R")
		mustSignal(t, ch, "a grant")
		revokeMarker(t, cliO, wb.key(nsLeaseBusy, "sc", "R"))
		mustSignal(t, ch, "the busy marker's end")
		acquire("R")
		mustSignal(t, ch, "a takeover")
	})

	t.Run("Permits", func(t *testing.T) {
		ch := watch(ctx, "P")
		one := watch(ctx, "P#2")
		req := contract.PermitRequest{Scope: "sc", Resource: "P", Owner: "o", TTL: ttl, Permits: 3}
		p1, err := other.AcquirePermit(ctx, req)
		if err != nil || p1.Resource != "P#1" {
			t.Fatal(p1, err)
		}
		mustSignal(t, ch, "a permit's grant")
		noSignal(t, one, "another permit's grant")
		p2, err := other.AcquirePermit(ctx, req)
		if err != nil || p2.Resource != "P#2" {
			t.Fatal(p2, err)
		}
		mustSignal(t, ch, "a permit's grant")
		mustSignal(t, one, "its permit's grant")
		if _, err := other.RenewLease(ctx, p2, ttl); err != nil {
			t.Fatal(err)
		}
		noSignal(t, ch, "a permit's renewal")
		release(p1)
		mustSignal(t, ch, "a permit's release")
		noSignal(t, one, "another permit's release")
		release(p2)
		mustSignal(t, ch, "a permit's release")
		mustSignal(t, one, "its permit's release")
		// Permits of other semaphores, and the plain lease of a permit's
		// semaphore, are not watched by a permit's watch.
		for _, sem := range []string{"PP", "Q", "P2"} {
			l, err := other.AcquirePermit(ctx, contract.PermitRequest{Scope: "sc", Resource: sem, Owner: "o", TTL: ttl, Permits: 2})
			if err != nil {
				t.Fatal(err)
			}
			release(l)
		}
		noSignal(t, ch, "other semaphores' permits")
		release(acquire("P"))
		mustSignal(t, ch, "the plain lease")
		noSignal(t, one, "the plain lease of its semaphore")
	})

	t.Run("Ends", func(t *testing.T) {
		waitWatches(t, wb, 3) // the subtests' watches, on ctx
		before := runtime.NumGoroutine()
		wctx, cancel := context.WithCancel(ctx)
		var chs []<-chan struct{}
		for i := range 20 {
			chs = append(chs, watch(wctx, fmt.Sprintf("E%d", i)))
		}
		waitWatches(t, wb, 23)
		cancel()
		waitWatches(t, wb, 3)
		for _, ch := range chs {
			drain(ch)
		}
		for i := range 20 {
			release(acquire(fmt.Sprintf("E%d", i)))
		}
		time.Sleep(quiet)
		for i, ch := range chs {
			select {
			case _, ok := <-ch:
				t.Fatalf("watch %d: a signal (or a close: %v) after its context ended", i, !ok)
			default:
			}
		}
		deadline := time.Now().Add(signalWait)
		for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before+2 {
			t.Errorf("%d goroutines after the watches ended, %d before", n, before)
		}
		// Close ends the rest.
		be, err := NewBackend(cliW, Options{Prefix: "watch"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := be.WatchLease(context.Background(), "sc", fmt.Sprintf("C%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		waitWatches(t, be, 3)
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
		if n := be.watches.Load(); n != 0 {
			t.Errorf("%d watches after Close", n)
		}
		if _, err := be.WatchLease(ctx, "sc", "C"); contract.CodeOf(err) != contract.Closed {
			t.Errorf("WatchLease after Close = %v, want Closed", err)
		}
	})
}

// TestWatchLeaseRace releases a lease, or a permit of a watched
// semaphore, at a random moment before, during or after WatchLease, many
// times, with the waiter's protocol: watch, then read; if the read still
// finds the lease held, the release comes after the watch was registered
// and must signal.
func TestWatchLeaseRace(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	wb, err := NewBackend(c.client(t), Options{Prefix: "watch-race"})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	ob, err := NewBackend(c.client(t), Options{Prefix: "watch-race"})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	const ttl = 30 * time.Second
	held, signalled := 0, 0
	for round := range 150 {
		permit := round%2 == 1
		var l contract.Lease
		if permit {
			l, err = ob.AcquirePermit(ctx, contract.PermitRequest{Resource: "R", Owner: "o", TTL: ttl, Permits: 2})
		} else {
			l, err = ob.AcquireLease(ctx, contract.LeaseRequest{Resource: "R", Owner: "o", TTL: ttl})
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		released := make(chan error, 1)
		release := func() {
			ok, err := ob.ReleaseLease(ctx, l)
			if err == nil && !ok {
				err = fmt.Errorf("not released")
			}
			released <- err
		}
		// Every third round releases at once after WatchLease returns;
		// the others at a random moment from its start.
		after := round%3 == 2
		delay := time.Duration(rand.IntN(3000)) * time.Microsecond
		if !after {
			go func() {
				time.Sleep(delay)
				release()
			}()
		}
		wctx, cancel := context.WithCancel(ctx)
		ch, err := wb.WatchLease(wctx, "", "R")
		if err != nil {
			t.Fatal(err)
		}
		if after {
			release()
		}
		_, gerr := wb.GetLease(ctx, "", l.Resource)
		if after {
			gerr = nil // released after the watch: it must signal
		}
		switch {
		case gerr == nil:
			held++
			select {
			case <-ch:
				signalled++
			case <-time.After(signalWait):
				t.Fatalf("round %d (%s, release at once after WatchLease: %v, else after %v from its start): the lease was held after WatchLease returned, and its release never signalled", round, l.Resource, after, delay)
			}
		case contract.CodeOf(gerr) != contract.NotFound:
			t.Fatal(gerr)
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	t.Logf("%d of 150 rounds released after the watch (each signalled: %d)", held, signalled)
	if held == 0 {
		t.Error("no round released after the watch: the race was not exercised")
	}
	waitWatches(t, wb, 0)
}

// TestWatchLeaseRewatch starts a lease watch at a revision etcd has
// compacted away (as a watch that fell behind would find it): the watch
// signals, watches again from the compaction, and still reports later
// changes.
func TestWatchLeaseRewatch(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	cli := c.client(t)
	be, err := NewBackend(cli, Options{Prefix: "rewatch"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	r, err := cli.Put(ctx, "rewatch/x", "1")
	if err != nil {
		t.Fatal(err)
	}
	old := r.Header.Revision
	for range 5 {
		if _, err := cli.Put(ctx, "rewatch/x", "2"); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := cli.Put(ctx, "rewatch/x", "3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	ch, err := be.startLeaseWatch(ctx, be.leaseWatchRanges("", "R", old))
	if err != nil {
		t.Fatal(err)
	}
	mustSignal(t, ch, "starting at a compacted revision")
	time.Sleep(2 * rewatchPause)
	drain(ch)
	l, err := be.AcquireLease(ctx, contract.LeaseRequest{Resource: "R", Owner: "o", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustSignal(t, ch, "a grant after watching again")
	if _, err := be.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	mustSignal(t, ch, "a release after watching again")
}

// TestWatchLeaseLeaderLoss takes the etcd cluster's quorum away under a
// lease watch: etcd ends the watch (it requires a leader), which signals;
// once the quorum is back the watch is watching again and a release
// through another client signals.
func TestWatchLeaseLeaderLoss(t *testing.T) {
	c := startCluster(t, 3)
	ctx := t.Context()
	wb, err := NewBackend(c.client(t), Options{Prefix: "watch-loss"})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	ob, err := NewBackend(c.client(t), Options{Prefix: "watch-loss"})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	l, err := ob.AcquireLease(ctx, contract.LeaseRequest{Resource: "R", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := wb.WatchLease(ctx, "", "R")
	if err != nil {
		t.Fatal(err)
	}
	c.stop(1, true)
	c.stop(2, true)
	select {
	case <-ch: // etcd ended the watch
	case <-time.After(30 * time.Second):
		t.Fatal("no signal after the quorum was lost")
	}
	c.restart(t, 1)
	c.restart(t, 2)
	// Watching again: failed attempts signal, spuriously, until one holds.
	for stable := false; !stable; {
		select {
		case <-ch:
		case <-time.After(quiet):
			stable = true
		}
	}
	// The quorum may still be settling: retry until a release goes
	// through (false: an earlier attempt applied).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := ob.ReleaseLease(ctx, l)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := ob.GetLease(ctx, "", "R"); contract.CodeOf(err) != contract.NotFound {
		t.Fatalf("GetLease after the release = %v, want NotFound", err)
	}
	mustSignal(t, ch, "a release after the quorum came back")
	if n := wb.watches.Load(); n != 1 {
		t.Errorf("%d lease watches, want 1", n)
	}
}
