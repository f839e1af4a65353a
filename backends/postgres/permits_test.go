package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// leaseValues are values a lease must keep byte for byte: empty, NUL
// bytes, invalid UTF-8, every byte, the largest allowed.
var leaseValues = func() []string {
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	return []string{
		"", "x", "\x00", "a\x00b\x00", "\xff\xfe\xfd", "caf\xc3", "10.0.0.7:8080",
		string(all), strings.Repeat("\x00\xff", contract.MaxLeaseValueBytes/2),
	}
}()

// checkLeaseValues grants, reads, renews, lists and re-grants leases and
// permits with every value of leaseValues on b, in scope, and checks each
// read returns the grant's value byte for byte.
func checkLeaseValues(t *testing.T, b *Backend, scope contract.Scope) {
	t.Helper()
	ctx := t.Context()
	const ttl = time.Minute
	want := map[string]string{}
	for i, v := range leaseValues {
		res := fmt.Sprintf("val-%02d", i)
		l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "o", TTL: ttl, Value: v})
		if err != nil || l.Value != v {
			t.Fatalf("value %d: AcquireLease = %q, %v; want %q", i, l.Value, err, v)
		}
		if g, err := b.GetLease(ctx, scope, res); err != nil || g.Value != v || g != l {
			t.Errorf("value %d: GetLease = %+v, %v; want %+v", i, g, err, l)
		}
		// Renewal keeps the stored value, whatever the Lease passed says.
		passed := l
		passed.Value = "ignored"
		if r, err := b.RenewLease(ctx, passed, ttl); err != nil || r.Value != v {
			t.Errorf("value %d: RenewLease = %q, %v; want %q", i, r.Value, err, v)
		}
		if out, err := b.RenewLeases(ctx, []contract.Lease{passed}, ttl); err != nil || out[0].Err != nil || out[0].Lease.Value != v {
			t.Errorf("value %d: RenewLeases = %+v, %v; want %q", i, out, err, v)
		}
		want[res] = v
		p, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: fmt.Sprintf("sem-%02d", i), Owner: "o", TTL: ttl, Value: v, Permits: 2})
		if err != nil || p.Value != v || p.Resource != fmt.Sprintf("sem-%02d#1", i) {
			t.Fatalf("value %d: AcquirePermit = %+v, %v; want permit 1 with %q", i, p, err, v)
		}
		if g, err := b.GetLease(ctx, scope, p.Resource); err != nil || g.Value != v {
			t.Errorf("value %d: GetLease(permit) = %q, %v; want %q", i, g.Value, err, v)
		}
		want[p.Resource] = v
		// A new grant stores its own value; an empty one leaves none.
		if ok, err := b.ReleaseLease(ctx, passed); !ok || err != nil {
			t.Fatalf("ReleaseLease = %v, %v", ok, err)
		}
		next := leaseValues[(i+1)%len(leaseValues)]
		l2, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "o2", TTL: ttl, Value: next})
		if err != nil || l2.Value != next {
			t.Errorf("value %d: the next grant = %q, %v; want %q", i, l2.Value, err, next)
		}
		if _, err := b.ReleaseLease(ctx, l2); err != nil {
			t.Fatal(err)
		}
		l3, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "o3", TTL: ttl})
		if err != nil || l3.Value != "" {
			t.Errorf("value %d: a grant without a value = %q, %v; want none", i, l3.Value, err)
		}
		if _, err := b.ReleaseLease(ctx, l3); err != nil {
			t.Fatal(err)
		}
		l4, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "o", TTL: ttl, Value: v})
		if err != nil || l4.Value != v {
			t.Fatalf("value %d: AcquireLease again = %q, %v", i, l4.Value, err)
		}
	}
	ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope})
	if err != nil || len(ls) != len(want) {
		t.Fatalf("ListLeases = %d leases, %v; want %d", len(ls), err, len(want))
	}
	for _, l := range ls {
		if v, ok := want[l.Resource]; !ok || l.Value != v {
			t.Errorf("ListLeases: %s has %q, want %q", l.Resource, l.Value, v)
		}
	}
	held, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Held: true, After: "sem-00#1"})
	if err != nil || len(held) == 0 {
		t.Fatalf("ListLeases(held) = %d, %v", len(held), err)
	}
	for _, l := range held {
		if l.Value != want[l.Resource] {
			t.Errorf("ListLeases(held): %s has %q, want %q", l.Resource, l.Value, want[l.Resource])
		}
	}
}

// TestLeaseValuesRoundTrip: every client path (pgx, lib/pq and pgx's
// stdlib from a DSN and on a *sql.DB, and through PgBouncer in
// transaction mode) stores and returns lease values byte for byte.
func TestLeaseValuesRoundTrip(t *testing.T) {
	for _, c := range []testClient{tcPgx, tcPQ, tcStdlib, tcPQDB, tcStdDB} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner, clock, srv := newTestBackend(t, Options{})
			b := openWaiter(t, c, srv, owner, clock, ListenOn)
			checkLeaseValues(t, b, "s")
		})
	}
	for _, c := range []struct {
		name, params string
	}{{"pgbouncer-pgx", ""}, {"pgbouncer-pq", "&driver=pq&pooler=transaction"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bouncer, schema := migratedBehindBouncer(t)
			b, err := openDSN(t.Context(), bouncer.DSN()+"&schema="+schema+c.params)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !b.transactionPooled() {
				t.Fatal("the backend does not run as behind a transaction pooler")
			}
			checkLeaseValues(t, b, "s")
		})
	}
}

// TestAcquirePermitGrantsTheLowestFree: sequentially, AcquirePermit grants
// permit 1, 2, … as AcquireLease would grant them, reclaims a released
// permit and one expired more than the tolerance ago at its number, and
// answers LeaseBusy when every permit of the request is held; permits and
// plain leases on the resource share one increasing sequence of tokens.
func TestAcquirePermitGrantsTheLowestFree(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	req := contract.PermitRequest{Scope: "s", Resource: "sem", Owner: "o", TTL: time.Hour, Permits: 3}
	var last int64
	grant := func(r contract.PermitRequest, wantN int) contract.Lease {
		t.Helper()
		l, err := b.AcquirePermit(ctx, r)
		if want := contract.PermitResource(r.Resource, wantN); err != nil || l.Resource != want {
			t.Fatalf("AcquirePermit = %+v, %v; want %s", l, err, want)
		}
		now := clock.now().Truncate(time.Microsecond)
		if l.Token <= last || l.Owner != r.Owner || !l.AcquiredAt.Equal(now) || !l.ExpiresAt.Equal(now.Add(r.TTL)) || l.Scope != r.Scope {
			t.Fatalf("AcquirePermit = %+v; want a grant as AcquireLease's at %v with a token above %d", l, now, last)
		}
		last = l.Token
		if g, err := b.GetLease(ctx, r.Scope, l.Resource); err != nil || g != l {
			t.Fatalf("GetLease(%s) = %+v, %v; want %+v", l.Resource, g, err, l)
		}
		return l
	}
	busy := func(r contract.PermitRequest) {
		t.Helper()
		_, err := b.AcquirePermit(ctx, r)
		checkCode(t, err, contract.LeaseBusy)
	}
	grant(req, 1)
	p2 := grant(req, 2)
	short := req
	short.TTL = time.Second
	p3 := grant(short, 3)
	busy(req)
	// A plain lease on the resource draws from the same sequence.
	plain, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: "sem", Owner: "o", TTL: time.Hour})
	if err != nil || plain.Token <= last {
		t.Fatalf("AcquireLease(sem) = %+v, %v; want a token above %d", plain, err, last)
	}
	last = plain.Token
	if ok, err := b.ReleaseLease(ctx, p2); !ok || err != nil {
		t.Fatalf("ReleaseLease = %v, %v", ok, err)
	}
	p2 = grant(req, 2)
	// Permit 3 expired, but not yet by more than the tolerance: held.
	clock.advance(time.Second + b.tol/2)
	busy(req)
	clock.advance(b.tol)
	p3b := grant(req, 3)
	if p3b.Token <= p3.Token {
		t.Errorf("the takeover's token %d is not above %d", p3b.Token, p3.Token)
	}
	// A request for fewer permits looks only at the first ones.
	if ok, err := b.ReleaseLease(ctx, p3b); !ok || err != nil {
		t.Fatal(err)
	}
	two := req
	two.Permits = 2
	busy(two)
	// Permits beyond the stored ones are inserted.
	five := req
	five.Permits = 5
	grant(five, 3)
	grant(five, 4)
	// Rows that are no permit's of this semaphore count for nothing: a
	// malformed name, another semaphore whose name extends this one's, a
	// permit past the request, a watch's placeholder.
	q := quoteIdent(b.schema)
	if _, err := b.Pool().Exec(ctx, `INSERT INTO `+q+`.leases (scope, resource, owner, token, acquired_at, expires_at)
		VALUES ('s', 'sem#0', 'x', 1, now(), 'infinity'), ('s', 'sem#x', 'x', 1, now(), 'infinity'),
		       ('s', 'sem#05', 'x', 1, now(), 'infinity'), ('s', 'sem2#5', 'x', 1, now(), 'infinity'),
		       ('s', 'sem#7', 'x', 1, now(), 'infinity')`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	if _, err := b.WatchLease(wctx, "s", "sem#5"); err != nil {
		t.Fatal(err)
	}
	cancel()
	grant(five, 5)
	busy(five)
	// The same semaphore in another scope is another semaphore.
	other := req
	other.Scope = "t"
	grant(other, 1)
}

// TestAcquirePermitRaceGrantsEveryFreePermit: as many callers as there are
// permits, from pools of three client libraries, start together, round
// after round: each must be granted a permit (a caller that loses a permit
// to another runs again instead of answering LeaseBusy), all different,
// with distinct tokens, each above the previous round's.
func TestAcquirePermitRaceGrantsEveryFreePermit(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	var pools []*Backend
	for _, c := range []testClient{tcPgx, tcPQ, tcStdlib} {
		pools = append(pools, openWaiter(t, c, srv, owner, clock, ListenOff))
	}
	const permits = 6
	rounds := 40
	if testing.Short() {
		rounds = 5
	}
	var floor int64
	for round := range rounds {
		start := make(chan struct{})
		grants := make([]contract.Lease, permits)
		errs := make([]error, permits)
		var wg sync.WaitGroup
		for i := range permits {
			wg.Go(func() {
				<-start
				grants[i], errs[i] = pools[i%len(pools)].AcquirePermit(ctx, contract.PermitRequest{
					Scope: "s", Resource: "race", Owner: fmt.Sprintf("o-%d", i), TTL: time.Minute, Permits: permits})
			})
		}
		close(start)
		wg.Wait()
		seen := map[string]bool{}
		tokens := map[int64]bool{}
		var top int64
		for i, l := range grants {
			if errs[i] != nil {
				t.Fatalf("round %d: caller %d: AcquirePermit = %v while %d permits were free", round, i, errs[i], permits)
			}
			if seen[l.Resource] || tokens[l.Token] || l.Token <= floor {
				t.Fatalf("round %d: grants %+v: a permit or token twice, or a token not above %d", round, grants, floor)
			}
			seen[l.Resource], tokens[l.Token] = true, true
			top = max(top, l.Token)
		}
		floor = top
		for i, l := range grants {
			if ok, err := pools[i%len(pools)].ReleaseLease(ctx, l); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
		}
	}
}

// TestAcquirePermitNeverAdmitsMoreThanPermits: callers on three pools
// acquire and release permits of one semaphore for a while. A caller
// counts itself a holder after its grant returned and until it starts its
// release, so more counted holders than permits would mean more live
// grants; the held rows, counted by the server meanwhile, never exceed the
// permits either. Each permit's tokens increase from grant to grant, and
// a grant requested after another returned has a greater token.
func TestAcquirePermitNeverAdmitsMoreThanPermits(t *testing.T) {
	owner, clock, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	var pools []*Backend
	for _, c := range []testClient{tcPgx, tcPQ, tcStdlib} {
		pools = append(pools, openWaiter(t, c, srv, owner, clock, ListenOff))
	}
	const permits, callers = 3, 12
	duration := 3 * time.Second
	if testing.Short() {
		duration = 500 * time.Millisecond
	}
	type grant struct {
		called, returned time.Time
		token            int64
	}
	var (
		holders, maxHolders atomic.Int64
		mu                  sync.Mutex
		byPermit            = map[string][]int64{}
		all                 []grant
		busy, granted       atomic.Int64
		failure             atomic.Pointer[error]
	)
	fail := func(err error) { failure.CompareAndSwap(nil, &err) }
	stop := time.Now().Add(duration)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			b := pools[i%len(pools)]
			for time.Now().Before(stop) && failure.Load() == nil {
				called := time.Now()
				l, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "sem", Owner: fmt.Sprintf("o-%d", i), TTL: time.Minute, Permits: permits})
				if contract.CodeOf(err) == contract.LeaseBusy {
					busy.Add(1)
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				returned := time.Now()
				granted.Add(1)
				n := holders.Add(1)
				for m := maxHolders.Load(); n > m && !maxHolders.CompareAndSwap(m, n); m = maxHolders.Load() {
				}
				mu.Lock()
				byPermit[l.Resource] = append(byPermit[l.Resource], l.Token)
				all = append(all, grant{called, returned, l.Token})
				mu.Unlock()
				time.Sleep(time.Duration(i%3) * time.Millisecond)
				holders.Add(-1)
				if ok, err := b.ReleaseLease(ctx, l); !ok || err != nil {
					fail(fmt.Errorf("ReleaseLease(%s) = %v, %v", l.Resource, ok, err))
					return
				}
			}
		})
	}
	// The server's count of held permits, meanwhile.
	wg.Go(func() {
		for time.Now().Before(stop) && failure.Load() == nil {
			var n int
			if err := owner.Pool().QueryRow(ctx, `SELECT count(*) FROM `+quoteIdent(owner.schema)+`.leases
				WHERE scope = 's' AND resource LIKE 'sem#%' AND NOT released`).Scan(&n); err != nil {
				fail(err)
				return
			}
			if n > permits {
				fail(fmt.Errorf("%d permits held at once, of %d", n, permits))
				return
			}
		}
	})
	wg.Wait()
	if p := failure.Load(); p != nil {
		t.Fatal(*p)
	}
	if m := maxHolders.Load(); m > permits || m < 1 || granted.Load() < 10 {
		t.Fatalf("at most %d holders at once of %d permits, %d grants", m, permits, granted.Load())
	}
	if len(byPermit) != permits {
		t.Errorf("permits granted: %v; want all %d", slices.Sorted(maps.Keys(byPermit)), permits)
	}
	for p, tokens := range byPermit {
		if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
			t.Errorf("permit %s: tokens %v do not increase", p, tokens)
		}
	}
	slices.SortFunc(all, func(a, b grant) int { return a.called.Compare(b.called) })
	var maxBefore int64 // the greatest token of the grants returned before each call
	byReturn := slices.Clone(all)
	slices.SortFunc(byReturn, func(a, b grant) int { return a.returned.Compare(b.returned) })
	j := 0
	for _, g := range all {
		for j < len(byReturn) && byReturn[j].returned.Before(g.called) {
			maxBefore = max(maxBefore, byReturn[j].token)
			j++
		}
		if g.token <= maxBefore {
			t.Fatalf("a grant requested after a grant of token %d returned has token %d", maxBefore, g.token)
		}
	}
	t.Logf("%d grants, %d LeaseBusy, at most %d holders", granted.Load(), busy.Load(), maxHolders.Load())
}

// TestAcquirePermitThroughPgBouncer: the permit statement runs as one
// statement behind a transaction pooler.
func TestAcquirePermitThroughPgBouncer(t *testing.T) {
	bouncer, schema := migratedBehindBouncer(t)
	ctx := t.Context()
	for _, params := range []string{"", "&driver=pq&pooler=transaction"} {
		b, err := openDSN(ctx, bouncer.DSN()+"&schema="+schema+params)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		res := "bounce" + strings.ReplaceAll(strings.ReplaceAll(params, "&", "-"), "=", "-")
		for n := 1; n <= 2; n++ {
			l, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: res, Owner: "o", TTL: time.Minute, Permits: 2, Value: "v"})
			if err != nil || l.Resource != contract.PermitResource(res, n) || l.Value != "v" {
				t.Fatalf("AcquirePermit = %+v, %v; want permit %d", l, err, n)
			}
		}
		_, err = b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: res, Owner: "o", TTL: time.Minute, Permits: 2})
		checkCode(t, err, contract.LeaseBusy)
	}
}
