package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// renewScenarios are the scenarios of Store.RenewLeases, in the Leases
// group: the optional contract.LeaseRenewer when the backend has it, the
// Store's fallback (one RenewLease per lease) when it does not. Both must
// give every lease the outcome RenewLease would.
func renewScenarios() []scenario {
	return []scenario{
		{"RenewLeasesRenewsEveryHeldLease", needClock, testRenewLeasesRenewsEveryHeldLease},
		{"RenewLeasesFencesOnlyTheLeasesNoLongerHeld", needClock, testRenewLeasesFencesOnlyTheLeasesNoLongerHeld},
		{"RenewLeasesOfAnEmptyBatchIsEmpty", 0, testRenewLeasesOfAnEmptyBatchIsEmpty},
		{"RenewLeasesGivesDuplicatesTheSameOutcome", 0, testRenewLeasesGivesDuplicatesTheSameOutcome},
		{"RenewLeasesStayInTheirScope", 0, testRenewLeasesStayInTheirScope},
		{"RenewLeasesRejectsBadBatches", 0, testRenewLeasesRejectsBadBatches},
	}
}

// renewLeases calls RenewLeases and checks the shape of its answer: no
// error for the batch, one outcome per lease.
func renewLeases(t *testing.T, e *env, s *durable.Store, leases []contract.Lease, ttl time.Duration) []contract.LeaseRenewal {
	t.Helper()
	out, err := s.RenewLeases(e.ctx, leases, ttl)
	if err != nil {
		t.Fatalf("RenewLeases of %d leases: %v (a lease that is no longer held is Fenced in its own outcome, not an error of the batch)", len(leases), err)
	}
	if len(out) != len(leases) {
		t.Fatalf("RenewLeases of %d leases returned %d outcomes, want one per lease", len(leases), len(out))
	}
	return out
}

// checkRenewed asserts that outcome i renewed l to until, keeping the
// grant, and that the store holds the renewed lease.
func checkRenewed(t *testing.T, e *env, s *durable.Store, i int, o contract.LeaseRenewal, l contract.Lease, until time.Time) {
	t.Helper()
	if o.Err != nil {
		t.Errorf("outcome %d (lease %s): %v, want renewed", i, l.Resource, o.Err)
		return
	}
	want := l
	want.ExpiresAt = o.Lease.ExpiresAt
	if d := diffLease(o.Lease, want); d != "" {
		t.Errorf("outcome %d (lease %s): %s (the grant is unchanged but for ExpiresAt)", i, l.Resource, d)
	}
	e.checkTime(t, fmt.Sprintf("outcome %d (lease %s): ExpiresAt (now + ttl)", i, l.Resource), o.Lease.ExpiresAt, until)
	checkStoredLease(t, e.ctx, s, o.Lease)
}

// checkFencedOutcome asserts that outcome i is Fenced.
func checkFencedOutcome(t *testing.T, i int, o contract.LeaseRenewal, why string) {
	t.Helper()
	if o.Err == nil {
		t.Errorf("outcome %d (%s) renewed the lease to %v, want Fenced", i, why, o.Lease.ExpiresAt)
		return
	}
	if !errors.Is(o.Err, durable.ErrFenced) || contract.CodeOf(o.Err) != contract.Fenced {
		t.Errorf("outcome %d (%s): %v (code %v), want Fenced", i, why, o.Err, contract.CodeOf(o.Err))
	}
}

func testRenewLeasesRenewsEveryHeldLease(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	var leases []contract.Lease
	for i := range 5 {
		req := e.leaseReq(fmt.Sprintf("res-%d", i), fmt.Sprintf("owner-%d", i%2))
		if i == 3 {
			req.Scope = "scope-b"
		}
		leases = append(leases, mustAcquire(t, e.ctx, s, req))
	}
	step := 1250 * time.Millisecond
	e.advance(step)
	now := leases[0].AcquiredAt.Add(step)
	// Longer than what is left, not whole seconds.
	ttl := 2*e.ttl + 1500*time.Millisecond
	out := renewLeases(t, e, s, leases, ttl)
	for i, l := range leases {
		checkRenewed(t, e, other, i, out[i], l, now.Add(ttl))
	}
	// Shorter than what is left: each lease ends sooner.
	e.advance(step)
	now = now.Add(step)
	short := e.tol + time.Second + max(500*time.Millisecond, 4*e.g)
	renewed := make([]contract.Lease, len(out))
	for i, o := range out {
		renewed[i] = o.Lease
	}
	out = renewLeases(t, e, other, renewed, short)
	for i, l := range renewed {
		checkRenewed(t, e, s, i, out[i], l, now.Add(short))
	}
}

func testRenewLeasesFencesOnlyTheLeasesNoLongerHeld(t *testing.T, e *env) {
	s, next := e.open(), e.open()
	long := func(resource string) contract.LeaseRequest {
		req := e.leaseReq(resource, "owner-1")
		req.TTL = 10 * e.ttl
		return req
	}
	held := mustAcquire(t, e.ctx, s, long("held-1"))
	released := mustAcquire(t, e.ctx, s, long("released"))
	stale := mustAcquire(t, e.ctx, s, e.leaseReq("taken-over", "owner-1"))
	expired := mustAcquire(t, e.ctx, s, e.leaseReq("expired", "owner-1"))
	held2 := mustAcquire(t, e.ctx, s, long("held-2"))
	ok, err := s.ReleaseLease(e.ctx, released)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatal("ReleaseLease of a held lease = false")
	}
	e.advance(e.pastTakeover())
	now := held.AcquiredAt.Add(e.pastTakeover())
	taker := mustAcquire(t, e.ctx, next, e.leaseReq("taken-over", "owner-2"))
	// Within the tolerance of its expiry: no longer renewable.
	late := mustAcquire(t, e.ctx, s, e.leaseReq("late", "owner-1"))
	if e.tol > 0 {
		e.advance(e.ttl - e.tol/2)
		now = now.Add(e.ttl - e.tol/2)
	} else {
		e.advance(e.ttl)
		now = now.Add(e.ttl)
	}
	wrongOwner := held
	wrongOwner.Owner = "owner-9"
	wrongToken := held2
	wrongToken.Token = taker.Token + 1000

	batch := []contract.Lease{held, released, stale, expired, held2, late, wrongOwner, wrongToken}
	out := renewLeases(t, e, s, batch, e.ttl)
	checkRenewed(t, e, next, 0, out[0], held, now.Add(e.ttl))
	checkFencedOutcome(t, 1, out[1], "released")
	checkFencedOutcome(t, 2, out[2], "taken over by another owner")
	checkFencedOutcome(t, 3, out[3], "expired beyond the tolerance, not taken over")
	checkRenewed(t, e, next, 4, out[4], held2, now.Add(e.ttl))
	checkFencedOutcome(t, 5, out[5], "expires within the tolerance")
	checkFencedOutcome(t, 6, out[6], "another owner")
	checkFencedOutcome(t, 7, out[7], "another token")
	// The failed renewals changed nothing.
	checkNoLease(t, e.ctx, next, "", "released")
	checkStoredLease(t, e.ctx, next, taker)
	checkStoredLease(t, e.ctx, next, expired)
	checkStoredLease(t, e.ctx, next, late)
}

func testRenewLeasesOfAnEmptyBatchIsEmpty(t *testing.T, e *env) {
	s := e.open()
	for _, batch := range [][]contract.Lease{nil, {}} {
		out, err := s.RenewLeases(e.ctx, batch, 0)
		noErr(t, err, "RenewLeases of an empty batch")
		if len(out) != 0 {
			t.Errorf("RenewLeases of an empty batch returned %d outcomes", len(out))
		}
	}
}

func testRenewLeasesGivesDuplicatesTheSameOutcome(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	a := mustAcquire(t, e.ctx, s, e.leaseReq("res-a", "owner-1"))
	b := mustAcquire(t, e.ctx, s, e.leaseReq("res-b", "owner-1"))
	staleB := b
	staleB.Token = b.Token + 1000
	// The clock stands still: a renewal to 2×TTL shows in ExpiresAt.
	ttl := 2 * e.ttl
	out := renewLeases(t, e, s, []contract.Lease{a, staleB, a, b, staleB, b}, ttl)
	for _, i := range []int{0, 2} {
		checkRenewed(t, e, other, i, out[i], a, a.AcquiredAt.Add(ttl))
	}
	for _, i := range []int{3, 5} {
		checkRenewed(t, e, other, i, out[i], b, b.AcquiredAt.Add(ttl))
	}
	checkFencedOutcome(t, 1, out[1], "a token that never held the lease")
	checkFencedOutcome(t, 4, out[4], "the same stale lease again")
}

func testRenewLeasesStayInTheirScope(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	const scopeB = contract.Scope("scope-b")
	unscoped := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	// Another owner in scope-b: tokens need only increase per resource,
	// so both grants may carry the same token, and a grant named in the
	// other scope must then still not match that scope's lease.
	req := e.leaseReq("res-1", "owner-2")
	req.Scope = scopeB
	scoped := mustAcquire(t, e.ctx, s, req)
	// Each grant named in the other scope.
	crossB := unscoped
	crossB.Scope = scopeB
	crossU := scoped
	crossU.Scope = ""
	ttl := 2 * e.ttl
	out := renewLeases(t, e, s, []contract.Lease{crossB, crossU}, ttl)
	checkFencedOutcome(t, 0, out[0], "the unscoped grant named in scope-b")
	checkFencedOutcome(t, 1, out[1], "scope-b's grant named unscoped")
	checkStoredLease(t, e.ctx, other, unscoped)
	checkStoredLease(t, e.ctx, other, scoped)
	// Renewing one scope's lease leaves the other's alone.
	out = renewLeases(t, e, s, []contract.Lease{scoped}, ttl)
	checkRenewed(t, e, other, 0, out[0], scoped, scoped.AcquiredAt.Add(ttl))
	checkStoredLease(t, e.ctx, other, unscoped)
	out = renewLeases(t, e, s, []contract.Lease{unscoped}, ttl)
	checkRenewed(t, e, other, 0, out[0], unscoped, unscoped.AcquiredAt.Add(ttl))
}

func testRenewLeasesRejectsBadBatches(t *testing.T, e *env) {
	s := e.open()
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	full := make([]contract.Lease, durable.MaxRenewBatch+1)
	for i := range full {
		full[i] = l
	}
	bad := l
	bad.Token = 0
	badOwner := l
	badOwner.Owner = "bad owner"
	for what, c := range map[string]struct {
		leases []contract.Lease
		ttl    time.Duration
	}{
		"more than MaxRenewBatch leases": {full, e.ttl},
		"a lease with token 0":           {[]contract.Lease{l, bad}, e.ttl},
		"a lease with a bad owner":       {[]contract.Lease{badOwner, l}, e.ttl},
		"a ttl below the minimum":        {[]contract.Lease{l}, 500 * time.Millisecond},
	} {
		out, err := s.RenewLeases(e.ctx, c.leases, c.ttl)
		if !checkCode(t, err, contract.InvalidArgument) || out != nil {
			t.Errorf("RenewLeases with %s: %d outcomes, err %v; want InvalidArgument and none", what, len(out), err)
		}
	}
	// Nothing was renewed.
	checkStoredLease(t, e.ctx, s, l)
	// A full batch is accepted (in one call when the backend renews
	// batches; through the fallback, 1,000 calls would only slow the suite
	// down, so a short one).
	n := durable.MaxRenewBatch
	if r := contract.LeaseRenewer(nil); !s.As(&r) {
		n = 10
	}
	out := renewLeases(t, e, s, full[:n], 2*e.ttl)
	for i := range out {
		if out[i].Err != nil || out[i].Lease.Token != l.Token {
			t.Fatalf("outcome %d of a full batch of one lease: %+v", i, out[i])
		}
	}
}
