package pgclient

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BatchItem is one statement of a pipelined batch: its text, its
// arguments and the scan targets of its first row. Or, when Rows is not
// nil, a statement for several calls at once: the first column of each row
// it returns is a call's 1-based position in Rows (a bigint), and the
// other columns are scanned into that call's targets; a call has at most
// one row.
type BatchItem struct {
	SQL  string
	Args []any
	Dest []any
	Rows [][]any
}

// calls is how many results the item gives.
func (it BatchItem) calls() int {
	if it.Rows != nil {
		return len(it.Rows)
	}
	return 1
}

// Pipeliner sends several statements as one pipelined transaction: the
// backend's coalesced writes. Only pgx can (its own pool, and pgx's stdlib
// through Conn.Raw); lib/pq has no pipeline mode, and database/sql none of
// its own.
type Pipeliner interface {
	// QueryBatch sends items, in order, on one connection, as one pipeline
	// ended by one Sync: PostgreSQL runs them in one implicit transaction
	// (each statement sees the effects of the earlier ones) and commits
	// them together at the Sync, or not at all. It scans the first row of
	// each item, if any, into its Dest, or each row of an item with Rows
	// into its call's targets. found has one entry per call, in the order
	// of items (an item with Rows gives len(Rows) entries): whether the
	// call had a row.
	//
	// err nil means the transaction committed and every item was scanned.
	// Otherwise see RolledBack: either the batch certainly failed (nothing
	// was applied), or the connection broke, or the context ended, after
	// the batch may have been sent (the commit's outcome is unknown), or it
	// failed before anything was sent (SafeToRetry; a failure to acquire a
	// connection is marked so). The Dest of every item may then hold
	// anything.
	QueryBatch(ctx context.Context, items []BatchItem) (found []bool, err error)
}

// PipelinerOf returns what sends batches on q's connections, or nil when q
// cannot: lib/pq, any other database/sql driver, and pgx in its exec mode
// for a transaction pooler (a batch runs in the connection's default mode,
// which may prepare statements: the backend does not coalesce behind a
// transaction pooler).
func PipelinerOf(q Querier) Pipeliner {
	switch q := q.(type) {
	case pgxQuerier:
		if !q.sessionless {
			return q
		}
	case sqlQuerier:
		if q.pgxConn && !q.stdlibExec {
			return q
		}
	}
	return nil
}

func (q pgxQuerier) QueryBatch(ctx context.Context, items []BatchItem) ([]bool, error) {
	conn, err := q.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	return pgxBatch(ctx, conn.Conn(), items)
}

func (q sqlQuerier) QueryBatch(ctx context.Context, items []BatchItem) ([]bool, error) {
	var found []bool
	err := q.onPgx(ctx, func(conn *pgx.Conn) (err error) {
		found, err = pgxBatch(ctx, conn, items)
		return err
	})
	return found, err
}

// pgxBatch sends items as one pgx.Batch (one pipeline, one Sync) on conn
// and reads every result. Only when the batch's results were all read,
// the Sync's ReadyForQuery included (BatchResults.Close), is the commit
// known.
func pgxBatch(ctx context.Context, conn *pgx.Conn, items []BatchItem) ([]bool, error) {
	b := &pgx.Batch{}
	for _, it := range items {
		b.Queue(it.SQL, it.Args...)
	}
	br := conn.SendBatch(ctx, b)
	n := 0
	for _, it := range items {
		n += it.calls()
	}
	found := make([]bool, n)
	var first error
	at := 0
	for _, it := range items {
		var err error
		if it.Rows != nil {
			err = scanRows(br, it.Rows, found[at:at+len(it.Rows)])
		} else {
			err = br.QueryRow().Scan(it.Dest...)
			switch {
			case err == nil:
				found[at] = true
			case errors.Is(err, pgx.ErrNoRows):
				err = nil
			}
		}
		if err != nil {
			first = err
			break
		}
		at += it.calls()
	}
	err := br.Close()
	if first == nil {
		first = err
	}
	if first != nil {
		return nil, sentError(first)
	}
	return found, nil
}

// scanRows reads the rows of a statement for several calls (see
// BatchItem.Rows): each row's first column says whose row it is.
func scanRows(br pgx.BatchResults, calls [][]any, found []bool) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		ord   int64
		first []any // &ord, then nil for every other column
		dest  []any // nil, then a call's targets
	)
	for rows.Next() {
		if first == nil {
			first = make([]any, len(rows.FieldDescriptions()))
			first[0] = &ord
			dest = make([]any, len(first))
		}
		if err := rows.Scan(first...); err != nil {
			return err
		}
		if ord < 1 || ord > int64(len(calls)) || found[ord-1] || len(calls[ord-1])+1 != len(dest) {
			return errBadRows
		}
		copy(dest[1:], calls[ord-1])
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		found[ord-1] = true
	}
	return rows.Err()
}

// errBadRows is a statement for several calls that returned a row for no
// call, or two for one: a bug of the statement, not of the calls.
var errBadRows = errors.New("postgres: a batch statement returned a row that belongs to no call")

// RolledBack reports whether err, from QueryBatch, certainly means the
// batch's transaction was rolled back with the session intact: the server
// answered with an error of severity ERROR (a statement failed, or the
// commit did), before the Sync's ReadyForQuery. A FATAL or PANIC error
// ends the session, and the backend treats it as a broken connection
// (unknown outcome), as it does any failure without a server error.
func RolledBack(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	sev := pe.SeverityUnlocalized // PostgreSQL 9.6 and later
	if sev == "" {
		sev = pe.Severity
	}
	return sev == "ERROR"
}
