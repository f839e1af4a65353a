package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// WatchLease's tests. A watcher that listens has its polling floor set to
// an hour (noPoll), so that a signal can only come from a NOTIFY (or the
// one wake-up when its LISTEN connection comes up): a watch that misses
// its notification leaves its channel empty and fails the test.

// noPoll sets b's polling floor to an hour; call it before b's first
// WaitKey or WatchLease.
func noPoll(b *Backend) { b.hub.pollMin, b.hub.pollMax = time.Hour, time.Hour }

// drain empties ch.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// signaled waits up to d for a signal on ch.
func signaled(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// watchOrFail watches (scope "s", resource) on b until t ends.
func watchOrFail(t *testing.T, b *Backend, resource string) <-chan struct{} {
	t.Helper()
	ch, err := b.WatchLease(t.Context(), "s", resource)
	if err != nil {
		t.Fatalf("WatchLease(%s) = %v", resource, err)
	}
	return ch
}

// settle waits until a listening watcher's LISTEN connection is up, then
// empties chans of the wake-up that brings.
func settle(t *testing.T, w *Backend, chans ...<-chan struct{}) {
	t.Helper()
	if w.listen {
		awaitListener(t, w, 0)
		time.Sleep(50 * time.Millisecond)
	}
	for _, ch := range chans {
		drain(ch)
	}
}

// watchSignals runs every kind of change of a lease and of a semaphore's
// permits on changer and checks that watcher's watches on the lease, the
// semaphore and one permit are each signaled within d. expire makes a
// lease granted for ttl expire by more than the tolerance.
func watchSignals(t *testing.T, watcher, changer *Backend, expire func(ttl time.Duration), d time.Duration) {
	ctx := t.Context()
	const short = 200 * time.Millisecond
	chR, chS, chP := watchOrFail(t, watcher, "r"), watchOrFail(t, watcher, "sem"), watchOrFail(t, watcher, "sem#2")
	settle(t, watcher, chR, chS, chP)
	step := func(name string, do func(), chans ...<-chan struct{}) {
		t.Helper()
		for _, ch := range []<-chan struct{}{chR, chS, chP} {
			drain(ch)
		}
		do()
		for _, ch := range chans {
			if !signaled(ch, d) {
				t.Fatalf("%s: no signal within %v", name, d)
			}
		}
	}
	acquire := func(res, owner string, ttl time.Duration) contract.Lease {
		t.Helper()
		l, err := changer.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: res, Owner: owner, TTL: ttl, Value: owner})
		if err != nil {
			t.Fatalf("AcquireLease(%s) = %v", res, err)
		}
		return l
	}
	release := func(l contract.Lease) {
		t.Helper()
		if ok, err := changer.ReleaseLease(ctx, l); !ok || err != nil {
			t.Fatalf("ReleaseLease(%s) = %v, %v", l.Resource, ok, err)
		}
	}
	permit := func(want int, ttl time.Duration) contract.Lease {
		t.Helper()
		l, err := changer.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "sem", Owner: "p", TTL: ttl, Permits: 3})
		if err != nil || l.Resource != contract.PermitResource("sem", want) {
			t.Fatalf("AcquirePermit = %+v, %v; want permit %d", l, err, want)
		}
		return l
	}
	deleteLease := func(res string) {
		t.Helper()
		if found, err := changer.DeleteRecord(ctx, contract.KindLease, "s", res); !found || err != nil {
			t.Fatalf("DeleteRecord(%s) = %v, %v", res, found, err)
		}
	}
	cleanup := func() {
		t.Helper()
		if res, err := changer.Cleanup(ctx, contract.CleanupRequest{Limit: 1000}); err != nil || res.Leases == 0 {
			t.Fatalf("Cleanup = %+v, %v", res, err)
		}
	}

	var l contract.Lease
	step("a grant", func() { l = acquire("r", "a", time.Hour) }, chR)
	step("a renewal and a release", func() {
		if _, err := changer.RenewLease(ctx, l, time.Hour); err != nil {
			t.Fatal(err)
		}
		release(l)
	}, chR)
	step("a grant over the released lease", func() { l = acquire("r", "b", short) }, chR)
	step("a takeover of the expired lease", func() { expire(short); l = acquire("r", "c", short) }, chR)
	step("the expired lease deleted by Cleanup", func() { expire(short); cleanup() }, chR)
	step("a grant after Cleanup", func() { l = acquire("r", "d", time.Hour) }, chR)
	step("DeleteRecord", func() { deleteLease("r") }, chR)
	step("a grant after DeleteRecord", func() { l = acquire("r", "e", time.Hour) }, chR)

	var p1 contract.Lease
	step("permit 1", func() { p1 = permit(1, time.Hour) }, chS)
	step("permit 2", func() { permit(2, short) }, chS, chP)
	step("permit 3 through AcquireLease", func() { acquire("sem#3", "q", time.Hour) }, chS)
	step("permit 1 released", func() { release(p1) }, chS)
	step("permit 1 again", func() { p1 = permit(1, time.Hour) }, chS)
	step("permit 2 taken over once expired", func() { expire(short); permit(2, time.Hour) }, chS, chP)
	step("permit 2 deleted", func() { deleteLease("sem#2") }, chS, chP)
	step("permit 2 granted after its deletion", func() { permit(2, short) }, chS, chP)
	step("permit 2 deleted by Cleanup", func() { expire(short); cleanup() }, chS, chP)
	step("a plain lease on the semaphore's resource", func() { acquire("sem", "s", time.Hour) }, chS)
}

// TestWatchLeaseSignalsEveryChange: a watch on one pool is signaled by
// every grant, release, takeover, DeleteRecord and Cleanup made through
// another pool, of the lease it watches, of every permit of the semaphore
// it watches, and of the one permit it watches: through NOTIFY on every
// client library's listener (pgx, lib/pq and pgx's stdlib from a DSN and on
// a *sql.DB), and by polling without LISTEN (listen=off, and through
// PgBouncer in transaction mode).
func TestWatchLeaseSignalsEveryChange(t *testing.T) {
	for _, c := range []struct {
		client testClient
		listen ListenMode
	}{
		{tcPgx, ListenOn}, {tcPQ, ListenOn}, {tcStdlib, ListenOn}, {tcPQDB, ListenOn}, {tcStdDB, ListenOn},
		{tcPgx, ListenOff},
	} {
		name := c.client.name
		if c.listen == ListenOff {
			name += "/listen=off"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			changer, clock, srv := newTestBackend(t, Options{})
			w, err := c.client.open(t.Context(), srv.DSN()+"&pool_max_conns=4", Options{Schema: changer.schema, Clock: clock, Migrate: MigrateVerify, Listen: c.listen})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			if w.listen != (c.listen == ListenOn) {
				t.Fatalf("listening: %v", w.listen)
			}
			if w.listen {
				noPoll(w)
			}
			watchSignals(t, w, changer, func(ttl time.Duration) { clock.advance(ttl + changer.tol + time.Millisecond) }, 5*time.Second)
		})
	}
	for _, c := range []struct {
		name, params string
	}{{"pgbouncer-pgx", ""}, {"pgbouncer-pq", "&driver=pq&pooler=transaction"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bouncer, schema := migratedBehindBouncer(t)
			w, err := openDSN(t.Context(), bouncer.DSN()+"&schema="+schema+c.params)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.listen || !w.transactionPooled() {
				t.Fatal("the backend does not run as behind a transaction pooler")
			}
			// The changer writes directly, on the database's clock.
			changer, err := openDSN(t.Context(), bouncer.Server().DSN()+"&schema="+schema+"&migrate=verify")
			if err != nil {
				t.Fatal(err)
			}
			defer changer.Close()
			watchSignals(t, w, changer, func(ttl time.Duration) { time.Sleep(ttl + changer.tol + 10*time.Millisecond) }, 5*time.Second)
		})
	}
}

// TestWatchLeaseNotifiesOnlyWatchedLeases listens on the backend's channel
// itself: grants, releases, deletions and cleanups of leases nobody
// watches send no NOTIFY; once a watch marked a lease, each of them does,
// with the payload of the lease's resource (a permit's: its semaphore's),
// across takeovers, DeleteRecord and Cleanup (which put the mark back);
// a watch on one permit marks that permit only; once the watch ended and
// its mark lapsed, nothing is sent any more and Cleanup deletes the row
// that held the mark.
func TestWatchLeaseNotifiesOnlyWatchedLeases(t *testing.T) {
	b, clock, srv := newTestBackend(t, Options{})
	b.hub.markTTL = 2 * time.Second // before the first watch
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(b.channel)); err != nil {
		t.Fatal(err)
	}
	next := func(d time.Duration) string {
		nctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n, err := conn.WaitForNotification(nctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}
	const ttl = time.Second
	acquire := func(res string) contract.Lease {
		t.Helper()
		l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: res, Owner: "o", TTL: ttl})
		if err != nil {
			t.Fatalf("AcquireLease(%s) = %v", res, err)
		}
		return l
	}
	expireAndCleanUp := func() {
		t.Helper()
		clock.advance(ttl + b.tol + time.Millisecond)
		if _, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	// every runs each kind of change of res, and calls check after each.
	every := func(res string, check func(what string)) {
		t.Helper()
		l := acquire(res)
		check("grant")
		if _, err := b.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		check("release")
		acquire(res)
		check("grant over a released lease")
		clock.advance(ttl + b.tol + time.Millisecond)
		acquire(res)
		check("takeover")
		if _, err := b.DeleteRecord(ctx, contract.KindLease, "s", res); err != nil {
			t.Fatal(err)
		}
		check("DeleteRecord")
		acquire(res)
		check("grant after DeleteRecord")
		expireAndCleanUp()
		check("Cleanup")
		l = acquire(res)
		check("grant after Cleanup")
		if _, err := b.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		check("release")
	}
	quiet := func(res string) func(string) {
		return func(what string) {
			t.Helper()
			if p := next(100 * time.Millisecond); p != "" {
				t.Errorf("%s of %s, which nobody watches, notified %q", what, res, p)
			}
		}
	}
	loud := func(res, payloadOf string) func(string) {
		return func(what string) {
			t.Helper()
			if p, want := next(5*time.Second), leaseNotifyPayload("s", payloadOf); p != want {
				t.Errorf("%s of %s: notification %q, want %q", what, res, p, want)
			}
		}
	}

	every("quiet", quiet("quiet"))
	if _, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "qsem", Owner: "o", TTL: ttl, Permits: 2}); err != nil {
		t.Fatal(err)
	}
	quiet("qsem")("a permit")

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, res := range []string{"w", "sem", "one#1"} {
		if _, err := b.WatchLease(wctx, "s", res); err != nil {
			t.Fatal(err)
		}
	}
	var until time.Time
	if err := b.Pool().QueryRow(ctx, `SELECT watched_until FROM `+quoteIdent(b.schema)+`.leases WHERE scope = 's' AND resource = 'w'`).Scan(&until); err != nil ||
		time.Until(until) <= 0 || time.Until(until) > b.hub.markTTL+time.Second {
		t.Errorf("the mark of w: %v, %v; want about %v ahead", until, err, b.hub.markTTL)
	}
	every("w", loud("w", "w"))
	every("sem#1", loud("sem#1", "sem"))
	if _, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "sem", Owner: "o", TTL: ttl, Permits: 3}); err != nil {
		t.Fatal(err)
	}
	loud("sem#2", "sem")("AcquirePermit")
	// A watch on permit 1 of "one" marks that permit alone.
	for _, want := range []string{"one#1", "one#2"} {
		l, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "one", Owner: "o", TTL: ttl, Permits: 2})
		if err != nil || l.Resource != want {
			t.Fatalf("AcquirePermit = %+v, %v; want %s", l, err, want)
		}
		if want == "one#1" {
			loud(want, "one")("AcquirePermit")
		} else {
			quiet(want)("AcquirePermit")
		}
	}

	// The watch ends; once its marks lapse, nothing notifies.
	cancel()
	time.Sleep(b.hub.markTTL + 500*time.Millisecond)
	for next(10*time.Millisecond) != "" {
	}
	every("w", quiet("w"))
	expireAndCleanUp()
	var rows int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM `+quoteIdent(b.schema)+`.leases WHERE scope = 's'`).Scan(&rows); err != nil || rows != 0 {
		r, _ := b.Pool().Query(ctx, `SELECT resource || ' ' || owner || ' ' || token || ' ' || released || ' ' || coalesce(watched_until::text, 'null') || ' ' || expires_at FROM `+quoteIdent(b.schema)+`.leases WHERE scope = 's'`)
		left, _ := pgx.CollectRows(r, pgx.RowTo[string])
		t.Errorf("after the marks lapsed, Cleanup left %d rows, %v; want none: %q", rows, err, left)
	}
}

// TestWatchLeaseNeverMissesARelease races waiters against the end of a
// lease, many rounds: waiters that watched before the release, waiters
// that start with it (random jitter) and waiters that start after. Each
// watches, reads, and waits for a signal while the lease is held, until it
// reads it free; the polling floor is an hour, so a missed signal hangs it
// past its deadline. The end is a release, a DeleteRecord, a Cleanup of
// the expired lease, or the release of one of a semaphore's permits (the
// waiters watch the semaphore). Observers of a grant race the same way
// with a grant of a lease that has no row yet.
func TestWatchLeaseNeverMissesARelease(t *testing.T) {
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner, clock, srv := newTestBackend(t, Options{})
			w := openWaiter(t, c, srv, owner, clock, ListenOn)
			noPoll(w)
			settle(t, w, watchOrFail(t, w, "warm-up"))
			iterations := 30
			if c.name == tcPgx.name {
				iterations = 100
			}
			if testing.Short() {
				iterations = 10
			}
			ctx := t.Context()
			const prompt = 3 * time.Second
			const ttl = time.Minute
			get := func(res string) (bool, error) {
				_, err := owner.GetLease(ctx, "s", res)
				if contract.CodeOf(err) == contract.NotFound {
					return false, nil
				}
				return err == nil, err
			}
			for i := range iterations {
				res := fmt.Sprintf("race-%d", i)
				kind := i % 5
				// done reports whether the waiter may stop: the lease
				// (or a permit) is free, or, for kind 4, granted.
				done := func() (bool, error) {
					switch kind {
					case 3:
						for n := 1; n <= 2; n++ {
							held, err := get(contract.PermitResource(res, n))
							if err != nil || !held {
								return err == nil, err
							}
						}
						return false, nil
					case 4:
						return get(res)
					}
					held, err := get(res)
					return !held, err
				}
				var held []contract.Lease
				switch kind {
				case 3:
					for range 2 {
						l, err := owner.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: res, Owner: "o", TTL: ttl, Permits: 2})
						if err != nil {
							t.Fatal(err)
						}
						held = append(held, l)
					}
				case 4:
				default:
					l, err := owner.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: res, Owner: "o", TTL: ttl})
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, l)
				}
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				wait := func(name string, ch <-chan struct{}, wctx context.Context) {
					for {
						ok, err := done()
						if err != nil {
							errs <- err
							return
						}
						if ok {
							return
						}
						select {
						case <-ch:
						case <-wctx.Done():
							errs <- fmt.Errorf("iteration %d (kind %d, %s waiter): no signal within %v", i, kind, name, prompt)
							return
						}
					}
				}
				start := func(name string, jitter bool) {
					wg.Go(func() {
						if jitter {
							time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
						}
						wctx, cancel := context.WithTimeout(ctx, prompt)
						defer cancel()
						ch, err := w.WatchLease(wctx, "s", res)
						if err != nil {
							errs <- err
							return
						}
						wait(name, ch, wctx)
					})
				}
				// Before: a waiter whose watch is in place.
				bctx, bcancel := context.WithTimeout(ctx, prompt)
				bch, err := w.WatchLease(bctx, "s", res)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() { defer bcancel(); wait("before", bch, bctx) })
				// During: waiters and the end start together.
				start("during", true)
				start("during", true)
				time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
				switch kind {
				case 0, 3:
					if ok, err := owner.ReleaseLease(ctx, held[len(held)-1]); !ok || err != nil {
						t.Fatalf("ReleaseLease = %v, %v", ok, err)
					}
				case 1:
					if found, err := owner.DeleteRecord(ctx, contract.KindLease, "s", res); !found || err != nil {
						t.Fatalf("DeleteRecord = %v, %v", found, err)
					}
				case 2:
					clock.advance(ttl + owner.tol + time.Millisecond)
					if r, err := owner.Cleanup(ctx, contract.CleanupRequest{Limit: 1000}); err != nil || r.Leases < 1 {
						t.Fatalf("Cleanup = %+v, %v", r, err)
					}
				case 4:
					if _, err := owner.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: res, Owner: "o", TTL: ttl}); err != nil {
						t.Fatal(err)
					}
				}
				// After.
				start("after", false)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestWatchLeaseEnds: a watch ends with its context (it leaves the LISTEN
// hub; a polling watch stops polling); after Close, WatchLease returns
// Closed and the watches end.
func TestWatchLeaseEnds(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	registered := func(b *Backend) int {
		b.hub.mu.Lock()
		defer b.hub.mu.Unlock()
		return len(b.hub.waiters)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Listening.
	w := openWaiter(t, tcPgx, srv, owner, clock, ListenOn)
	wctx, cancel := context.WithCancel(ctx)
	if _, err := w.WatchLease(wctx, "s", "r"); err != nil {
		t.Fatal(err)
	}
	if registered(w) != 1 {
		t.Fatalf("%d payloads registered, want 1", registered(w))
	}
	cancel()
	eventually("the watch leaves the hub", func() bool { return registered(w) == 0 })

	// Polling: count the polls.
	p := openWaiter(t, tcPgx, srv, owner, clock, ListenOff)
	rec := &recordingQuerier{querier: p.q}
	p.q = rec
	pctx, pcancel := context.WithCancel(ctx)
	if _, err := p.WatchLease(pctx, "s", "r"); err != nil {
		t.Fatal(err)
	}
	polls := func() int {
		n := 0
		for _, q := range rec.take() {
			if q == qLeaseState.sql(p.st) {
				n++
			}
		}
		return n
	}
	eventually("the watch polls", func() bool { return polls() > 0 })
	pcancel()
	time.Sleep(100 * time.Millisecond)
	polls()
	time.Sleep(2 * p.hub.pollMax)
	if n := polls(); n != 0 {
		t.Errorf("%d polls after the watch ended", n)
	}

	// Close ends every watch; WatchLease afterwards is Closed.
	for _, b := range []*Backend{w, p} {
		if _, err := b.WatchLease(ctx, "s", "r2"); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := b.WatchLease(ctx, "s", "r3")
		checkCode(t, err, contract.Closed)
	}
	eventually("Close ends the listening watch", func() bool { return registered(w) == 0 })
	polls()
	time.Sleep(2 * p.hub.pollMax)
	if n := polls(); n != 0 {
		t.Errorf("%d polls after Close", n)
	}
}

// TestWatchLeasePollsWhileTheListenerIsDown: a backend whose LISTEN
// connection cannot come up (its ListenDSN names a port nobody listens on)
// still signals its watches, by polling.
func TestWatchLeasePollsWhileTheListenerIsDown(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	c, err := pq.NewConnector(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	w, err := NewBackend(ctx, db, Options{Schema: owner.schema, Clock: clock, Migrate: MigrateVerify,
		ListenDSN: "postgres://127.0.0.1:1/none?sslmode=disable&connect_timeout=1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.listen {
		t.Fatal("the backend does not try to listen")
	}
	ch := watchOrFail(t, w, "r")
	time.Sleep(listenGrace + 1500*time.Millisecond) // the watch polls now
	drain(ch)
	if _, err := owner.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: "r", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if !signaled(ch, 5*time.Second) {
		t.Fatal("no signal while the LISTEN connection is down")
	}
	if w.listenerPID() != 0 {
		t.Fatal("the LISTEN connection came up")
	}
}

// TestWatchLeaseSignalsAPermitGrantedWhileItMarks: a grant of a permit
// whose row did not exist, in a transaction left open while a watch of the
// semaphore marks (its insertion is invisible to the watch and does not
// block it), commits after WatchLease returned: the watch may miss that
// grant (the documented gap), but every later change of the permit, its
// release and its deletion, is signaled, though the row carries no mark
// of its own.
func TestWatchLeaseSignalsAPermitGrantedWhileItMarks(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	w := openWaiter(t, tcPgx, srv, owner, clock, ListenOn)
	noPoll(w)
	settle(t, w, watchOrFail(t, w, "warm-up"))
	ctx := t.Context()
	for round, end := range []string{"release", "delete"} {
		sem := fmt.Sprintf("sem-%d", round)
		tx, err := owner.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := contract.PermitRequest{Scope: "s", Resource: sem, Owner: "o", TTL: time.Minute, Permits: 2}
		var r permitRow
		if err := tx.QueryRow(ctx, qAcquirePermit.sql(owner.st), qAcquirePermit.args(owner.acquirePermitParams(req))...).Scan(r.dest()...); err != nil || !r.granted {
			t.Fatalf("the grant in the open transaction: %+v, %v", r, err)
		}
		ch := watchOrFail(t, w, sem)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var marked bool
		if err := owner.Pool().QueryRow(ctx, `SELECT watched_until IS NOT NULL FROM `+quoteIdent(owner.schema)+`.leases WHERE scope = 's' AND resource = $1`, r.resource).Scan(&marked); err != nil || marked {
			t.Fatalf("the permit's own mark: %v, %v; want none (the case under test)", marked, err)
		}
		signaled(ch, 200*time.Millisecond) // the grant's signal, if any
		drain(ch)
		switch l := r.lease("s", r.resource); end {
		case "release":
			if ok, err := owner.ReleaseLease(ctx, l); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
		case "delete":
			if found, err := owner.DeleteRecord(ctx, contract.KindLease, "s", l.Resource); !found || err != nil {
				t.Fatalf("DeleteRecord = %v, %v", found, err)
			}
		}
		if !signaled(ch, 5*time.Second) {
			t.Fatalf("the %s of a permit granted while the watch marked: no signal", end)
		}
	}
}
