package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// targets returns the node and the cluster, each with a second client of
// its own (another connection pool: "another process" for the tests).
func targets(t *testing.T) map[string][2]goredis.UniversalClient {
	node, cluster := sharedNode(t), sharedCluster(t)
	return map[string][2]goredis.UniversalClient{
		"node":    {nodeClient(t, node), nodeClient(t, node)},
		"cluster": {clusterClient(t, cluster), clusterClient(t, cluster)},
	}
}

// sharedBackends returns a raw backend per client, all on one fresh
// prefix and one manual clock (nil clock: the server's).
func sharedBackends(t *testing.T, clock contract.Clock, rdbs ...goredis.UniversalClient) []*Backend {
	t.Helper()
	prefix := freshPrefix()
	out := make([]*Backend, len(rdbs))
	for i, rdb := range rdbs {
		b, err := NewBackend(rdb, Options{Prefix: prefix, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		out[i] = b
	}
	t.Cleanup(func() { _ = deletePrefix(context.Background(), rdbs[0], prefix+":") })
	return out
}

// leaseValue is a value of the largest size, with every byte value in it.
func leaseValue() string {
	var sb strings.Builder
	for sb.Len() < contract.MaxLeaseValueBytes {
		sb.WriteByte(byte(sb.Len() % 256))
	}
	return sb.String()
}

// TestLeaseValues: a grant stores the value byte for byte; Acquire, Renew,
// RenewLeases, Get and List return it; a renewal keeps it whatever the
// Lease passed carries; a new grant replaces it (an empty value leaves
// nothing of the old one); a request retried after its grant returns it.
func TestLeaseValues(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			clock := conformance.NewManualClock()
			b := sharedBackends(t, clock, c[0])[0]
			const scope = contract.Scope("tenant/ü")
			val := leaseValue()
			check := func(what string, l contract.Lease, want string) {
				t.Helper()
				if l.Value != want {
					t.Fatalf("%s: value of %d bytes, want %d bytes (equal: %v)", what, len(l.Value), len(want), l.Value == want)
				}
			}
			l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "leader", Owner: "a", TTL: time.Minute, Value: val})
			if err != nil {
				t.Fatal(err)
			}
			check("AcquireLease", l, val)
			g, err := b.GetLease(ctx, scope, "leader")
			if err != nil {
				t.Fatal(err)
			}
			check("GetLease", g, val)
			if g != l {
				t.Fatalf("GetLease %+v, AcquireLease %+v", g, l)
			}
			other := l
			other.Value = "ignored"
			r, err := b.RenewLease(ctx, other, 2*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			check("RenewLease", r, val)
			rs, err := b.RenewLeases(ctx, []contract.Lease{other}, 3*time.Minute)
			if err != nil || rs[0].Err != nil {
				t.Fatal(err, rs)
			}
			check("RenewLeases", rs[0].Lease, val)
			g, _ = b.GetLease(ctx, scope, "leader")
			check("GetLease after renewals", g, val)
			ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Limit: 10})
			if err != nil || len(ls) != 1 {
				t.Fatalf("ListLeases: %v %v", ls, err)
			}
			check("ListLeases", ls[0], val)

			// A grant after a release, with no value: nothing of the old one.
			if ok, err := b.ReleaseLease(ctx, rs[0].Lease); err != nil || !ok {
				t.Fatal(ok, err)
			}
			l, err = b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "leader", Owner: "b", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			check("AcquireLease without a value", l, "")
			g, _ = b.GetLease(ctx, scope, "leader")
			check("GetLease without a value", g, "")
			// A takeover replaces the value.
			clock.Advance(time.Minute + b.ClockTolerance() + time.Second)
			l, err = b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "leader", Owner: "c", TTL: time.Minute, Value: "c:8080"})
			if err != nil {
				t.Fatal(err)
			}
			check("takeover", l, "c:8080")

			// A permit carries its value too.
			p, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: "pool", Owner: "a", TTL: time.Minute, Value: val, Permits: 2})
			if err != nil {
				t.Fatal(err)
			}
			check("AcquirePermit", p, val)
			g, _ = b.GetLease(ctx, scope, p.Resource)
			check("GetLease of the permit", g, val)

			// A grant's script run again with the same request id (a retry
			// of a request whose reply was lost) returns the grant: the
			// same token and times, and the value stays stored.
			base := b.base(scope)
			id := nonce()
			run := func() contract.Lease {
				v, err := b.run(ctx, leaseAcquire, true, []string{base + "l:retried", base + "t:retried"},
					base, b.now(), "retried", "a", us(time.Minute), b.tol(), id, "v\x00", "retried")
				if err != nil {
					t.Fatal(err)
				}
				r := asReply(v)
				if kind := r.str(); kind != "ok" {
					t.Fatalf("grant: %s", kind)
				}
				l, err := decodeAcquired(r, contract.LeaseRequest{Scope: scope, Resource: "retried", Owner: "a", Value: "v\x00"})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			first := run()
			clock.Advance(time.Second)
			if again := run(); again != first {
				t.Fatalf("retried grant %+v, first %+v", again, first)
			}
			if g, err := b.GetLease(ctx, scope, "retried"); err != nil || g.Value != "v\x00" || g.Token != first.Token {
				t.Fatalf("GetLease after the retried grant = %+v, %v", g, err)
			}
		})
	}
}

// TestPermitsLowestFree: permits are granted lowest first; all held is
// LeaseBusy; a released permit, or one expired more than the tolerance
// ago, is the next granted; tokens rise across permits and plain leases
// on the resource and its permits (one counter, P:{sS}:t:R).
func TestPermitsLowestFree(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			clock := conformance.NewManualClock()
			b := sharedBackends(t, clock, c[0])[0]
			const scope, R = contract.Scope("s"), "exports"
			var last int64
			acquire := func(owner string, ttl time.Duration, want string) contract.Lease {
				t.Helper()
				l, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: R, Owner: owner, TTL: ttl, Permits: 3})
				if want == "" {
					if contract.CodeOf(err) != contract.LeaseBusy {
						t.Fatalf("AcquirePermit with every permit held: %+v, %v; want LeaseBusy", l, err)
					}
					return l
				}
				if err != nil {
					t.Fatalf("AcquirePermit, want %s: %v", want, err)
				}
				if l.Resource != want || l.Owner != owner || l.Scope != scope {
					t.Fatalf("AcquirePermit granted %+v, want %s to %s", l, want, owner)
				}
				if l.Token <= last {
					t.Fatalf("token %d after %d", l.Token, last)
				}
				if !l.ExpiresAt.Equal(l.AcquiredAt.Add(ttl)) || !l.AcquiredAt.Equal(clock.Now().UTC().Truncate(time.Microsecond)) {
					t.Fatalf("times %v %v, want now %v + %v", l.AcquiredAt, l.ExpiresAt, clock.Now(), ttl)
				}
				last = l.Token
				return l
			}
			p1 := acquire("a", time.Minute, R+"#1")
			p2 := acquire("b", time.Hour, R+"#2")
			acquire("a", time.Hour, R+"#3") // an owner may hold several permits
			acquire("d", time.Hour, "")
			if ok, err := b.ReleaseLease(ctx, p2); err != nil || !ok {
				t.Fatal(ok, err)
			}
			acquire("e", time.Hour, R+"#2")
			// Permit 1 expires; within the tolerance it is still held.
			clock.Advance(time.Minute + b.ClockTolerance())
			acquire("f", time.Hour, "")
			clock.Advance(time.Microsecond)
			p1b := acquire("f", time.Hour, R+"#1")
			if _, err := b.RenewLease(ctx, p1, time.Minute); contract.CodeOf(err) != contract.Fenced {
				t.Fatalf("renewing the permit taken over: %v, want Fenced", err)
			}
			// A fence on a permit: the holder's passes, the former holder's not.
			if _, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "w", Status: contract.StatusRunning}); err != nil {
				t.Fatal(err)
			}
			upd := func(l contract.Lease) error {
				_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "w", ExpectStatus: contract.StatusRunning,
					Status: contract.StatusRunning, Fence: &contract.Fence{Resource: l.Resource, Owner: l.Owner, Token: l.Token}})
				return err
			}
			if err := upd(p1b); err != nil {
				t.Fatalf("fenced write of the permit's holder: %v", err)
			}
			if err := upd(p1); contract.CodeOf(err) != contract.Fenced {
				t.Fatalf("fenced write of the permit's former holder: %v, want Fenced", err)
			}

			// Plain leases on R and on a permit's name share the counter.
			for _, res := range []string{R, R + "#7", R + "#1000"} {
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "x", TTL: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if l.Token <= last {
					t.Fatalf("AcquireLease %s: token %d after %d", res, l.Token, last)
				}
				last = l.Token
			}
			acquire("a", time.Hour, "")
			rdb := c[0]
			base := b.base(scope)
			if n, err := rdb.Get(ctx, base+"t:"+R).Int64(); err != nil || n != last {
				t.Fatalf("the counter of %s: %d, %v; want %d", R, n, err, last)
			}
			for _, k := range []string{base + "t:" + R + "#1", base + "t:" + R + "#7"} {
				if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
					t.Fatalf("a counter per permit %s exists: %d %v", k, n, err)
				}
			}
			// Not a permit's name (a leading zero, past MaxPermits): its own counter.
			for _, res := range []string{R + "#01", R + "#1001"} {
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "x", TTL: time.Hour})
				if err != nil || l.Token != 1 {
					t.Fatalf("AcquireLease %s: %+v %v, want token 1 of its own counter", res, l, err)
				}
			}

			// Tokens end at 2^53 for permits as for leases.
			if err := rdb.Set(ctx, base+"t:"+R, "9007199254740992", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if ok, err := b.ReleaseLease(ctx, p1b); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if _, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: R, Owner: "z", TTL: time.Hour, Permits: 3}); !errors.Is(err, contract.ErrTokensExhausted) {
				t.Fatalf("AcquirePermit at 2^53: %v, want ErrTokensExhausted", err)
			}
		})
	}
}

// TestPermitsUnderConcurrentClients: clients of their own (separate
// connection pools) race for 3 permits. A permit is never held by two
// clients at once (so never more than 3 holders), every grant names a
// permit 1–3, tokens are unique and rise per client and per permit, and
// every release of a held permit succeeds.
func TestPermitsUnderConcurrentClients(t *testing.T) {
	for name := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			const clients, permits, rounds = 6, 3, 40
			rdbs := make([]goredis.UniversalClient, clients)
			for i := range rdbs {
				if name == "node" {
					rdbs[i] = nodeClient(t, sharedNode(t))
				} else {
					rdbs[i] = clusterClient(t, sharedCluster(t))
				}
			}
			bs := sharedBackends(t, nil, rdbs...)
			var (
				slot     [permits + 1]atomic.Int64 // holder+1 of each permit, 0 when free
				slotLast [permits + 1]int64        // last token of each permit, under its slot
				mu       sync.Mutex
				seen     = map[int64]bool{}
				holders  atomic.Int64
				maxHeld  atomic.Int64
				grants   atomic.Int64
				wg       sync.WaitGroup
				failed   atomic.Bool
			)
			fail := func(format string, args ...any) {
				failed.Store(true)
				t.Errorf(format, args...)
			}
			for c := range clients {
				wg.Go(func() {
					var last int64
					for range rounds {
						if failed.Load() {
							return
						}
						l, err := bs[c].AcquirePermit(ctx, contract.PermitRequest{Scope: "race", Resource: "R", Owner: "c" + strconv.Itoa(c), TTL: time.Minute, Permits: permits})
						if contract.CodeOf(err) == contract.LeaseBusy {
							time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
							continue
						}
						if err != nil {
							fail("client %d: %v", c, err)
							return
						}
						_, n, ok := contract.SplitPermit(l.Resource)
						if !ok || n < 1 || n > permits || !strings.HasPrefix(l.Resource, "R#") {
							fail("client %d was granted %q", c, l.Resource)
							return
						}
						if !slot[n].CompareAndSwap(0, int64(c+1)) {
							fail("permit %d granted to client %d while client %d holds it", n, c, slot[n].Load()-1)
							return
						}
						if h := holders.Add(1); h > maxHeld.Load() {
							maxHeld.Store(h)
						}
						if l.Token <= slotLast[n] || l.Token <= last {
							fail("permit %d: token %d after %d (client's last %d)", n, l.Token, slotLast[n], last)
						}
						slotLast[n], last = l.Token, l.Token
						mu.Lock()
						if seen[l.Token] {
							fail("token %d issued twice", l.Token)
						}
						seen[l.Token] = true
						mu.Unlock()
						grants.Add(1)
						time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
						holders.Add(-1)
						slot[n].Store(0)
						if ok, err := bs[c].ReleaseLease(ctx, l); err != nil || !ok {
							fail("client %d releasing %s: %v %v", c, l.Resource, ok, err)
							return
						}
					}
				})
			}
			wg.Wait()
			if maxHeld.Load() > permits {
				t.Fatalf("%d holders at once", maxHeld.Load())
			}
			if grants.Load() < rounds {
				t.Fatalf("only %d grants", grants.Load())
			}
			t.Logf("%d grants, at most %d holders at once", grants.Load(), maxHeld.Load())
		})
	}
}

// TestPermitScriptOnOneSlot: the permit script names keys only through
// the scope's base, so a cluster runs it on one node whatever the number
// of permits (a key of another slot would fail with CROSSSLOT).
func TestPermitScriptOnOneSlot(t *testing.T) {
	ctx := testCtx(t)
	rdb := clusterClient(t, sharedCluster(t))
	b := sharedBackends(t, nil, rdb)[0]
	for i := range 12 {
		scope := contract.Scope(fmt.Sprintf("tenant-%d", i))
		for n := range 5 {
			l, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: "R", Owner: "o", TTL: time.Minute, Permits: contract.MaxPermits})
			if err != nil || l.Resource != contract.PermitResource("R", n+1) {
				t.Fatalf("scope %s: %+v %v", scope, l, err)
			}
		}
	}
}

// TestTokresMatchesContract: the scripts' tokres is contract.TokenResource.
func TestTokresMatchesContract(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, sharedNode(t))
	b := sharedBackends(t, nil, rdb)[0]
	for _, res := range []string{"R", "R#1", "R#9", "R#10", "R#999", "R#1000", "R#1001", "R#0", "R#01", "#1", "R#",
		"a#b#1", "R#-1", "R#+1", "R#1a", "R# 1", "R#1 ", "R#99999999999999999999", "ü#7", "a.b:c-d_e#42", "##1", "R#1#2"} {
		v, err := b.run(ctx, tokresScript, false, []string{b.base("") + "x"}, b.base(""), res)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := v.(string), contract.TokenResource(res); got != want {
			t.Errorf("tokres(%q) = %q, contract.TokenResource = %q", res, got, want)
		}
	}
}
