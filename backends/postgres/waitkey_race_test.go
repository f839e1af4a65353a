package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// Completions notify only the keys a listening WaitKey marked waited
// (migration 3). These tests prove that no wake-up is lost: with the
// waiter's polling floor set to an hour, a waiter can only return through
// its first read or a NOTIFY, so one that misses its notification hangs
// and fails the test.

// waitedOf reads the waited mark of key in scope "s".
func waitedOf(t *testing.T, b *Backend, key string) bool {
	t.Helper()
	var w bool
	if err := b.Pool().QueryRow(t.Context(), `SELECT waited FROM `+quoteIdent(b.schema)+`.idempotency_keys WHERE scope = 's' AND key = $1`, key).Scan(&w); err != nil {
		t.Fatalf("reading waited of %s: %v", key, err)
	}
	return w
}

// awaitMarked waits until a waiter marked key.
func awaitMarked(t *testing.T, b *Backend, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !waitedOf(t, b, key) {
		if time.Now().After(deadline) {
			t.Fatalf("no waiter marked %s", key)
		}
		time.Sleep(time.Millisecond)
	}
}

// noPollWaiter opens a listening waiter on owner's schema whose polling
// floor is an hour, with its LISTEN connection up.
func noPollWaiter(t *testing.T, c testClient, srv *pgtest.Server, owner *Backend, clock *testClock) *Backend {
	t.Helper()
	w := openWaiter(t, c, srv, owner, clock, ListenOn)
	w.hub.pollMin, w.hub.pollMax = time.Hour, time.Hour // before its first WaitKey
	// Start the listener with a WaitKey that returns at once (no record).
	if _, err := w.WaitKey(t.Context(), contract.KeyRef{Scope: "s", Key: "warm-up"}); contract.CodeOf(err) != contract.NotFound {
		t.Fatalf("WaitKey(missing) = %v, want NotFound", err)
	}
	awaitListener(t, w, 0)
	return w
}

// TestWaitKeyNeverMissesACompletion races waiters against completions and
// releases on real PostgreSQL: waiters that arrive before (and have marked
// the key), during (started concurrently, with random jitter, many
// iterations) and after the completion. Each must return the completed
// record (or NotFound after a release) promptly, through the NOTIFY or
// its own read: the polling floor is an hour.
func TestWaitKeyNeverMissesACompletion(t *testing.T) {
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner, clock, srv := newTestBackend(t, Options{})
			waiter := noPollWaiter(t, c, srv, owner, clock)
			iterations := 40
			if c.name == tcPgx.name {
				iterations = 150
			}
			if testing.Short() {
				iterations = 10
			}
			ctx := t.Context()
			const prompt = 3 * time.Second
			for i := range iterations {
				key := fmt.Sprintf("race-%d", i)
				cl := claimFor(t, owner, key)
				release := i%5 == 4
				var wg sync.WaitGroup
				results := make(chan error, 8)
				wait := func(name string, start time.Time) {
					defer wg.Done()
					wctx, cancel := context.WithTimeout(ctx, prompt)
					defer cancel()
					rec, err := waiter.WaitKey(wctx, cl.Record.KeyRef)
					switch {
					case release && contract.CodeOf(err) == contract.NotFound:
					case !release && err == nil && rec.State == contract.KeyCompleted && rec.Outcome != nil && rec.Outcome.Code == 204:
					default:
						results <- fmt.Errorf("iteration %d (%s waiter, release %v): WaitKey = %+v, %v after %v; want the %s promptly",
							i, name, release, rec, err, time.Since(start), map[bool]string{false: "completed record", true: "NotFound"}[release])
					}
				}
				// Before: a waiter that has marked the key.
				wg.Add(1)
				go wait("before", time.Now())
				awaitMarked(t, owner, key)
				// During: waiters and the completion start together.
				for range 2 {
					wg.Add(1)
					go func() {
						time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
						wait("during", time.Now())
					}()
				}
				time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
				if release {
					if ok, err := owner.ReleaseKey(ctx, cl.Record.KeyRef, cl.Token); !ok || err != nil {
						t.Fatalf("ReleaseKey = %v, %v", ok, err)
					}
				} else {
					complete(t, owner, cl)
				}
				// After: the record is there to be read.
				wg.Add(1)
				go wait("after", time.Now())
				wg.Wait()
				close(results)
				for err := range results {
					t.Error(err)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestCompleteKeyNotifiesOnlyWaitedKeys listens on the backend's channel
// itself: a completion, a release or a cleanup of a key nobody waits for
// sends no NOTIFY (PostgreSQL serializes the commits that notify); once a
// WaitKey marked the key, they do, with the key's payload.
func TestCompleteKeyNotifiesOnlyWaitedKeys(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(owner.channel)); err != nil {
		t.Fatal(err)
	}
	// next returns the payload of the next notification, or "" after d.
	next := func(d time.Duration) string {
		nctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n, err := conn.WaitForNotification(nctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}

	cl := claimFor(t, owner, "quiet")
	complete(t, owner, cl)
	cl2 := claimFor(t, owner, "quiet-release")
	if ok, err := owner.ReleaseKey(ctx, cl2.Record.KeyRef, cl2.Token); !ok || err != nil {
		t.Fatalf("ReleaseKey = %v, %v", ok, err)
	}
	if p := next(300 * time.Millisecond); p != "" {
		t.Errorf("a completion and a release that nobody waited for notified (%s)", p)
	}

	waiter := noPollWaiter(t, tcPgx, srv, owner, clock)
	for _, end := range []string{"complete", "release"} {
		cl := claimFor(t, owner, "waited-"+end)
		ch := startWaitKey(ctx, waiter, cl.Record.KeyRef)
		awaitMarked(t, owner, "waited-"+end)
		if end == "complete" {
			complete(t, owner, cl)
		} else if ok, err := owner.ReleaseKey(ctx, cl.Record.KeyRef, cl.Token); !ok || err != nil {
			t.Fatalf("ReleaseKey = %v, %v", ok, err)
		}
		if p := next(5 * time.Second); p != notifyPayload(cl.Record.KeyRef) {
			t.Errorf("%s of a waited key: notification %q, want the key's payload", end, p)
		}
		select {
		case r := <-ch:
			if end == "complete" && r.err != nil || end == "release" && contract.CodeOf(r.err) != contract.NotFound {
				t.Errorf("WaitKey after %s = %+v, %v", end, r.rec, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("WaitKey did not return after %s", end)
		}
	}

	// Cleanup of an abandoned claim that a waiter marked notifies it.
	cl = claimFor(t, owner, "waited-cleanup")
	ch := startWaitKey(ctx, waiter, cl.Record.KeyRef)
	awaitMarked(t, owner, "waited-cleanup")
	clock.advance(10 * time.Minute) // past the claim (30 s), not the completed keys' retention (1 h)
	if res, err := owner.Cleanup(ctx, contract.CleanupRequest{Limit: 100}); err != nil || res.Keys != 1 {
		t.Fatalf("Cleanup = %+v, %v", res, err)
	}
	if p := next(5 * time.Second); p != notifyPayload(cl.Record.KeyRef) {
		t.Errorf("cleanup of a waited key: notification %q, want the key's payload", p)
	}
	select {
	case r := <-ch:
		if contract.CodeOf(r.err) != contract.NotFound {
			t.Errorf("WaitKey after cleanup = %+v, %v", r.rec, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitKey did not return after cleanup")
	}
}

// TestWaitKeyMarkBlockedByACompletion makes the window of the race
// deterministic: the completion (CompleteKey's own statement, or
// ReleaseKey's) runs in a transaction held open, so the waiter's mark
// statement takes its snapshot before the completion commits and then
// waits for the row lock; the completion, not yet seeing a mark, does not
// notify. The waiter must see that it could not mark the claim and read
// again, instead of sleeping on a claim that is already completed.
func TestWaitKeyMarkBlockedByACompletion(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	waiter := noPollWaiter(t, tcPgx, srv, owner, clock)
	ctx := t.Context()
	for _, end := range []string{"complete", "release"} {
		t.Run(end, func(t *testing.T) {
			cl := claimFor(t, owner, "blocked-"+end)
			tx, err := owner.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			var q string
			var args []any
			if end == "complete" {
				p := owner.completeKeyParams(contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: contract.Outcome{Code: 204}, Retain: time.Hour})
				q, args = qCompleteKey.sql(owner.st), p.args()
			} else {
				q, args = qReleaseKey.sql(owner.st), owner.releaseKeyParams(cl.Record.KeyRef, cl.Token).args()
			}
			rows, err := tx.Query(ctx, q, args...)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			ch := startWaitKey(ctx, waiter, cl.Record.KeyRef)
			// Wait until the waiter's statement waits for the row lock.
			deadline := time.Now().Add(10 * time.Second)
			for {
				var n int
				if err := owner.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%SET waited = true%'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the waiter's mark statement never waited for the completion's row lock")
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-ch:
				if end == "complete" && (r.err != nil || r.rec.State != contract.KeyCompleted) || end == "release" && contract.CodeOf(r.err) != contract.NotFound {
					t.Errorf("WaitKey = %+v, %v", r.rec, r.err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("WaitKey missed a completion that committed while it was marking the key")
			}
		})
	}
}
