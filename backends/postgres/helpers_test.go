package postgres

import (
	"context"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// newPool returns a pool on dsn, closed when t ends.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// openDSN opens the raw backend a DSN names, as the registry's driver
// does without options.
func openDSN(ctx context.Context, dsn string) (*Backend, error) {
	return openBackend(ctx, dsn, contract.OpenOptions{})
}

// newTestBackend returns a backend on a fresh, migrated schema with an
// injected clock, closed when t ends.
func newTestBackend(t testing.TB, opts Options) (*Backend, *testClock, *pgtest.Server) {
	t.Helper()
	srv := pgtest.Require(t)
	if opts.Schema == "" {
		opts.Schema = srv.Schema(t)
	}
	clock := newTestClock()
	if opts.Clock == nil {
		opts.Clock = clock
	}
	b, err := openTestBackend(context.Background(), srv.DSN(), opts)
	if err != nil {
		t.Fatalf("opening the backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, clock, srv
}

// migratePool migrates schema on pool the way a caller who has only a pool
// does: a backend on it with MigrateOff, and its Migrate method.
func migratePool(ctx context.Context, pool *pgxpool.Pool, schema string, dir Direction) error {
	b, err := NewBackend(ctx, pool, Options{Schema: schema, Migrate: MigrateOff})
	if err != nil {
		return err
	}
	defer b.Close()
	return b.Migrate(ctx, dir)
}

// poolMigrationStatus reads the migration state of schema on pool through
// a backend with MigrateOff.
func poolMigrationStatus(ctx context.Context, pool *pgxpool.Pool, schema string) (SchemaStatus, error) {
	b, err := NewBackend(ctx, pool, Options{Schema: schema, Migrate: MigrateOff})
	if err != nil {
		return SchemaStatus{}, err
	}
	defer b.Close()
	return b.MigrationStatus(ctx)
}
