package postgres

import (
	"context"
	"errors"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
)

// Tx is a transaction of the caller's that [Backend.FenceTx] checks a fence
// in: a pgx.Tx (from a *pgxpool.Pool, a *pgx.Conn, …) or a *sql.Tx (from a
// *sql.DB on lib/pq, pgx's stdlib or any other PostgreSQL driver). Any
// other value is rejected with InvalidArgument.
type Tx any

// FenceTx checks fence inside the caller's own transaction tx and holds the
// lease row with a share lock until tx ends, so that the caller's writes to
// its own tables commit only while the fence is valid: no takeover, renewal
// or release of that lease can commit before tx does (they wait for it).
// It returns nil when the lease on fence.Resource in scope is held by
// fence.Owner with fence.Token and expires more than the tolerance after the
// current statement's time (or the injected clock), and Fenced otherwise.
//
// tx may be a pgx.Tx or a *sql.Tx (see [Tx]), whichever client library the
// backend itself runs on: both run the same statement, with the same
// guarantees and hazards. Use it as the first statement of a READ COMMITTED
// transaction, then write:
//
//	tx, _ := pool.Begin(ctx) // or db.BeginTx(ctx, nil)
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
// the same database and see the backend's schema.
//
// A nil tx or fence, a tx of another type, or a transaction that was
// already committed or rolled back → InvalidArgument.
func (b *Backend) FenceTx(ctx context.Context, tx Tx, scope contract.Scope, fence *contract.Fence) error {
	if b.closed.Load() {
		return errClosed()
	}
	if fence == nil {
		return invalid("FenceTx needs a fence")
	}
	q, err := pgclient.UserTx(tx)
	switch {
	case errors.Is(err, pgclient.ErrNoTx):
		return invalid("FenceTx needs a transaction")
	case err != nil:
		return invalid("FenceTx needs a pgx.Tx or a *sql.Tx")
	}
	var r tokenRow
	found, err := q.QueryRow(ctx, qFenceTx.kind, qFenceTx.sql(b.st), qFenceTx.args(b.fenceTxParams(scope, fence)), qFenceTx.dest(&r)...)
	switch {
	case pgclient.TxDone(err):
		return &contract.Error{Code: contract.InvalidArgument, Msg: "transaction is already committed or rolled back", Err: err}
	case err != nil:
		return classify(ctx, err, qFenceTx.kind)
	case !found:
		return &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	return nil
}
