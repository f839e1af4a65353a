package postgres

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestAcquireLeaseFailsWhenTokensAreExhausted: with the sequence
// lease_tokens at the bigint maximum, AcquireLease (a grant on a free
// resource, and a takeover of a released row) fails with
// ErrTokensExhausted, non-retryable, and grants nothing; on every client.
func TestAcquireLeaseFailsWhenTokensAreExhausted(t *testing.T) {
	srv := pgtest.Require(t)
	for _, c := range []testClient{tcPgx, tcPQ, tcPQDB, tcStdlib, tcStdDB} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			b, err := c.open(ctx, srv.DSN(), Options{Schema: schema, Migrate: MigrateVerify, Listen: ListenOff})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := admin.Exec(ctx, `SELECT setval($1::regclass, $2)`, quoteIdent(schema)+".lease_tokens", int64(math.MaxInt64-1)); err != nil {
				t.Fatal(err)
			}
			req := func(res string) contract.LeaseRequest {
				return contract.LeaseRequest{Resource: res, Owner: "owner-1", TTL: time.Minute}
			}
			last, err := b.AcquireLease(ctx, req("res-1"))
			if err != nil || last.Token != math.MaxInt64 {
				t.Fatalf("AcquireLease = %d, %v; want the token %d", last.Token, err, int64(math.MaxInt64))
			}
			if ok, err := b.ReleaseLease(ctx, last); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
			for _, res := range []string{"res-2", "res-1"} {
				_, err := b.AcquireLease(ctx, req(res))
				if !errors.Is(err, contract.ErrTokensExhausted) || contract.CodeOf(err) != contract.Misconfigured || contract.Retryable(err) {
					t.Errorf("AcquireLease(%s) at the maximum: %v, want a non-retryable Misconfigured error with ErrTokensExhausted", res, err)
				}
				if err != nil && (!strings.Contains(err.Error(), "2200H") || strings.Contains(err.Error(), res)) {
					t.Errorf("Error() = %q, want the SQLSTATE and no resource name", err)
				}
				if _, err := b.GetLease(ctx, "", res); contract.CodeOf(err) != contract.NotFound {
					t.Errorf("GetLease(%s) after the failed grant: %v, want NotFound", res, err)
				}
			}
		})
	}
}
