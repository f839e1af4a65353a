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

// CompleteKeyTx stores an idempotency key's outcome in the same pgx
// transaction as the payment it stands for: both commit or neither does,
// so a crash between the payment and its completion cannot make a retry
// pay twice. It needs a server, so it is compiled but not run here;
// TestExampleCompleteKeyTx runs recordPayment against the test server,
// twice for one key.
func ExampleBackend_CompleteKeyTx() {
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
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS payments (key text PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	out, err := recordPayment(ctx, store, pool, "payments", "pay-123", 4200)
	fmt.Println(out.Code, string(out.Body), err)
}

// recordPayment claims key, and, if the key is new, inserts the payment
// and stores the response in one transaction; a retry of a completed key
// gets the stored response and pays nothing.
func recordPayment(ctx context.Context, store *durable.Store, pool *pgxpool.Pool, table, key string, cents int64) (durable.Outcome, error) {
	var backend *postgres.Backend
	if !store.As(&backend) {
		return durable.Outcome{}, fmt.Errorf("not a postgres store")
	}
	ref := durable.KeyRef{Key: key}
	claim, err := store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: fmt.Sprint("pay:", cents)})
	if err != nil {
		return durable.Outcome{}, err
	}
	switch claim.Kind {
	case durable.ClaimCompleted:
		return *claim.Record.Outcome, nil // the stored response
	case durable.ClaimInFlight:
		return durable.Outcome{}, durable.ErrInFlight
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		return durable.Outcome{}, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (key, cents) VALUES ($1, $2)`, key, cents); err != nil {
		return durable.Outcome{}, err
	}
	out := durable.Outcome{Code: 201, Body: []byte("paid")}
	// The backend's method takes the retention as given: name it.
	if _, err := backend.CompleteKeyTx(ctx, tx, durable.Completion{KeyRef: ref, Token: claim.Token, Outcome: out,
		Retain: 24 * time.Hour, Tombstone: 7 * 24 * time.Hour}); err != nil {
		return durable.Outcome{}, err // Fenced: the claim was lost; nothing commits
	}
	// A lost reply here is ErrOutcomeUnknown: retry the whole call, which
	// then finds the key completed, or free again if nothing committed.
	return out, tx.Commit(ctx)
}
