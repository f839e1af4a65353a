package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestCorruptOutcomeFailsClosedAndCanBeDeleted damages a completed key's
// stored outcome header (as a tool writing to the table outside durable
// could) and checks the deliberate behaviour: ClaimKey and GetKey fail with
// ErrCorrupt (not retryable, no user data in the message) instead of
// replaying or running the request again, other keys are unaffected, and
// DeleteRecord removes the record so that the key can be claimed afresh.
func TestCorruptOutcomeFailsClosedAndCanBeDeleted(t *testing.T) {
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			srv := pgtest.Require(t)
			schema := srv.Schema(t)
			ctx := context.Background()
			b, err := tc.open(ctx, srv.DSN()+"&pool_max_conns=2", Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			s, err := durable.New(b)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, key := range []string{"secret-key-1", "other-key"} {
				ref := durable.KeyRef{Key: key}
				c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp-secret", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token,
					Outcome: durable.Outcome{Code: 201, Header: map[string][]string{"Location": {"/secret"}}, Body: []byte("secret body")}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Exec(ctx, `UPDATE "`+schema+`".idempotency_keys SET outcome_header = '\x02ff'::bytea WHERE key = 'secret-key-1'`); err != nil {
				t.Fatal(err)
			}
			ref := durable.KeyRef{Key: "secret-key-1"}
			_, err = s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp-secret", TTL: time.Minute})
			checkCorrupt(t, "ClaimKey", err)
			_, err = s.GetKey(ctx, ref)
			checkCorrupt(t, "GetKey", err)
			if _, err := s.GetKey(ctx, durable.KeyRef{Key: "other-key"}); err != nil {
				t.Fatalf("another key: %v", err)
			}
			found, err := s.DeleteRecord(ctx, "key", "", "secret-key-1")
			if err != nil || !found {
				t.Fatalf("DeleteRecord = %v, %v", found, err)
			}
			c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp-secret", TTL: time.Minute})
			if err != nil || c.Kind != durable.ClaimNew {
				t.Fatalf("ClaimKey after the deletion = %+v, %v; want ClaimNew", c, err)
			}
		})
	}
}

func checkCorrupt(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, durable.ErrCorrupt) || durable.Retryable(err) {
		t.Fatalf("%s on a damaged record = %v, want a non-retryable ErrCorrupt", op, err)
	}
	for _, leak := range []string{"secret", "fp-secret", "Location"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("%s error %q contains %q", op, err, leak)
		}
	}
}
