package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func leaseScenarios() []scenario {
	return []scenario{
		{"AcquireGrantsATokenForTheTTL", 0, testAcquireGrantsATokenForTheTTL},
		{"AcquireWithZeroTTLUsesTheStoreDefault", 0, testAcquireWithZeroTTLUsesTheStoreDefault},
		{"HeldLeaseIsBusyForAnotherOwner", 0, testHeldLeaseIsBusyForAnotherOwner},
		{"HeldLeaseIsBusyForTheSameOwner", 0, testHeldLeaseIsBusyForTheSameOwner},
		{"GetOfMissingLeaseIsNotFound", 0, testGetOfMissingLeaseIsNotFound},
		{"RenewKeepsTheTokenAndMovesExpiry", 0, testRenewKeepsTheTokenAndMovesExpiry},
		{"RenewedLeaseOutlivesItsFirstTTL", needClock, testRenewedLeaseOutlivesItsFirstTTL},
		{"WrongTokenOrOwnerCannotRenewOrRelease", 0, testWrongTokenOrOwnerCannotRenewOrRelease},
		{"FencedWriteNeedsTheCurrentGrant", 0, testFencedWriteNeedsTheCurrentGrant},
		{"StaleTokenIsRejectedAfterTakeover", needClock, testStaleTokenIsRejectedAfterTakeover},
		{"ExpiredLeaseCannotBeRenewedOrFence", needClock, testExpiredLeaseCannotBeRenewedOrFence},
		{"ToleranceGapLetsNeitherSideWrite", needClock | needTolerance, testToleranceGapLetsNeitherSideWrite},
		{"NoTakeoverWithinTolerance", needClock | needTolerance, testNoTakeoverWithinTolerance},
		{"TokensIncreaseAcrossRelease", 0, testTokensIncreaseAcrossRelease},
		{"TokensIncreaseAcrossCleanup", needClock, testTokensIncreaseAcrossCleanup},
		{"TokensIncreaseAcrossRestart", needRestart, testTokensIncreaseAcrossRestart},
		{"ConcurrentAcquiresHaveOneWinner", 0, testConcurrentAcquiresHaveOneWinner},
		{"RenewLeaseSetsExpiresAtToNowPlusTTL", needClock, testRenewLeaseSetsExpiresAtToNowPlusTTL},
		{"FractionalLeaseTTLsAreKeptExactly", 0, testFractionalLeaseTTLsAreKeptExactly},
		{"TokensIncreaseForTheSameOwner", needClock, testTokensIncreaseForTheSameOwner},
		{"TokensIncreaseAcrossTakeoverAndCleanup", needClock, testTokensIncreaseAcrossTakeoverAndCleanup},
		{"ConcurrentTakeoversHaveOneWinner", needClock, testConcurrentTakeoversHaveOneWinner},
		{"TokensIncreasePerResourceWhenGrantsInterleave", needClock, testTokensIncreasePerResourceWhenGrantsInterleave},
		{"TokensIncreaseWhenCleanupDeletesARecordTakenOverSeveralTimes", needClock, testTokensIncreaseWhenCleanupDeletesARecordTakenOverSeveralTimes},
		{"RenewalKeepsTheGrant", needClock, testRenewalKeepsTheGrant},                 // grant.go
		{"RunnerKeepAliveKeepsTheGrant", needClock, testRunnerKeepAliveKeepsTheGrant}, // grant.go
		{"ResourcesMatchExactly", needClock, testLeaseResourcesMatchExactly},          // exactmatch.go
	}
}

func (e *env) leaseReq(resource, owner string) contract.LeaseRequest {
	return contract.LeaseRequest{Resource: resource, Owner: owner, TTL: e.ttl}
}

func testAcquireGrantsATokenForTheTTL(t *testing.T, e *env) {
	s := e.open()
	l, err := s.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-1"))
	noErr(t, err, "AcquireLease")
	if l.Token <= 0 {
		t.Errorf("Token = %d, want > 0", l.Token)
	}
	if l.Resource != "res-1" || l.Owner != "owner-1" || l.Scope != "" {
		t.Errorf("lease = %+v, want resource %q owner %q in scope \"\"", l, "res-1", "owner-1")
	}
	if l.AcquiredAt.IsZero() {
		t.Errorf("AcquiredAt is zero")
	}
	e.checkDur(t, "ExpiresAt - AcquiredAt", l.ExpiresAt.Sub(l.AcquiredAt), e.ttl)
	checkStoredLease(t, e.ctx, e.open(), l)
	f := l.Fence()
	if f.Resource != "res-1" || f.Owner != "owner-1" || f.Token != l.Token {
		t.Errorf("Fence() = %+v, want the lease's resource, owner and token", *f)
	}
}

func testAcquireWithZeroTTLUsesTheStoreDefault(t *testing.T, e *env) {
	s := e.open()
	req := e.leaseReq("res-1", "owner-1")
	req.TTL = 0
	l := mustAcquire(t, e.ctx, s, req)
	e.checkDur(t, "ExpiresAt - AcquiredAt with a zero TTL", l.ExpiresAt.Sub(l.AcquiredAt), durable.DefaultLeaseTTL)
}

func testHeldLeaseIsBusyForAnotherOwner(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	l := mustAcquire(t, e.ctx, s1, e.leaseReq("res-1", "owner-1"))
	_, err := s2.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	checkCode(t, err, contract.LeaseBusy)
	checkStoredLease(t, e.ctx, s2, l)
	// Another resource is free.
	mustAcquire(t, e.ctx, s2, e.leaseReq("res-2", "owner-2"))
}

func testHeldLeaseIsBusyForTheSameOwner(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	l := mustAcquire(t, e.ctx, s1, e.leaseReq("res-1", "owner-1"))
	for i, s := range []*durable.Store{s1, s2} {
		_, err := s.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-1"))
		if !checkCode(t, err, contract.LeaseBusy) {
			t.Logf("  (client %d, same owner)", i)
		}
	}
	checkStoredLease(t, e.ctx, s1, l)
}

func testGetOfMissingLeaseIsNotFound(t *testing.T, e *env) {
	s := e.open()
	checkNoLease(t, e.ctx, s, "", "res-1")
	mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	checkNoLease(t, e.ctx, s, "", "res-10")
	checkNoLease(t, e.ctx, s, "", "res")
}

func testRenewKeepsTheTokenAndMovesExpiry(t *testing.T, e *env) {
	s := e.open()
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	var step time.Duration
	if e.caps.Clock {
		step = e.ttl / 4
		e.advance(step)
	}
	r, err := e.open().RenewLease(e.ctx, l, 2*e.ttl)
	noErr(t, err, "RenewLease")
	if r.Token != l.Token || r.Owner != l.Owner || r.Resource != l.Resource || r.Scope != l.Scope {
		t.Errorf("renewed lease = %+v, want the same grant as %+v", r, l)
	}
	if !r.AcquiredAt.Equal(l.AcquiredAt) {
		t.Errorf("AcquiredAt changed from %v to %v on renewal", l.AcquiredAt, r.AcquiredAt)
	}
	checkAtLeast(t, "renewed ExpiresAt - AcquiredAt", r.ExpiresAt.Sub(r.AcquiredAt), 2*e.ttl+step)
	checkStoredLease(t, e.ctx, s, r)
	// Renewing with the renewed lease works again, and the old value (same
	// owner and token) is the same grant.
	r2, err := s.RenewLease(e.ctx, l, e.ttl)
	noErr(t, err, "second RenewLease")
	if r2.Token != l.Token {
		t.Errorf("second renewal changed the token from %d to %d", l.Token, r2.Token)
	}
	checkStoredLease(t, e.ctx, s, r2)
}

func testRenewedLeaseOutlivesItsFirstTTL(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	l := mustAcquire(t, e.ctx, s1, e.leaseReq("res-1", "owner-1"))
	e.advance(e.ttl / 2)
	r, err := s1.RenewLease(e.ctx, l, e.ttl)
	noErr(t, err, "RenewLease")
	// Past the first grant's expiry and tolerance, before the renewal's
	// expiry.
	e.advance(e.ttl/2 + e.tol + time.Second)
	_, err = s2.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	checkCode(t, err, contract.LeaseBusy)
	checkStoredLease(t, e.ctx, s2, r)
}

func testWrongTokenOrOwnerCannotRenewOrRelease(t *testing.T, e *env) {
	s := e.open()
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	other := mustAcquire(t, e.ctx, s, e.leaseReq("res-2", "owner-2"))
	bad := map[string]contract.Lease{}
	wrongToken := l
	wrongToken.Token = l.Token + 1000
	bad["wrong token"] = wrongToken
	wrongOwner := l
	wrongOwner.Owner = "owner-2"
	bad["wrong owner"] = wrongOwner
	otherGrant := l
	otherGrant.Owner, otherGrant.Token = other.Owner, other.Token
	bad["another resource's grant"] = otherGrant
	for name, b := range bad {
		_, err := s.RenewLease(e.ctx, b, e.ttl)
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (RenewLease with %s)", name)
		}
		ok, err := s.ReleaseLease(e.ctx, b)
		noErr(t, err, "ReleaseLease with "+name)
		if ok {
			t.Errorf("ReleaseLease with %s = true, want false", name)
		}
	}
	checkStoredLease(t, e.ctx, s, l)
	checkStoredLease(t, e.ctx, s, other)
}

func testFencedWriteNeedsTheCurrentGrant(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	// Tokens need only grow per resource, so res-2's token may equal
	// res-1's: its other owner is what makes the fence below invalid.
	mustAcquire(t, e.ctx, s, e.leaseReq("res-2", "owner-2"))
	bad := map[string]contract.Fence{
		"wrong token":    {Resource: "res-1", Owner: "owner-1", Token: l.Token + 1000},
		"wrong owner":    {Resource: "res-1", Owner: "owner-2", Token: l.Token},
		"wrong resource": {Resource: "res-2", Owner: "owner-1", Token: l.Token},
		"no lease":       {Resource: "res-3", Owner: "owner-1", Token: l.Token},
	}
	for name, f := range bad {
		_, err := s.UpdateWorkflow(e.ctx, contract.Update{
			ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning,
			Snapshot: []byte(name), Fence: &f,
		})
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (fence with %s)", name)
		}
	}
	checkStored(t, e.ctx, s, w)
	w = mustUpdate(t, e.ctx, s, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: l.Fence(),
	})

	// Released: the fence is no longer valid.
	ok, err := s.ReleaseLease(e.ctx, l)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatalf("ReleaseLease = false, want true")
	}
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: contract.StatusRunning, Fence: l.Fence(),
	})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, s, w)
}

func testStaleTokenIsRejectedAfterTakeover(t *testing.T, e *env) {
	old, next := e.open(), e.open()
	w := mustCreate(t, e.ctx, old, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("v1")})
	claimReq := e.claimReq("key-1")
	claimReq.TTL = 10 * e.ttl // the claim outlives the lease
	c := mustClaim(t, e.ctx, old, claimReq, contract.ClaimNew)

	l1 := mustAcquire(t, e.ctx, old, e.leaseReq("res-1", "owner-1"))
	e.advance(e.pastTakeover())
	l2, err := next.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	noErr(t, err, "AcquireLease after expiry beyond the tolerance")
	if l2.Token <= l1.Token {
		t.Errorf("token after takeover = %d, want > %d", l2.Token, l1.Token)
	}
	e.checkDur(t, "ExpiresAt - AcquiredAt after takeover", l2.ExpiresAt.Sub(l2.AcquiredAt), e.ttl)

	// The old owner comes back.
	_, err = old.RenewLease(e.ctx, l1, e.ttl)
	checkCode(t, err, contract.Fenced)
	ok, err := old.ReleaseLease(e.ctx, l1)
	noErr(t, err, "ReleaseLease of the stale grant")
	if ok {
		t.Errorf("ReleaseLease of the stale grant = true, want false")
	}
	_, err = old.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusSucceeded,
		Snapshot: []byte("stale write"), Fence: l1.Fence(),
	})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, next, w)
	_, err = old.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("stale"), Fence: l1.Fence()})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, next, c.Record)
	checkStoredLease(t, e.ctx, next, l2)

	// The new owner writes.
	mustUpdate(t, e.ctx, next, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning,
		Snapshot: []byte("new owner"), Fence: l2.Fence(),
	})
	mustComplete(t, e.ctx, next, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("new"), Fence: l2.Fence()})
}

func testExpiredLeaseCannotBeRenewedOrFence(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	e.advance(e.ttl)
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: l.Fence(),
	})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, s, w)
	_, err = s.RenewLease(e.ctx, l, e.ttl)
	checkCode(t, err, contract.Fenced)
	// A failed renewal leaves the lease as it was.
	checkStoredLease(t, e.ctx, s, l)
}

func testToleranceGapLetsNeitherSideWrite(t *testing.T, e *env) {
	holder, other := e.open(), e.open()
	w := mustCreate(t, e.ctx, holder, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	l := mustAcquire(t, e.ctx, holder, e.leaseReq("res-1", "owner-1"))
	// Not yet expired, but less than the tolerance left.
	e.advance(e.ttl - e.tol/2)
	_, err := holder.RenewLease(e.ctx, l, e.ttl)
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (renewal with %v left, tolerance %v)", e.tol/2, e.tol)
	}
	_, err = holder.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning,
		Snapshot: []byte("too late"), Fence: l.Fence(),
	})
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (fenced write with %v left, tolerance %v)", e.tol/2, e.tol)
	}
	checkStored(t, e.ctx, holder, w)
	_, err = other.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	if !checkCode(t, err, contract.LeaseBusy) {
		t.Logf("  (takeover %v before expiry)", e.tol/2)
	}
	checkStoredLease(t, e.ctx, other, l)
}

func testNoTakeoverWithinTolerance(t *testing.T, e *env) {
	holder, other := e.open(), e.open()
	l := mustAcquire(t, e.ctx, holder, e.leaseReq("res-1", "owner-1"))
	e.advance(e.ttl + e.tol/2)
	_, err := other.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	if !checkCode(t, err, contract.LeaseBusy) {
		t.Logf("  (takeover %v after expiry, tolerance %v)", e.tol/2, e.tol)
	}
	_, err = holder.RenewLease(e.ctx, l, e.ttl)
	checkCode(t, err, contract.Fenced)
	checkStoredLease(t, e.ctx, other, l)
}

func testTokensIncreaseAcrossRelease(t *testing.T, e *env) {
	stores := e.openN(3)
	var last int64
	for i := 0; i < 6; i++ {
		s := stores[i%len(stores)]
		owner := fmt.Sprintf("owner-%d", i%2)
		l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", owner))
		if l.Token <= last {
			t.Errorf("grant %d: token %d, want > %d (the previous grant's)", i, l.Token, last)
		}
		last = l.Token
		ok, err := s.ReleaseLease(e.ctx, l)
		noErr(t, err, "ReleaseLease")
		if !ok {
			t.Fatalf("grant %d: ReleaseLease = false, want true", i)
		}
		checkNoLease(t, e.ctx, s, "", "res-1")
		// Releasing twice reports false.
		ok, err = s.ReleaseLease(e.ctx, l)
		noErr(t, err, "second ReleaseLease")
		if ok {
			t.Errorf("grant %d: second ReleaseLease = true, want false", i)
		}
		// A released grant cannot be renewed back to life.
		_, err = s.RenewLease(e.ctx, l, e.ttl)
		checkCode(t, err, contract.Fenced)
	}
}

func testTokensIncreaseAcrossCleanup(t *testing.T, e *env) {
	s := e.open()
	l1 := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	e.advance(e.pastTakeover())
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: time.Hour})
	noErr(t, err, "Cleanup")
	if res.Leases != 1 {
		t.Errorf("Cleanup deleted %d leases, want 1", res.Leases)
	}
	checkNoLease(t, e.ctx, s, "", "res-1")
	l2 := mustAcquire(t, e.ctx, e.open(), e.leaseReq("res-1", "owner-1"))
	if l2.Token <= l1.Token {
		t.Errorf("token after cleanup = %d, want > %d", l2.Token, l1.Token)
	}
	_, err = s.RenewLease(e.ctx, l1, e.ttl)
	checkCode(t, err, contract.Fenced)
}

func testTokensIncreaseAcrossRestart(t *testing.T, e *env) {
	s := e.open()
	e.open() // a second client, also closed by the restart
	l1 := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	ok, err := s.ReleaseLease(e.ctx, l1)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatalf("ReleaseLease = false, want true")
	}
	held := mustAcquire(t, e.ctx, s, e.leaseReq("res-2", "owner-1"))
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: binaryData("restart")})

	e.closeAll()
	s = e.open()

	l2 := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	if l2.Token <= l1.Token {
		t.Errorf("token after restart = %d, want > %d (issued before the restart)", l2.Token, l1.Token)
	}
	// Records survived.
	checkStored(t, e.ctx, s, w)
	checkStoredLease(t, e.ctx, s, held)
	_, err = s.AcquireLease(e.ctx, e.leaseReq("res-2", "owner-2"))
	checkCode(t, err, contract.LeaseBusy)
	// A grant is data, not a session: it is renewable from the new client.
	r, err := s.RenewLease(e.ctx, held, e.ttl)
	noErr(t, err, "RenewLease after restart")
	if r.Token != held.Token {
		t.Errorf("renewal after restart changed the token from %d to %d", held.Token, r.Token)
	}
}

func testConcurrentAcquiresHaveOneWinner(t *testing.T, e *env) {
	stores := e.openN(raceClients)
	leases := make([]contract.Lease, len(stores))
	errs := make([]error, len(stores))
	race(len(stores), func(i int) {
		leases[i], errs[i] = stores[i].AcquireLease(e.ctx, e.leaseReq("res-1", fmt.Sprintf("owner-%d", i)))
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("owners %d and %d both acquired the lease", winner, i)
		case err == nil:
			winner = i
		default:
			checkCode(t, err, contract.LeaseBusy)
		}
	}
	if winner < 0 {
		t.Fatalf("no client acquired the lease")
	}
	checkStoredLease(t, e.ctx, stores[0], leases[winner])
}

func testRenewLeaseSetsExpiresAtToNowPlusTTL(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	now := l.AcquiredAt

	// Longer than what is left, and not whole seconds.
	step := 1250 * time.Millisecond
	e.advance(step)
	now = now.Add(step)
	ttl := 2*e.ttl + 1500*time.Millisecond
	r, err := s.RenewLease(e.ctx, l, ttl)
	noErr(t, err, "RenewLease")
	e.checkTime(t, "ExpiresAt after RenewLease(ttl) at now (now + ttl, not the old ExpiresAt + ttl)", r.ExpiresAt, now.Add(ttl))
	if r.Token != l.Token || !r.AcquiredAt.Equal(l.AcquiredAt) || r.Owner != l.Owner {
		t.Errorf("renewed lease = %+v, want the grant %+v with a new ExpiresAt only", r, l)
	}
	checkStoredLease(t, e.ctx, other, r)

	// Shorter than what is left: the lease ends sooner.
	margin := max(250*time.Millisecond, 2*e.g)
	step = 750 * time.Millisecond
	e.advance(step)
	now = now.Add(step)
	short := e.tol + time.Second + 2*margin
	r, err = s.RenewLease(e.ctx, r, short)
	noErr(t, err, "RenewLease with a shorter TTL")
	e.checkTime(t, "ExpiresAt after RenewLease with a TTL shorter than what was left (now + ttl)", r.ExpiresAt, now.Add(short))
	checkStoredLease(t, e.ctx, other, r)

	// The lease behaves as ExpiresAt says.
	e.advance(short - margin)
	_, err = other.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	checkCode(t, err, contract.LeaseBusy)
	e.advance(margin + e.tol + time.Second)
	l2, err := other.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	noErr(t, err, "AcquireLease past the renewed ExpiresAt and the tolerance")
	if l2.Token <= l.Token {
		t.Errorf("token after takeover = %d, want > %d", l2.Token, l.Token)
	}
}

func testFractionalLeaseTTLsAreKeptExactly(t *testing.T, e *env) {
	s := e.open()
	for i, ttl := range []time.Duration{e.tol + 1500*time.Millisecond, e.ttl + 123456*time.Microsecond, 90*time.Minute + 750*time.Millisecond} {
		req := e.leaseReq(fmt.Sprintf("res-%d", i), "owner-1")
		req.TTL = ttl
		l := mustAcquire(t, e.ctx, s, req)
		e.checkDur(t, "ExpiresAt - AcquiredAt of a lease with TTL "+ttl.String(), l.ExpiresAt.Sub(l.AcquiredAt), ttl)
		checkStoredLease(t, e.ctx, s, l)
		renew := ttl + 1250*time.Millisecond
		r, err := s.RenewLease(e.ctx, l, renew)
		noErr(t, err, "RenewLease")
		if e.caps.Clock { // the clock stood still: now is AcquiredAt
			e.checkDur(t, "ExpiresAt - AcquiredAt after RenewLease("+renew.String()+")", r.ExpiresAt.Sub(r.AcquiredAt), renew)
		} else {
			checkAtLeast(t, "ExpiresAt - AcquiredAt after RenewLease("+renew.String()+")", r.ExpiresAt.Sub(r.AcquiredAt), renew)
		}
		checkStoredLease(t, e.ctx, s, r)
	}
}

// checkGreater asserts that each grant's token exceeds every earlier one.
func checkGreater(t *testing.T, what string, l contract.Lease, earlier ...contract.Lease) {
	t.Helper()
	for _, p := range earlier {
		if l.Token <= p.Token {
			t.Errorf("%s: token %d, want > %d (an earlier grant to %s)", what, l.Token, p.Token, p.Owner)
		}
	}
}

func testTokensIncreaseForTheSameOwner(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	var grants []contract.Lease
	l1 := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	grants = append(grants, l1)

	// The owner takes back its own expired lease: a new grant.
	e.advance(e.pastTakeover())
	l2 := mustAcquire(t, e.ctx, other, e.leaseReq("res-1", "owner-1"))
	checkGreater(t, "the same owner taking back its expired lease", l2, grants...)
	grants = append(grants, l2)
	_, err := s.RenewLease(e.ctx, l1, e.ttl)
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (renewing the owner's earlier grant after it took the lease back)")
	}
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: l1.Fence()})
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (a fenced write with the owner's earlier grant)")
	}
	checkStored(t, e.ctx, s, w)

	// Released and acquired again by the same owner.
	ok, err := other.ReleaseLease(e.ctx, l2)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatalf("ReleaseLease = false, want true")
	}
	l3 := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	checkGreater(t, "the same owner acquiring after its release", l3, grants...)
	grants = append(grants, l3)

	// Expired, cleaned up and acquired again by the same owner.
	e.advance(e.pastTakeover())
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: time.Hour})
	noErr(t, err, "Cleanup")
	if res.Leases != 1 {
		t.Errorf("Cleanup deleted %d leases, want 1", res.Leases)
	}
	l4 := mustAcquire(t, e.ctx, other, e.leaseReq("res-1", "owner-1"))
	checkGreater(t, "the same owner acquiring after cleanup", l4, grants...)
	grants = append(grants, l4)

	// Restarted and acquired again by the same owner.
	if !e.caps.Restart {
		t.Logf("the harness cannot restart (Capabilities.Restart is false): the restart step is not checked")
		return
	}
	ok, err = other.ReleaseLease(e.ctx, l4)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatalf("ReleaseLease = false, want true")
	}
	e.closeAll()
	l5 := mustAcquire(t, e.ctx, e.open(), e.leaseReq("res-1", "owner-1"))
	checkGreater(t, "the same owner acquiring after a restart", l5, grants...)
}

func testTokensIncreaseAcrossTakeoverAndCleanup(t *testing.T, e *env) {
	s1, s2, s3 := e.open(), e.open(), e.open()
	l1 := mustAcquire(t, e.ctx, s1, e.leaseReq("res-1", "owner-1"))
	e.advance(e.pastTakeover())
	l2 := mustAcquire(t, e.ctx, s2, e.leaseReq("res-1", "owner-2"))
	checkGreater(t, "takeover", l2, l1)
	e.advance(e.pastTakeover())
	res, err := s3.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: time.Hour})
	noErr(t, err, "Cleanup")
	if res.Leases != 1 {
		t.Errorf("Cleanup deleted %d leases, want 1", res.Leases)
	}
	checkNoLease(t, e.ctx, s3, "", "res-1")
	l3 := mustAcquire(t, e.ctx, s1, e.leaseReq("res-1", "owner-1"))
	checkGreater(t, "grant after takeover, expiry and cleanup", l3, l1, l2)
	_, err = s2.RenewLease(e.ctx, l2, e.ttl)
	checkCode(t, err, contract.Fenced)
	_, err = s1.RenewLease(e.ctx, l1, e.ttl)
	checkCode(t, err, contract.Fenced)
	checkStoredLease(t, e.ctx, s3, l3)
}

func testConcurrentTakeoversHaveOneWinner(t *testing.T, e *env) {
	first := e.open()
	old := mustAcquire(t, e.ctx, first, e.leaseReq("res-1", "owner-old"))
	e.advance(e.pastTakeover())
	stores := e.openN(raceClients)
	leases := make([]contract.Lease, len(stores))
	errs := make([]error, len(stores))
	race(len(stores), func(i int) {
		leases[i], errs[i] = stores[i].AcquireLease(e.ctx, e.leaseReq("res-1", fmt.Sprintf("owner-%d", i)))
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("owners %d and %d both took the expired lease over (tokens %d and %d)", winner, i, leases[winner].Token, leases[i].Token)
		case err == nil:
			winner = i
		default:
			checkCode(t, err, contract.LeaseBusy)
		}
	}
	if winner < 0 {
		t.Fatalf("no client took the expired lease over")
	}
	checkGreater(t, "takeover", leases[winner], old)
	checkStoredLease(t, e.ctx, first, leases[winner])
	_, err := first.RenewLease(e.ctx, old, e.ttl)
	checkCode(t, err, contract.Fenced)
	for i, err := range errs {
		if err == nil && i != winner {
			_, err := stores[i].RenewLease(e.ctx, leases[i], e.ttl)
			checkCode(t, err, contract.Fenced)
		}
	}
}
