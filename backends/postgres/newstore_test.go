package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestNewReturnsAValidatingStore: New and NewFromDB, the constructors for a
// pool the application already has, return the Store (bad input never
// reaches the backend), As reaches the backend, and closing the Store
// leaves the caller's pool open.
func TestNewReturnsAValidatingStore(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := context.Background()
	pool := newPool(t, srv.DSN())
	s, err := New(ctx, pool, Options{Schema: srv.Schema(t)}, durable.WithMaxWait(durable.DefaultMaxWait))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWorkflow(ctx, "", "bad id!"); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("GetWorkflow(bad id) = %v, want InvalidArgument from the Store", err)
	}
	var b *Backend
	if !s.As(&b) || b.Pool() != pool {
		t.Fatal("Store.As does not reach the *postgres.Backend on the caller's pool")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the caller's pool was closed with the Store: %v", err)
	}
	if _, err := New(ctx, pool, Options{Schema: "Bad"}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("New with a bad schema = %v", err)
	}
}
