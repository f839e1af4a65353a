package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5"
)

// These tests drive the paths where a statement's snapshot misses a commit
// that its write saw: another transaction holds the row, the statement
// blocks on it after taking its snapshot, and the other transaction then
// commits a change.

// blockAndCommit runs op in a goroutine while tx holds a row op needs,
// commits tx once op has had time to block, and returns op's result.
func blockAndCommit[T any](t *testing.T, tx pgx.Tx, op func() (T, error)) (T, error) {
	t.Helper()
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := op()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		t.Fatalf("the operation returned (%v, %v) without waiting for the open transaction", r.v, r.err)
	case <-time.After(250 * time.Millisecond):
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("the operation did not return after the commit")
	}
	panic("unreachable")
}

func TestUpdateWorkflowReadsAgainWhenItsSnapshotIsStale(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	w, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1", Status: "running"})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := b.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `UPDATE `+quoteIdent(b.schema)+`.workflows SET revision = revision + 1 WHERE id = 'wf-1'`); err != nil {
		t.Fatal(err)
	}
	_, err = blockAndCommit(t, tx, func() (contract.Workflow, error) {
		return b.UpdateWorkflow(ctx, contract.Update{ID: "wf-1", ExpectStatus: "running", ExpectRevision: w.Revision, Status: "running"})
	})
	var ce *contract.Error
	if contract.CodeOf(err) != contract.Conflict || !asError(err, &ce) || ce.Details == nil || ce.Details.ActualRevision != w.Revision+1 {
		t.Fatalf("UpdateWorkflow = %v, want Conflict with actual revision %d", err, w.Revision+1)
	}
}

func TestClaimKeyRunsAgainWhenItsSnapshotMissedTheRow(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	tx, err := b.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	// Another client's claim, not yet committed.
	if _, err := tx.Exec(ctx, `INSERT INTO `+quoteIdent(b.schema)+`.idempotency_keys
		(scope, key, fingerprint, state, token, lease_until, created_at) VALUES ('', 'k-1', 'fp', 'claimed', 'other', $1::timestamptz + interval '1 minute', $1)`, clock.now()); err != nil {
		t.Fatal(err)
	}
	c, err := blockAndCommit(t, tx, func() (contract.Claim, error) {
		return b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "k-1"}, Fingerprint: "fp", TTL: time.Minute})
	})
	if err != nil || c.Kind != contract.ClaimInFlight || c.Token != "" {
		t.Fatalf("ClaimKey = %+v, %v; want InFlight", c, err)
	}
}

func TestCompleteKeyRunsAgainWhenAConcurrentRetryCompletedIt(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "k-1"}, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := b.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	// The same completion, from a retry that got there first.
	if _, err := tx.Exec(ctx, `UPDATE `+quoteIdent(b.schema)+`.idempotency_keys SET state = 'completed', outcome_code = 201,
		completed_at = created_at, expires_at = created_at + interval '1 hour', lease_until = NULL WHERE key = 'k-1'`); err != nil {
		t.Fatal(err)
	}
	rec, err := blockAndCommit(t, tx, func() (contract.KeyRecord, error) {
		return b.CompleteKey(ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: 201}, Retain: time.Hour})
	})
	if err != nil || rec.State != contract.KeyCompleted || rec.Outcome == nil || rec.Outcome.Code != 201 {
		t.Fatalf("CompleteKey = %+v, %v; want the stored completion", rec, err)
	}
}

func TestDeadlocksAreRetriedThenUnavailable(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	calls := 0
	err := b.do(ctx, write, func() error {
		calls++
		if calls < 3 {
			return pgErr("40P01")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("do = %v after %d calls, want success on the third", err, calls)
	}
	calls = 0
	err = b.do(ctx, write, func() error { calls++; return pgErr("40001") })
	if contract.CodeOf(err) != contract.Unavailable || calls != maxTxRetries+1 {
		t.Errorf("do = %v after %d calls, want Unavailable after %d", err, calls, maxTxRetries+1)
	}
}
