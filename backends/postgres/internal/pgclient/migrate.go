package pgclient

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
)

// MigrationTx is the one transaction of the backend's migration driver.
// Its statements carry no parameters and run with the simple query
// protocol, which allows several statements in one text and prepares
// nothing.
type MigrationTx interface {
	Exec(ctx context.Context, sql string) error
	// Query scans every row into dest, calling row after each.
	Query(ctx context.Context, sql string, dest []any, row func() error) error
	// QueryRow scans the one row the statement returns.
	QueryRow(ctx context.Context, sql string, dest ...any) error
	Commit(ctx context.Context) error
	// Rollback ends the transaction; a failure leaves nothing to do (the
	// client library closes a connection it could not roll back).
	Rollback()
}

// rollbackTimeout bounds a rollback, which runs after the context may have
// ended.
const rollbackTimeout = 10 * time.Second

// BeginMigration begins the migration transaction on c.
func (c Client) BeginMigration(ctx context.Context) (MigrationTx, error) {
	if c.pool != nil {
		tx, err := c.pool.Begin(ctx) // BEGIN has no parameters: simple protocol
		if err != nil {
			return nil, err
		}
		return pgxMigrationTx{tx: tx, ctx: ctx}, nil
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	t := sqlMigrationTx{tx: tx}
	if IsStdlib(c.db) {
		// pgx's stdlib hands a query option through: without it, a query
		// runs in the connection's default mode, by default a named
		// prepared statement. (Exec without arguments always runs with
		// the simple protocol, in pgx and in lib/pq, and so does a lib/pq
		// query without arguments.)
		t.queryOpts = []any{pgx.QueryExecModeSimpleProtocol}
	}
	return t, nil
}

type pgxMigrationTx struct {
	tx  pgx.Tx
	ctx context.Context // for the rollback's values
}

func (t pgxMigrationTx) Exec(ctx context.Context, sql string) error {
	_, err := t.tx.Exec(ctx, sql) // no arguments: the simple protocol
	return err
}

func (t pgxMigrationTx) Query(ctx context.Context, sql string, dest []any, row func() error) error {
	rows, err := t.tx.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := row(); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (t pgxMigrationTx) QueryRow(ctx context.Context, sql string, dest ...any) error {
	return t.tx.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(dest...)
}

func (t pgxMigrationTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t pgxMigrationTx) Rollback() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), rollbackTimeout)
	defer cancel()
	_ = t.tx.Rollback(ctx)
}

type sqlMigrationTx struct {
	tx        *sql.Tx
	queryOpts []any
}

func (t sqlMigrationTx) Exec(ctx context.Context, sql string) error {
	_, err := t.tx.ExecContext(ctx, sql)
	return err
}

func (t sqlMigrationTx) Query(ctx context.Context, sql string, dest []any, row func() error) error {
	rows, err := t.tx.QueryContext(ctx, sql, t.queryOpts...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := row(); err != nil {
			return err
		}
	}
	return closeRows(rows)
}

func (t sqlMigrationTx) QueryRow(ctx context.Context, sql string, dest ...any) error {
	return t.tx.QueryRowContext(ctx, sql, t.queryOpts...).Scan(dest...)
}

func (t sqlMigrationTx) Commit(context.Context) error { return t.tx.Commit() }

func (t sqlMigrationTx) Rollback() { _ = t.tx.Rollback() }
