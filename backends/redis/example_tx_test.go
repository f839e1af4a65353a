package redis_test

import (
	"context"
	"fmt"
	"log"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/redis"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// DoTx with a *redis.Tx counts each order exactly once: the INCR is queued
// in the Tx and sent with the key's completion in one MULTI/EXEC, so the
// count and the stored outcome are applied together or not at all, and a
// retry of the same request replays the outcome instead of counting again.
// It needs a server, so it is compiled but not run here; TestExampleDoTx
// runs countOrder on a private server.
func ExampleTx() {
	ctx := context.Background()
	store, err := redis.Open(ctx, "redis://localhost:6379/0?prefix=shop")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	res, err := countOrder(ctx, store, "order-42")
	fmt.Println(res.Outcome.Code, string(res.Outcome.Body), res.Replayed, err)
}

// countOrder adds one to the scope's order counter, once per request id.
func countOrder(ctx context.Context, store *durable.Store, requestID string) (durable.DoResult, error) {
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: "shop", Key: requestID}, Fingerprint: "count-order"}
	return durable.DoTx(ctx, store, req, durable.DoOptions{},
		func(ctx context.Context, tx *redis.Tx) (durable.Outcome, error) {
			// Every key the transaction writes is in the completion's
			// slot: build it with ScopeKey and the request's scope.
			counter := tx.ScopeKey(req.Scope, "orders")
			tx.Queue(func(p goredis.Pipeliner) { p.Incr(ctx, counter) })
			return durable.Outcome{Code: 200, Body: []byte("counted")}, nil
		})
}

// TestExampleDoTx runs ExampleTx's countOrder: twice for one request id
// (the second replays), once for another; the counter is 2.
func TestExampleDoTx(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	store, err := redis.Open(ctx, "redis://"+srv.Addr()+"/0?prefix=shop")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for i, id := range []string{"order-42", "order-42", "order-43"} {
		res, err := countOrder(ctx, store, id)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if string(res.Outcome.Body) != "counted" || res.Replayed != (i == 1) {
			t.Errorf("call %d: %+v, want counted, replayed %v", i, res, i == 1)
		}
	}
	var b *redis.Backend
	if !store.As(&b) {
		t.Fatal("not a redis store")
	}
	n, err := b.Client().Get(ctx, b.ScopeKey("shop", "orders")).Int64()
	if err != nil || n != 2 {
		t.Errorf("counter = %d, %v; want 2 (order-42 counted once)", n, err)
	}
}
