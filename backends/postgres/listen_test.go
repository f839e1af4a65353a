package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/lib/pq"
)

type waitResult struct {
	rec contract.KeyRecord
	err error
	at  time.Time
}

func startWaitKey(ctx context.Context, b *Backend, k contract.KeyRef) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		rec, err := b.WaitKey(ctx, k)
		ch <- waitResult{rec, err, time.Now()}
	}()
	return ch
}

func awaitListener(t *testing.T, b *Backend, not uint32) uint32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if pid := b.listenerPID(); pid != 0 && pid != not {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the LISTEN connection did not come up")
	return 0
}

func claimFor(t *testing.T, b *Backend, key string) contract.Claim {
	t.Helper()
	c, err := b.ClaimKey(t.Context(), contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: "fp", TTL: 30 * time.Second})
	if err != nil || c.Kind != contract.ClaimNew {
		t.Fatalf("ClaimKey: %+v, %v", c, err)
	}
	return c
}

func complete(t *testing.T, b *Backend, c contract.Claim) {
	t.Helper()
	if _, err := b.CompleteKey(t.Context(), contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: 204}, Retain: time.Hour}); err != nil {
		t.Fatalf("CompleteKey: %v", err)
	}
}

func expectCompleted(t *testing.T, ch <-chan waitResult, after time.Time, within time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.rec.State != contract.KeyCompleted || r.rec.Outcome == nil || r.rec.Outcome.Code != 204 {
			t.Fatalf("WaitKey = %+v, %v; want the completed record", r.rec, r.err)
		}
		if d := r.at.Sub(after); d > within {
			t.Errorf("WaitKey returned %v after the completion, want within %v", d, within)
		}
	case <-time.After(within + 5*time.Second):
		t.Fatalf("WaitKey did not return within %v of the completion", within)
	}
}

// Every WaitKey test runs on each client library's listener: pgx's pool
// (a hijacked connection), lib/pq (its ListenerConn, dialed from the DSN)
// and pgx's stdlib (a *sql.Conn's pgx connection, through Raw).

// openWaiter opens a second backend on owner's schema through client c.
func openWaiter(t *testing.T, c testClient, srv *pgtest.Server, owner *Backend, clock *testClock, listen ListenMode) *Backend {
	t.Helper()
	w, err := c.open(t.Context(), srv.DSN()+"&pool_max_conns=4", Options{Schema: owner.schema, Clock: clock, Migrate: MigrateVerify, Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// TestWaitKeyIsWokenByNotify waits long enough for the polling floor to
// back off to its maximum, then completes: the waiter must return well
// before the next poll.
func TestWaitKeyIsWokenByNotify(t *testing.T) {
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner, clock, srv := newTestBackend(t, Options{})
			waiter := openWaiter(t, c, srv, owner, clock, ListenOn)
			cl := claimFor(t, owner, "key-1")
			ch := startWaitKey(t.Context(), waiter, cl.Record.KeyRef)
			awaitListener(t, waiter, 0)
			time.Sleep(1600 * time.Millisecond) // the poll delay is now 1 s
			start := time.Now()
			complete(t, owner, cl)
			expectCompleted(t, ch, start, 300*time.Millisecond)
		})
	}
}

// TestWaitKeySurvivesAKilledListener kills the LISTEN connection's server
// process: a completion is still seen within the polling bound, and the
// listener comes back.
func TestWaitKeySurvivesAKilledListener(t *testing.T) {
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner, clock, srv := newTestBackend(t, Options{})
			waiter := openWaiter(t, c, srv, owner, clock, ListenOn)
			ctx := t.Context()

			cl := claimFor(t, owner, "key-1")
			ch := startWaitKey(ctx, waiter, cl.Record.KeyRef)
			pid := awaitListener(t, waiter, 0)
			var killed bool
			if err := owner.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed); err != nil || !killed {
				t.Fatalf("pg_terminate_backend: %v, %v", killed, err)
			}
			start := time.Now()
			complete(t, owner, cl) // likely while no listener is up: the notification is lost
			expectCompleted(t, ch, start, pollMax+500*time.Millisecond)

			// The listener is re-established, and wakes waiters again.
			awaitListener(t, waiter, pid)
			c2 := claimFor(t, owner, "key-2")
			ch = startWaitKey(ctx, waiter, c2.Record.KeyRef)
			time.Sleep(1600 * time.Millisecond)
			start = time.Now()
			complete(t, owner, c2)
			expectCompleted(t, ch, start, 300*time.Millisecond)
		})
	}
}

// TestWaitKeyPollsWithListenOff needs no LISTEN connection.
func TestWaitKeyPollsWithListenOff(t *testing.T) {
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner, clock, srv := newTestBackend(t, Options{})
			waiter := openWaiter(t, c, srv, owner, clock, ListenOff)
			cl := claimFor(t, owner, "key-1")
			ch := startWaitKey(t.Context(), waiter, cl.Record.KeyRef)
			time.Sleep(100 * time.Millisecond)
			if waiter.listenerPID() != 0 {
				t.Error("listen=off started a LISTEN connection")
			}
			start := time.Now()
			complete(t, owner, cl)
			expectCompleted(t, ch, start, pollMax+500*time.Millisecond)

			// A released claim ends the wait with NotFound.
			cl = claimFor(t, owner, "key-2")
			ch = startWaitKey(t.Context(), waiter, cl.Record.KeyRef)
			if ok, err := owner.ReleaseKey(t.Context(), cl.Record.KeyRef, cl.Token); !ok || err != nil {
				t.Fatalf("ReleaseKey: %v %v", ok, err)
			}
			select {
			case r := <-ch:
				if contract.CodeOf(r.err) != contract.NotFound {
					t.Errorf("WaitKey after release = %v, want NotFound", r.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("WaitKey did not return after release")
			}
		})
	}
}

// TestWaitKeyWithoutAListenerPolls: NewBackend on a *sql.DB of a driver
// that is neither pgx's stdlib nor given a ListenDSN cannot LISTEN;
// WaitKey polls.
func TestWaitKeyWithoutAListenerPolls(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	dsn, _, err := splitPoolSize(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	c, err := pq.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := newFromOwnDB(t.Context(), sql.OpenDB(c), Options{Schema: owner.schema, Clock: clock, Migrate: MigrateVerify})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	cl := claimFor(t, owner, "key-1")
	ch := startWaitKey(t.Context(), waiter, cl.Record.KeyRef)
	time.Sleep(100 * time.Millisecond)
	if waiter.listenerPID() != 0 || waiter.listen {
		t.Error("a backend with no way to LISTEN started a listener")
	}
	start := time.Now()
	complete(t, owner, cl)
	expectCompleted(t, ch, start, pollMax+500*time.Millisecond)
}

// TestNotifyPayloadMatches listens on the channel itself and checks that
// the statements' payload is notifyPayload's.
func TestNotifyPayloadMatches(t *testing.T) {
	b, _, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	conn, err := srv.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(b.channel)); err != nil {
		t.Fatal(err)
	}
	// Only keys a WaitKey marked are notified: mark them as WaitKey does
	// while its LISTEN connection is up.
	mark := func(c contract.Claim) {
		if _, err := b.waitRead(ctx, c.Record.KeyRef); err != nil {
			t.Fatal(err)
		}
	}
	c := claimFor(t, b, "key-1")
	mark(c)
	complete(t, b, c)
	c2 := claimFor(t, b, "key-2")
	mark(c2)
	if ok, err := b.ReleaseKey(ctx, c2.Record.KeyRef, c2.Token); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for _, k := range []contract.KeyRef{c.Record.KeyRef, c2.Record.KeyRef} {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel != b.channel || n.Payload != notifyPayload(k) {
			t.Errorf("notification %q %q, want %q %q", n.Channel, n.Payload, b.channel, notifyPayload(k))
		}
	}
	if got := channelName("a_very_long_schema_name_that_goes_on_and_on_for_sixty_three_ch"); len(got) > 63 {
		t.Errorf("channel name %q is longer than 63 bytes", got)
	}
}
