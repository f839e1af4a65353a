package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestNewReturnsAValidatingStore: New, the constructor for a pool the
// application already has (pgx's or database/sql's), returns the Store (bad input never
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

// TestNewOnDatabaseSQL: New on a *sql.DB returns the Store the same way,
// and As reaches the backend on the caller's *sql.DB.
func TestNewOnDatabaseSQL(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(ctx, db, Options{Schema: srv.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWorkflow(ctx, "", "bad id!"); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("GetWorkflow(bad id) = %v, want InvalidArgument from the Store", err)
	}
	var b *Backend
	if !s.As(&b) || b.DB() != db || b.Pool() != nil {
		t.Fatal("Store.As does not reach the *postgres.Backend on the caller's *sql.DB")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("the caller's *sql.DB was closed with the Store: %v", err)
	}
	if _, err := New(ctx, db, Options{Schema: "Bad"}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("New with a bad schema = %v", err)
	}
}

// TestOpenReturnsAStore: Open of a DSN returns the validating Store, whose
// Close closes the pool it opened, and refuses a DSN of another scheme
// without quoting it.
func TestOpenReturnsAStore(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := context.Background()
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		s, err := Open(ctx, srv.DSN()+"&schema="+srv.Schema(t)+"&driver="+drv, durable.WithMaxWait(durable.DefaultMaxWait))
		if err != nil {
			t.Fatalf("%s: %v", drv, err)
		}
		if _, err := s.GetWorkflow(ctx, "", "bad id!"); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Fatalf("%s: GetWorkflow(bad id) = %v, want InvalidArgument from the Store", drv, err)
		}
		var b *Backend
		if !s.As(&b) {
			t.Fatalf("%s: Store.As does not reach the *postgres.Backend", drv)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: Close: %v", drv, err)
		}
		if _, err := b.GetWorkflow(ctx, "", "x"); contract.CodeOf(err) != contract.Closed {
			t.Fatalf("%s: the backend after Store.Close: %v, want Closed", drv, err)
		}
	}
	for _, dsn := range []string{
		"memory://",
		"sqlite:///tmp/secret-path.db",
		"mysql://user:hunter2@host/db",
		"host=localhost password=hunter2",
		"",
	} {
		s, err := Open(ctx, dsn)
		if !errors.Is(err, durable.ErrInvalidArgument) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open(another scheme) = %v, want InvalidArgument", err)
		}
		if dsn != "" && strings.Contains(err.Error(), dsn) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "secret") {
			t.Fatalf("Open's error quotes the DSN: %v", err)
		}
	}
}
