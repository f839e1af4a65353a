package memory

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// At the counter's maximum AcquireLease fails with ErrTokensExhausted and
// grants nothing: tokens never wrap.
func TestAcquireLeaseFailsWhenTokensAreExhausted(t *testing.T) {
	ctx := context.Background()
	s := NewStorage(Options{})
	b := s.Backend()
	defer b.Close()
	s.mu.Lock()
	s.tokens = math.MaxInt64 - 1
	s.mu.Unlock()

	last, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "owner-1", TTL: time.Minute})
	if err != nil || last.Token != math.MaxInt64 {
		t.Fatalf("AcquireLease = %d, %v; want the token %d", last.Token, err, int64(math.MaxInt64))
	}
	for _, res := range []string{"res-2", "res-1"} {
		if res == "res-1" {
			if ok, err := b.ReleaseLease(ctx, last); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
		}
		_, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: res, Owner: "owner-2", TTL: time.Minute})
		if !errors.Is(err, contract.ErrTokensExhausted) || contract.CodeOf(err) != contract.Misconfigured || contract.Retryable(err) {
			t.Errorf("AcquireLease(%s) at the maximum: %v, want a non-retryable Misconfigured error with ErrTokensExhausted", res, err)
		}
		if _, err := b.GetLease(ctx, "", res); contract.CodeOf(err) != contract.NotFound {
			t.Errorf("GetLease(%s) after the failed grant: %v, want NotFound", res, err)
		}
	}
}
