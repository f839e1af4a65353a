package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestWriteCutAfterSendingIsOutcomeUnknownAndAppliedAtMostOnce sends a
// write through a proxy, lets it block in the server, cuts the connection,
// and then lets the statement finish on the server. On every client
// library the caller must see OutcomeUnknown, and the statement must have
// run exactly once: database/sql re-sends a statement after
// driver.ErrBadConn, which lib/pq returns for a connection that broke after
// sending (lib/pq #939), and the backend must not let it.
//
// The write is AcquireLease of a free resource. It draws its token with
// nextval before it waits for a conflicting insert that another
// transaction holds uncommitted, and sequences are not transactional, so
// the sequence counts how often the statement ran; the lease row shows
// whether it was applied (the server may also abort it when it notices the
// client is gone).
func TestWriteCutAfterSendingIsOutcomeUnknownAndAppliedAtMostOnce(t *testing.T) {
	srv := pgtest.Require(t)
	for _, c := range []testClient{tcPgx, tcPQ, tcPQDB, tcStdlib, tcStdDB} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			q := quoteIdent(schema)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			proxy := srv.NewProxy(t)
			b, err := c.open(ctx, proxy.DSN(srv.DSN())+"&pool_max_conns=2", Options{Schema: schema, Migrate: MigrateVerify, Listen: ListenOff})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()

			// Another transaction inserts the same resource, uncommitted.
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `INSERT INTO `+q+`.leases (scope, resource, owner, token, acquired_at, expires_at)
				VALUES ('', 'res-1', 'other', 0, now(), now() + interval '1 hour')`); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "mine", TTL: time.Minute})
				errc <- err
			}()
			// Wait until the statement is in the server, waiting for the lock.
			waitFor(t, func() bool {
				var n int
				err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%lease_tokens%'`, schema).Scan(&n)
				return err == nil && n == 1
			})
			proxy.Cut()
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("AcquireLease did not return after the connection was cut")
			}
			if contract.CodeOf(err) != contract.OutcomeUnknown {
				t.Errorf("a write whose connection broke after sending = %v (code %v), want OutcomeUnknown", err, contract.CodeOf(err))
			}
			// Let the statement go on in the server, and a re-sent copy, if
			// there were one, too.
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				var n int
				err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE state = 'active' AND query LIKE '%' || $1 || '%lease_tokens%' AND pid <> pg_backend_pid()`, schema).Scan(&n)
				return err == nil && n == 0
			})
			time.Sleep(100 * time.Millisecond)
			var last int64
			var called bool
			if err := admin.QueryRow(ctx, `SELECT last_value, is_called FROM `+q+`.lease_tokens`).Scan(&last, &called); err != nil {
				t.Fatal(err)
			}
			if !called || last != 1 {
				t.Errorf("the statement ran %d times (sequence last_value %d, is_called %v), want exactly once", map[bool]int64{true: last}[called], last, called)
			}
			var rows int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+q+`.leases WHERE resource = 'res-1'`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows > 1 {
				t.Errorf("%d lease rows", rows)
			}
			t.Logf("the cut write was %s", map[bool]string{true: "applied (once)", false: "not applied"}[rows == 1])

			// With the server unreachable, a write is eventually refused
			// before sending (Unavailable); until the pool has dropped its
			// dead connections it may still be OutcomeUnknown, and a read
			// is Unavailable.
			proxy.Close()
			sawUnavailable := false
			for i := 0; i < 5 && !sawUnavailable; i++ {
				_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1", Status: "running"})
				switch contract.CodeOf(err) {
				case contract.Unavailable:
					sawUnavailable = true
				case contract.OutcomeUnknown:
				default:
					t.Fatalf("CreateWorkflow with the server unreachable = %v, want Unavailable or OutcomeUnknown", err)
				}
			}
			if !sawUnavailable {
				t.Error("a write with the server unreachable was never Unavailable")
			}
			if _, err := b.GetLease(ctx, "", "res-1"); contract.CodeOf(err) != contract.Unavailable {
				t.Errorf("GetLease with the server unreachable = %v, want Unavailable", err)
			}
		})
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for a condition")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
