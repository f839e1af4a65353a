package redis

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// TestAcquireLeaseFailsWhenTokensAreExhausted: with a resource's counter
// at maxToken, AcquireLease fails with ErrTokensExhausted, non-retryable,
// and grants nothing; before, a counter past 2^53 rounded tokens into
// repeats. Another resource's counter is unaffected.
func TestAcquireLeaseFailsWhenTokensAreExhausted(t *testing.T) {
	for name, rdb := range map[string]goredis.UniversalClient{
		"node": nodeClient(t, sharedNode(t)), "cluster": clusterClient(t, sharedCluster(t)),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b, clock := rawBackend(t, rdb)
			const scope = contract.Scope("tenant/1")
			req := func(res string) contract.LeaseRequest {
				return contract.LeaseRequest{Scope: scope, Resource: res, Owner: "owner-1", TTL: time.Minute}
			}
			counter := b.base(scope) + "t:res-1"
			if err := rdb.Set(ctx, counter, strconv.FormatInt(maxToken-1, 10), 0).Err(); err != nil {
				t.Fatal(err)
			}
			last, err := b.AcquireLease(ctx, req("res-1"))
			if err != nil || last.Token != maxToken {
				t.Fatalf("AcquireLease = %d, %v; want the token %d", last.Token, err, int64(maxToken))
			}
			exhausted := func(after string) {
				t.Helper()
				_, err := b.AcquireLease(ctx, req("res-1"))
				if !errors.Is(err, contract.ErrTokensExhausted) || contract.CodeOf(err) != contract.Misconfigured || contract.Retryable(err) {
					t.Errorf("AcquireLease %s: %v, want a non-retryable Misconfigured error with ErrTokensExhausted", after, err)
				}
			}
			// Held: busy, as ever.
			if _, err := b.AcquireLease(ctx, req("res-1")); contract.CodeOf(err) != contract.LeaseBusy {
				t.Errorf("AcquireLease of the held lease: %v, want LeaseBusy", err)
			}
			clock.Advance(time.Minute + b.ClockTolerance() + time.Second)
			exhausted("taking over the expired lease")
			if l, err := b.GetLease(ctx, scope, "res-1"); err != nil || l.Token != last.Token || l.Owner != last.Owner {
				t.Errorf("GetLease after the failed takeover = %+v, %v; want the expired grant %+v", l, err, last)
			}
			if ok, err := b.DeleteRecord(ctx, contract.KindLease, scope, "res-1"); err != nil || !ok {
				t.Fatalf("DeleteRecord: %v, %v", ok, err)
			}
			exhausted("after the record was deleted")
			if _, err := b.GetLease(ctx, scope, "res-1"); contract.CodeOf(err) != contract.NotFound {
				t.Errorf("GetLease after the failed grant: %v, want NotFound", err)
			}
			if n, err := rdb.Get(ctx, counter).Int64(); err != nil || n != maxToken {
				t.Errorf("counter = %d (%v), want %d", n, err, int64(maxToken))
			}
			// A counter past 2^53 (set outside durable) grants nothing either.
			if err := rdb.Set(ctx, counter, strconv.FormatInt(maxToken+2, 10), 0).Err(); err != nil {
				t.Fatal(err)
			}
			exhausted("with the counter past 2^53")
			if _, err := b.AcquireLease(ctx, req("res-2")); err != nil {
				t.Errorf("AcquireLease of another resource: %v", err)
			}
		})
	}
}
