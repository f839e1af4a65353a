package pgclient

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

// Kind says whether a statement may change anything, which decides how a
// client library may retry it and how a failure after sending is reported.
type Kind bool

const (
	Read  Kind = false // changes nothing: safe to send again
	Write Kind = true  // may change something
)

// Querier runs the backend's statements. It is the only thing a client
// library has to provide: pgxQuerier for a pgx pool, sqlQuerier for
// database/sql (lib/pq, pgx's stdlib, any other PostgreSQL driver). Both
// receive the same SQL text and the same arguments (nil, string, int64,
// int, float64, []byte, time.Time: what a query's args method returns) and
// scan into the same destinations (string, int64, bool, []byte, time.Time
// and pointers to them for NULLable columns: what its dest method returns).
// kind, the statement's, says whether the statement may change anything,
// which decides how a client library may retry it.
type Querier interface {
	// QueryRow runs a statement that returns at most one row and scans it
	// into dest. found is false when there was no row.
	QueryRow(ctx context.Context, kind Kind, sql string, args []any, dest ...any) (found bool, err error)
	// Query runs a statement, scans every row into dest and calls row
	// after each.
	Query(ctx context.Context, kind Kind, sql string, args []any, dest []any, row func() error) error
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
// failure after it is the statement's, and the backend's classification
// decides from pgconn's own SafeToRetry whether it happened before sending.
type pgxQuerier struct {
	pool *pgxpool.Pool
	// sessionless: run every statement in pgx's exec mode (an unnamed
	// statement, one round trip), for a transaction pooler; otherwise in
	// the pool's default mode (a cached prepared statement).
	sessionless bool
}

// withMode prepends the query exec mode when sessionless is set.
func withMode(sessionless bool, args []any) []any {
	if !sessionless {
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

func (q pgxQuerier) QueryRow(ctx context.Context, _ Kind, sql string, args []any, dest ...any) (bool, error) {
	conn, err := q.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	return pgxQueryRow(ctx, conn, sql, withMode(q.sessionless, args), dest)
}

func (q pgxQuerier) Query(ctx context.Context, _ Kind, sql string, args []any, dest []any, row func() error) error {
	conn, err := q.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return pgxQuery(ctx, conn, sql, withMode(q.sessionless, args), dest, row)
}

// pgxConn is a connection pgx runs statements on: a *pgxpool.Conn, or the
// *pgx.Conn under a connection of pgx's stdlib.
type pgxConn interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgxQueryRow runs a statement on an acquired pgx connection.
func pgxQueryRow(ctx context.Context, conn pgxConn, sql string, args, dest []any) (bool, error) {
	err := conn.QueryRow(ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, sentError(err)
}

// pgxQuery runs a statement on an acquired pgx connection, row by row.
func pgxQuery(ctx context.Context, conn pgxConn, sql string, args, dest []any, row func() error) error {
	rows, err := conn.Query(ctx, sql, args...)
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

// sqlQuerier runs statements on a database/sql pool, in one of three ways:
//
//   - On pgx's stdlib (Open with driver=pgx-stdlib, or postgres.New on a
//     *sql.DB of pgx's stdlib), it takes a connection with DB.Conn and runs
//     the statement on the *pgx.Conn underneath (Conn.Raw) exactly as
//     pgxQuerier does on a pooled connection: pgx's per-connection cache of
//     prepared statements, pgx's own scanning, pgconn's SafeToRetry to tell
//     a failure before sending, and no database/sql machinery in between
//     (which cost 10–30 % and re-sends after driver.ErrBadConn). With
//     stdlibExec (a transaction pooler) it passes pgx.QueryExecModeExec.
//   - On lib/pq opened by Open (driver=pq), it takes a connection with
//     DB.Conn and, when the connection was found to reach the server
//     directly (see pqConnector) and the pooler is not a transaction
//     pooler (prepare), runs the statement as a named prepared statement
//     that the connection prepared the first time it ran it (see
//     runPrepared): PostgreSQL then parses and plans it once per
//     connection instead of on every call.
//   - Otherwise (lib/pq behind a transaction pooler or in a *sql.DB given
//     to postgres.New, any other driver) it runs the statement through
//     database/sql, as an unnamed statement.
//
// database/sql re-sends a statement on another connection when the driver
// returns driver.ErrBadConn (DB.QueryContext tries up to three times). That
// error is meant for failures before anything was sent, but lib/pq also
// returns it when the connection broke after the statement was sent (lib/pq
// #939: a write applied twice). So on the database/sql path:
//
//   - A read runs through DB.QueryContext: re-sending a read is harmless,
//     and the retry hides a stale pooled connection.
//   - A write first takes a connection of its own with DB.Conn, which
//     database/sql may retry (nothing has been sent yet), and then runs on
//     it with Conn.QueryContext, which database/sql never retries. A failure
//     of the acquisition is marked notSent; a failure after it is the
//     statement's, and the backend's classify reports it as OutcomeUnknown
//     unless it is certainly from before sending.
//
// The two direct paths never go through database/sql's query methods, so
// nothing there is ever re-sent.
type sqlQuerier struct {
	db *sql.DB
	// watch, when set (Open with driver=pq), cuts the connection of a
	// statement that goes on after its context ended; see pqConnector.
	watch *pqConnector
	// pgxConn: the driver is pgx's stdlib; statements run on its *pgx.Conn.
	pgxConn bool
	// stdlibExec: with pgxConn, run every statement in pgx's exec mode
	// (unnamed statements), for a transaction pooler.
	stdlibExec bool
	// prepare: with watch, run statements as named prepared statements on
	// connections that reach the server directly. Never set behind a
	// transaction pooler.
	prepare bool
}

func newSQLQuerier(db *sql.DB) sqlQuerier {
	return sqlQuerier{db: db, pgxConn: IsStdlib(db)}
}

// IsStdlib reports whether db runs on pgx's stdlib driver.
func IsStdlib(db *sql.DB) bool {
	_, ok := db.Driver().(*stdlib.Driver)
	return ok
}

// notSentError marks a failure that happened before the statement was
// sent: the write was certainly not applied. SafeToRetry reports it.
type notSentError struct{ err error }

func (e notSentError) Error() string     { return e.err.Error() }
func (e notSentError) Unwrap() error     { return e.err }
func (e notSentError) SafeToRetry() bool { return true }

// inFlightError marks a bare context error that database/sql returned after
// the statement was sent (the backend otherwise takes a bare context error
// for the wait for a pooled connection).
type inFlightError struct{ err error }

func (e inFlightError) Error() string { return e.err.Error() }
func (e inFlightError) Unwrap() error { return e.err }

// NotSent marks err as a failure before the statement was sent, as the
// queriers do (for the backend's tests of its classification).
func NotSent(err error) error { return notSentError{err} }

// InFlight marks the bare context error err as one returned after the
// statement was sent, as the queriers do (for the backend's tests).
func InFlight(err error) error { return inFlightError{err} }

// SQLArgs converts the backend's arguments for database/sql drivers so that
// they reach the server as pgx sends them: a nil []byte is NULL (not an
// empty bytea), and a time is cut to the microsecond, PostgreSQL's
// precision, as pgx does (text-format drivers such as lib/pq would make the
// server round it instead).
func SQLArgs(args []any) []any {
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

// take takes a connection of its own for one statement and arms the
// watchdog on it. The returned function releases it (call it after closing
// the statement's rows); a failure means nothing was sent.
func (q sqlQuerier) take(ctx context.Context) (*sql.Conn, func(), error) {
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
	return conn, release, nil
}

// onPgx runs f on the *pgx.Conn of a connection of pgx's stdlib.
func (q sqlQuerier) onPgx(ctx context.Context, f func(conn *pgx.Conn) error) error {
	conn, release, err := q.take(ctx)
	if err != nil {
		return err
	}
	defer release()
	var ferr error
	if err := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotStdlib
		}
		ferr = f(sc.Conn())
		return nil
	}); err != nil {
		// The connection was closed before anything was sent.
		return notSentError{err}
	}
	return ferr
}

var errNotStdlib = errors.New("postgres: not a connection of pgx's stdlib")

// rows runs a statement through database/sql and returns its rows and a
// function that releases what the statement held (call it after closing
// the rows).
func (q sqlQuerier) rows(ctx context.Context, kind Kind, query string, args []any) (*sql.Rows, func(), error) {
	args = SQLArgs(args)
	if kind == Read && q.watch == nil {
		rows, err := q.db.QueryContext(ctx, query, args...)
		return rows, func() {}, err
	}
	conn, release, err := q.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	rows, err := q.rowsOn(ctx, conn, kind, query, args)
	if err != nil {
		release()
		return nil, nil, err
	}
	return rows, release, nil
}

// rowsOn runs a statement through database/sql on conn, with args
// already converted by SQLArgs.
func (q sqlQuerier) rowsOn(ctx context.Context, conn *sql.Conn, kind Kind, query string, args []any) (*sql.Rows, error) {
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		if kind == Read && errors.Is(err, driver.ErrBadConn) {
			// A read is safe to send again (Backend.do retries it).
			return nil, notSentError{err}
		}
		return nil, afterSend(err)
	}
	return rows, nil
}

// afterSend marks a write's failure after its connection was acquired: a
// bare context error is the statement's, not the wait for a connection's.
// (lib/pq returns driver.ErrBadConn also after sending, so that stays a
// failure that may have applied.)
func afterSend(err error) error {
	if err == context.Canceled || err == context.DeadlineExceeded {
		return inFlightError{err}
	}
	return err
}

func (q sqlQuerier) QueryRow(ctx context.Context, kind Kind, query string, args []any, dest ...any) (bool, error) {
	switch {
	case q.pgxConn:
		var found bool
		err := q.onPgx(ctx, func(conn *pgx.Conn) (err error) {
			found, err = pgxQueryRow(ctx, conn, query, withMode(q.stdlibExec, args), dest)
			return err
		})
		return found, err
	case q.prepare:
		return q.prepared(ctx, kind, query, args, dest, nil)
	}
	rows, release, err := q.rows(ctx, kind, query, args)
	if err != nil {
		return false, err
	}
	found, err := scanOne(rows, dest)
	release()
	if err != nil && kind == Write {
		err = afterSend(err)
	}
	return found, err
}

func (q sqlQuerier) Query(ctx context.Context, kind Kind, query string, args []any, dest []any, row func() error) error {
	switch {
	case q.pgxConn:
		return q.onPgx(ctx, func(conn *pgx.Conn) error {
			return pgxQuery(ctx, conn, query, withMode(q.stdlibExec, args), dest, row)
		})
	case q.prepare:
		_, err := q.prepared(ctx, kind, query, args, dest, row)
		return err
	}
	rows, release, err := q.rows(ctx, kind, query, args)
	if err != nil {
		return err
	}
	defer release()
	return scanAll(rows, kind, dest, row)
}

// scanAll scans every row of rows into dest, calls row after each, and
// closes rows.
func scanAll(rows *sql.Rows, kind Kind, dest []any, row func() error) error {
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
	err := closeRows(rows)
	if err != nil && kind == Write {
		err = afterSend(err)
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

// Mode describes how a querier runs statements, for the backend's tests.
type Mode struct {
	Pgx     bool // on pgx's own pool
	Exec    bool // in pgx's exec mode (unnamed statements), on pgx or pgx's stdlib
	Prepare bool // lib/pq's named prepared statements on direct connections
}

// ModeOf returns how q runs statements; the zero Mode for a querier of
// another package.
func ModeOf(q Querier) Mode {
	switch q := q.(type) {
	case pgxQuerier:
		return Mode{Pgx: true, Exec: q.sessionless}
	case sqlQuerier:
		return Mode{Exec: q.stdlibExec, Prepare: q.prepare}
	}
	return Mode{}
}

// PreparedOn reports, for dc, a driver connection of q's pool that the
// caller holds (inside Conn.Raw), whether statements may be prepared on it
// and how many were (for the backend's tests). Both are zero unless q runs
// on lib/pq opened by Open.
func PreparedOn(q Querier, dc any) (direct bool, prepares int) {
	sq, ok := q.(sqlQuerier)
	if !ok || sq.watch == nil {
		return false, 0
	}
	if ps := sq.watch.stmts(dc); ps != nil {
		return ps.direct, ps.prepares
	}
	return false, 0
}
