package pgclient

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BatchItem is one statement of a pipelined batch: its text, its
// arguments and the scan targets of its first row.
type BatchItem struct {
	SQL  string
	Args []any
	Dest []any
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
	// each item, if any, into its Dest; found[i] says whether it had one.
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
	found := make([]bool, len(items))
	var first error
	for i, it := range items {
		err := br.QueryRow().Scan(it.Dest...)
		switch {
		case err == nil:
			found[i] = true
			continue
		case errors.Is(err, pgx.ErrNoRows):
			continue
		}
		first = err
		break
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
