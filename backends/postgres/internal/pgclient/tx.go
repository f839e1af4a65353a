package pgclient

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
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
func UserTx(tx any) (Querier, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		return pgxTx{tx: tx}, nil
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

// pgxTx runs statements in a caller's pgx.Tx.
type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) QueryRow(ctx context.Context, _ Kind, sql string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRow(ctx, sql, args...).Scan(dest...)
	found := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return found, err
}

func (t pgxTx) Query(ctx context.Context, _ Kind, sql string, args []any, dest []any, row func() error) error {
	return pgxQuery(ctx, t.tx, sql, args, dest, row)
}

// sqlTx runs statements in a caller's *sql.Tx.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) QueryRow(ctx context.Context, _ Kind, query string, args []any, dest ...any) (bool, error) {
	rows, err := t.tx.QueryContext(ctx, query, SQLArgs(args)...)
	if err != nil {
		return false, err
	}
	return scanOne(rows, dest)
}

func (t sqlTx) Query(ctx context.Context, kind Kind, query string, args []any, dest []any, row func() error) error {
	rows, err := t.tx.QueryContext(ctx, query, SQLArgs(args)...)
	if err != nil {
		return err
	}
	return scanAll(rows, kind, dest, row)
}
