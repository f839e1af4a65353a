package pgclient

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// The errors of UserTx. Their text is for the backend's tests; it maps
// them to InvalidArgument with its own messages.
var (
	ErrNoTx  = errors.New("postgres: no transaction")
	ErrNotTx = errors.New("postgres: not a pgx.Tx or a *sql.Tx")
)

// UserTx returns a Querier that runs statements inside tx, a transaction of
// the caller's: a pgx.Tx (from a *pgxpool.Pool, a *pgx.Conn, …) or a
// *sql.Tx (from a *sql.DB of any PostgreSQL driver), whichever client
// library the backend itself runs on. A nil tx (or nil *sql.Tx) is ErrNoTx;
// a value of another type, ErrNotTx. Statements run as the backend's own
// do on that library, with the same arguments and scan targets; nothing is
// re-sent.
func UserTx(tx any) (Querier, error) { return UserTxExec(tx, false) }

// UserTxExec is UserTx, running the statements on a pgx.Tx in pgx's exec
// mode (unnamed statements) when exec is set: for a backend behind a
// transaction pooler, whose statements must not rely on a prepared
// statement of the session. (A *sql.Tx runs them as its driver does.)
func UserTxExec(tx any, exec bool) (Querier, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		return pgxTx{tx: tx, exec: exec}, nil
	case *sql.Tx:
		if tx == nil {
			return nil, ErrNoTx
		}
		return sqlTx{tx: tx}, nil
	case nil:
		return nil, ErrNoTx
	}
	return nil, ErrNotTx
}

// TxDone reports whether err says the caller's transaction was already
// committed or rolled back.
func TxDone(err error) bool {
	return errors.Is(err, sql.ErrTxDone) || errors.Is(err, pgx.ErrTxClosed)
}

// pgxTx runs statements in a pgx.Tx; exec: in pgx's exec mode.
type pgxTx struct {
	tx   pgx.Tx
	exec bool
}

func (t pgxTx) QueryRow(ctx context.Context, _ Kind, sql string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRow(ctx, sql, withMode(t.exec, args)...).Scan(dest...)
	found := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return found, err
}

func (t pgxTx) Query(ctx context.Context, _ Kind, sql string, args []any, dest []any, row func() error) error {
	return pgxQuery(ctx, t.tx, sql, withMode(t.exec, args), dest, row)
}

// sqlTx runs statements in a *sql.Tx; exec: pgx's stdlib in pgx's exec
// mode.
type sqlTx struct {
	tx   *sql.Tx
	exec bool
}

// args converts args for database/sql, with pgx's exec mode first when
// exec is set (pgx's stdlib takes it as a query option).
func (t sqlTx) args(args []any) []any {
	a := SQLArgs(args)
	if t.exec {
		a = append([]any{pgx.QueryExecModeExec}, a...)
	}
	return a
}

func (t sqlTx) QueryRow(ctx context.Context, _ Kind, query string, args []any, dest ...any) (bool, error) {
	rows, err := t.tx.QueryContext(ctx, query, t.args(args)...)
	if err != nil {
		return false, err
	}
	return scanOne(rows, dest)
}

func (t sqlTx) Query(ctx context.Context, kind Kind, query string, args []any, dest []any, row func() error) error {
	rows, err := t.tx.QueryContext(ctx, query, t.args(args)...)
	if err != nil {
		return err
	}
	return scanAll(rows, kind, dest, row)
}

// Tx is a transaction the backend began on its own pool (Client.Begin):
// its statements run in it through Querier, and the caller's through Raw.
type Tx struct {
	Querier
	raw      any // pgx.Tx or *sql.Tx
	commit   func(ctx context.Context) error
	rollback func(ctx context.Context) error
}

// Raw is the client library's transaction: a pgx.Tx on a pgx pool, a
// *sql.Tx on database/sql.
func (t *Tx) Raw() any { return t.raw }

// Commit sends COMMIT. Its error is the client library's.
func (t *Tx) Commit(ctx context.Context) error { return t.commit(ctx) }

// Rollback rolls the transaction back; after Commit or Rollback it does
// nothing and returns nil. A failure leaves nothing to do: the client
// library closes a connection it could not roll back, and the server then
// rolls the transaction back itself.
func (t *Tx) Rollback(ctx context.Context) error {
	if err := t.rollback(ctx); err != nil && !TxDone(err) {
		return err
	}
	return nil
}

// Begin begins a transaction on c. exec: run the backend's statements in
// it in pgx's exec mode (unnamed statements; for a transaction pooler), on
// pgx and on pgx's stdlib. A failure to begin means nothing was written.
func (c Client) Begin(ctx context.Context, exec bool) (*Tx, error) {
	if c.pool != nil {
		// pgxpool's Tx gives its connection back to the pool when it ends.
		tx, err := c.pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return &Tx{Querier: pgxTx{tx: tx, exec: exec}, raw: tx, commit: tx.Commit, rollback: tx.Rollback}, nil
	}
	// database/sql rolls a transaction back when the context it was begun
	// on ends, and ctx bounds only the beginning (contract.TxCompleter): the
	// transaction lives on a context of its own, which ctx cancels only
	// while BEGIN is still under way, and which ends with the transaction.
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	tx, err := c.db.BeginTx(txCtx, nil)
	if !stop() && err == nil {
		// ctx ended as BEGIN returned: the transaction may already be
		// rolled back. Give it up.
		_ = tx.Rollback()
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &Tx{
		Querier: sqlTx{tx: tx, exec: exec && IsStdlib(c.db)},
		raw:     tx,
		// Commit and Rollback take no context on database/sql: the one they
		// are given ends the transaction's own context, which database/sql
		// watches, so that a hung COMMIT returns when it ends.
		commit: func(cctx context.Context) error {
			defer context.AfterFunc(cctx, cancel)()
			defer cancel()
			return tx.Commit()
		},
		rollback: func(cctx context.Context) error {
			defer context.AfterFunc(cctx, cancel)()
			defer cancel()
			return tx.Rollback()
		},
	}, nil
}

// CommitRolledBack reports whether err, from a COMMIT, says the server
// rolled the transaction back instead because a statement in it had
// failed: nothing was committed.
func CommitRolledBack(err error) bool {
	return errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pq.ErrInFailedTransaction)
}
