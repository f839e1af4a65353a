package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// New builds a Store on a pgx pool the application already has. It needs a
// server, so it is compiled but not run here; TestExampleNew runs
// startOrder against the test server.
func ExampleNew() {
	ctx := context.Background()
	wf, err := startOrder(ctx, os.Getenv("DATABASE_URL"), postgres.DefaultSchema, "order-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(wf.ID, wf.Status, wf.Revision)
}

// startOrder opens a pgx pool on dsn, builds a Store on it and creates
// the workflow id.
func startOrder(ctx context.Context, dsn, schema, id string) (durable.Workflow, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return durable.Workflow{}, err
	}
	defer pool.Close() // the pool is yours: store.Close leaves it open

	// With the default MigrateAuto, New creates or migrates the schema
	// first; a deployment that migrates separately passes MigrateVerify.
	store, err := postgres.New(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		return durable.Workflow{}, err
	}
	defer store.Close()

	return store.CreateWorkflow(ctx, durable.Workflow{ID: id, Snapshot: []byte(`{"step":"created"}`)})
}
