package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// txExec runs a statement of the caller's in tx, the Raw of a contract.Tx
// or the caller's own transaction: a pgx.Tx or a *sql.Tx. exec: in pgx's
// exec mode (behind a transaction pooler).
func txExec(ctx context.Context, tx any, exec bool, query string, args ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		if exec {
			args = append([]any{pgx.QueryExecModeExec}, args...)
		}
		_, err := tx.Exec(ctx, query, args...)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	}
	return fmt.Errorf("not a transaction: %T", tx)
}

// TestCompleteKeyTx, on every client library, with the backend's BeginTx
// and with the caller's own transaction: a commit stores both the caller's
// row and the outcome; a rollback leaves the claim as it was; a reclaim
// started while the transaction is open waits for it and then finds the
// key completed; a retry with the same token in a new transaction returns
// the stored record; a stale token is Fenced and stores nothing.
func TestCompleteKeyTx(t *testing.T) {
	srv := pgtest.Require(t)
	for _, tc := range dsnClients {
		for _, own := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/own=%v", tc.name, own), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				schema := srv.Schema(t)
				if err := migratePool(ctx, newPool(t, srv.DSN()), schema, Up); err != nil {
					t.Fatal(err)
				}
				clock := newTestClock()
				b, err := tc.open(ctx, srv.DSN(), Options{Schema: schema, Migrate: MigrateVerify, Listen: ListenOff, Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				testCompleteKeyTx(t, b, clock, own, false)
			})
		}
	}
}

// TestCompleteKeyTxThroughPgBouncer: the same through PgBouncer in
// transaction mode, where the backend relies on no session state.
func TestCompleteKeyTxThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	srv := bouncer.Server()
	for _, tc := range []testClient{tcPgx, tcPQ} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			if err := migratePool(ctx, newPool(t, srv.DSN()), schema, Up); err != nil {
				t.Fatal(err)
			}
			clock := newTestClock()
			b, err := tc.open(ctx, bouncer.DSN(), Options{Schema: schema, Migrate: MigrateVerify, Pooler: PoolerTransaction, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !b.transactionPooled() {
				t.Fatal("the backend does not run as behind a transaction pooler")
			}
			testCompleteKeyTx(t, b, clock, false, true)
		})
	}
}

func testCompleteKeyTx(t *testing.T, b *Backend, clock *testClock, own, pooled bool) {
	ctx := t.Context()
	table := quoteIdent(b.schema) + ".app_payments"
	admin := b.client
	{
		tx, err := admin.Begin(ctx, pooled)
		if err != nil {
			t.Fatal(err)
		}
		if err := txExec(ctx, tx.Raw(), pooled, `CREATE TABLE `+table+` (id text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// begin returns a transaction: the backend's, or one the caller began
	// on the same pool (its Raw then goes to CompleteKeyTx).
	begin := func() (contract.Tx, any) {
		t.Helper()
		tx, err := b.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if own {
			return tx, tx.Raw()
		}
		return tx, tx
	}
	paid := func(id string) bool {
		t.Helper()
		tx, err := admin.Begin(ctx, pooled)
		if err != nil {
			t.Fatal(err)
		}
		defer rollback(ctx, tx)
		var n int64
		if _, err := tx.QueryRow(ctx, read, `SELECT count(*) FROM `+table+` WHERE id = $1::text`, []any{id}, &n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	req := func(key string) contract.ClaimRequest {
		return contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: "fp", TTL: 2 * time.Second}
	}
	out := contract.Outcome{Code: 201, Body: []byte("paid")}

	// Commit: the caller's row and the outcome both.
	cl, err := b.ClaimKey(ctx, req("k-commit"))
	if err != nil {
		t.Fatal(err)
	}
	tx, raw := begin()
	if _, ok := tx.Raw().(pgx.Tx); ok != (b.Pool() != nil) {
		t.Errorf("Raw is %T on a backend with pool %v", tx.Raw(), b.Pool() != nil)
	}
	if err := txExec(ctx, tx.Raw(), pooled, `INSERT INTO `+table+` (id) VALUES ($1)`, "k-commit"); err != nil {
		t.Fatal(err)
	}
	c := contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: out, Retain: time.Hour, Tombstone: 2 * time.Hour}
	rec, err := b.CompleteKeyTx(ctx, raw, c)
	if err != nil || rec.State != contract.KeyCompleted || rec.Outcome == nil || string(rec.Outcome.Body) != "paid" ||
		!rec.ForgetAt.Equal(rec.CompletedAt.Add(2*time.Hour)) || !rec.ExpiresAt.Equal(rec.CompletedAt.Add(time.Hour)) {
		t.Fatalf("CompleteKeyTx = %+v, %v", rec, err)
	}
	// Before the commit, nobody sees it.
	if got, err := b.GetKey(ctx, c.KeyRef); err != nil || got.State != contract.KeyClaimed {
		t.Errorf("GetKey before the commit = %+v, %v; want the claim", got, err)
	}
	// A reclaim started now (the claim lapsed) waits for the transaction.
	clock.advance(time.Minute)
	type claimed struct {
		c   contract.Claim
		err error
	}
	reclaim := make(chan claimed, 1)
	go func() {
		c, err := b.ClaimKey(ctx, req("k-commit"))
		reclaim <- claimed{c, err}
	}()
	select {
	case r := <-reclaim:
		t.Fatalf("a reclaim answered while the completing transaction was open: %+v, %v", r.c, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-reclaim
	if r.err != nil || r.c.Kind != contract.ClaimCompleted || string(r.c.Record.Outcome.Body) != "paid" {
		t.Errorf("the reclaim after the commit = %+v, %v; want the completed key", r.c, r.err)
	}
	if !paid("k-commit") {
		t.Error("the caller's row was not committed with the outcome")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Errorf("Rollback after Commit = %v, want nil", err)
	}
	// A retry with the same token in a new transaction: the stored record.
	tx2, raw2 := begin()
	again, err := b.CompleteKeyTx(ctx, raw2, c)
	if err != nil || again.State != contract.KeyCompleted || !again.CompletedAt.Equal(rec.CompletedAt) {
		t.Errorf("retried CompleteKeyTx = %+v, %v; want the stored record", again, err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Rollback: the claim as before, still the token's.
	cl, err = b.ClaimKey(ctx, req("k-rollback"))
	if err != nil {
		t.Fatal(err)
	}
	tx, raw = begin()
	if err := txExec(ctx, tx.Raw(), pooled, `INSERT INTO `+table+` (id) VALUES ($1)`, "k-rollback"); err != nil {
		t.Fatal(err)
	}
	c = contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: out, Retain: time.Hour}
	if _, err := b.CompleteKeyTx(ctx, raw, c); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetKey(ctx, c.KeyRef); err != nil || got.State != contract.KeyClaimed || !got.LeaseUntil.Equal(cl.Record.LeaseUntil) {
		t.Errorf("GetKey after the rollback = %+v, %v; want the claim as it was", got, err)
	}
	if paid("k-rollback") {
		t.Error("the caller's row survived the rollback")
	}
	if _, err := b.CompleteKey(ctx, c); err != nil {
		t.Errorf("CompleteKey by the same token after the rollback = %v", err)
	}
	if _, err := b.CompleteKeyTx(ctx, raw, c); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("CompleteKeyTx in a rolled back transaction = %v, want InvalidArgument", err)
	}

	// A stale token: Fenced; the transaction rolls back.
	tx, raw = begin()
	_, err = b.CompleteKeyTx(ctx, raw, contract.Completion{KeyRef: contract.KeyRef{Scope: "s", Key: "k-none"}, Token: "stale", Outcome: out, Retain: time.Hour})
	if contract.CodeOf(err) != contract.Fenced {
		t.Errorf("CompleteKeyTx with a stale token = %v, want Fenced", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Error(err)
	}
}

// TestCommitAfterAFailedStatementStoresNothing: a COMMIT of a transaction
// in which a statement failed rolls back; Commit says so, and it is not
// OutcomeUnknown.
func TestCommitAfterAFailedStatementStoresNothing(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	tx, err := b.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := txExec(ctx, tx.Raw(), false, `SELECT 1/0`); err == nil {
		t.Fatal("division by zero succeeded")
	}
	err = tx.Commit(ctx)
	if err == nil || contract.CodeOf(err) == contract.OutcomeUnknown || !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("Commit after a failed statement = %v (code %v)", err, contract.CodeOf(err))
	}
}
