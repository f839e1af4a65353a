package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// querier runs the backend's statements. It is the only thing a client
// library has to provide: pgxQuerier for a pgx pool, sqlQuerier for
// database/sql (lib/pq, pgx's stdlib, any other PostgreSQL driver). Both
// receive the same SQL text and the same arguments (nil, string, int64,
// int, float64, []byte, time.Time: what a query's args method returns) and
// scan into the same destinations (string, int64, bool, []byte, time.Time
// and pointers to them for NULLable columns: what its dest method returns).
// kind, the statement's (see query), says whether the statement may change
// anything, which decides how a client library may retry it.
type querier interface {
	// queryRow runs a statement that returns at most one row and scans it
	// into dest. found is false when there was no row.
	queryRow(ctx context.Context, kind opKind, sql string, args []any, dest ...any) (found bool, err error)
	// query runs a statement, scans every row into dest and calls row
	// after each.
	query(ctx context.Context, kind opKind, sql string, args []any, dest []any, row func() error) error
}

// pgxQuerier runs statements on a pgx pool, one round trip each (pgx caches
// the prepared statement per connection after its first use). pgx never
// re-sends a statement by itself, so reads and writes go the same way.
//
// It acquires the connection itself instead of letting pool.QueryRow do it,
// because the two failures look alike and mean opposite things: pgxpool
// returns the bare context error when the context ends while waiting for a
// connection (nothing sent), and pgconn also returns a bare context.Canceled
// when the context is cancelled while the statement is in flight (it may
// have applied). An acquisition failure is therefore marked notSent here; a
// failure after it is the statement's, and classify decides from pgconn's
// own SafeToRetry whether it happened before sending.
type pgxQuerier struct {
	pool *pgxpool.Pool
	// sessionless: run every statement in pgx's exec mode (an unnamed
	// statement, one round trip), for a transaction pooler; otherwise in
	// the pool's default mode (a cached prepared statement).
	sessionless bool
}

// withMode prepends the query exec mode when q is sessionless.
func (q pgxQuerier) withMode(args []any) []any {
	if !q.sessionless {
		return args
	}
	return append([]any{pgx.QueryExecModeExec}, args...)
}

// acquire takes a connection; a failure means nothing was sent.
func (q pgxQuerier) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return nil, notSentError{err}
	}
	return conn, nil
}

func (q pgxQuerier) queryRow(ctx context.Context, _ opKind, sql string, args []any, dest ...any) (bool, error) {
	conn, err := q.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	err = conn.QueryRow(ctx, sql, q.withMode(args)...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, sentError(err)
}

func (q pgxQuerier) query(ctx context.Context, _ opKind, sql string, args []any, dest []any, row func() error) error {
	conn, err := q.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, sql, q.withMode(args)...)
	if err != nil {
		return sentError(err)
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
	return sentError(rows.Err())
}

// sentError marks a bare context error returned after the connection was
// acquired: pgconn returns context.Canceled itself when the context is
// cancelled while the statement is in flight. (pgconn marks failures before
// sending, including a context that had already ended, as SafeToRetry.)
func sentError(err error) error {
	if err == context.Canceled || err == context.DeadlineExceeded {
		return inFlightError{err}
	}
	return err
}

// sqlQuerier runs statements on a database/sql pool.
//
// database/sql re-sends a statement on another connection when the driver
// returns driver.ErrBadConn (DB.QueryContext tries up to three times). That
// error is meant for failures before anything was sent, but lib/pq also
// returns it when the connection broke after the statement was sent (lib/pq
// #939: a write applied twice). So:
//
//   - A read runs through DB.QueryContext: re-sending a read is harmless,
//     and the retry hides a stale pooled connection.
//   - A write first takes a connection of its own with DB.Conn, which
//     database/sql may retry (nothing has been sent yet), and then runs on
//     it with Conn.QueryContext, which database/sql never retries. A failure
//     of the acquisition is marked notSent; a failure after it is the
//     statement's, and classify reports it as OutcomeUnknown unless it is
//     certainly from before sending (pgx's stdlib returns ErrBadConn only
//     then; lib/pq and unknown drivers do not promise it).
type sqlQuerier struct {
	db *sql.DB
	// watch, when set (Open with driver=pq), cuts the connection of a
	// statement that goes on after its context ended; see pqConnector.
	watch *pqConnector
	// badConnBeforeSend: the driver returns driver.ErrBadConn only when
	// nothing was sent (pgx's stdlib checks pgconn.SafeToRetry).
	badConnBeforeSend bool
	// stdlibExec: pass pgx.QueryExecModeExec to pgx's stdlib with every
	// statement (its connections hand options through), for a transaction
	// pooler.
	stdlibExec bool
}

func newSQLQuerier(db *sql.DB) sqlQuerier {
	return sqlQuerier{db: db, badConnBeforeSend: isStdlib(db)}
}

// isStdlib reports whether db runs on pgx's stdlib driver.
func isStdlib(db *sql.DB) bool {
	_, ok := db.Driver().(*stdlib.Driver)
	return ok
}

// notSentError marks a failure that happened before the statement was
// sent: the write was certainly not applied. classify sees it through
// pgconn.SafeToRetry.
type notSentError struct{ err error }

func (e notSentError) Error() string     { return e.err.Error() }
func (e notSentError) Unwrap() error     { return e.err }
func (e notSentError) SafeToRetry() bool { return true }

// inFlightError marks a bare context error that database/sql returned after
// the statement was sent (classify otherwise takes a bare context error for
// the wait for a pooled connection).
type inFlightError struct{ err error }

func (e inFlightError) Error() string { return e.err.Error() }
func (e inFlightError) Unwrap() error { return e.err }

// sqlArgs converts the backend's arguments for database/sql drivers so that
// they reach the server as pgx sends them: a nil []byte is NULL (not an
// empty bytea), and a time is cut to the microsecond, PostgreSQL's
// precision, as pgx does (text-format drivers such as lib/pq would make the
// server round it instead).
func sqlArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case []byte:
			if v == nil {
				a = nil
			}
		case time.Time:
			a = v.Truncate(time.Microsecond)
		}
		out[i] = a
	}
	return out
}

// rows runs a statement and returns its rows and a function that releases
// what the statement held (call it after closing the rows).
func (q sqlQuerier) rows(ctx context.Context, kind opKind, query string, args []any) (*sql.Rows, func(), error) {
	args = sqlArgs(args)
	if q.stdlibExec {
		args = append([]any{pgx.QueryExecModeExec}, args...)
	}
	if kind == read && q.watch == nil {
		rows, err := q.db.QueryContext(ctx, query, args...)
		return rows, func() {}, err
	}
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, nil, notSentError{err}
	}
	if err := ctx.Err(); err != nil {
		_ = conn.Close()
		return nil, nil, notSentError{err}
	}
	release := func() { _ = conn.Close() }
	if q.watch != nil {
		disarm := q.watch.watch(ctx, conn)
		release = func() {
			if disarm() {
				discard(conn)
			} else {
				_ = conn.Close()
			}
		}
	}
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		release()
		if kind == read && errors.Is(err, driver.ErrBadConn) {
			// A read is safe to send again (Backend.do retries it).
			return nil, nil, notSentError{err}
		}
		return nil, nil, q.afterSend(err)
	}
	return rows, release, nil
}

// afterSend marks a write's failure after its connection was acquired.
func (q sqlQuerier) afterSend(err error) error {
	switch {
	case q.badConnBeforeSend && errors.Is(err, driver.ErrBadConn):
		return notSentError{err}
	case err == context.Canceled || err == context.DeadlineExceeded:
		return inFlightError{err}
	}
	return err
}

func (q sqlQuerier) queryRow(ctx context.Context, kind opKind, query string, args []any, dest ...any) (bool, error) {
	rows, release, err := q.rows(ctx, kind, query, args)
	if err != nil {
		return false, err
	}
	found, err := scanOne(rows, dest)
	release()
	if err != nil && kind == write {
		err = q.afterSend(err)
	}
	return found, err
}

func (q sqlQuerier) query(ctx context.Context, kind opKind, query string, args []any, dest []any, row func() error) error {
	rows, release, err := q.rows(ctx, kind, query, args)
	if err != nil {
		return err
	}
	defer release()
	for rows.Next() {
		err := rows.Scan(dest...)
		if err == nil {
			err = row()
		}
		if err != nil {
			_ = rows.Close()
			return err
		}
	}
	err = closeRows(rows)
	if err != nil && kind == write {
		err = q.afterSend(err)
	}
	return err
}

// scanOne scans the first row of rows, if any, into dest and closes rows.
// Closing reads the rest of the result, so an error the server reports
// after the row (the statement failed after all) is returned, as pgx's
// QueryRow does.
func scanOne(rows *sql.Rows, dest []any) (bool, error) {
	var found bool
	var err error
	if rows.Next() {
		found = true
		err = rows.Scan(dest...)
	}
	if cerr := closeRows(rows); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	return found, nil
}

// closeRows closes rows and returns the first error of the result.
func closeRows(rows *sql.Rows) error {
	cerr := rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return cerr
}
