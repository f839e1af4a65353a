package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func keyScenarios() []scenario {
	return []scenario{
		{"ClaimOfFreeKeyIsNew", 0, testClaimOfFreeKeyIsNew},
		{"ClaimWithZeroTTLUsesTheStoreDefault", 0, testClaimWithZeroTTLUsesTheStoreDefault},
		{"LiveClaimIsInFlight", 0, testLiveClaimIsInFlight},
		{"OtherFingerprintIsKeyConflict", 0, testOtherFingerprintIsKeyConflict},
		{"OtherWorkflowIDIsKeyConflict", 0, testOtherWorkflowIDIsKeyConflict},
		{"KeyStaysBoundAfterItsClaimExpires", needClock, testKeyStaysBoundAfterItsClaimExpires},
		{"CompletedKeyReplaysItsOutcome", 0, testCompletedKeyReplaysItsOutcome},
		{"CompletionRetryAfterLostReplyReturnsStoredRecord", 0, testCompletionRetryAfterLostReplyReturnsStoredRecord},
		{"CompletedKeyIsNeverOverwritten", 0, testCompletedKeyIsNeverOverwritten},
		{"StaleTokenIsRejectedAfterReclaim", needClock, testStaleTokenIsRejectedAfterReclaim},
		{"NoReclaimWithinTolerance", needClock | needTolerance, testNoReclaimWithinTolerance},
		{"ReleaseLetsARetryClaimAgain", 0, testReleaseLetsARetryClaimAgain},
		{"ReleaseWithWrongTokenKeepsTheClaim", 0, testReleaseWithWrongTokenKeepsTheClaim},
		{"CompletedKeyCannotBeReleasedOrRenewed", 0, testCompletedKeyCannotBeReleasedOrRenewed},
		{"UnclaimedKeyCannotBeCompletedRenewedOrReleased", 0, testUnclaimedKeyCannotBeCompletedRenewedOrReleased},
		{"RenewWithWrongTokenIsFenced", 0, testRenewWithWrongTokenIsFenced},
		{"RenewExtendsTheClaim", needClock, testRenewExtendsTheClaim},
		{"CompletedKeyIsForgottenAfterRetention", needClock, testCompletedKeyIsForgottenAfterRetention},
		{"ConcurrentClaimsHaveOneWinner", 0, testConcurrentClaimsHaveOneWinner},
		{"WaitKeyReturnsTheCompletedRecord", 0, testWaitKeyReturnsTheCompletedRecord},
		{"WaitKeyReturnsNotFoundWhenReleased", 0, testWaitKeyReturnsNotFoundWhenReleased},
		{"WaitKeyOnCompletedKeyReturnsAtOnce", 0, testWaitKeyOnCompletedKeyReturnsAtOnce},
		{"WaitKeyOnMissingKeyIsNotFound", 0, testWaitKeyOnMissingKeyIsNotFound},
		{"WaitKeyEndsWithItsContext", 0, testWaitKeyEndsWithItsContext},
		{"WaitKeyOutlastsAnExpiredClaim", needClock, testWaitKeyOutlastsAnExpiredClaim},
		{"CompletionWithInvalidFenceIsFenced", 0, testCompletionWithInvalidFenceIsFenced},
		{"CompletionWithExpiredFenceIsFenced", needClock, testCompletionWithExpiredFenceIsFenced},
		{"GetOfMissingKeyIsNotFound", 0, testGetOfMissingKeyIsNotFound},
		{"OtherWorkflowIDOnCompletedKeyIsKeyConflict", 0, testOtherWorkflowIDOnCompletedKeyIsKeyConflict},
		{"OtherWorkflowIDOnAbandonedClaimIsKeyConflict", needClock, testOtherWorkflowIDOnAbandonedClaimIsKeyConflict},
		{"CompletedKeyReplaysUntilItsExpiry", needClock, testCompletedKeyReplaysUntilItsExpiry},
		{"RetentionCountsFromCompletion", needClock, testRetentionCountsFromCompletion},
		{"RenewKeySetsLeaseUntilToNowPlusTTL", needClock, testRenewKeySetsLeaseUntilToNowPlusTTL},
		{"FractionalClaimTTLsAreKeptExactly", 0, testFractionalClaimTTLsAreKeptExactly},
		{"ConcurrentReclaimsHaveOneWinner", needClock, testConcurrentReclaimsHaveOneWinner},
		{"LateCompletionRacingAReclaim", needClock, testLateCompletionRacingAReclaim}, // grant.go
		{"ClaimTokensAreUnpredictable", 0, testClaimTokensAreUnpredictable},
		{"SeveralWaitersAllWakeOnCompletion", 0, testSeveralWaitersAllWakeOnCompletion},
		{"SeveralWaitersAllWakeOnRelease", 0, testSeveralWaitersAllWakeOnRelease},
		{"DeclinedWaitKeyFallsBackToPolling", 0, testDeclinedWaitKeyFallsBackToPolling},
		{"KeysMatchExactly", needClock, testKeysMatchExactly}, // exactmatch.go
	}
}

const fp1, fp2 = "POST:/orders:sha256=1111", "POST:/orders:sha256=2222"

func keyRef(key string) contract.KeyRef { return contract.KeyRef{Key: key} }

func (e *env) claimReq(key string) contract.ClaimRequest {
	return contract.ClaimRequest{KeyRef: keyRef(key), Fingerprint: fp1, TTL: e.ttl}
}

func testClaimOfFreeKeyIsNew(t *testing.T, e *env) {
	s := e.open()
	req := e.claimReq("key-1")
	req.WorkflowID = "wf-1"
	c, err := s.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey")
	if c.Kind != contract.ClaimNew {
		t.Fatalf("Kind = %v, want %v", c.Kind, contract.ClaimNew)
	}
	if c.Token == "" {
		t.Errorf("Token is empty, want a fresh claim token")
	}
	r := c.Record
	if r.CreatedAt.IsZero() {
		t.Errorf("CreatedAt is zero")
	}
	e.checkTime(t, "LeaseUntil of a new claim (CreatedAt + TTL)", r.LeaseUntil, r.CreatedAt.Add(e.ttl))
	checkKey(t, "new claim", r, contract.KeyRecord{
		KeyRef: req.KeyRef, Fingerprint: fp1, WorkflowID: "wf-1", State: contract.KeyClaimed,
		LeaseUntil: r.LeaseUntil, CreatedAt: r.CreatedAt,
	})
	checkStoredKey(t, e.ctx, e.open(), r)

	// Another key gets another token.
	c2 := mustClaim(t, e.ctx, s, e.claimReq("key-2"), contract.ClaimNew)
	if c2.Token == c.Token {
		t.Errorf("two keys got the same claim token %q", c.Token)
	}
}

func testClaimWithZeroTTLUsesTheStoreDefault(t *testing.T, e *env) {
	s := e.open()
	req := e.claimReq("key-1")
	req.TTL = 0
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	e.checkDur(t, "LeaseUntil - CreatedAt with a zero TTL", c.Record.LeaseUntil.Sub(c.Record.CreatedAt), durable.DefaultClaimTTL)
}

func testLiveClaimIsInFlight(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	for i, s := range []*durable.Store{s1, s2} {
		got, err := s.ClaimKey(e.ctx, e.claimReq("key-1"))
		noErr(t, err, "second ClaimKey")
		if got.Kind != contract.ClaimInFlight {
			t.Errorf("client %d: Kind = %v, want %v", i, got.Kind, contract.ClaimInFlight)
		}
		if got.Token != "" {
			t.Errorf("client %d: an in-flight claim returned a token %q", i, got.Token)
		}
		checkKey(t, "in-flight record", got.Record, c.Record)
	}
	checkStoredKey(t, e.ctx, s2, c.Record)
}

func testOtherFingerprintIsKeyConflict(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	req := e.claimReq("key-1")
	req.Fingerprint = fp2
	_, err := s2.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
	checkStoredKey(t, e.ctx, s2, c.Record)

	// Also once completed.
	done := mustComplete(t, e.ctx, s1, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("1")})
	_, err = s2.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
	checkStoredKey(t, e.ctx, s2, done)
}

func testOtherWorkflowIDIsKeyConflict(t *testing.T, e *env) {
	s := e.open()
	req := e.claimReq("key-1")
	req.WorkflowID = "wf-1"
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)

	req.WorkflowID = "wf-2"
	_, err := s.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)

	// An empty WorkflowID does not conflict.
	req.WorkflowID = ""
	got, err := s.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey without a workflow id")
	if got.Kind != contract.ClaimInFlight {
		t.Errorf("ClaimKey without a workflow id: Kind = %v, want %v", got.Kind, contract.ClaimInFlight)
	}
	checkStoredKey(t, e.ctx, s, c.Record)

	// A key claimed without a workflow id is not bound to one named later.
	mustClaim(t, e.ctx, s, e.claimReq("key-2"), contract.ClaimNew)
	req = e.claimReq("key-2")
	req.WorkflowID = "wf-3"
	_, err = s.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
}

func testKeyStaysBoundAfterItsClaimExpires(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	req := e.claimReq("key-1")
	req.Fingerprint = fp2
	_, err := s.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
	// The abandoned claim is still there, unchanged.
	checkStoredKey(t, e.ctx, s, c.Record)
}

func testCompletedKeyReplaysItsOutcome(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	req := e.claimReq("key-1")
	req.WorkflowID = "wf-1"
	c := mustClaim(t, e.ctx, s1, req, contract.ClaimNew)
	out := testOutcome("replay")
	const retain = 10 * time.Minute
	done, err := s1.CompleteKey(e.ctx, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: out, Retain: retain})
	noErr(t, err, "CompleteKey")
	if done.CompletedAt.IsZero() {
		t.Errorf("CompletedAt is zero")
	}
	if done.CompletedAt.Before(c.Record.CreatedAt) {
		t.Errorf("CompletedAt %v is before CreatedAt %v", done.CompletedAt, c.Record.CreatedAt)
	}
	e.checkTime(t, "ExpiresAt of a completed key (CompletedAt + Retain)", done.ExpiresAt, done.CompletedAt.Add(retain))
	checkKey(t, "completed record", done, contract.KeyRecord{
		KeyRef: req.KeyRef, Fingerprint: fp1, WorkflowID: "wf-1", State: contract.KeyCompleted,
		LeaseUntil: done.LeaseUntil, // not promised once completed
		Outcome:    &out, CreatedAt: c.Record.CreatedAt,
		CompletedAt: done.CompletedAt, ExpiresAt: done.ExpiresAt,
	})
	for i, s := range []*durable.Store{s1, s2} {
		got, err := s.ClaimKey(e.ctx, req)
		noErr(t, err, "ClaimKey of a completed key")
		if got.Kind != contract.ClaimCompleted {
			t.Errorf("client %d: Kind = %v, want %v", i, got.Kind, contract.ClaimCompleted)
		}
		if got.Token != "" {
			t.Errorf("client %d: a completed claim returned a token %q", i, got.Token)
		}
		checkKey(t, "replayed record", got.Record, done)
		checkStoredKey(t, e.ctx, s, done)
	}
	// A claim that names no workflow replays too.
	req.WorkflowID = ""
	got, err := s2.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey without a workflow id")
	if got.Kind != contract.ClaimCompleted {
		t.Errorf("Kind = %v, want %v", got.Kind, contract.ClaimCompleted)
	}
}

func testCompletionRetryAfterLostReplyReturnsStoredRecord(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	comp := contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("lost"), Retain: time.Hour}
	first := mustComplete(t, e.ctx, s1, comp)
	if e.caps.Clock {
		e.advance(time.Second) // the retry must not restamp the record
	}
	// The reply was lost; the caller retries, perhaps on another client.
	for i, s := range []*durable.Store{s1, s2} {
		again, err := s.CompleteKey(e.ctx, comp)
		if err != nil {
			t.Errorf("client %d: retried CompleteKey: %v, want the stored record", i, err)
			continue
		}
		checkKey(t, "retried completion", again, first)
	}
	checkStoredKey(t, e.ctx, s2, first)
}

func testCompletedKeyIsNeverOverwritten(t *testing.T, e *env) {
	s := e.open()
	c1 := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	first := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c1.Token, Outcome: testOutcome("first"), Retain: time.Hour})

	// Same token, another outcome: the first outcome stands.
	second, err := s.CompleteKey(e.ctx, contract.Completion{
		KeyRef: keyRef("key-1"), Token: c1.Token, Retain: 2 * time.Hour,
		Outcome: contract.Outcome{Code: 500, Body: []byte("second"), Ref: "other"},
	})
	if err != nil {
		t.Errorf("second CompleteKey with the same token: %v, want the stored record", err)
	} else {
		checkKey(t, "second completion with the same token", second, first)
	}

	// Another token: Fenced.
	c2 := mustClaim(t, e.ctx, s, e.claimReq("key-2"), contract.ClaimNew)
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c2.Token, Outcome: contract.Outcome{Code: 409}})
	checkCode(t, err, contract.Fenced)
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: "not-a-token", Outcome: contract.Outcome{Code: 409}})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s, first)
}

func testStaleTokenIsRejectedAfterReclaim(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	old := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	adv := e.pastTakeover()
	e.advance(adv)

	re, err := s2.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey of an abandoned claim")
	if re.Kind != contract.ClaimReclaimed {
		t.Fatalf("Kind = %v, want %v (the claim expired %v ago, beyond the tolerance %v)", re.Kind, contract.ClaimReclaimed, adv-e.ttl, e.tol)
	}
	if re.Token == "" || re.Token == old.Token {
		t.Fatalf("reclaimed token %q, want a new non-empty token (old %q)", re.Token, old.Token)
	}
	if re.Record.State != contract.KeyClaimed || re.Record.Fingerprint != fp1 {
		t.Errorf("reclaimed record = state %q fingerprint %q, want %q %q", re.Record.State, re.Record.Fingerprint, contract.KeyClaimed, fp1)
	}
	checkAtLeast(t, "reclaimed LeaseUntil - the old LeaseUntil", re.Record.LeaseUntil.Sub(old.Record.LeaseUntil), adv)

	// The old owner comes back: everything it tries is refused.
	_, err = s1.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: old.Token, Outcome: testOutcome("stale")})
	checkCode(t, err, contract.Fenced)
	_, err = s1.RenewKey(e.ctx, keyRef("key-1"), old.Token, e.ttl)
	checkCode(t, err, contract.Fenced)
	ok, err := s1.ReleaseKey(e.ctx, keyRef("key-1"), old.Token)
	noErr(t, err, "ReleaseKey with the stale token")
	if ok {
		t.Errorf("ReleaseKey with the stale token = true, want false")
	}
	checkStoredKey(t, e.ctx, s1, re.Record)

	// The new owner completes.
	out := testOutcome("new owner")
	done := mustComplete(t, e.ctx, s2, contract.Completion{KeyRef: keyRef("key-1"), Token: re.Token, Outcome: out})
	if d := diffOutcome(done.Outcome, &out); d != "" {
		t.Errorf("completion by the new owner: %s", d)
	}
	// Still refused after the completion.
	_, err = s1.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: old.Token, Outcome: testOutcome("stale")})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s1, done)
}

func testNoReclaimWithinTolerance(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.ttl + e.tol/2)
	got, err := s2.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	if got.Kind != contract.ClaimInFlight {
		t.Errorf("Kind = %v %v after expiry (tolerance %v), want %v: no takeover within the tolerance", got.Kind, e.tol/2, e.tol, contract.ClaimInFlight)
	}
	if got.Token != "" {
		t.Errorf("got a token %q within the tolerance", got.Token)
	}
	checkStoredKey(t, e.ctx, s2, c.Record)
}

func testReleaseLetsARetryClaimAgain(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	ok, err := s1.ReleaseKey(e.ctx, keyRef("key-1"), c.Token)
	noErr(t, err, "ReleaseKey")
	if !ok {
		t.Fatalf("ReleaseKey with the claim's token = false, want true")
	}
	checkNoKey(t, e.ctx, s2, keyRef("key-1"))
	ok, err = s1.ReleaseKey(e.ctx, keyRef("key-1"), c.Token)
	noErr(t, err, "second ReleaseKey")
	if ok {
		t.Errorf("second ReleaseKey = true, want false")
	}

	// A released key is free: even another fingerprint may claim it.
	req := e.claimReq("key-1")
	req.Fingerprint = fp2
	c2 := mustClaim(t, e.ctx, s2, req, contract.ClaimNew)
	if c2.Token == c.Token {
		t.Errorf("the new claim reused the released token %q", c.Token)
	}
	// The released token does not hold the new claim.
	_, err = s1.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("old")})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s1, c2.Record)
}

func testReleaseWithWrongTokenKeepsTheClaim(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	other := mustClaim(t, e.ctx, s, e.claimReq("key-2"), contract.ClaimNew)
	for _, tok := range []string{other.Token, "wrong-token", c.Token + "x"} {
		ok, err := s.ReleaseKey(e.ctx, keyRef("key-1"), tok)
		noErr(t, err, "ReleaseKey with a wrong token")
		if ok {
			t.Errorf("ReleaseKey with token %q = true, want false", tok)
		}
	}
	got, err := s.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	if got.Kind != contract.ClaimInFlight {
		t.Errorf("Kind = %v after a release with a wrong token, want %v", got.Kind, contract.ClaimInFlight)
	}
	checkStoredKey(t, e.ctx, s, c.Record)
	checkStoredKey(t, e.ctx, s, other.Record)
}

func testCompletedKeyCannotBeReleasedOrRenewed(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("1")})
	ok, err := s.ReleaseKey(e.ctx, keyRef("key-1"), c.Token)
	noErr(t, err, "ReleaseKey of a completed key")
	if ok {
		t.Errorf("ReleaseKey of a completed key = true, want false")
	}
	_, err = s.RenewKey(e.ctx, keyRef("key-1"), c.Token, e.ttl)
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s, done)
}

func testUnclaimedKeyCannotBeCompletedRenewedOrReleased(t *testing.T, e *env) {
	s := e.open()
	_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: "made-up", Outcome: testOutcome("1")})
	checkCode(t, err, contract.Fenced)
	_, err = s.RenewKey(e.ctx, keyRef("key-1"), "made-up", e.ttl)
	checkCode(t, err, contract.Fenced)
	ok, err := s.ReleaseKey(e.ctx, keyRef("key-1"), "made-up")
	noErr(t, err, "ReleaseKey")
	if ok {
		t.Errorf("ReleaseKey of a key nobody claimed = true, want false")
	}
	checkNoKey(t, e.ctx, s, keyRef("key-1"))
}

func testRenewWithWrongTokenIsFenced(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	_, err := s.RenewKey(e.ctx, keyRef("key-1"), "wrong-token", 2*e.ttl)
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s, c.Record)

	rec, err := s.RenewKey(e.ctx, keyRef("key-1"), c.Token, 2*e.ttl)
	noErr(t, err, "RenewKey with the right token")
	checkAtLeast(t, "LeaseUntil - CreatedAt after renewing for 2×TTL", rec.LeaseUntil.Sub(rec.CreatedAt), 2*e.ttl)
	want := c.Record
	want.LeaseUntil = rec.LeaseUntil
	checkKey(t, "renewed record", rec, want)
	checkStoredKey(t, e.ctx, s, rec)
}

func testRenewExtendsTheClaim(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.ttl / 2)
	rec, err := s1.RenewKey(e.ctx, keyRef("key-1"), c.Token, e.ttl)
	noErr(t, err, "RenewKey")
	checkAtLeast(t, "renewed LeaseUntil - the first LeaseUntil", rec.LeaseUntil.Sub(c.Record.LeaseUntil), e.ttl/2)
	if rec.State != contract.KeyClaimed {
		t.Errorf("renewed State = %q, want %q", rec.State, contract.KeyClaimed)
	}
	// Past the first lease and its tolerance, inside the renewed one.
	e.advance(e.ttl/2 + e.tol + time.Second)
	got, err := s2.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	if got.Kind != contract.ClaimInFlight {
		t.Fatalf("Kind = %v after the first lease expired but the renewed one did not, want %v", got.Kind, contract.ClaimInFlight)
	}
	// The renewed claim still completes with its token.
	mustComplete(t, e.ctx, s1, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("renewed")})
}

func testCompletedKeyIsForgottenAfterRetention(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	c := mustClaim(t, e.ctx, s1, e.claimReq("key-1"), contract.ClaimNew)
	const retain = time.Minute
	done := mustComplete(t, e.ctx, s1, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("1"), Retain: retain})
	e.checkDur(t, "ExpiresAt - CompletedAt", done.ExpiresAt.Sub(done.CompletedAt), retain)

	e.advance(retain / 2)
	got, err := s2.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey within retention")
	if got.Kind != contract.ClaimCompleted {
		t.Errorf("Kind = %v within retention, want %v", got.Kind, contract.ClaimCompleted)
	}
	checkStoredKey(t, e.ctx, s2, done)

	e.advance(retain/2 + time.Second)
	checkNoKey(t, e.ctx, s2, keyRef("key-1"))
	// Past retention the key is free, even for another request.
	req := e.claimReq("key-1")
	req.Fingerprint = fp2
	nc := mustClaim(t, e.ctx, s2, req, contract.ClaimNew)
	if nc.Record.Fingerprint != fp2 || nc.Record.State != contract.KeyClaimed || nc.Record.Outcome != nil {
		t.Errorf("new claim after retention = %s, want a fresh claim for %q", fmtKey(nc.Record), fp2)
	}
	// The old token holds nothing.
	_, err = s1.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("old")})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s1, nc.Record)
}

func testConcurrentClaimsHaveOneWinner(t *testing.T, e *env) {
	stores := e.openN(raceClients)
	claims := make([]contract.Claim, len(stores))
	errs := make([]error, len(stores))
	race(len(stores), func(i int) {
		claims[i], errs[i] = stores[i].ClaimKey(e.ctx, e.claimReq("key-1"))
	})
	winner := -1
	for i, c := range claims {
		if errs[i] != nil {
			t.Errorf("client %d: ClaimKey: %v", i, errs[i])
			continue
		}
		switch c.Kind {
		case contract.ClaimNew:
			if winner >= 0 {
				t.Errorf("clients %d and %d both got a new claim", winner, i)
			}
			winner = i
		case contract.ClaimInFlight:
		default:
			t.Errorf("client %d: Kind = %v, want %v or %v", i, c.Kind, contract.ClaimNew, contract.ClaimInFlight)
		}
	}
	if winner < 0 {
		t.Fatalf("no client got a new claim")
	}
	mustComplete(t, e.ctx, stores[winner], contract.Completion{KeyRef: keyRef("key-1"), Token: claims[winner].Token, Outcome: testOutcome("winner")})
}

func testWaitKeyReturnsTheCompletedRecord(t *testing.T, e *env) {
	owner, waiter := e.open(), e.open()
	c := mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	ch := startWait(e.ctx, waiter, keyRef("key-1"))
	checkStillWaiting(t, ch, "the key is still claimed")
	out := testOutcome("waited")
	done := mustComplete(t, e.ctx, owner, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: out})
	r := awaitWait(t, ch)
	if r.err != nil {
		t.Fatalf("WaitKey: %v (code %q), want the completed record", r.err, contract.CodeOf(r.err))
	}
	checkKey(t, "record returned by WaitKey", r.rec, done)
}

func testWaitKeyReturnsNotFoundWhenReleased(t *testing.T, e *env) {
	owner, waiter := e.open(), e.open()
	c := mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	ch := startWait(e.ctx, waiter, keyRef("key-1"))
	checkStillWaiting(t, ch, "the key is still claimed")
	ok, err := owner.ReleaseKey(e.ctx, keyRef("key-1"), c.Token)
	noErr(t, err, "ReleaseKey")
	if !ok {
		t.Fatalf("ReleaseKey = false, want true")
	}
	r := awaitWait(t, ch)
	checkCode(t, r.err, contract.NotFound)
}

func testWaitKeyOnCompletedKeyReturnsAtOnce(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("1")})
	ctx, cancel := context.WithTimeout(e.ctx, waitGuard)
	defer cancel()
	rec, err := e.open().WaitKey(ctx, keyRef("key-1"))
	noErr(t, err, "WaitKey of a completed key")
	checkKey(t, "record returned by WaitKey", rec, done)
}

func testWaitKeyOnMissingKeyIsNotFound(t *testing.T, e *env) {
	s := e.open()
	ctx, cancel := context.WithTimeout(e.ctx, waitGuard)
	defer cancel()
	_, err := s.WaitKey(ctx, keyRef("key-missing"))
	checkCode(t, err, contract.NotFound)
}

func testWaitKeyEndsWithItsContext(t *testing.T, e *env) {
	owner, waiter := e.open(), e.open()
	mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)

	ctx, cancel := context.WithCancel(e.ctx)
	ch := startWait(ctx, waiter, keyRef("key-1"))
	checkStillWaiting(t, ch, "the key is still claimed")
	cancel()
	start := time.Now()
	r := awaitWait(t, ch)
	checkCtxErr(t, r.err, context.Canceled)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("WaitKey returned %v after its context was cancelled, want promptly", d)
	}

	ctx, cancel = context.WithTimeout(e.ctx, 10*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err := waiter.WaitKey(ctx, keyRef("key-1"))
	checkCtxErr(t, err, context.DeadlineExceeded)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("WaitKey with a 10ms timeout returned after %v, want promptly", d)
	}
}

func testWaitKeyOutlastsAnExpiredClaim(t *testing.T, e *env) {
	owner, waiter, retry := e.open(), e.open(), e.open()
	mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	ch := startWait(e.ctx, waiter, keyRef("key-1"))
	checkStillWaiting(t, ch, "the key is claimed, though the claim expired")
	re := mustClaim(t, e.ctx, retry, e.claimReq("key-1"), contract.ClaimReclaimed)
	checkStillWaiting(t, ch, "the key was reclaimed")
	done := mustComplete(t, e.ctx, retry, contract.Completion{KeyRef: keyRef("key-1"), Token: re.Token, Outcome: testOutcome("late")})
	r := awaitWait(t, ch)
	if r.err != nil {
		t.Fatalf("WaitKey: %v, want the completed record", r.err)
	}
	checkKey(t, "record returned by WaitKey", r.rec, done)
}

func testCompletionWithInvalidFenceIsFenced(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	l := mustAcquire(t, e.ctx, s, contract.LeaseRequest{Resource: "res-1", Owner: "owner-1", TTL: e.ttl})
	bad := []struct {
		name  string
		fence contract.Fence
	}{
		{"no lease on the resource", contract.Fence{Resource: "res-none", Owner: "owner-1", Token: l.Token}},
		{"wrong token", contract.Fence{Resource: "res-1", Owner: "owner-1", Token: l.Token + 1}},
		{"wrong owner", contract.Fence{Resource: "res-1", Owner: "owner-2", Token: l.Token}},
	}
	for _, b := range bad {
		_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome(b.name), Fence: &b.fence})
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (fence with %s)", b.name)
		}
	}
	checkStoredKey(t, e.ctx, s, c.Record)
	out := testOutcome("fenced")
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: out, Fence: l.Fence()})
	if done.State != contract.KeyCompleted {
		t.Errorf("State = %q after a fenced completion, want %q", done.State, contract.KeyCompleted)
	}
	checkStoredKey(t, e.ctx, s, done)
	checkStoredLease(t, e.ctx, s, l)
}

func testCompletionWithExpiredFenceIsFenced(t *testing.T, e *env) {
	s := e.open()
	req := e.claimReq("key-1")
	req.TTL = 10 * e.ttl // the claim outlives the lease
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	l := mustAcquire(t, e.ctx, s, contract.LeaseRequest{Resource: "res-1", Owner: "owner-1", TTL: e.ttl})
	e.advance(e.ttl)
	_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("late"), Fence: l.Fence()})
	checkCode(t, err, contract.Fenced)
	checkStoredKey(t, e.ctx, s, c.Record)
}

func testGetOfMissingKeyIsNotFound(t *testing.T, e *env) {
	s := e.open()
	checkNoKey(t, e.ctx, s, keyRef("key-1"))
	mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	checkNoKey(t, e.ctx, s, keyRef("key-10"))
	checkNoKey(t, e.ctx, s, keyRef("key"))
}

func testOtherWorkflowIDOnCompletedKeyIsKeyConflict(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.claimReq("key-1")
	req.WorkflowID = "wf-1"
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: testOutcome("1")})

	req.WorkflowID = "wf-2"
	_, err := other.ClaimKey(e.ctx, req)
	if !checkCode(t, err, contract.KeyConflict) {
		t.Logf("  (a completed key bound to %q, claimed for %q with the same fingerprint)", "wf-1", "wf-2")
	}
	for _, wf := range []string{"wf-1", ""} {
		req.WorkflowID = wf
		got, err := other.ClaimKey(e.ctx, req)
		noErr(t, err, "ClaimKey of the completed key for workflow "+wf)
		if got.Kind != contract.ClaimCompleted {
			t.Errorf("ClaimKey of the completed key for workflow %q = %v, want %v", wf, got.Kind, contract.ClaimCompleted)
		}
	}
	checkStoredKey(t, e.ctx, other, done)

	// Completed without a workflow id: a claim naming one conflicts too.
	c2 := mustClaim(t, e.ctx, s, e.claimReq("key-2"), contract.ClaimNew)
	done2 := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-2"), Token: c2.Token, Outcome: testOutcome("2")})
	req2 := e.claimReq("key-2")
	req2.WorkflowID = "wf-3"
	_, err = other.ClaimKey(e.ctx, req2)
	checkCode(t, err, contract.KeyConflict)
	checkStoredKey(t, e.ctx, other, done2)
}

func testOtherWorkflowIDOnAbandonedClaimIsKeyConflict(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.claimReq("key-1")
	req.WorkflowID = "wf-1"
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	e.advance(e.pastTakeover())

	// Abandoned, same fingerprint, another workflow: still bound.
	req.WorkflowID = "wf-2"
	_, err := other.ClaimKey(e.ctx, req)
	if !checkCode(t, err, contract.KeyConflict) {
		t.Logf("  (an abandoned claim of %q, claimed for %q with the same fingerprint)", "wf-1", "wf-2")
	}
	checkStoredKey(t, e.ctx, other, c.Record)

	// A reclaim that names no workflow keeps the binding.
	req.WorkflowID = ""
	re := mustClaim(t, e.ctx, other, req, contract.ClaimReclaimed)
	if re.Record.WorkflowID != "wf-1" {
		t.Errorf("WorkflowID after a reclaim that named none = %q, want %q (the key stays bound)", re.Record.WorkflowID, "wf-1")
	}
	e.advance(e.pastTakeover())
	req.WorkflowID = "wf-2"
	_, err = s.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
	req.WorkflowID = "wf-1"
	mustClaim(t, e.ctx, s, req, contract.ClaimReclaimed)
}

// retentionMargin is how close to ExpiresAt the suite checks a completed
// key: a second, or two granules of a coarse backend.
func (e *env) retentionMargin() time.Duration { return max(time.Second, 2*e.g) }

func testCompletedKeyReplaysUntilItsExpiry(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	const retain = time.Minute
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("1"), Retain: retain})
	m := e.retentionMargin()

	e.advance(retain - m) // just before ExpiresAt
	got, err := other.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey just before ExpiresAt")
	if got.Kind != contract.ClaimCompleted {
		t.Errorf("ClaimKey %v before ExpiresAt = %v, want %v (the outcome is kept until ExpiresAt)", m, got.Kind, contract.ClaimCompleted)
	}
	checkStoredKey(t, e.ctx, other, done)
	ctx, cancel := context.WithTimeout(e.ctx, waitGuard)
	defer cancel()
	w, err := other.WaitKey(ctx, keyRef("key-1"))
	noErr(t, err, "WaitKey just before ExpiresAt")
	checkKey(t, "WaitKey just before ExpiresAt", w, done)
	req := e.claimReq("key-1")
	req.Fingerprint = fp2
	_, err = other.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)

	e.advance(2 * m) // just after
	checkNoKey(t, e.ctx, other, keyRef("key-1"))
	mustClaim(t, e.ctx, other, req, contract.ClaimNew)
}

func testRetentionCountsFromCompletion(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.claimReq("key-1")
	req.TTL = 30 * time.Minute // the claim outlives the wait below
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	const work = 90*time.Second + 250*time.Millisecond
	const retain = time.Minute
	e.advance(work)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("1"), Retain: retain})
	e.checkTime(t, "CompletedAt (the store clock at completion)", done.CompletedAt, c.Record.CreatedAt.Add(work))
	e.checkTime(t, "ExpiresAt (CompletedAt + Retain, not CreatedAt + Retain)", done.ExpiresAt, c.Record.CreatedAt.Add(work+retain))
	checkStoredKey(t, e.ctx, other, done)

	m := e.retentionMargin()
	e.advance(retain - m) // long past CreatedAt + Retain
	got, err := other.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey")
	if got.Kind != contract.ClaimCompleted {
		t.Errorf("ClaimKey %v after completion with Retain %v = %v, want %v: retention counts from the completion, not the claim",
			retain-m, retain, got.Kind, contract.ClaimCompleted)
	}
	e.advance(2 * m)
	checkNoKey(t, e.ctx, other, keyRef("key-1"))
}

func testRenewKeySetsLeaseUntilToNowPlusTTL(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	now := c.Record.CreatedAt

	// Longer than what is left, and not whole seconds.
	step := 1250 * time.Millisecond
	e.advance(step)
	now = now.Add(step)
	ttl := 2*e.ttl + 1500*time.Millisecond
	rec, err := s.RenewKey(e.ctx, keyRef("key-1"), c.Token, ttl)
	noErr(t, err, "RenewKey")
	e.checkTime(t, "LeaseUntil after RenewKey(ttl) at now (now + ttl)", rec.LeaseUntil, now.Add(ttl))
	want := c.Record
	want.LeaseUntil = rec.LeaseUntil
	checkKey(t, "renewed record", rec, want)
	checkStoredKey(t, e.ctx, other, rec)

	// Shorter than what is left: the claim ends sooner.
	margin := max(250*time.Millisecond, 2*e.g)
	step = 750 * time.Millisecond
	e.advance(step)
	now = now.Add(step)
	short := e.tol + time.Second + 2*margin
	rec, err = s.RenewKey(e.ctx, keyRef("key-1"), c.Token, short)
	noErr(t, err, "RenewKey with a shorter TTL")
	e.checkTime(t, "LeaseUntil after RenewKey with a TTL shorter than what was left (now + ttl)", rec.LeaseUntil, now.Add(short))
	checkStoredKey(t, e.ctx, other, rec)

	// The claim behaves as LeaseUntil says.
	e.advance(short - margin)
	got, err := other.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	if got.Kind != contract.ClaimInFlight {
		t.Errorf("ClaimKey %v before the renewed LeaseUntil = %v, want %v", margin, got.Kind, contract.ClaimInFlight)
	}
	e.advance(margin + e.tol + time.Second)
	re, err := other.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	if re.Kind != contract.ClaimReclaimed {
		t.Fatalf("ClaimKey past the renewed LeaseUntil and the tolerance = %v, want %v", re.Kind, contract.ClaimReclaimed)
	}
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("late")})
	checkCode(t, err, contract.Fenced)
}

func testFractionalClaimTTLsAreKeptExactly(t *testing.T, e *env) {
	s := e.open()
	for i, ttl := range []time.Duration{e.tol + 1500*time.Millisecond, e.ttl + 123456*time.Microsecond, 90*time.Minute + 750*time.Millisecond} {
		key := fmt.Sprintf("key-%d", i)
		req := e.claimReq(key)
		req.TTL = ttl
		c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
		e.checkDur(t, "LeaseUntil - CreatedAt of a claim with TTL "+ttl.String(), c.Record.LeaseUntil.Sub(c.Record.CreatedAt), ttl)
		checkStoredKey(t, e.ctx, s, c.Record)
		renew := ttl + 1250*time.Millisecond
		rec, err := s.RenewKey(e.ctx, keyRef(key), c.Token, renew)
		noErr(t, err, "RenewKey")
		if e.caps.Clock { // the clock stood still: now is CreatedAt
			e.checkDur(t, "LeaseUntil - CreatedAt after RenewKey("+renew.String()+")", rec.LeaseUntil.Sub(rec.CreatedAt), renew)
		} else {
			checkAtLeast(t, "LeaseUntil - CreatedAt after RenewKey("+renew.String()+")", rec.LeaseUntil.Sub(rec.CreatedAt), renew)
		}
		checkStoredKey(t, e.ctx, s, rec)
	}
}

func testConcurrentReclaimsHaveOneWinner(t *testing.T, e *env) {
	first := e.open()
	old := mustClaim(t, e.ctx, first, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	stores := e.openN(raceClients)
	claims := make([]contract.Claim, len(stores))
	errs := make([]error, len(stores))
	race(len(stores), func(i int) {
		claims[i], errs[i] = stores[i].ClaimKey(e.ctx, e.claimReq("key-1"))
	})
	winner := -1
	for i, c := range claims {
		if errs[i] != nil {
			t.Errorf("client %d: ClaimKey: %v", i, errs[i])
			continue
		}
		switch c.Kind {
		case contract.ClaimReclaimed:
			if winner >= 0 {
				t.Errorf("clients %d and %d both reclaimed the abandoned claim (tokens %q and %q)", winner, i, claims[winner].Token, c.Token)
			}
			winner = i
		case contract.ClaimInFlight:
			if c.Token != "" {
				t.Errorf("client %d: an in-flight answer carries a token", i)
			}
		default:
			t.Errorf("client %d: Kind = %v, want %v or %v", i, c.Kind, contract.ClaimReclaimed, contract.ClaimInFlight)
		}
	}
	if winner < 0 {
		t.Fatalf("no client reclaimed the abandoned claim")
	}
	if claims[winner].Token == old.Token {
		t.Errorf("the reclaim kept the abandoned claim's token")
	}
	_, err := first.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: old.Token, Outcome: testOutcome("stale")})
	checkCode(t, err, contract.Fenced)
	for i, c := range claims {
		if i != winner && c.Token != "" {
			_, err := stores[i].CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("loser")})
			checkCode(t, err, contract.Fenced)
		}
	}
	mustComplete(t, e.ctx, stores[winner], contract.Completion{KeyRef: keyRef("key-1"), Token: claims[winner].Token, Outcome: testOutcome("winner")})
}

// Claim tokens: what the suite requires of them.
const (
	minTokenLength = 16  // bytes
	maxTokenLength = 128 // bytes, the Store's limit
)

func testClaimTokensAreUnpredictable(t *testing.T, e *env) {
	stores := e.openN(3)
	var tokens []string
	const n = 32
	for i := range n {
		c := mustClaim(t, e.ctx, stores[i%len(stores)], e.claimReq(fmt.Sprintf("key-%02d", i)), contract.ClaimNew)
		tokens = append(tokens, c.Token)
	}
	// Released and claimed again.
	for i := 0; i < n; i += 4 {
		key := fmt.Sprintf("key-%02d", i)
		ok, err := stores[0].ReleaseKey(e.ctx, keyRef(key), tokens[i])
		noErr(t, err, "ReleaseKey")
		if !ok {
			t.Fatalf("ReleaseKey(%s) = false, want true", key)
		}
		c := mustClaim(t, e.ctx, stores[1], e.claimReq(key), contract.ClaimNew)
		tokens = append(tokens, c.Token)
	}
	// Reclaimed.
	if e.caps.Clock {
		e.advance(e.pastTakeover())
		for i := 1; i < n; i += 4 {
			c := mustClaim(t, e.ctx, stores[2], e.claimReq(fmt.Sprintf("key-%02d", i)), contract.ClaimReclaimed)
			tokens = append(tokens, c.Token)
		}
	}
	checkTokens(t, tokens)
}

// checkTokens asserts that claim tokens are distinct, of the length and
// alphabet the suite requires, and show no pattern a caller could predict
// another from: no character position is the same in all of them, and no
// two consecutive tokens share half their length as a prefix or suffix (a
// counter, a timestamp or a per-process prefix would).
func checkTokens(t *testing.T, tokens []string) {
	t.Helper()
	seen := map[string]int{}
	byLen := map[int][]string{}
	for i, tok := range tokens {
		if j, dup := seen[tok]; dup {
			t.Errorf("claims %d and %d got the same token %q", j, i, tok)
		}
		seen[tok] = i
		if len(tok) < minTokenLength || len(tok) > maxTokenLength {
			t.Errorf("token %q has %d bytes, want %d–%d", tok, len(tok), minTokenLength, maxTokenLength)
		}
		for k := 0; k < len(tok); k++ {
			if tok[k] < 0x21 || tok[k] > 0x7e {
				t.Errorf("token %q has byte %#x at %d, want printable ASCII (0x21–0x7e)", tok, tok[k], k)
				break
			}
		}
		byLen[len(tok)] = append(byLen[len(tok)], tok)
	}
	for n, toks := range byLen {
		if len(toks) < 16 || n == 0 {
			continue
		}
		for k := 0; k < n; k++ {
			same := true
			for _, tok := range toks[1:] {
				if tok[k] != toks[0][k] {
					same = false
					break
				}
			}
			if same {
				t.Errorf("all %d tokens of %d bytes have %q at byte %d (e.g. %q, %q): tokens must be random, not a counter or a timestamp", len(toks), n, toks[0][k], k, toks[0], toks[len(toks)-1])
				break
			}
		}
	}
	for i := 1; i < len(tokens); i++ {
		a, b := tokens[i-1], tokens[i]
		half := min(len(a), len(b)) / 2
		if half == 0 {
			continue
		}
		if a[:half] == b[:half] || a[len(a)-half:] == b[len(b)-half:] {
			t.Errorf("consecutive tokens %q and %q share half their bytes: tokens must be random", a, b)
		}
	}
}

// startWaiters starts n WaitKey calls on one key, spread over clients, and
// returns once they have all been waiting for a few milliseconds.
func startWaiters(t *testing.T, e *env, ref contract.KeyRef, clients []*durable.Store, n int, why string) []<-chan waitResult {
	t.Helper()
	var started sync.WaitGroup
	started.Add(n)
	out := make([]<-chan waitResult, n)
	for i := range out {
		out[i] = startWaitThen(e.ctx, clients[i%len(clients)], ref, started.Done)
	}
	started.Wait()
	time.Sleep(10 * time.Millisecond)
	for i, ch := range out {
		select {
		case r := <-ch:
			t.Fatalf("waiter %d of %d returned %s, %v (code %q) while %s; want it to keep waiting", i, n, fmtKey(r.rec), r.err, contract.CodeOf(r.err), why)
		default:
		}
	}
	return out
}

// severalWaiters is how many WaitKey calls wait on one key, over
// waiterClients clients (so some clients have two).
const severalWaiters, waiterClients = 5, 3

func testSeveralWaitersAllWakeOnCompletion(t *testing.T, e *env) {
	owner := e.open()
	c := mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	chs := startWaiters(t, e, keyRef("key-1"), e.openN(waiterClients), severalWaiters, "the key is still claimed")
	done := mustComplete(t, e.ctx, owner, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("all")})
	for i, ch := range chs {
		r := awaitWait(t, ch)
		if r.err != nil {
			t.Errorf("waiter %d of %d: %v (code %q), want the completed record", i, len(chs), r.err, contract.CodeOf(r.err))
			continue
		}
		checkKey(t, fmt.Sprintf("record returned to waiter %d", i), r.rec, done)
	}
}

func testSeveralWaitersAllWakeOnRelease(t *testing.T, e *env) {
	owner := e.open()
	c := mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	chs := startWaiters(t, e, keyRef("key-1"), e.openN(waiterClients), severalWaiters, "the key is still claimed")
	ok, err := owner.ReleaseKey(e.ctx, keyRef("key-1"), c.Token)
	noErr(t, err, "ReleaseKey")
	if !ok {
		t.Fatalf("ReleaseKey = false, want true")
	}
	for i, ch := range chs {
		r := awaitWait(t, ch)
		if !checkCode(t, r.err, contract.NotFound) {
			t.Logf("  (waiter %d of %d, after a release)", i, len(chs))
		}
	}
}

// declinedWaiter is a decorator that has WaitKey but declines it at run
// time, as a decorator over a backend without KeyWaiter must.
type declinedWaiter struct {
	contract.Backend
	tol time.Duration
}

func (d declinedWaiter) WaitKey(context.Context, contract.KeyRef) (contract.KeyRecord, error) {
	return contract.KeyRecord{}, &contract.Error{Code: contract.Unimplemented, Msg: "the wrapped backend cannot wait"}
}

func (d declinedWaiter) ClockTolerance() time.Duration { return d.tol }

func testDeclinedWaitKeyFallsBackToPolling(t *testing.T, e *env) {
	owner := e.open()
	b, err := e.h.Open(e.ctx)
	if err != nil {
		t.Fatalf("Harness.Open: %v", err)
	}
	waiter, err := durable.New(declinedWaiter{b, e.tol}, storeOptions()...)
	if err != nil {
		_ = b.Close()
		t.Fatalf("durable.New: %v", err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	const hint = " (a KeyWaiter that returns Unimplemented declines the capability, and the Store must then poll GetKey as if it were absent)"

	c1 := mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	c2 := mustClaim(t, e.ctx, owner, e.claimReq("key-2"), contract.ClaimNew)
	ch1 := startWait(e.ctx, waiter, keyRef("key-1"))
	ch2 := startWait(e.ctx, waiter, keyRef("key-2"))
	checkStillWaiting(t, ch1, "the key is still claimed"+hint)
	done := mustComplete(t, e.ctx, owner, contract.Completion{KeyRef: keyRef("key-1"), Token: c1.Token, Outcome: testOutcome("polled")})
	if r := awaitWait(t, ch1); r.err != nil {
		t.Errorf("WaitKey on a completed key: %v (code %q), want the record%s", r.err, contract.CodeOf(r.err), hint)
	} else {
		checkKey(t, "record returned by the polling WaitKey", r.rec, done)
	}
	ok, err := owner.ReleaseKey(e.ctx, keyRef("key-2"), c2.Token)
	noErr(t, err, "ReleaseKey")
	if !ok {
		t.Fatalf("ReleaseKey = false")
	}
	if r := awaitWait(t, ch2); !checkCode(t, r.err, contract.NotFound) {
		t.Logf("  (WaitKey on a released key%s)", hint)
	}
	ctx, cancel := context.WithTimeout(e.ctx, waitGuard)
	defer cancel()
	_, err = waiter.WaitKey(ctx, keyRef("key-missing"))
	if !checkCode(t, err, contract.NotFound) {
		t.Logf("  (WaitKey on a missing key%s)", hint)
	}
}
