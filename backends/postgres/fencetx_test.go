package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

// fencedTx is the caller's own transaction, on one client library, with
// the backend's fence check for it.
type fencedTx struct {
	fence    func(ctx context.Context, scope contract.Scope, f *contract.Fence) error
	exec     func(ctx context.Context, sql string, args ...any) error
	commit   func(ctx context.Context) error
	rollback func()
}

// txClient begins fenced transactions: pgx's or database/sql's on lib/pq
// or pgx's stdlib, all checked by the one FenceTx.
type txClient struct {
	name  string
	begin func(t *testing.T, b *Backend, srv *pgtest.Server) func(ctx context.Context) (fencedTx, error)
}

var txClients = []txClient{
	{"pgx", func(t *testing.T, b *Backend, _ *pgtest.Server) func(context.Context) (fencedTx, error) {
		return func(ctx context.Context) (fencedTx, error) {
			tx, err := b.Pool().Begin(ctx)
			if err != nil {
				return fencedTx{}, err
			}
			return fencedTx{
				fence: func(ctx context.Context, scope contract.Scope, f *contract.Fence) error {
					return b.FenceTx(ctx, tx, scope, f)
				},
				exec: func(ctx context.Context, sql string, args ...any) error {
					_, err := tx.Exec(ctx, sql, args...)
					return err
				},
				commit:   tx.Commit,
				rollback: func() { _ = tx.Rollback(context.Background()) },
			}, nil
		}
	}},
	{"pq", sqlTxClient(func(dsn string) (*sql.DB, error) {
		c, err := pq.NewConnector(dsn)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(c), nil
	})},
	{"pgx-stdlib", sqlTxClient(func(dsn string) (*sql.DB, error) {
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		return stdlib.OpenDB(*cc), nil
	})},
}

func sqlTxClient(open func(dsn string) (*sql.DB, error)) func(*testing.T, *Backend, *pgtest.Server) func(context.Context) (fencedTx, error) {
	return func(t *testing.T, b *Backend, srv *pgtest.Server) func(context.Context) (fencedTx, error) {
		db, err := open(srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return func(ctx context.Context) (fencedTx, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return fencedTx{}, err
			}
			return fencedTx{
				fence: func(ctx context.Context, scope contract.Scope, f *contract.Fence) error {
					return b.FenceTx(ctx, tx, scope, f)
				},
				exec: func(ctx context.Context, sql string, args ...any) error {
					_, err := tx.ExecContext(ctx, sql, args...)
					return err
				},
				commit:   func(context.Context) error { return tx.Commit() },
				rollback: func() { _ = tx.Rollback() },
			}, nil
		}
	}
}

func TestFenceTx(t *testing.T) {
	for _, tc := range txClients {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testFenceTx(t, tc)
		})
	}
}

func testFenceTx(t *testing.T, tc txClient) {
	b, clock, srv := newTestBackend(t, Options{})
	begin := tc.begin(t, b, srv)
	ctx := t.Context()
	table := quoteIdent(b.schema) + ".app_orders"
	if _, err := b.Pool().Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY, writer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ttl := 10 * time.Second
	const scope = contract.Scope("tenant-1")
	write := func(f *contract.Fence, id int, writer string) error {
		tx, err := begin(ctx)
		if err != nil {
			return err
		}
		defer tx.rollback()
		if err := tx.fence(ctx, scope, f); err != nil {
			return err
		}
		if err := tx.exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2)`, id, writer); err != nil {
			return err
		}
		return tx.commit(ctx)
	}
	count := func(writer string) int {
		var n int
		if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE writer = $1`, writer).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("PermitHoldersAreFencedEachOnTheirOwn", func(t *testing.T) {
		req := contract.PermitRequest{Scope: scope, Resource: "sem-tx", TTL: ttl, Permits: 2}
		req.Owner = "p1"
		p1, err := b.AcquirePermit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		req.Owner = "p2"
		p2, err := b.AcquirePermit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if p1.Resource == p2.Resource || p2.Token <= p1.Token {
			t.Fatalf("permits %+v and %+v: want two permits, the second with the greater token", p1, p2)
		}
		if err := write(p1.Fence(), 101, "p1"); err != nil {
			t.Fatalf("permit 1's fenced transaction: %v", err)
		}
		if err := write(p2.Fence(), 102, "p2"); err != nil {
			t.Fatalf("permit 2's fenced transaction: %v", err)
		}
		// Another permit's resource with this holder's token is not a fence.
		cross := &contract.Fence{Resource: p2.Resource, Owner: p1.Owner, Token: p1.Token}
		if err := write(cross, 103, "x"); contract.CodeOf(err) != contract.Fenced {
			t.Errorf("a fence naming the other permit = %v, want Fenced", err)
		}
		// Permit 1 is released and granted again: its old holder is fenced,
		// permit 2's holder is not.
		if ok, err := b.ReleaseLease(ctx, p1); err != nil || !ok {
			t.Fatalf("ReleaseLease(permit 1) = %v, %v", ok, err)
		}
		req.Owner = "p3"
		p3, err := b.AcquirePermit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if p3.Resource != p1.Resource || p3.Token <= p2.Token {
			t.Fatalf("regrant %+v: want permit 1 again with a token above %d", p3, p2.Token)
		}
		if err := write(p1.Fence(), 104, "p1"); contract.CodeOf(err) != contract.Fenced {
			t.Errorf("the released permit's transaction = %v, want Fenced", err)
		}
		if err := write(p2.Fence(), 105, "p2"); err != nil {
			t.Errorf("permit 2's transaction after permit 1 changed hands: %v", err)
		}
		if err := write(p3.Fence(), 106, "p3"); err != nil {
			t.Errorf("the new holder of permit 1: %v", err)
		}
		if n := count("p1"); n != 1 {
			t.Errorf("the released holder wrote %d rows, want 1", n)
		}
	})

	t.Run("StaleOwnerIsRejected", func(t *testing.T) {
		l1, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-stale", Owner: "old", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if err := write(l1.Fence(), 1, "old"); err != nil {
			t.Fatalf("the holder's fenced transaction: %v", err)
		}
		clock.advance(ttl + b.tol + time.Second)
		l2, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-stale", Owner: "new", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		err = write(l1.Fence(), 2, "old")
		if contract.CodeOf(err) != contract.Fenced {
			t.Errorf("the stale owner's transaction = %v, want Fenced", err)
		}
		if n := count("old"); n != 1 {
			t.Errorf("the stale owner wrote %d rows, want only its first", n)
		}
		if err := write(l2.Fence(), 3, "new"); err != nil {
			t.Errorf("the new owner's transaction: %v", err)
		}
		// Other scopes and wrong owners are rejected too.
		for _, bad := range []Tx{nil, (*sql.Tx)(nil), b.Pool(), "tx"} {
			if err := b.FenceTx(ctx, bad, scope, l2.Fence()); contract.CodeOf(err) != contract.InvalidArgument {
				t.Errorf("FenceTx(%T) = %v, want InvalidArgument", bad, err)
			}
		}
		for _, f := range []*contract.Fence{
			{Resource: l2.Resource, Owner: "old", Token: l2.Token},
			{Resource: l2.Resource, Owner: l2.Owner, Token: l2.Token + 1},
		} {
			if err := write(f, 4, "x"); contract.CodeOf(err) != contract.Fenced {
				t.Errorf("FenceTx(%+v) = %v, want Fenced", f, err)
			}
		}
		tx, err := begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.fence(ctx, "other-scope", l2.Fence()); contract.CodeOf(err) != contract.Fenced {
			t.Errorf("FenceTx in another scope = %v, want Fenced", err)
		}
		tx.rollback()
		// A transaction that has ended is a caller's mistake.
		if err := tx.fence(ctx, scope, l2.Fence()); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("FenceTx on a rolled-back transaction = %v, want InvalidArgument", err)
		}
	})

	t.Run("FenceWithinToleranceOfExpiryIsRejected", func(t *testing.T) {
		l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-tol", Owner: "o", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		clock.advance(ttl - b.tol/2)
		if err := write(l.Fence(), 10, "late"); contract.CodeOf(err) != contract.Fenced {
			t.Errorf("FenceTx %v before expiry (tolerance %v) = %v, want Fenced", b.tol/2, b.tol, err)
		}
	})

	t.Run("TakeoverWaitsForTheHoldersTransaction", func(t *testing.T) {
		l1, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-wait", Owner: "holder", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.rollback()
		if err := tx.fence(ctx, scope, l1.Fence()); err != nil {
			t.Fatalf("FenceTx: %v", err)
		}
		if err := tx.exec(ctx, `INSERT INTO `+table+` VALUES (20, 'holder')`); err != nil {
			t.Fatal(err)
		}
		// The lease expires while the transaction is open.
		clock.advance(ttl + b.tol + time.Second)
		type result struct {
			l   contract.Lease
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-wait", Owner: "taker", TTL: ttl})
			done <- result{l, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("the takeover returned (%+v, %v) while the holder's fenced transaction was open", r.l, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := tx.commit(ctx); err != nil {
			t.Fatalf("the holder's commit: %v", err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the takeover did not proceed after the holder committed")
		}
		if r.err != nil || r.l.Token <= l1.Token || r.l.Owner != "taker" {
			t.Fatalf("takeover = %+v, %v; want a grant with a token > %d", r.l, r.err, l1.Token)
		}
		if n := count("holder"); n != 1 {
			t.Errorf("the holder's committed write is missing")
		}
		if err := write(l1.Fence(), 21, "holder"); contract.CodeOf(err) != contract.Fenced {
			t.Errorf("the old holder after the takeover = %v, want Fenced", err)
		}
	})
	t.Run("RenewalKeepsTheFence", func(t *testing.T) {
		// The everyday case of a long job: the lease is renewed (by
		// RenewLease, then by RenewLeases as the runner's keep-alive
		// does), and the holder's transactions made after the first
		// grant would have ended still pass FenceTx with the same fence.
		l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-renew", Owner: "long-job", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		clock.advance(ttl / 2)
		r1, err := b.RenewLease(ctx, l, ttl)
		if err != nil || r1.Token != l.Token {
			t.Fatalf("RenewLease = %+v, %v; want the same token %d", r1, err, l.Token)
		}
		clock.advance(ttl/2 + b.tol + time.Second) // past the first grant's end and tolerance
		if err := write(l.Fence(), 30, "renewed"); err != nil {
			t.Errorf("FenceTx after RenewLease, past the first grant's end: %v", err)
		}
		out, err := b.RenewLeases(ctx, []contract.Lease{r1}, ttl)
		if err != nil || len(out) != 1 || out[0].Err != nil || out[0].Lease.Token != l.Token {
			t.Fatalf("RenewLeases = %+v, %v; want the lease renewed with token %d", out, err, l.Token)
		}
		clock.advance(ttl / 2) // past the first renewal's end
		if err := write(l.Fence(), 31, "renewed"); err != nil {
			t.Errorf("FenceTx after RenewLeases, past the first renewal's end: %v", err)
		}
		if n := count("renewed"); n != 2 {
			t.Errorf("the renewed holder wrote %d rows, want 2", n)
		}
		// Once the renewed grant has ended, the fence no longer passes.
		clock.advance(ttl)
		if err := write(l.Fence(), 32, "renewed"); contract.CodeOf(err) != contract.Fenced {
			t.Errorf("FenceTx after the renewed grant ended = %v, want Fenced", err)
		}
	})
}
