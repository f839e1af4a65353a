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
	u.RawQuery = q.Encode()
	return postgres.Open(ctx, u.String())
}
