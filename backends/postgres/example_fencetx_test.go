package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// FenceTx makes a write to the application's own tables commit only while
// a lease is still held. It needs a server, so it is compiled but not run
// here; TestExampleFenceTx runs publishReport against the test server,
// with a valid and with a stale lease.
func ExampleBackend_FenceTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS reports (day date PRIMARY KEY, body text NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	req := durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-1", TTL: 30 * time.Second}
	err = store.RunWithLease(ctx, req, durable.LeaseOptions{}, func(ctx context.Context, l durable.Lease) error {
		return publishReport(ctx, store, pool, "reports", l, "2026-12-03", "all good")
	})
	fmt.Println(err)
}

// publishReport writes a row to table in a transaction that commits only if
// lease l is still held: a worker that lost its lease (and a newer owner
// exists) gets an error with Code Fenced and writes nothing.
func publishReport(ctx context.Context, store *durable.Store, pool *pgxpool.Pool, table string, l durable.Lease, day, body string) error {
	var backend *postgres.Backend
	if !store.As(&backend) {
		return fmt.Errorf("not a postgres store")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op after Commit

	// First statement of the transaction: check the fence and hold the
	// lease row until the transaction ends.
	if err := backend.FenceTx(ctx, tx, l.Scope, l.Fence()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (day, body) VALUES ($1, $2)
		ON CONFLICT (day) DO UPDATE SET body = excluded.body`, day, body); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
