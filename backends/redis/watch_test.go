package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// signalWithin is how long a test waits for a signal that must come.
const signalWithin = 5 * time.Second

func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(signalWithin):
		t.Fatalf("no signal within %v after %s", signalWithin, what)
	}
}

func noSignal(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("a signal after %s", what)
	case <-time.After(d):
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// TestWatchLease: a watch set by one client is signalled by another
// client's grant, release, takeover, DeleteRecord and Cleanup of the
// lease and of any permit of it, and not by another resource's changes;
// when its context ends the backend drops it.
func TestWatchLease(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			clock := conformance.NewManualClock()
			bs := sharedBackends(t, clock, c[0], c[1])
			w, a := bs[0], bs[1]
			const scope = contract.Scope("tenant 1/ü")
			wctx, stop := context.WithCancel(ctx)
			ch, err := w.WatchLease(wctx, scope, "R")
			if err != nil {
				t.Fatal(err)
			}
			other, err := w.WatchLease(wctx, scope, "S")
			if err != nil {
				t.Fatal(err)
			}
			step := func(what string, f func() error) {
				t.Helper()
				drain(ch)
				if err := f(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				waitSignal(t, ch, what)
			}
			var l contract.Lease
			step("a grant", func() (err error) {
				l, err = a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute})
				return err
			})
			step("a release", func() error { _, err := a.ReleaseLease(ctx, l); return err })
			var p contract.Lease
			step("a permit's grant", func() (err error) {
				p, err = a.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute, Permits: 2})
				return err
			})
			step("a permit's release", func() error { _, err := a.ReleaseLease(ctx, p); return err })
			step("a grant of a permit by AcquireLease", func() (err error) {
				_, err = a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R#2", Owner: "a", TTL: time.Minute})
				return err
			})
			step("DeleteRecord of a permit", func() error {
				ok, err := a.DeleteRecord(ctx, contract.KindLease, scope, "R#2")
				if err == nil && !ok {
					err = fmt.Errorf("nothing deleted")
				}
				return err
			})
			step("a grant", func() (err error) {
				_, err = a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute})
				return err
			})
			clock.Advance(time.Minute + a.ClockTolerance() + time.Second)
			step("a takeover", func() (err error) {
				_, err = a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "b", TTL: time.Minute})
				return err
			})
			clock.Advance(time.Minute + a.ClockTolerance() + time.Second)
			step("Cleanup", func() error {
				r, err := a.Cleanup(ctx, contract.CleanupRequest{Limit: 100})
				if err == nil && r.Leases != 1 {
					err = fmt.Errorf("cleanup deleted %d leases", r.Leases)
				}
				return err
			})
			noSignal(t, other, 200*time.Millisecond, "changes of another resource")

			// A watch of a permit hears its permit.
			pch, err := w.WatchLease(wctx, scope, "R#1")
			if err != nil {
				t.Fatal(err)
			}
			drain(pch)
			if _, err := a.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute, Permits: 2}); err != nil {
				t.Fatal(err)
			}
			waitSignal(t, pch, "a grant of the watched permit")

			// The watch ends with its context: subscription and marks go.
			stop()
			deadline := time.Now().Add(signalWithin)
			for {
				w.sub.mu.Lock()
				n := len(w.sub.chans)
				w.sub.mu.Unlock()
				w.markMu.Lock()
				m := len(w.marks)
				w.markMu.Unlock()
				if n == 0 && m == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the watch's context ended: %d channels, %d marks left", n, m)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestWatchRace: a lease is released while another client starts a
// watch, at random moments before, during and after the release, many
// times. Whenever the watcher, after WatchLease returned, still reads the
// lease held, a signal must follow: a release is never missed.
func TestWatchRace(t *testing.T) {
	rounds := map[string]int{"node": 300, "cluster": 150}
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			bs := sharedBackends(t, nil, c[0], c[1])
			w, a := bs[0], bs[1]
			held, gone := 0, 0
			for i := range rounds[name] {
				scope := contract.Scope("race" + strconv.Itoa(i%7))
				res, watched := "R", "R"
				permit := i%2 == 1
				var l contract.Lease
				var err error
				if permit {
					l, err = a.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: res, Owner: "h", TTL: time.Minute, Permits: 2})
				} else {
					l, err = a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "h", TTL: time.Minute})
				}
				if err != nil {
					t.Fatal(err)
				}
				released := make(chan error, 1)
				go func() {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					ok, err := a.ReleaseLease(ctx, l)
					if err == nil && !ok {
						err = fmt.Errorf("release reported false")
					}
					released <- err
				}()
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				wctx, stop := context.WithCancel(ctx)
				ch, err := w.WatchLease(wctx, scope, watched)
				if err != nil {
					t.Fatal(err)
				}
				g, err := w.GetLease(ctx, scope, l.Resource)
				switch {
				case err == nil && g.Token == l.Token:
					held++
					waitSignal(t, ch, fmt.Sprintf("round %d: the release of a lease read held after the watch began", i))
				case contract.CodeOf(err) == contract.NotFound:
					gone++
				default:
					t.Fatalf("round %d: GetLease %+v %v", i, g, err)
				}
				if err := <-released; err != nil {
					t.Fatal(err)
				}
				stop()
			}
			t.Logf("%d rounds read the lease held after the watch began, %d read it released", held, gone)
			if held == 0 || gone == 0 {
				t.Fatalf("the rounds did not cover both orders: %d held, %d released", held, gone)
			}
		})
	}
}

// TestWatchAcrossClusterNodes: on a 3-master cluster, a watch on one
// client hears grants and releases in scopes on every master (the
// subscriber's connection is on one node; PUBLISH reaches all).
func TestWatchAcrossClusterNodes(t *testing.T) {
	ctx := testCtx(t)
	cl := sharedCluster(t)
	rw, ra := clusterClient(t, cl), clusterClient(t, cl)
	bs := sharedBackends(t, nil, rw, ra)
	w, a := bs[0], bs[1]
	masters := map[string][]contract.Scope{}
	for i := 0; len(masters) < 3 || i < 12; i++ {
		if i > 200 {
			t.Fatalf("scopes on %d masters only", len(masters))
		}
		scope := contract.Scope("n" + strconv.Itoa(i))
		node, err := rw.MasterForKey(ctx, w.base(scope)+"l:R")
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = append(masters[node.Options().Addr], scope)
	}
	for addr, scopes := range masters {
		for _, scope := range scopes {
			ch, err := w.WatchLease(ctx, scope, "R")
			if err != nil {
				t.Fatal(err)
			}
			l, err := a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			waitSignal(t, ch, "a grant in scope "+string(scope)+" on "+addr)
			if _, err := a.ReleaseLease(ctx, l); err != nil {
				t.Fatal(err)
			}
			waitSignal(t, ch, "a release in scope "+string(scope)+" on "+addr)
		}
	}
}

// publishes returns how many PUBLISH commands the node has run.
func publishes(t *testing.T, rdb *goredis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_publish:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, _ := strconv.ParseInt(n, 10, 64)
			return v
		}
	}
	return 0
}

// TestWatchMarks: grants and releases publish only while somebody
// watches (the mark P:{sS}:m:TR); the backend keeps the mark alive while
// it watches; a mark found gone signals the watch (a release may have
// gone unpublished); after the last watch ends the mark expires.
func TestWatchMarks(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Start(t, redistest.Options{AppendFsync: "everysec"})
	rdb := nodeClient(t, srv)
	bs := sharedBackends(t, nil, rdb, nodeClient(t, srv))
	w, a := bs[0], bs[1]
	w.watchMarkTTL = 400 * time.Millisecond // refreshed every 100 ms
	const scope = contract.Scope("s")
	pair := func() {
		t.Helper()
		l, err := a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	before := publishes(t, rdb)
	for range 10 {
		pair()
	}
	if n := publishes(t, rdb) - before; n != 0 {
		t.Fatalf("%d PUBLISH for grants and releases nobody watches", n)
	}

	wctx, stop := context.WithCancel(ctx)
	ch, err := w.WatchLease(wctx, scope, "R#3")
	if err != nil {
		t.Fatal(err)
	}
	mark := w.base(scope) + "m:R"
	// Outlive the mark's TTL several times: the refresh keeps it.
	time.Sleep(time.Second)
	drain(ch)
	before = publishes(t, rdb)
	pair()
	if n := publishes(t, rdb) - before; n != 2 {
		t.Fatalf("%d PUBLISH for a watched grant and release, want 2", n)
	}
	waitSignal(t, ch, "a grant and release")

	// The mark deleted behind the backend's back: the refresh finds it
	// gone, signals, and sets it again.
	drain(ch)
	if err := rdb.Del(ctx, mark).Err(); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ch, "the mark was deleted")
	// The signal may arrive before the refresh has set the mark again:
	// wait for it, within a few refresh periods.
	for set := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := rdb.Exists(ctx, mark).Result()
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(set) {
			t.Fatalf("the mark after a refresh: %d %v", n, err)
		}
	}

	stop()
	deadline := time.Now().Add(signalWithin)
	for {
		n, err := rdb.Exists(ctx, mark).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mark outlived its last watch by far more than its TTL")
		}
		time.Sleep(50 * time.Millisecond)
	}
	before = publishes(t, rdb)
	pair()
	if n := publishes(t, rdb) - before; n != 0 {
		t.Fatalf("%d PUBLISH after the last watch ended and its mark expired", n)
	}
}

// TestWatchAfterPubSubReconnect: the server drops the pub/sub connection
// (CLIENT KILL); go-redis connects again and subscribes again. Every
// watch is signalled (messages of the gap may be lost), and releases
// after the reconnect signal again.
func TestWatchAfterPubSubReconnect(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Start(t, redistest.Options{AppendFsync: "everysec"})
	rdb := nodeClient(t, srv)
	bs := sharedBackends(t, nil, rdb, nodeClient(t, srv))
	w, a := bs[0], bs[1]
	ch, err := w.WatchLease(ctx, "s", "R")
	if err != nil {
		t.Fatal(err)
	}
	drain(ch)
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ch, "the pub/sub connection was killed")
	// Wait for the subscription to be back, then a release signals again.
	deadline := time.Now().Add(signalWithin)
	for {
		n, err := rdb.Do(ctx, "PUBSUB", "NUMSUB", w.base("s")+"h:R").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := n[1].(int64); c == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no subscription after the reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	drain(ch)
	l, err := a.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: "R", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ch, "a grant after the reconnect")
	drain(ch)
	if _, err := a.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ch, "a release after the reconnect")
}

// TestWatchClose: Close signals every watch once; WatchLease on a closed
// backend fails with Closed.
func TestWatchClose(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, sharedNode(t))
	b := sharedBackends(t, nil, rdb)[0]
	ch, err := b.WatchLease(ctx, "s", "R")
	if err != nil {
		t.Fatal(err)
	}
	drain(ch)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ch, "Close")
	if _, err := b.WatchLease(ctx, "s", "R"); contract.CodeOf(err) != contract.Closed {
		t.Fatalf("WatchLease after Close: %v, want Closed", err)
	}
}

// TestWatchManyConcurrent: watches of one resource set and ended
// concurrently (joining and leaving the shared subscription while others
// do) each hear a grant made after they began.
func TestWatchManyConcurrent(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			bs := sharedBackends(t, nil, c[0], c[1])
			w, a := bs[0], bs[1]
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 15 {
						scope := contract.Scope("m" + strconv.Itoa(i%3))
						res := "R" + strconv.Itoa(g)
						wctx, stop := context.WithCancel(ctx)
						ch, err := w.WatchLease(wctx, scope, res)
						if err != nil {
							t.Error(err)
							stop()
							return
						}
						l, err := a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "a", TTL: time.Minute})
						if err != nil {
							t.Error(err)
							stop()
							return
						}
						select {
						case <-ch:
						case <-time.After(signalWithin):
							t.Errorf("watch %d/%d: no signal for a grant", g, i)
						}
						_, _ = a.ReleaseLease(ctx, l)
						stop()
					}
				})
			}
			wg.Wait()
		})
	}
}
