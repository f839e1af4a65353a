package contract

import "context"

// TxCompleter is a backend whose records live in a database the caller can
// write to as well (PostgreSQL, SQLite, Redis): it stores an idempotency key's
// outcome inside a transaction that also holds the caller's own effect, so
// that both commit or neither does. This closes the hazard of the plain
// path, where the effect commits and the process dies (or the store stays
// unreachable) before CompleteKey: the claim then expires and a retry runs
// the request a second time.
//
// Backends without a transaction the caller can share (memory, etcd) do not
// implement it, and the Store's CompleteKeyTx and DoTx return
// Unimplemented.
type TxCompleter interface {
	// BeginTx begins a transaction on the backend's own database: the
	// one its records are in, so that the caller's statements and
	// CompleteKeyTx commit together. ctx bounds beginning only: the Store
	// cancels it when BeginTx returns, so the transaction must not end
	// with it (with database/sql, begin on context.WithoutCancel(ctx)).
	BeginTx(ctx context.Context) (Tx, error)

	// CompleteKeyTx is CompleteKey inside tx: a Tx from BeginTx, or the
	// caller's own transaction on the same database in the client
	// library's type (the backend documents which: PostgreSQL takes a
	// pgx.Tx or a *sql.Tx, SQLite a *sql.Tx on the same file, Redis only
	// its own Tx from BeginTx).
	//
	// Its statement checks, like CompleteKey, that c.Token still holds the
	// claim (and c.Fence, if set), and it locks the key's record until tx
	// ends, so that no reclaim can take the key meanwhile: a reclaim waits
	// for the transaction. (Redis locks nothing: a reclaim does not wait,
	// and the commit instead fails with Fenced, applying nothing, if the
	// key's record changed after CompleteKeyTx checked it.) The returned
	// record is what a commit will store. If tx commits, the outcome is
	// stored (and the effect with it); if it rolls back, the claim is as
	// it was before, still held by c.Token until its lease ends. A lost reply to the commit is
	// OutcomeUnknown: a retried claim of the same request then replays the
	// stored outcome or, once the claim has expired, runs the request
	// again — never both. A retried CompleteKeyTx in a new transaction
	// with the same token returns the stored record if the first
	// committed, as CompleteKey does.
	CompleteKeyTx(ctx context.Context, tx any, c Completion) (KeyRecord, error)
}

// Tx is a transaction begun by [TxCompleter.BeginTx].
type Tx interface {
	// Raw is the client library's own transaction (a pgx.Tx, a *sql.Tx),
	// for the caller's statements.
	Raw() any
	// Commit commits the transaction. An error after the COMMIT was sent
	// is OutcomeUnknown.
	Commit(ctx context.Context) error
	// Rollback rolls the transaction back; after Commit it does nothing
	// and returns nil.
	Rollback(ctx context.Context) error
}
