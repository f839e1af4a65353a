package conformance

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Fenced semaphores (Store.AcquirePermit: the optional PermitAcquirer, or
// the Store's fallback over AcquireLease). Permit n of semaphore R is the
// lease on "R#n"; the tokens of R and all its permits form one strictly
// increasing sequence.
func permitScenarios() []scenario {
	return []scenario{
		{"GrantsDistinctPermitsUpToTheLimit", 0, testGrantsDistinctPermitsUpToTheLimit},
		{"TokensIncreaseAcrossPermitsAndThePlainLease", 0, testPermitTokensIncreaseWithThePlainLease},
		{"LowestFreePermitIsGrantedAfterARelease", 0, testLowestFreePermitAfterRelease},
		{"ExpiredPermitIsBusyWithinTheTolerance", needClock | needTolerance, testExpiredPermitBusyWithinTolerance},
		{"ExpiredPermitIsReclaimedPastTheTolerance", needClock, testExpiredPermitReclaimed},
		{"FencesArePerHolder", 0, testPermitFencesArePerHolder},
		{"RenewAndReleaseArePerPermit", 0, testRenewAndReleaseArePerPermit},
		{"ConcurrentAcquiresNeverExceedThePermits", 0, testConcurrentPermitAcquires},
		{"ConcurrentTakeoversNeverExceedThePermits", needClock, testConcurrentPermitTakeovers},
		{"DeleteRecordFreesOnePermit", 0, testDeleteRecordFreesOnePermit},
		{"CleanupRemovesExpiredPermits", needClock, testCleanupRemovesExpiredPermits},
		{"ListLeasesListsPermitsInByteOrder", 0, testListLeasesListsPermits},
		{"TokensIncreaseAcrossRestart", needRestart, testPermitTokensIncreaseAcrossRestart},
	}
}

func (e *env) permitReq(resource, owner string, permits int) contract.PermitRequest {
	return contract.PermitRequest{Resource: resource, Owner: owner, TTL: e.ttl, Permits: permits}
}

func mustPermit(t *testing.T, e *env, s *durable.Store, req contract.PermitRequest) contract.Lease {
	t.Helper()
	l, err := s.AcquirePermit(e.ctx, req)
	noErr(t, err, fmt.Sprintf("AcquirePermit(%q, %q, owner %q, %d permits)", req.Scope, req.Resource, req.Owner, req.Permits))
	return l
}

// checkPermit asserts that l is permit n of resource, granted to owner
// for e.ttl.
func checkPermit(t *testing.T, e *env, l contract.Lease, resource string, n int, owner string) {
	t.Helper()
	if want := contract.PermitResource(resource, n); l.Resource != want {
		t.Errorf("AcquirePermit granted %q, want %q (the lowest free permit)", l.Resource, want)
	}
	if l.Owner != owner || l.Scope != "" {
		t.Errorf("permit %s: owner %q in scope %q, want owner %q unscoped", l.Resource, l.Owner, l.Scope, owner)
	}
	if l.Token <= 0 {
		t.Errorf("permit %s: token %d, want > 0", l.Resource, l.Token)
	}
	e.checkDur(t, "permit "+l.Resource+": ExpiresAt - AcquiredAt", l.ExpiresAt.Sub(l.AcquiredAt), e.ttl)
}

func testGrantsDistinctPermitsUpToTheLimit(t *testing.T, e *env) {
	stores := e.openN(3)
	var grants []contract.Lease
	for i := range 3 {
		owner := fmt.Sprintf("owner-%d", i)
		l := mustPermit(t, e, stores[i], e.permitReq("sem", owner, 3))
		checkPermit(t, e, l, "sem", i+1, owner)
		checkGreater(t, "permit "+l.Resource, l, grants...)
		grants = append(grants, l)
	}
	for i, owner := range []string{"owner-3", "owner-0"} { // another owner, then a holder
		_, err := stores[i].AcquirePermit(e.ctx, e.permitReq("sem", owner, 3))
		if !checkCode(t, err, contract.LeaseBusy) {
			t.Logf("  (a fourth AcquirePermit of 3, by %s)", owner)
		}
	}
	for _, l := range grants {
		checkStoredLease(t, e.ctx, stores[2], l)
	}
	checkNoLease(t, e.ctx, stores[0], "", contract.PermitResource("sem", 4))
	// The permits are not a lease on the resource itself, and a larger
	// semaphore on it sees them as held.
	checkNoLease(t, e.ctx, stores[0], "", "sem")
	l := mustPermit(t, e, stores[1], e.permitReq("sem", "owner-4", 4))
	checkPermit(t, e, l, "sem", 4, "owner-4")
	checkGreater(t, "permit "+l.Resource, l, grants...)
}

func testPermitTokensIncreaseWithThePlainLease(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	plain := mustAcquire(t, e.ctx, s, e.leaseReq("sem", "owner-plain"))
	grants := []contract.Lease{plain}
	for i := range 3 {
		l := mustPermit(t, e, []*durable.Store{s, other}[i%2], e.permitReq("sem", fmt.Sprintf("owner-%d", i), 3))
		checkGreater(t, "permit "+l.Resource+" after the plain lease and earlier permits", l, grants...)
		grants = append(grants, l)
	}
	// A plain lease on the resource after the permits exceeds them all.
	release(t, e, s, plain)
	plain2 := mustAcquire(t, e.ctx, other, e.leaseReq("sem", "owner-plain"))
	checkGreater(t, "the plain lease on sem after its permits", plain2, grants...)
	grants = append(grants, plain2)
	// And a permit after that exceeds it.
	release(t, e, other, grants[2]) // sem#2
	l := mustPermit(t, e, s, e.permitReq("sem", "owner-9", 3))
	checkPermit(t, e, l, "sem", 2, "owner-9")
	checkGreater(t, "permit sem#2 granted again after a plain lease", l, grants...)
	// Permits of another semaphore whose name extends this one's do not
	// share its permits.
	m := mustPermit(t, e, s, e.permitReq("sem-b", "owner-1", 1))
	checkPermit(t, e, m, "sem-b", 1, "owner-1")
}

func testLowestFreePermitAfterRelease(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	var grants []contract.Lease
	for i := range 3 {
		grants = append(grants, mustPermit(t, e, s, e.permitReq("sem", fmt.Sprintf("owner-%d", i), 3)))
	}
	all := append([]contract.Lease(nil), grants...)
	release(t, e, other, grants[1])
	checkNoLease(t, e.ctx, other, "", contract.PermitResource("sem", 2))
	l := mustPermit(t, e, other, e.permitReq("sem", "owner-3", 3))
	checkPermit(t, e, l, "sem", 2, "owner-3")
	checkGreater(t, "permit sem#2 after its release", l, all...)
	all = append(all, l)

	release(t, e, s, grants[2])
	release(t, e, s, grants[0])
	l = mustPermit(t, e, other, e.permitReq("sem", "owner-4", 3))
	checkPermit(t, e, l, "sem", 1, "owner-4")
	checkGreater(t, "permit sem#1 after releases of sem#1 and sem#3", l, all...)
	all = append(all, l)
	l = mustPermit(t, e, s, e.permitReq("sem", "owner-4", 3)) // the same owner may hold two permits
	checkPermit(t, e, l, "sem", 3, "owner-4")
	checkGreater(t, "permit sem#3", l, all...)
	_, err := s.AcquirePermit(e.ctx, e.permitReq("sem", "owner-5", 3))
	checkCode(t, err, contract.LeaseBusy)
}

func testExpiredPermitBusyWithinTolerance(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	long := e.permitReq("sem", "owner-1", 2)
	long.TTL = 4 * e.pastTakeover()
	held := mustPermit(t, e, s, long)
	l := mustPermit(t, e, s, e.permitReq("sem", "owner-2", 2))
	checkPermit(t, e, l, "sem", 2, "owner-2")

	// Expired, but within the tolerance: still busy, and no longer valid.
	e.advance(e.ttl + e.tol/2)
	_, err := other.AcquirePermit(e.ctx, e.permitReq("sem", "owner-3", 2))
	if !checkCode(t, err, contract.LeaseBusy) {
		t.Logf("  (AcquirePermit %v after a permit expired, tolerance %v)", e.tol/2, e.tol)
	}
	_, err = s.RenewLease(e.ctx, l, e.ttl)
	checkCode(t, err, contract.Fenced)
	checkStoredLease(t, e.ctx, other, l)
	checkStoredLease(t, e.ctx, other, held)
}

func testExpiredPermitReclaimed(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	long := e.permitReq("sem", "owner-1", 2)
	long.TTL = 4 * e.pastTakeover()
	held := mustPermit(t, e, s, long)
	old := mustPermit(t, e, s, e.permitReq("sem", "owner-2", 2))
	checkPermit(t, e, old, "sem", 2, "owner-2")

	e.advance(e.pastTakeover())
	l := mustPermit(t, e, other, e.permitReq("sem", "owner-3", 2))
	checkPermit(t, e, l, "sem", 2, "owner-3")
	checkGreater(t, "the takeover of sem#2", l, held, old)
	checkStoredLease(t, e.ctx, s, l)
	checkStoredLease(t, e.ctx, s, held)

	// The old holder is fenced out.
	_, err := s.RenewLease(e.ctx, old, e.ttl)
	checkCode(t, err, contract.Fenced)
	ok, err := s.ReleaseLease(e.ctx, old)
	noErr(t, err, "ReleaseLease of the expired permit")
	if ok {
		t.Errorf("ReleaseLease of the permit taken over = true, want false")
	}
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning,
		Snapshot: []byte("stale"), Fence: old.Fence(),
	})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, other, w)
	// The new holder and the other permit's holder write.
	w = mustUpdate(t, e.ctx, other, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: l.Fence(),
	})
	mustUpdate(t, e.ctx, s, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: contract.StatusRunning, Fence: held.Fence(),
	})
	// Both permits are held again.
	_, err = other.AcquirePermit(e.ctx, e.permitReq("sem", "owner-4", 2))
	checkCode(t, err, contract.LeaseBusy)
}

func testPermitFencesArePerHolder(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	a := mustPermit(t, e, s, e.permitReq("sem", "owner-a", 2))
	b := mustPermit(t, e, other, e.permitReq("sem", "owner-b", 2))
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	ca := mustClaim(t, e.ctx, s, e.claimReq("key-a"), contract.ClaimNew)
	cb := mustClaim(t, e.ctx, other, e.claimReq("key-b"), contract.ClaimNew)

	update := func(s *durable.Store, f *contract.Fence) (contract.Workflow, error) {
		return s.UpdateWorkflow(e.ctx, contract.Update{
			ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: contract.StatusRunning,
			Snapshot: []byte(f.Resource), Fence: f,
		})
	}
	// Each holder's fence works.
	for _, p := range []struct {
		s *durable.Store
		l contract.Lease
	}{{s, a}, {other, b}, {s, a}} {
		var err error
		w, err = update(p.s, p.l.Fence())
		noErr(t, err, "UpdateWorkflow fenced by "+p.l.Resource)
	}
	// A fence mixing two holders, or naming the semaphore itself, is not
	// valid.
	bad := map[string]contract.Fence{
		"permit 1 with permit 2's token": {Resource: a.Resource, Owner: a.Owner, Token: b.Token},
		"permit 1 with permit 2's owner": {Resource: a.Resource, Owner: b.Owner, Token: a.Token},
		"permit 2 with permit 1's token": {Resource: b.Resource, Owner: b.Owner, Token: a.Token},
		"the semaphore's resource":       {Resource: "sem", Owner: a.Owner, Token: a.Token},
		"a permit not granted":           {Resource: contract.PermitResource("sem", 3), Owner: a.Owner, Token: a.Token},
	}
	for name, f := range bad {
		if _, err := update(s, &f); !checkCode(t, err, contract.Fenced) {
			t.Logf("  (fence: %s)", name)
		}
	}
	checkStored(t, e.ctx, other, w)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: ca.Record.KeyRef, Token: ca.Token, Outcome: testOutcome("a"), Fence: a.Fence()})

	// Holder a releases: its fence is stale, b's still works.
	release(t, e, s, a)
	_, err := update(s, a.Fence())
	checkCode(t, err, contract.Fenced)
	_, err = other.CompleteKey(e.ctx, contract.Completion{KeyRef: cb.Record.KeyRef, Token: cb.Token, Outcome: testOutcome("stale"), Fence: a.Fence()})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s, cb.Record)
	mustComplete(t, e.ctx, other, contract.Completion{KeyRef: cb.Record.KeyRef, Token: cb.Token, Outcome: testOutcome("b"), Fence: b.Fence()})
	_, err = update(other, b.Fence())
	noErr(t, err, "UpdateWorkflow fenced by the remaining holder")
}

func testRenewAndReleaseArePerPermit(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	a := mustPermit(t, e, s, e.permitReq("sem", "owner-1", 2))
	b := mustPermit(t, e, other, e.permitReq("sem", "owner-2", 2))

	// Renewing a moves a's expiry alone.
	ra, err := s.RenewLease(e.ctx, a, 2*e.ttl)
	noErr(t, err, "RenewLease of sem#1")
	if ra.Token != a.Token || ra.Resource != a.Resource {
		t.Errorf("RenewLease of sem#1 = %s token %d, want %s token %d", ra.Resource, ra.Token, a.Resource, a.Token)
	}
	e.checkDur(t, "ExpiresAt - AcquiredAt of the renewed sem#1 (the clock did not move)", ra.ExpiresAt.Sub(ra.AcquiredAt), 2*e.ttl)
	checkStoredLease(t, e.ctx, other, ra)
	checkStoredLease(t, e.ctx, other, b)

	// Another permit's token, owner or resource does not hold a permit.
	wrong := map[string]contract.Lease{
		"sem#1 with sem#2's token": {Resource: a.Resource, Owner: a.Owner, Token: b.Token, AcquiredAt: a.AcquiredAt, ExpiresAt: a.ExpiresAt},
		"sem#1 with sem#2's owner": {Resource: a.Resource, Owner: b.Owner, Token: a.Token, AcquiredAt: a.AcquiredAt, ExpiresAt: a.ExpiresAt},
		"sem#2 with sem#1's token": {Resource: b.Resource, Owner: b.Owner, Token: a.Token, AcquiredAt: b.AcquiredAt, ExpiresAt: b.ExpiresAt},
		"sem with sem#1's grant":   {Resource: "sem", Owner: a.Owner, Token: a.Token, AcquiredAt: a.AcquiredAt, ExpiresAt: a.ExpiresAt},
	}
	for name, l := range wrong {
		if _, err := s.RenewLease(e.ctx, l, e.ttl); !checkCode(t, err, contract.Fenced) {
			t.Logf("  (RenewLease of %s)", name)
		}
		ok, err := s.ReleaseLease(e.ctx, l)
		noErr(t, err, "ReleaseLease of "+name)
		if ok {
			t.Errorf("ReleaseLease of %s = true, want false", name)
		}
	}
	checkStoredLease(t, e.ctx, other, ra)
	checkStoredLease(t, e.ctx, other, b)

	// Releasing b leaves a held and renewable.
	release(t, e, other, b)
	checkNoLease(t, e.ctx, s, "", b.Resource)
	checkStoredLease(t, e.ctx, other, ra)
	_, err = s.RenewLease(e.ctx, b, e.ttl)
	checkCode(t, err, contract.Fenced)
	ra, err = s.RenewLease(e.ctx, ra, e.ttl)
	noErr(t, err, "RenewLease of sem#1 after sem#2's release")
	checkStoredLease(t, e.ctx, other, ra)
	rs, err := other.RenewLeases(e.ctx, []contract.Lease{ra, b}, e.ttl)
	noErr(t, err, "RenewLeases")
	if len(rs) != 2 || rs[0].Err != nil || contract.CodeOf(rs[1].Err) != contract.Fenced {
		t.Errorf("RenewLeases of the held sem#1 and the released sem#2 = %+v, want a renewal and Fenced", rs)
	}
}

// permitRace races clients for n permits of sem and checks that at most n
// win, each a distinct permit within 1..n, and at least want of them.
func permitRace(t *testing.T, e *env, stores []*durable.Store, n, want int, round string) []contract.Lease {
	t.Helper()
	leases := make([]contract.Lease, len(stores))
	errs := make([]error, len(stores))
	race(len(stores), func(i int) {
		leases[i], errs[i] = stores[i].AcquirePermit(e.ctx, e.permitReq("sem", fmt.Sprintf("owner-%s-%d", strings.ReplaceAll(round, " ", "-"), i), n))
	})
	var won []contract.Lease
	holder := map[string]int{}
	for i, err := range errs {
		if err != nil {
			checkCode(t, err, contract.LeaseBusy)
			continue
		}
		if _, num, ok := contract.SplitPermit(leases[i].Resource); !ok || num > n || !strings.HasPrefix(leases[i].Resource, "sem#") {
			t.Errorf("%s: client %d was granted %q, not a permit of sem within 1-%d", round, i, leases[i].Resource, n)
		}
		if j, dup := holder[leases[i].Resource]; dup {
			t.Errorf("%s: clients %d and %d both hold %s", round, j, i, leases[i].Resource)
		}
		holder[leases[i].Resource] = i
		won = append(won, leases[i])
	}
	if len(won) > n {
		t.Errorf("%s: %d clients won one of %d permits", round, len(won), n)
	}
	if len(won) < want {
		t.Errorf("%s: %d clients won one of %d free permits, want %d", round, len(won), n, want)
	}
	for _, l := range won {
		checkStoredLease(t, e.ctx, stores[0], l)
	}
	return won
}

func testConcurrentPermitAcquires(t *testing.T, e *env) {
	stores := e.openN(raceClients)
	const n = 3
	won := permitRace(t, e, stores, n, n, "first round")
	// Two released: two more winners, never more.
	if len(won) == n {
		release(t, e, stores[0], won[0])
		release(t, e, stores[1], won[2])
		again := permitRace(t, e, stores, n, 2, "after two releases")
		for _, l := range again {
			checkGreater(t, "a permit won after the releases", l, won...)
		}
	}
	_, err := stores[0].AcquirePermit(e.ctx, e.permitReq("sem", "owner-late", n))
	checkCode(t, err, contract.LeaseBusy)
}

func testConcurrentPermitTakeovers(t *testing.T, e *env) {
	stores := e.openN(raceClients)
	const n = 3
	won := permitRace(t, e, stores, n, n, "first round")
	e.advance(e.pastTakeover())
	again := permitRace(t, e, stores, n, n, "takeover round")
	for _, l := range again {
		checkGreater(t, "a permit taken over", l, won...)
	}
	for _, l := range won {
		_, err := stores[1].RenewLease(e.ctx, l, e.ttl)
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (renewing the taken-over %s)", l.Resource)
		}
	}
}

func testDeleteRecordFreesOnePermit(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	if _, err := s.DeleteRecord(e.ctx, contract.KindWorkflow, "", "wf-none"); contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend does not implement contract.RecordDeleter (optional): Store.DeleteRecord returns Unimplemented")
	}
	var grants []contract.Lease
	for i := range 3 {
		grants = append(grants, mustPermit(t, e, s, e.permitReq("sem", fmt.Sprintf("owner-%d", i), 3)))
	}
	found, err := other.DeleteRecord(e.ctx, contract.KindLease, "", contract.PermitResource("sem", 2))
	noErr(t, err, "DeleteRecord of sem#2")
	if !found {
		t.Errorf("DeleteRecord of the held sem#2 = false, want true")
	}
	checkNoLease(t, e.ctx, s, "", contract.PermitResource("sem", 2))
	checkStoredLease(t, e.ctx, s, grants[0])
	checkStoredLease(t, e.ctx, s, grants[2])
	l := mustPermit(t, e, other, e.permitReq("sem", "owner-3", 3))
	checkPermit(t, e, l, "sem", 2, "owner-3")
	checkGreater(t, "permit sem#2 after DeleteRecord", l, grants...)
	_, err = s.RenewLease(e.ctx, grants[1], e.ttl)
	checkCode(t, err, contract.Fenced)
	found, err = other.DeleteRecord(e.ctx, contract.KindLease, "", contract.PermitResource("sem", 4))
	noErr(t, err, "DeleteRecord of sem#4")
	if found {
		t.Errorf("DeleteRecord of sem#4, never granted, = true")
	}
}

func testCleanupRemovesExpiredPermits(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	long := e.permitReq("sem", "owner-0", 3)
	long.TTL = 4 * e.pastTakeover()
	grants := []contract.Lease{mustPermit(t, e, s, long)}
	for i := 1; i < 3; i++ {
		grants = append(grants, mustPermit(t, e, s, e.permitReq("sem", fmt.Sprintf("owner-%d", i), 3)))
	}
	e.advance(e.pastTakeover())
	cleanupLeases(t, e, other, 2)
	checkStoredLease(t, e.ctx, other, grants[0])
	checkNoLease(t, e.ctx, other, "", contract.PermitResource("sem", 2))
	checkNoLease(t, e.ctx, other, "", contract.PermitResource("sem", 3))
	all := append([]contract.Lease(nil), grants...)
	for n := 2; n <= 3; n++ {
		l := mustPermit(t, e, other, e.permitReq("sem", fmt.Sprintf("owner-%d", n+3), 3))
		checkPermit(t, e, l, "sem", n, fmt.Sprintf("owner-%d", n+3))
		checkGreater(t, "a permit after Cleanup", l, all...)
		all = append(all, l)
	}
	// A plain lease on the semaphore's resource after Cleanup too.
	p := mustAcquire(t, e.ctx, s, e.leaseReq("sem", "owner-plain"))
	checkGreater(t, "the plain lease on sem after Cleanup of its permits", p, all...)
	for _, l := range grants[1:] {
		_, err := s.RenewLease(e.ctx, l, e.ttl)
		checkCode(t, err, contract.Fenced)
	}
}

func testListLeasesListsPermits(t *testing.T, e *env) {
	s := e.lister()
	want := map[string]contract.Lease{}
	for i := range 12 {
		l := mustPermit(t, e, s, e.permitReq("sem", fmt.Sprintf("owner-%d", i), 12))
		want[l.Resource] = l
	}
	// Plain leases that sort between and around the permits in byte
	// order ('#' < '-' < '.' < '0').
	for _, r := range []string{"sem", "sem-x", "sem.y", "sem0", "se", "sem-b"} {
		l := mustAcquire(t, e.ctx, s, e.leaseReq(r, "owner-p"))
		want[l.Resource] = l
	}
	// One released permit is not listed.
	release(t, e, s, want[contract.PermitResource("sem", 7)])
	delete(want, contract.PermitResource("sem", 7))
	var ids []string
	for r := range want {
		ids = append(ids, r)
	}
	sort.Strings(ids)
	for _, limit := range []int{1, 3, 1000} {
		what := fmt.Sprintf("ListLeases (Limit %d)", limit)
		got := pageAll(t, what, limit, func(after string) ([]contract.Lease, error) {
			return s.ListLeases(e.ctx, contract.LeaseListQuery{After: after, Limit: limit})
		}, func(l contract.Lease) string { return l.Resource }, func(l contract.Lease) {
			if d := diffLease(l, want[l.Resource]); d != "" {
				t.Errorf("%s lease %s: %s", what, l.Resource, d)
			}
		})
		checkIDs(t, what, got, ids)
	}
	// A permit's name as the cursor.
	page, err := s.ListLeases(e.ctx, contract.LeaseListQuery{After: contract.PermitResource("sem", 1), Limit: 2})
	noErr(t, err, "ListLeases after sem#1")
	var got []string
	for _, l := range page {
		got = append(got, l.Resource)
	}
	checkIDs(t, "ListLeases after sem#1, Limit 2", got, []string{"sem#10", "sem#11"})
}

func testPermitTokensIncreaseAcrossRestart(t *testing.T, e *env) {
	s := e.open()
	e.open()
	var grants []contract.Lease
	for i := range 2 {
		grants = append(grants, mustPermit(t, e, s, e.permitReq("sem", fmt.Sprintf("owner-%d", i), 2)))
	}
	release(t, e, s, grants[0])

	e.closeAll()
	s = e.open()
	checkStoredLease(t, e.ctx, s, grants[1])
	l := mustPermit(t, e, s, e.permitReq("sem", "owner-2", 2))
	checkPermit(t, e, l, "sem", 1, "owner-2")
	checkGreater(t, "a permit after the restart", l, grants...)
	_, err := s.AcquirePermit(e.ctx, e.permitReq("sem", "owner-3", 2))
	checkCode(t, err, contract.LeaseBusy)
	r, err := s.RenewLease(e.ctx, grants[1], e.ttl)
	noErr(t, err, "RenewLease of a permit after the restart")
	if r.Token != grants[1].Token {
		t.Errorf("renewal after restart changed the token from %d to %d", grants[1].Token, r.Token)
	}
	p := mustAcquire(t, e.ctx, s, e.leaseReq("sem", "owner-plain"))
	checkGreater(t, "the plain lease on sem after the restart", p, append(grants, l)...)
}
