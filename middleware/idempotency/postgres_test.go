package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMain stops the throwaway PostgreSQL cluster, if TestPostgres started
// one.
func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgres runs the end-to-end scenarios on the Postgres backend, each
// on a fresh schema, with the backend's default clock tolerance and an
// injected clock that the scenarios advance.
func TestPostgres(t *testing.T) {
	srv := pgtest.Require(t)
	runE2E(t, func(t *testing.T) (*durable.Store, func(time.Duration)) {
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, srv.DSN()+"&pool_max_conns=4")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		clock := memory.NewManualClock(time.Now())
		b, err := postgres.NewBackend(ctx, pool, postgres.Options{Schema: srv.Schema(t), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		s, err := durable.New(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, clock.Advance
	})
}
