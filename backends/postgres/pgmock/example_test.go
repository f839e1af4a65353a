package pgmock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/postgres/pgmock"
)

// Billing is a service that charges a customer at most once per
// idempotency key, whatever the retries.
type Billing struct {
	Store   *durable.Store
	Charged int // what the payment provider was asked for
}

// chargeRequest is the claim of one charge: the key, and a fingerprint
// that binds it to the amount.
func chargeRequest(key string, amount int) durable.ClaimRequest {
	return durable.ClaimRequest{
		KeyRef:      durable.KeyRef{Scope: "billing", Key: key},
		Fingerprint: fmt.Sprintf("charge:%d", amount),
	}
}

// Charge charges amount once per key and returns the receipt.
func (b *Billing) Charge(ctx context.Context, key string, amount int) (string, error) {
	res, err := b.Store.Do(ctx, chargeRequest(key, amount), durable.DoOptions{},
		func(ctx context.Context) (durable.Outcome, error) {
			b.Charged += amount
			return durable.Outcome{Code: 201, Body: fmt.Appendf(nil, "receipt: %d charged", amount)}, nil
		})
	if err != nil {
		return "", err
	}
	if res.Replayed {
		return string(res.Outcome.Body) + " (replayed)", nil
	}
	return string(res.Outcome.Body), nil
}

// A service's unit test with go-sqlmock's exact matcher: one pgmock line
// per durable call, for a new key, a replay and a conflicting request.
func Example() {
	ctx := context.Background()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	opts := postgres.Options{Schema: "billing", Migrate: postgres.MigrateVerify}
	m := pgmock.New(mock, pgmock.Backend(opts), pgmock.MatchEqual())

	m.ExpectOpen().Current()
	store, err := postgres.New(ctx, db, opts)
	if err != nil {
		panic(err)
	}
	svc := &Billing{Store: store}

	// A new key: the charge runs and its outcome is stored.
	m.ExpectClaimKey(chargeRequest("order-1", 100)).New()
	m.ExpectCompleteKey(durable.Completion{
		KeyRef:  durable.KeyRef{Scope: "billing", Key: "order-1"},
		Outcome: durable.Outcome{Code: 201, Body: []byte("receipt: 100 charged")},
	}).Stores()
	fmt.Println(svc.Charge(ctx, "order-1", 100))

	// A retry: the stored outcome is replayed, nothing is charged.
	m.ExpectClaimKey(chargeRequest("order-1", 100)).Completed(durable.Outcome{Code: 201, Body: []byte("receipt: 100 charged")})
	fmt.Println(svc.Charge(ctx, "order-1", 100))

	// Another amount under the same key: refused.
	m.ExpectClaimKey(chargeRequest("order-1", 250)).KeyConflict()
	_, err = svc.Charge(ctx, "order-1", 250)
	fmt.Println(errors.Is(err, durable.ErrKeyConflict))

	fmt.Println("charged:", svc.Charged)
	fmt.Println("expectations met:", mock.ExpectationsWereMet() == nil)
	// Output:
	// receipt: 100 charged <nil>
	// receipt: 100 charged (replayed) <nil>
	// true
	// charged: 100
	// expectations met: true
}
