package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier runs the backend's statements. It is the only thing a client
// library has to provide: pgxQuerier here, a database/sql one for lib/pq
// and pgx's stdlib. Both receive the same SQL text and the same arguments
// (nil, string, int64, float64, bool, []byte, time.Time) and scan into the
// same destinations (string, int64, bool, []byte, time.Time and pointers to
// them for NULLable columns).
type querier interface {
	// queryRow runs a statement that returns at most one row and scans it
	// into dest. found is false when there was no row.
	queryRow(ctx context.Context, sql string, args []any, dest ...any) (found bool, err error)
	// query runs a statement and calls each for every row, with a scan
	// function for that row.
	query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error
}

// pgxQuerier runs statements on a pgx pool, one round trip each (pgx caches
// the prepared statement per connection after its first use).
type pgxQuerier struct{ pool *pgxpool.Pool }

func (q pgxQuerier) queryRow(ctx context.Context, sql string, args []any, dest ...any) (bool, error) {
	err := q.pool.QueryRow(ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (q pgxQuerier) query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
