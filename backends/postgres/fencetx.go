package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5"
)

// FenceTx checks fence inside the caller's own transaction tx and holds the
// lease row with a share lock until tx ends, so that the caller's writes to
// its own tables commit only while the fence is valid: no takeover, renewal
// or release of that lease can commit before tx does (they wait for it).
// It returns nil when the lease on fence.Resource in scope is held by
// fence.Owner with fence.Token and expires more than the tolerance after the
// current statement's time (or the injected clock), and Fenced otherwise.
//
// Use it as the first statement of a READ COMMITTED transaction, then write:
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	if err := backend.FenceTx(ctx, tx, scope, lease.Fence()); err != nil {
//		return err // fenced: a newer owner exists
//	}
//	// … writes to your tables …
//	return tx.Commit(ctx)
//
// Hazards: the lock delays a takeover, and the holder's own RenewLease, for
// as long as tx stays open, so keep such transactions short. Under
// REPEATABLE READ or SERIALIZABLE a lease row changed after tx's snapshot
// makes the check fail with a serialization error (Unavailable); run FenceTx
// first in the transaction or use READ COMMITTED. The transaction must be on
// the same database and see the backend's schema; it may come from any
// client library (see FenceSQLTx for database/sql), whichever the backend
// runs on.
func (b *Backend) FenceTx(ctx context.Context, tx pgx.Tx, scope contract.Scope, fence *contract.Fence) error {
	if b.closed.Load() {
		return errClosed()
	}
	if tx == nil || fence == nil {
		return invalid("FenceTx needs a transaction and a fence")
	}
	var token int64
	err := tx.QueryRow(ctx, b.st.fenceTx, b.now(), b.tolSecs, string(scope), fence.Resource, fence.Owner, fence.Token).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	if err != nil {
		return classify(ctx, err, read)
	}
	return nil
}

// FenceSQLTx is FenceTx for a database/sql transaction (lib/pq, pgx's
// stdlib, …): the same statement, the same guarantees and hazards.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	defer tx.Rollback()
//	if err := backend.FenceSQLTx(ctx, tx, scope, lease.Fence()); err != nil {
//		return err // fenced: a newer owner exists
//	}
//	// … writes to your tables …
//	return tx.Commit()
//
// A transaction that was already committed or rolled back →
// InvalidArgument.
func (b *Backend) FenceSQLTx(ctx context.Context, tx *sql.Tx, scope contract.Scope, fence *contract.Fence) error {
	if b.closed.Load() {
		return errClosed()
	}
	if tx == nil || fence == nil {
		return invalid("FenceSQLTx needs a transaction and a fence")
	}
	var token int64
	rows, err := tx.QueryContext(ctx, b.st.fenceTx, sqlArgs([]any{b.now(), b.tolSecs, string(scope), fence.Resource, fence.Owner, fence.Token})...)
	var found bool
	if err == nil {
		found, err = scanOne(rows, []any{&token})
	}
	switch {
	case errors.Is(err, sql.ErrTxDone):
		return &contract.Error{Code: contract.InvalidArgument, Msg: "transaction is already committed or rolled back", Err: err}
	case err != nil:
		return classify(ctx, err, read)
	case !found:
		return &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	return nil
}
