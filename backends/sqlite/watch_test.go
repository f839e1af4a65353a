package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

// signalled reports whether ch holds a signal (waiting up to a second,
// long enough for any in-process signal, which is sent before the write
// returns).
func signalled(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// drain empties ch.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// TestWatchLeaseAcrossBackends: a watch made through one backend is
// signalled by every grant, release, takeover and deletion made through
// another backend on the same file (once it committed: the change is
// visible when the signal arrives); a watch on a plain resource also by
// its permits' changes.
func TestWatchLeaseAcrossBackends(t *testing.T) {
	ctx := t.Context()
	bs, clock, _ := openShared(t, 3)
	w, b, reader := bs[0], bs[1], bs[2]
	onR, err := w.WatchLease(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	onP2, err := w.WatchLease(ctx, "s", "r#2")
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, chs []<-chan struct{}, change func() error, visible func() bool) {
		t.Helper()
		for _, ch := range chs {
			drain(ch)
		}
		if err := change(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i, ch := range chs {
			if !signalled(ch) {
				t.Errorf("%s: watch %d not signalled", what, i)
			}
		}
		if !visible() {
			t.Errorf("%s: not visible to another backend once signalled", what)
		}
	}
	held := func(res string, owner string) func() bool {
		return func() bool { l, err := reader.GetLease(ctx, "s", res); return err == nil && l.Owner == owner }
	}
	gone := func(res string) func() bool {
		return func() bool {
			_, err := reader.GetLease(ctx, "s", res)
			return contract.CodeOf(err) == contract.NotFound
		}
	}
	var l contract.Lease
	acquire := func(res, owner string) func() error {
		return func() (err error) {
			l, err = b.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: res, Owner: owner, TTL: 2 * time.Second})
			return err
		}
	}
	release := func() error {
		ok, err := b.ReleaseLease(ctx, l)
		if err == nil && !ok {
			err = fmt.Errorf("not released")
		}
		return err
	}
	only := func(chs ...<-chan struct{}) []<-chan struct{} { return chs }

	step("grant", only(onR), acquire("r", "o1"), held("r", "o1"))
	step("release", only(onR), release, gone("r"))
	step("grant again", only(onR), acquire("r", "o1"), held("r", "o1"))
	clock.Advance(4 * time.Second)
	step("takeover", only(onR), acquire("r", "o2"), held("r", "o2"))
	step("DeleteRecord", only(onR), func() error {
		_, err := b.DeleteRecord(ctx, contract.KindLease, "s", "r")
		return err
	}, gone("r"))
	step("grant to expire", only(onR), acquire("r", "o3"), held("r", "o3"))
	clock.Advance(4 * time.Second)
	step("Cleanup", only(onR), func() error {
		res, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 10, TerminalAge: time.Hour})
		if err == nil && res.Leases != 1 {
			err = fmt.Errorf("Cleanup deleted %d leases, want 1", res.Leases)
		}
		return err
	}, gone("r"))

	// Permits: a watch on "r" sees every permit; one on "r#2" its own.
	permit := func() error {
		var err error
		l, err = b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "r", Owner: "p", TTL: 2 * time.Second, Permits: 3})
		return err
	}
	step("permit 1", only(onR), permit, held("r#1", "p"))
	step("permit 2", only(onR, onP2), permit, held("r#2", "p"))
	step("release of permit 2", only(onR, onP2), release, gone("r#2"))
	step("permit 2 as a lease", only(onR, onP2), acquire("r#2", "q"), held("r#2", "q"))
	step("DeleteRecord of permit 2", only(onR, onP2), func() error {
		_, err := b.DeleteRecord(ctx, contract.KindLease, "s", "r#2")
		return err
	}, gone("r#2"))
	clock.Advance(4 * time.Second)
	step("takeover of permit 1", only(onR), permit, held("r#1", "p"))
	clock.Advance(4 * time.Second)
	step("Cleanup of permit 1", only(onR), func() error {
		_, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 10, TerminalAge: time.Hour})
		return err
	}, gone("r#1"))
}

// TestWatchLeaseByAnotherPath: backends that open one file by different
// paths (relative, through a symbolic link) see each other's changes.
func TestWatchLeaseByAnotherPath(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "real.db")
	link := filepath.Join(dir, "link.db")
	a, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := os.Symlink(path, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: link})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ch, err := a.WatchLease(ctx, "", "r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if !signalled(ch) {
		t.Error("a grant through a symbolic link did not signal")
	}
}

// TestWatchLeaseDropped: a watch is dropped when its context ends (no
// leak) or its backend closes (with a last signal); WatchLease on a closed
// backend or with an ended context fails.
func TestWatchLeaseDropped(t *testing.T) {
	ctx := t.Context()
	bs, _, _ := openShared(t, 2)
	a, b := bs[0], bs[1]
	for i := range 50 {
		wctx, cancel := context.WithCancel(ctx)
		if _, err := a.WatchLease(wctx, "", fmt.Sprintf("r%d", i%5)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			cancel()
		} else {
			defer cancel()
		}
	}
	waitWatches := func(bk *sqlite.Backend, own, hub int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			o, h := sqlite.WatchesForTest(bk)
			if o == own && h == hub {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("watches: %d own, %d in the hub; want %d and %d", o, h, own, hub)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitWatches(a, 25, 25)
	waitWatches(b, 0, 25)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.WatchLease(ended, "", "r"); contract.CodeOf(err) != contract.Canceled {
		t.Errorf("WatchLease with an ended context: %v, want Canceled", err)
	}
	ch, err := b.WatchLease(ctx, "", "r")
	if err != nil {
		t.Fatal(err)
	}
	waitWatches(b, 1, 26)
	b.Close()
	if !signalled(ch) {
		t.Error("Close left no signal")
	}
	waitWatches(a, 25, 25)
	if _, err := b.WatchLease(ctx, "", "r"); contract.CodeOf(err) != contract.Closed {
		t.Errorf("WatchLease after Close: %v, want Closed", err)
	}
}

// TestWatchLeaseNeverMissesARelease: a waiter that watches, then reads the
// lease and waits for a signal while it is held, is woken by its release
// (through another backend on the file) whether the watch comes before,
// during or after the release: many rounds with random timing, and no
// polling to hide a missed signal.
func TestWatchLeaseNeverMissesARelease(t *testing.T) {
	ctx := t.Context()
	bs, clock, _ := openShared(t, 3)
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := range rounds {
		res := fmt.Sprintf("r%d", round%7)
		kind := round % 4
		var l contract.Lease
		var err error
		watched := res
		if kind == 3 {
			l, err = bs[1].AcquirePermit(ctx, contract.PermitRequest{Resource: res, Owner: "o", TTL: 2 * time.Second, Permits: 1})
		} else {
			l, err = bs[1].AcquireLease(ctx, contract.LeaseRequest{Resource: res, Owner: "o", TTL: 2 * time.Second})
		}
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wait := rand.N(300 * time.Microsecond)
		delay := rand.N(300 * time.Microsecond)
		wg.Go(func() {
			time.Sleep(wait)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			ch, err := bs[0].WatchLease(wctx, "", watched)
			if err != nil {
				t.Error(err)
				return
			}
			for {
				g, err := bs[0].GetLease(ctx, "", l.Resource)
				if contract.CodeOf(err) == contract.NotFound {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if g.Token != l.Token {
					t.Errorf("round %d: unexpected lease %+v", round, g)
					return
				}
				select {
				case <-ch:
				case <-wctx.Done():
					t.Errorf("round %d (kind %d): the waiter missed the release", round, kind)
					return
				}
			}
		})
		time.Sleep(delay)
		switch kind {
		case 0, 3:
			_, err = bs[2].ReleaseLease(ctx, l)
		case 1:
			_, err = bs[2].DeleteRecord(ctx, contract.KindLease, "", l.Resource)
		case 2:
			clock.Advance(4 * time.Second)
			_, err = bs[2].Cleanup(ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour})
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// TestWatchLeaseInMemory: an in-memory database's backend signals its own
// watches.
func TestWatchLeaseInMemory(t *testing.T) {
	ctx := t.Context()
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: sqlite.MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ch, err := b.WatchLease(ctx, "", "r")
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquirePermit(ctx, contract.PermitRequest{Resource: "r", Owner: "o", TTL: time.Minute, Permits: 2})
	if err != nil || !signalled(ch) {
		t.Fatalf("grant of %+v (%v) did not signal", l, err)
	}
	if ok, err := b.ReleaseLease(ctx, l); !ok || err != nil || !signalled(ch) {
		t.Fatalf("release (%v, %v) did not signal", ok, err)
	}
}
