package main

import (
	"context"
	"net/url"
	"strings"

	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/contract"
)

// isPostgres reports whether dsn names the Postgres backend.
func isPostgres(dsn string) bool {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok {
		return false
	}
	scheme = strings.ToLower(scheme)
	return scheme == "postgres" || scheme == "postgresql"
}

// openPostgresNoMigrate opens the Postgres backend without touching the
// schema: the migrate and doctor commands decide themselves what to do.
func openPostgresNoMigrate(ctx context.Context, dsn string) (*postgres.Backend, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error repeats the input: say only what is wrong.
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "malformed postgres DSN"}
	}
	q := u.Query()
	q.Set("migrate", "off")
	// url.Values.Encode writes a space as "+", which libpq-style parsers
	// read as a plus sign; keep spaces as %20.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return postgres.Open(ctx, u.String())
}

// queryRow runs one read-only query on whichever client library the backend
// uses (pgx, or database/sql for driver=pq and driver=pgx-stdlib).
func queryRow(ctx context.Context, b *postgres.Backend, sql string, dest ...any) error {
	if pool := b.Pool(); pool != nil {
		return pool.QueryRow(ctx, sql).Scan(dest...)
	}
	return b.DB().QueryRowContext(ctx, sql).Scan(dest...)
}

// tryListen runs LISTEN and UNLISTEN on one connection.
func tryListen(ctx context.Context, b *postgres.Backend) error {
	if pool := b.Pool(); pool != nil {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "LISTEN durable_doctor"); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, "UNLISTEN durable_doctor")
		return err
	}
	conn, err := b.DB().Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LISTEN durable_doctor"); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "UNLISTEN durable_doctor")
	return err
}
