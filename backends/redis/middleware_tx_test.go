package redis_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/durable-go/durable/backends/redis"
	"github.com/durable-go/durable/internal/redistest"
	"github.com/durable-go/durable/middleware/idempotency"
	goredis "github.com/redis/go-redis/v9"
)

// TestMiddlewareTransactionalOnRedis: the HTTP middleware's transactional
// mode on Redis. The handler queues its effect (an INCR) on the request's
// *redis.Tx; the middleware sends it with the stored response in one
// MULTI/EXEC, so a retry with the same key replays the response and the
// effect is applied once.
func TestMiddlewareTransactionalOnRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	store, err := redis.Open(ctx, "redis://"+srv.Addr()+"/0?prefix=mw")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var b *redis.Backend
	if !store.As(&b) {
		t.Fatal("not a redis store")
	}
	counter := b.ScopeKey("", "payments")
	mw, err := idempotency.New(store, idempotency.Options{Transactional: true})
	if err != nil {
		t.Fatalf("idempotency.New(Transactional) on Redis: %v", err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idempotency.Tx[*redis.Tx](r.Context())
		if !ok {
			http.Error(w, "no *redis.Tx in the request", http.StatusInternalServerError)
			return
		}
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(r.Context(), counter) })
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("paid"))
	}))
	send := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":5}`))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, key := range []string{"pay-1", "pay-1", "pay-2"} {
		rec := send(key)
		replayed := rec.Header().Get(idempotency.ReplayedHeader) == "true"
		if rec.Code != http.StatusCreated || rec.Body.String() != "paid" || replayed != (i == 1) {
			t.Errorf("request %d (key %s) = %d %q replayed %v; want 201 paid, replayed %v", i, key, rec.Code, rec.Body.String(), replayed, i == 1)
		}
	}
	n, err := b.Client().Get(ctx, counter).Int64()
	if err != nil || n != 2 {
		t.Errorf("payments counter = %d, %v; want 2 (pay-1 applied once)", n, err)
	}
}
