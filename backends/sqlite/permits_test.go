package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

// TestAcquirePermitLowestFree: the lowest free permit is granted, as
// AcquireLease would grant it (times, value, a token above every earlier
// one of the resource and its permits); all held → LeaseBusy; a released
// permit, and one expired more than the tolerance ago, are granted again;
// one expired within the tolerance is not. Permits beyond req.Permits,
// the plain lease on the resource and other resources' permits do not
// count.
func TestAcquirePermitLowestFree(t *testing.T) {
	ctx := t.Context()
	bs, clock, _ := openShared(t, 2)
	a, b := bs[0], bs[1]
	req := contract.PermitRequest{Scope: "s", Resource: "sem", Owner: "o", TTL: 10 * time.Second, Value: "v", Permits: 3}
	var last int64
	grant := func(bk *sqlite.Backend, want int) contract.Lease {
		t.Helper()
		l, err := bk.AcquirePermit(ctx, req)
		if err != nil {
			t.Fatalf("AcquirePermit: %v, want permit %d", err, want)
		}
		now := clock.Now()
		if l.Resource != contract.PermitResource(req.Resource, want) || l.Scope != "s" || l.Owner != "o" || l.Value != "v" ||
			!l.AcquiredAt.Equal(now) || !l.ExpiresAt.Equal(now.Add(req.TTL)) || l.Token <= last {
			t.Fatalf("AcquirePermit = %+v, want permit %d at %v with a token above %d", l, want, now, last)
		}
		last = l.Token
		if g, err := b.GetLease(ctx, "s", l.Resource); err != nil || g != l {
			t.Fatalf("GetLease = %+v, %v, want %+v", g, err, l)
		}
		return l
	}
	busy := func(bk *sqlite.Backend) {
		t.Helper()
		if l, err := bk.AcquirePermit(ctx, req); contract.CodeOf(err) != contract.LeaseBusy {
			t.Fatalf("AcquirePermit = %+v, %v; want LeaseBusy", l, err)
		}
	}
	// Leases that are not permits of "sem" (1–3) in scope "s".
	for _, other := range []contract.LeaseRequest{
		{Scope: "s", Resource: "sem", Owner: "x", TTL: time.Minute},
		{Scope: "s", Resource: "sem#4", Owner: "x", TTL: time.Minute},
		{Scope: "s", Resource: "sem.b#1", Owner: "x", TTL: time.Minute},
		{Scope: "s", Resource: "se#1", Owner: "x", TTL: time.Minute},
		{Scope: "t", Resource: "sem#1", Owner: "x", TTL: time.Minute},
	} {
		l, err := a.AcquireLease(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token
	}
	p1 := grant(a, 1)
	p2 := grant(b, 2)
	p3 := grant(a, 3)
	busy(b)
	if ok, err := a.ReleaseLease(ctx, p2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	p2 = grant(b, 2)
	busy(a)
	// A plain grant on a permit's resource takes part in the same sequence.
	if ok, err := a.ReleaseLease(ctx, p1); !ok || err != nil {
		t.Fatal(ok, err)
	}
	l, err := b.AcquireLease(ctx, req.Lease(1))
	if err != nil || l.Token <= last {
		t.Fatalf("AcquireLease of permit 1: %+v, %v", l, err)
	}
	last = l.Token
	busy(a)
	// Expiry: within the tolerance still held, beyond it free (lowest first).
	if _, err := a.RenewLease(ctx, p3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second) // permits 1 and 2 expire now
	busy(a)
	clock.Advance(time.Second) // exactly the tolerance
	busy(b)
	clock.Advance(time.Microsecond)
	grant(a, 1)
	grant(b, 2)
	busy(a)
	if _, err := a.RenewLease(ctx, p2, time.Minute); contract.CodeOf(err) != contract.Fenced {
		t.Errorf("renewal of a permit taken over: %v, want Fenced", err)
	}
	// One permit is enough for Permits: 1.
	req.Resource, req.Permits = "mutex", 1
	grant(a, 1)
	busy(b)
}

// TestAcquirePermitTokensExhausted: with the counter at its maximum a free
// permit is not granted (ErrTokensExhausted), as AcquireLease would not.
func TestAcquirePermitTokensExhausted(t *testing.T) {
	ctx := t.Context()
	bs, _, path := openShared(t, 1)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `UPDATE lease_tokens SET last = ? WHERE id = 1`, int64(math.MaxInt64-1)); err != nil {
		t.Fatal(err)
	}
	req := contract.PermitRequest{Resource: "sem", Owner: "o", TTL: time.Minute, Permits: 2}
	l, err := bs[0].AcquirePermit(ctx, req)
	if err != nil || l.Token != math.MaxInt64 || l.Resource != "sem#1" {
		t.Fatalf("AcquirePermit = %+v, %v", l, err)
	}
	if _, err := bs[0].AcquirePermit(ctx, req); !errors.Is(err, contract.ErrTokensExhausted) {
		t.Fatalf("AcquirePermit at the maximum: %v, want ErrTokensExhausted", err)
	}
	if _, err := bs[0].GetLease(ctx, "", "sem#2"); contract.CodeOf(err) != contract.NotFound {
		t.Errorf("GetLease(sem#2) after the failed grant: %v, want NotFound", err)
	}
}

// TestAcquirePermitConcurrent: goroutines on two backends of one file (and
// so two write connections, serialized by SQLite's lock) race for the
// permits of one semaphore, hold a while and release: never more than
// Permits holders, never two on one permit, every token issued once and
// greater than the one before it on that permit.
func TestAcquirePermitConcurrent(t *testing.T) {
	ctx := t.Context()
	bs, _, _ := openShared(t, 2)
	const permits, workers, rounds = 3, 8, 40
	var (
		mu      sync.Mutex
		holder  = map[string]string{} // permit → worker
		tokens  = map[int64]bool{}
		lastTok = map[string]int64{}
		live    atomic.Int32
		grants  atomic.Int32
		busy    atomic.Int32
	)
	var wg sync.WaitGroup
	for w := range 2 * workers {
		bk := bs[w%2]
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for range rounds {
				l, err := bk.AcquirePermit(ctx, contract.PermitRequest{Resource: "sem", Owner: owner, TTL: time.Minute, Permits: permits})
				if contract.CodeOf(err) == contract.LeaseBusy {
					busy.Add(1)
					time.Sleep(time.Duration(rand.N(200)) * time.Microsecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				grants.Add(1)
				if n := live.Add(1); n > permits {
					t.Errorf("%d live holders of %d permits", n, permits)
				}
				mu.Lock()
				if h, ok := holder[l.Resource]; ok {
					t.Errorf("%s granted to %s while %s holds it", l.Resource, owner, h)
				}
				if tokens[l.Token] {
					t.Errorf("token %d issued twice", l.Token)
				}
				if l.Token <= lastTok[l.Resource] {
					t.Errorf("%s: token %d after %d", l.Resource, l.Token, lastTok[l.Resource])
				}
				holder[l.Resource], tokens[l.Token], lastTok[l.Resource] = owner, true, l.Token
				mu.Unlock()
				time.Sleep(time.Duration(rand.N(300)) * time.Microsecond)
				mu.Lock()
				delete(holder, l.Resource)
				mu.Unlock()
				live.Add(-1)
				if ok, err := bk.ReleaseLease(ctx, l); !ok || err != nil {
					t.Errorf("ReleaseLease(%s) = %v, %v", l.Resource, ok, err)
				}
			}
		})
	}
	wg.Wait()
	if grants.Load() == 0 || busy.Load() == 0 {
		t.Errorf("%d grants, %d busy: the race did not happen", grants.Load(), busy.Load())
	}
	for n := 1; n <= permits; n++ {
		if lastTok[contract.PermitResource("sem", n)] == 0 {
			t.Errorf("permit %d was never granted", n)
		}
	}
	t.Logf("%d grants, %d busy", grants.Load(), busy.Load())
}
