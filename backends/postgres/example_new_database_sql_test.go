package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// New builds a Store on a database/sql pool of any PostgreSQL driver too
// (here pgx's stdlib; lib/pq works the same). It needs a server, so it is
// compiled but not run here; TestExampleNew_database_sql runs claimOnce
// against the test server.
func ExampleNew_database_sql() {
	ctx := context.Background()
	kind, err := claimOnce(ctx, os.Getenv("DATABASE_URL"), postgres.DefaultSchema, "pay-123")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(kind)
}

// claimOnce opens a *sql.DB on dsn, builds a Store on it and claims the
// idempotency key, completing it on the first claim.
func claimOnce(ctx context.Context, dsn, schema, key string) (durable.ClaimKind, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close() // the *sql.DB is yours: store.Close leaves it open

	store, err := postgres.New(ctx, db, postgres.Options{Schema: schema})
	if err != nil {
		return 0, err
	}
	defer store.Close()

	// The TTL must be at least store.MinTTL(): 1 s plus the clock
	// tolerance (postgres.DefaultTolerance, 1 s, unless Options says).
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: key}, Fingerprint: "sha256:body", TTL: time.Minute}
	c, err := store.ClaimKey(ctx, req)
	if err != nil {
		return 0, err
	}
	if c.Kind == durable.ClaimNew {
		_, err = store.CompleteKey(ctx, durable.Completion{KeyRef: req.KeyRef, Token: c.Token,
			Outcome: durable.Outcome{Code: 201, Body: []byte(`{"id":"pay_1"}`)}})
	}
	return c.Kind, err
}
