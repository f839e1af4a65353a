package sqlite_test

import (
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

// At the counter's maximum AcquireLease fails with ErrTokensExhausted and
// grants nothing: tokens never wrap (nor turn into floating point, as
// SQLite's integer arithmetic does on overflow).
func TestAcquireLeaseFailsWhenTokensAreExhausted(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "exhausted.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `UPDATE lease_tokens SET last = ? WHERE id = 1`, int64(math.MaxInt64-1)); err != nil {
		t.Fatal(err)
	}

	req := func(res string) durable.LeaseRequest {
		return durable.LeaseRequest{Resource: res, Owner: "owner-1", TTL: time.Minute}
	}
	last, err := s.AcquireLease(ctx, req("res-1"))
	if err != nil || last.Token != math.MaxInt64 {
		t.Fatalf("AcquireLease = %d, %v; want the token %d", last.Token, err, int64(math.MaxInt64))
	}
	for _, res := range []string{"res-2", "res-1"} {
		if res == "res-1" {
			if ok, err := s.ReleaseLease(ctx, last); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
		}
		_, err := s.AcquireLease(ctx, req(res))
		if !errors.Is(err, contract.ErrTokensExhausted) || contract.CodeOf(err) != contract.Misconfigured || contract.Retryable(err) {
			t.Errorf("AcquireLease(%s) at the maximum: %v, want a non-retryable Misconfigured error with ErrTokensExhausted", res, err)
		}
		if _, err := s.GetLease(ctx, "", res); contract.CodeOf(err) != contract.NotFound {
			t.Errorf("GetLease(%s) after the failed grant: %v, want NotFound", res, err)
		}
	}
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT last FROM lease_tokens WHERE id = 1`).Scan(&n); err != nil || n != math.MaxInt64 {
		t.Errorf("counter = %d (%v), want %d", n, err, int64(math.MaxInt64))
	}
}
