package postgres

import (
	"context"
	"errors"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
)

var _ contract.TxCompleter = (*Backend)(nil)

// BeginTx implements contract.TxCompleter: it begins a READ COMMITTED
// transaction on the backend's own pool. Its Raw is a pgx.Tx on a pgx
// pool and a *sql.Tx on database/sql, for the caller's own statements;
// CompleteKeyTx stores the outcome in it. Behind a transaction pooler the
// backend's statements in it run without prepared statements, as its
// others do; run yours the same way (pgx.QueryExecModeExec, or a DSN's
// default_query_exec_mode=exec).
func (b *Backend) BeginTx(ctx context.Context) (contract.Tx, error) {
	if b.closed.Load() {
		return nil, errClosed()
	}
	var tx *pgclient.Tx
	// BEGIN changes nothing: a failure is reported as a read's.
	err := b.do(ctx, read, func() (err error) {
		tx, err = b.client.Begin(ctx, b.execMode())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &backendTx{tx: tx}, nil
}

// backendTx is a transaction BeginTx began (contract.Tx).
type backendTx struct{ tx *pgclient.Tx }

func (t *backendTx) Raw() any { return t.tx.Raw() }

// Commit commits. A COMMIT that failed after it was sent (the connection
// broke, the context ended while it was in flight) is OutcomeUnknown; a
// COMMIT that the server answered with an error, or that rolled back a
// transaction in which a statement had failed, stored nothing.
func (t *backendTx) Commit(ctx context.Context) error {
	err := t.tx.Commit(ctx)
	switch {
	case err == nil:
		return nil
	case pgclient.TxDone(err):
		return &contract.Error{Code: contract.InvalidArgument, Msg: "transaction is already committed or rolled back", Err: err}
	case pgclient.CommitRolledBack(err):
		return &contract.Error{Code: contract.Unavailable, Msg: "a statement of the transaction had failed: COMMIT rolled it back and nothing was stored", Err: err}
	}
	return classify(ctx, err, write)
}

// Rollback rolls back; after Commit or Rollback it does nothing.
func (t *backendTx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(ctx); err != nil {
		// The client library closed the connection: the server rolls the
		// transaction back itself.
		return classify(ctx, err, read)
	}
	return nil
}

// CompleteKeyTx implements contract.TxCompleter: CompleteKey inside tx,
// which is a transaction from BeginTx or the caller's own on the same
// database: a pgx.Tx or a *sql.Tx (as for FenceTx, see [Tx]), or any value
// whose Raw method returns one (a contract.Tx that wraps BeginTx's).
//
// One statement checks that c.Token still holds the claim (and c.Fence,
// if set, holding the lease row with a share lock as FenceTx does), stores
// the outcome, and, being an UPDATE, keeps the key's row locked until tx
// ends: a reclaim of the key waits for tx and then finds the key
// completed (commit) or still claimed by c.Token (rollback). Its clock is
// the statement's (statement_timestamp()), not the transaction's start. It
// returns what a commit stores; a retry with the same token in a new
// transaction after the first committed returns the stored record, as
// CompleteKey does (the tombstone, once the outcome expired).
//
// Errors: a stale token, an expired claim or an invalid fence → Fenced; a
// failure of the statement (the transaction cannot commit then) →
// Unavailable or the server error's code, never OutcomeUnknown: nothing is
// stored unless the transaction commits, and the COMMIT's error says
// whether it did. Use a READ COMMITTED transaction: under REPEATABLE READ
// or SERIALIZABLE a key row changed after the transaction's snapshot fails
// the statement with a serialization error. A nil tx, a tx of another
// type, or one already committed or rolled back → InvalidArgument.
func (b *Backend) CompleteKeyTx(ctx context.Context, tx any, c contract.Completion) (contract.KeyRecord, error) {
	if b.closed.Load() {
		return contract.KeyRecord{}, errClosed()
	}
	var q pgclient.Querier
	switch t := tx.(type) {
	case *backendTx:
		q = t.tx
	case interface{ Raw() any }:
		tx = t.Raw()
	}
	if q == nil {
		var err error
		q, err = pgclient.UserTxExec(tx, b.execMode())
		switch {
		case errors.Is(err, pgclient.ErrNoTx):
			return contract.KeyRecord{}, invalid("CompleteKeyTx needs a transaction")
		case err != nil:
			return contract.KeyRecord{}, invalid("CompleteKeyTx needs a transaction from BeginTx, a pgx.Tx or a *sql.Tx")
		}
	}
	p := b.completeKeyParams(c)
	text := qCompleteKeyTx.sql(b.st)
	for attempt := 0; attempt < maxStaleRetries; attempt++ {
		p.Now = b.nowParam()
		var r completeKeyRow
		found, err := q.QueryRow(ctx, qCompleteKeyTx.kind, text, qCompleteKeyTx.args(p), qCompleteKeyTx.dest(&r)...)
		switch {
		case pgclient.TxDone(err):
			return contract.KeyRecord{}, &contract.Error{Code: contract.InvalidArgument, Msg: "transaction is already committed or rolled back", Err: err}
		case err != nil:
			// Classified as a read: the transaction cannot commit after a
			// failed statement, so nothing of it can be stored.
			return contract.KeyRecord{}, classify(ctx, err, read)
		}
		if rec, err, decided := completeResult(c, found, &r); decided {
			return rec, err
		}
	}
	return contract.KeyRecord{}, errContention()
}
