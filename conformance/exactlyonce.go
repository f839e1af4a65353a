package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// What exactly-once needs beyond claims and completions: the caller's own
// claim token recovering a claim whose reply was lost (Tokens), the
// tombstone that keeps a key bound to its request after its outcome's
// retention (Tombstones), and storing an outcome in the caller's
// transaction (Tx, the optional contract.TxCompleter).

func tokenScenarios() []scenario {
	return []scenario{
		{"RetriedClaimWithItsTokenGetsItsClaimBack", needClock, testRetriedClaimWithItsTokenGetsItsClaimBack},
		{"LapsedOwnClaimIsHandedBack", needClock, testLapsedOwnClaimIsHandedBack},
		{"ReclaimedClaimIsNotHandedBackToTheOldToken", needClock, testReclaimedClaimIsNotHandedBackToTheOldToken},
		{"CompletedKeyIsNotHandedBackAsHeld", 0, testCompletedKeyIsNotHandedBackAsHeld},
		{"OtherTokenOnALiveClaimIsInFlight", 0, testOtherTokenOnALiveClaimIsInFlight},
		{"TokensAreComparedByteForByte", 0, testTokensAreComparedByteForByte},
	}
}

func tombstoneScenarios() []scenario {
	return []scenario{
		{"TombstoneOutlivesTheOutcome", needClock, testTombstoneOutlivesTheOutcome},
		{"CompletionWithoutTombstoneIsForgottenAtExpiry", needClock, testCompletionWithoutTombstoneIsForgottenAtExpiry},
		{"CleanupDropsOutcomesWithinLimit", needClock, testCleanupDropsOutcomesWithinLimit},
	}
}

func txScenarios() []scenario {
	return []scenario{
		{"CompletionCommitsWithTheTransaction", 0, testTxCompletionCommitsWithTheTransaction},
		{"RollbackLeavesTheClaimHeld", 0, testTxRollbackLeavesTheClaimHeld},
		{"CompletionWithStaleTokenIsFenced", needClock, testTxCompletionWithStaleTokenIsFenced},
	}
}

// The caller tokens of the scenarios: 16–128 bytes of printable ASCII.
const (
	tokenA = "caller-token-A-0123456789abcdef"
	tokenB = "caller-token-B-0123456789abcdef"
)

// tokenReq is claimReq with the caller's own token.
func (e *env) tokenReq(key, token string) contract.ClaimRequest {
	req := e.claimReq(key)
	req.Token = token
	return req
}

func testRetriedClaimWithItsTokenGetsItsClaimBack(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.tokenReq("key-1", tokenA)
	first, err := s.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey with a caller token")
	// Its reply is "lost": the caller retries with the same token, a
	// little later, from another client.
	now := first.Record.CreatedAt
	step := 1250 * time.Millisecond
	e.advance(step)
	now = now.Add(step)
	c, err := other.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey retried with the same token")
	if c.Kind != contract.ClaimNew {
		t.Fatalf("ClaimKey retried with the token of the live claim = %v, want %v: a caller whose reply was lost gets its own claim back", c.Kind, contract.ClaimNew)
	}
	if c.Token != tokenA {
		t.Errorf("Token = %q, want the caller's %q", c.Token, tokenA)
	}
	e.checkTime(t, "LeaseUntil of the claim handed back (now + TTL)", c.Record.LeaseUntil, now.Add(req.TTL))
	if c.Record.State != contract.KeyClaimed || c.Record.Fingerprint != req.Fingerprint {
		t.Errorf("record handed back = %s, want the claim", fmtKey(c.Record))
	}
	checkStoredKey(t, e.ctx, s, c.Record)
	// The token holds the claim: the caller can complete it.
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: tokenA, Outcome: testOutcome("own"), Retain: time.Hour})
	got, err := other.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey after completion")
	if got.Kind != contract.ClaimCompleted {
		t.Errorf("ClaimKey after completion = %v, want %v", got.Kind, contract.ClaimCompleted)
	}
	checkKey(t, "replayed record", got.Record, done)
}

// testLapsedOwnClaimIsHandedBack: a claim whose lease lapsed beyond the
// tolerance, which nobody reclaimed, is still the caller's: a retry with
// its token gets it back with a fresh lease, the same token.
func testLapsedOwnClaimIsHandedBack(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.tokenReq("key-1", tokenA)
	first := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	e.advance(e.pastTakeover())
	c, err := other.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey retried with the token of a lapsed claim")
	if !c.Kind.Owned() || c.Token != tokenA {
		t.Fatalf("ClaimKey retried with the token of the caller's lapsed claim = %v (token %q), want the claim, token %q", c.Kind, c.Token, tokenA)
	}
	e.checkTime(t, "LeaseUntil of the lapsed claim handed back (now + TTL)", c.Record.LeaseUntil, first.Record.CreatedAt.Add(e.pastTakeover()+req.TTL))
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: tokenA, Outcome: testOutcome("own"), Retain: time.Hour})
}

func testReclaimedClaimIsNotHandedBackToTheOldToken(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	mustClaim(t, e.ctx, s, e.tokenReq("key-1", tokenA), contract.ClaimNew)
	e.advance(e.pastTakeover())
	b := mustClaim(t, e.ctx, other, e.tokenReq("key-1", tokenB), contract.ClaimReclaimed)
	if b.Token != tokenB {
		t.Errorf("reclaim Token = %q, want the caller's %q", b.Token, tokenB)
	}
	c, err := s.ClaimKey(e.ctx, e.tokenReq("key-1", tokenA))
	noErr(t, err, "ClaimKey with the old token")
	if c.Kind != contract.ClaimInFlight {
		t.Fatalf("ClaimKey with the token of a claim another caller reclaimed = %v (token %q), want %v: the key is no longer the old caller's", c.Kind, c.Token, contract.ClaimInFlight)
	}
	// The reclaimer still holds it.
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: tokenA, Outcome: testOutcome("old")})
	checkCode(t, err, contract.Fenced)
	mustComplete(t, e.ctx, other, contract.Completion{KeyRef: keyRef("key-1"), Token: tokenB, Outcome: testOutcome("new"), Retain: time.Hour})
}

func testCompletedKeyIsNotHandedBackAsHeld(t *testing.T, e *env) {
	s := e.open()
	req := e.tokenReq("key-1", tokenA)
	mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: tokenA, Outcome: testOutcome("done"), Retain: time.Hour})
	c, err := s.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey with the token of the completed claim")
	if c.Kind != contract.ClaimCompleted {
		t.Fatalf("ClaimKey with the token that completed the key = %v, want %v: a completed key replays, it is never held again", c.Kind, contract.ClaimCompleted)
	}
	checkKey(t, "replayed record", c.Record, done)
}

func testOtherTokenOnALiveClaimIsInFlight(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	mustClaim(t, e.ctx, s, e.tokenReq("key-1", tokenA), contract.ClaimNew)
	c, err := other.ClaimKey(e.ctx, e.tokenReq("key-1", tokenB))
	noErr(t, err, "ClaimKey with another token")
	if c.Kind != contract.ClaimInFlight {
		t.Fatalf("ClaimKey with another token on a live claim = %v, want %v", c.Kind, contract.ClaimInFlight)
	}
	// And without a token.
	mustClaim(t, e.ctx, other, e.claimReq("key-1"), contract.ClaimInFlight)
	// The same token with another request is still a conflict.
	req := e.tokenReq("key-1", tokenA)
	req.Fingerprint = fp2
	_, err = other.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
}

func testTokensAreComparedByteForByte(t *testing.T, e *env) {
	s := e.open()
	mustClaim(t, e.ctx, s, e.tokenReq("key-1", tokenA), contract.ClaimNew)
	for _, tok := range []string{
		"CALLER-TOKEN-A-0123456789ABCDEF", // case
		"caller-token-a-0123456789abcdef", // one letter's case
		tokenA + "x",                      // longer
		tokenA[:len(tokenA)-1],            // shorter
	} {
		c, err := s.ClaimKey(e.ctx, e.tokenReq("key-1", tok))
		noErr(t, err, "ClaimKey with a token that differs from the claim's")
		if c.Kind != contract.ClaimInFlight {
			t.Errorf("ClaimKey with token %q on the claim of %q = %v, want %v: tokens are compared byte for byte", tok, tokenA, c.Kind, contract.ClaimInFlight)
		}
	}
}

func testTombstoneOutlivesTheOutcome(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	const retain, tomb = time.Minute, 10 * time.Minute
	out := testOutcome("paid")
	var done [2]contract.KeyRecord
	var toks [2]string
	for i, key := range []string{"key-1", "key-2"} {
		c := mustClaim(t, e.ctx, s, e.claimReq(key), contract.ClaimNew)
		toks[i] = c.Token
		done[i] = mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef(key), Token: c.Token, Outcome: out, Retain: retain, Tombstone: tomb})
		e.checkTime(t, "ExpiresAt (CompletedAt + Retain)", done[i].ExpiresAt, done[i].CompletedAt.Add(retain))
		e.checkTime(t, "ForgetAt (CompletedAt + max(Retain, Tombstone))", done[i].ForgetAt, done[i].CompletedAt.Add(tomb))
	}

	e.advance(retain / 2)
	rec, err := other.GetKey(e.ctx, keyRef("key-1"))
	noErr(t, err, "GetKey within the retention")
	if rec.State != contract.KeyCompleted || diffOutcome(rec.Outcome, &out) != "" {
		t.Errorf("GetKey within the retention = %s, want the completed key with its outcome", fmtKey(rec))
	}

	e.advance(retain/2 + time.Second)
	checkTomb := func(what string, rec contract.KeyRecord) {
		t.Helper()
		if rec.State != contract.KeyExpired {
			t.Errorf("%s: State %q, want %q", what, rec.State, contract.KeyExpired)
		}
		switch o := rec.Outcome; {
		case o == nil:
			t.Errorf("%s: Outcome is nil, want the status code alone", what)
		case o.Code != out.Code || len(o.Body) != 0 || o.Header != nil || o.Ref != "":
			t.Errorf("%s: Outcome {Code %d, %d header names, %d body bytes, Ref %q}, want {Code %d} alone: the payload must never be returned after ExpiresAt",
				what, o.Code, len(o.Header), len(o.Body), o.Ref, out.Code)
		}
		e.checkTime(t, what+": ExpiresAt", rec.ExpiresAt, done[0].ExpiresAt)
		e.checkTime(t, what+": ForgetAt", rec.ForgetAt, done[0].ForgetAt)
		if rec.Fingerprint != fp1 {
			t.Errorf("%s: Fingerprint %q, want %q", what, rec.Fingerprint, fp1)
		}
	}
	rec, err = other.GetKey(e.ctx, keyRef("key-1"))
	noErr(t, err, "GetKey past the retention")
	checkTomb("GetKey past the retention", rec)
	_, err = other.ClaimKey(e.ctx, e.claimReq("key-1"))
	if checkCode(t, err, contract.OutcomeExpired) && !errors.Is(err, durable.ErrOutcomeExpired) {
		t.Errorf("errors.Is(%v, durable.ErrOutcomeExpired) is false", err)
	}
	req := e.claimReq("key-1")
	req.Fingerprint = fp2
	_, err = other.ClaimKey(e.ctx, req)
	checkCode(t, err, contract.KeyConflict)
	// A completion retried with the token returns the tombstone.
	again, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: toks[0], Outcome: out, Retain: retain, Tombstone: tomb})
	noErr(t, err, "CompleteKey retried on the tombstone")
	checkTomb("CompleteKey retried on the tombstone", again)
	_, err = s.RenewKey(e.ctx, keyRef("key-1"), toks[0], e.ttl)
	checkCode(t, err, contract.Fenced)
	if ok, err := s.ReleaseKey(e.ctx, keyRef("key-1"), toks[0]); err != nil || ok {
		t.Errorf("ReleaseKey of a tombstone = %v, %v; want false", ok, err)
	}
	wctx, cancel := context.WithTimeout(e.ctx, waitGuard)
	rec, err = other.WaitKey(wctx, keyRef("key-1"))
	cancel()
	noErr(t, err, "WaitKey on a tombstone")
	checkTomb("WaitKey on a tombstone", rec)

	// Cleanup drops the outcomes and keeps the tombstones. A backend whose
	// storage drops an outcome by itself at ExpiresAt (etcd's leases) has
	// none left to drop and counts 0; the reads above and below show the
	// outcome gone either way, and counting must still equal deleting.
	dropped := func(r contract.CleanupResult) bool {
		return r == contract.CleanupResult{Outcomes: 2} || r == contract.CleanupResult{}
	}
	counter := contract.CleanupCounter(nil)
	counts := s.As(&counter)
	var counted *contract.CleanupResult
	if counts {
		got, err := s.CountCleanup(e.ctx, contract.CleanupRequest{})
		if contract.CodeOf(err) != contract.Unimplemented {
			noErr(t, err, "CountCleanup")
			if !dropped(got) {
				t.Errorf("CountCleanup past the retention = %+v, want the two outcomes (Outcomes 2; 0 where the storage dropped them itself) and nothing else", got)
			}
			counted = &got
		}
	}
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{})
	noErr(t, err, "Cleanup")
	if !dropped(res) {
		t.Errorf("Cleanup past the retention = %+v, want the two outcomes (Outcomes 2; 0 where the storage dropped them itself) and nothing else", res)
	}
	if counted != nil && *counted != res {
		t.Errorf("CountCleanup counted %+v but Cleanup did %+v", *counted, res)
	}
	rec, err = other.GetKey(e.ctx, keyRef("key-2"))
	noErr(t, err, "GetKey after Cleanup dropped the outcome")
	checkTomb("GetKey after Cleanup dropped the outcome", rec)
	_, err = other.ClaimKey(e.ctx, e.claimReq("key-2"))
	checkCode(t, err, contract.OutcomeExpired)
	res, err = s.Cleanup(e.ctx, contract.CleanupRequest{})
	noErr(t, err, "second Cleanup")
	checkCleanup(t, res, contract.CleanupResult{})

	// Past ForgetAt the key is free, and Cleanup deletes the tombstone.
	e.advance(tomb - retain)
	nc := mustClaim(t, e.ctx, other, e.claimReq("key-1"), contract.ClaimNew)
	if nc.Record.Outcome != nil || nc.Record.State != contract.KeyClaimed {
		t.Errorf("claim past ForgetAt = %s, want a fresh claim", fmtKey(nc.Record))
	}
	checkNoKey(t, e.ctx, other, keyRef("key-2"))
	if counts {
		got, err := s.CountCleanup(e.ctx, contract.CleanupRequest{})
		if contract.CodeOf(err) != contract.Unimplemented {
			noErr(t, err, "CountCleanup")
			if want := (contract.CleanupResult{Keys: 1}); got != want {
				t.Errorf("CountCleanup past ForgetAt = %+v, want %+v", got, want)
			}
		}
	}
	res, err = s.Cleanup(e.ctx, contract.CleanupRequest{})
	noErr(t, err, "Cleanup past ForgetAt")
	checkCleanup(t, res, contract.CleanupResult{Keys: 1})
}

// testCleanupDropsOutcomesWithinLimit: Cleanup drops outcomes past their
// retention at most Limit at a time and says More until none is left;
// CountCleanup counts the same. A backend whose storage drops them by
// itself (etcd) has none to drop: it reports nothing at all.
func testCleanupDropsOutcomesWithinLimit(t *testing.T, e *env) {
	s := e.open()
	const retain = time.Minute
	for _, k := range []string{"key-1", "key-2", "key-3"} {
		c := mustClaim(t, e.ctx, s, e.claimReq(k), contract.ClaimNew)
		mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef(k), Token: c.Token, Outcome: testOutcome(k), Retain: retain, Tombstone: time.Hour})
	}
	e.advance(retain + e.tol + time.Second)
	req := contract.CleanupRequest{Limit: 2}
	counter := contract.CleanupCounter(nil)
	var counted *contract.CleanupResult
	if s.As(&counter) {
		if got, err := s.CountCleanup(e.ctx, req); contract.CodeOf(err) != contract.Unimplemented {
			noErr(t, err, "CountCleanup")
			counted = &got
		}
	}
	res, err := s.Cleanup(e.ctx, req)
	noErr(t, err, "Cleanup with Limit 2")
	if counted != nil && *counted != res {
		t.Errorf("CountCleanup counted %+v but Cleanup did %+v", *counted, res)
	}
	if res == (contract.CleanupResult{}) {
		return // the storage dropped the outcomes itself
	}
	checkCleanup(t, res, contract.CleanupResult{Outcomes: 2, More: true})
	res, err = s.Cleanup(e.ctx, req)
	noErr(t, err, "second Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Outcomes: 1})
	res, err = s.Cleanup(e.ctx, req)
	noErr(t, err, "third Cleanup")
	checkCleanup(t, res, contract.CleanupResult{})
	for _, k := range []string{"key-1", "key-2", "key-3"} {
		_, err := s.ClaimKey(e.ctx, e.claimReq(k))
		checkCode(t, err, contract.OutcomeExpired)
	}
}

func testCompletionWithoutTombstoneIsForgottenAtExpiry(t *testing.T, e *env) {
	b, _ := e.rawOpen()
	const retain = time.Minute
	req := e.claimReq("key-1")
	c, err := b.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey")
	rec, err := b.CompleteKey(e.ctx, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: testOutcome("x"), Retain: retain})
	noErr(t, err, "CompleteKey with Tombstone 0 on the backend")
	e.checkTime(t, "ForgetAt of a completion with Tombstone 0 (= ExpiresAt)", rec.ForgetAt, rec.ExpiresAt)
	e.advance(retain + time.Second)
	s := e.open()
	checkNoKey(t, e.ctx, s, req.KeyRef)
	mustClaim(t, e.ctx, s, req, contract.ClaimNew)
}

// txStore returns a client whose backend stores outcomes in the caller's
// transaction, skipping the scenario when it cannot.
func (e *env) txStore() *durable.Store {
	e.t.Helper()
	s := e.open()
	if tc := contract.TxCompleter(nil); !s.As(&tc) {
		e.skipf("the backend does not implement contract.TxCompleter (optional: for backends whose records live in a database the caller can write to): Store.BeginTx, CompleteKeyTx and DoTx return Unimplemented")
	}
	tx, err := s.BeginTx(e.ctx)
	if contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend declines contract.TxCompleter at run time (Unimplemented)")
	}
	noErr(e.t, err, "BeginTx")
	noErr(e.t, tx.Rollback(e.ctx), "Rollback")
	return s
}

func testTxCompletionCommitsWithTheTransaction(t *testing.T, e *env) {
	s := e.txStore()
	other := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	tx, err := s.BeginTx(e.ctx)
	noErr(t, err, "BeginTx")
	out := testOutcome("tx")
	rec, err := s.CompleteKeyTx(e.ctx, tx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: out, Retain: time.Hour})
	if err != nil {
		_ = tx.Rollback(e.ctx)
		t.Fatalf("CompleteKeyTx: %v", err)
	}
	if rec.State != contract.KeyCompleted || diffOutcome(rec.Outcome, &out) != "" {
		t.Errorf("CompleteKeyTx = %s, want the record a commit stores", fmtKey(rec))
	}
	noErr(t, tx.Commit(e.ctx), "Commit")
	got, err := other.GetKey(e.ctx, keyRef("key-1"))
	noErr(t, err, "GetKey after Commit")
	if got.State != contract.KeyCompleted || diffOutcome(got.Outcome, &out) != "" {
		t.Errorf("GetKey after Commit = %s, want the completed key with the outcome", fmtKey(got))
	}
	cl, err := other.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey after Commit")
	if cl.Kind != contract.ClaimCompleted {
		t.Errorf("ClaimKey after Commit = %v, want %v", cl.Kind, contract.ClaimCompleted)
	}
}

func testTxRollbackLeavesTheClaimHeld(t *testing.T, e *env) {
	s := e.txStore()
	other := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	tx, err := s.BeginTx(e.ctx)
	noErr(t, err, "BeginTx")
	_, err = s.CompleteKeyTx(e.ctx, tx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("rolled back"), Retain: time.Hour})
	if err != nil {
		_ = tx.Rollback(e.ctx)
		t.Fatalf("CompleteKeyTx: %v", err)
	}
	noErr(t, tx.Rollback(e.ctx), "Rollback")
	got, err := other.GetKey(e.ctx, keyRef("key-1"))
	noErr(t, err, "GetKey after Rollback")
	if got.State != contract.KeyClaimed || got.Outcome != nil {
		t.Errorf("GetKey after Rollback = %s, want the claim as it was", fmtKey(got))
	}
	mustClaim(t, e.ctx, other, e.claimReq("key-1"), contract.ClaimInFlight)
	// The claim is still the token's.
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("plain"), Retain: time.Hour})
}

func testTxCompletionWithStaleTokenIsFenced(t *testing.T, e *env) {
	s := e.txStore()
	other := e.open()
	old := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	mustClaim(t, e.ctx, other, e.claimReq("key-1"), contract.ClaimReclaimed)
	tx, err := s.BeginTx(e.ctx)
	noErr(t, err, "BeginTx")
	_, err = s.CompleteKeyTx(e.ctx, tx, contract.Completion{KeyRef: keyRef("key-1"), Token: old.Token, Outcome: testOutcome("stale"), Retain: time.Hour})
	checkCode(t, err, contract.Fenced)
	_ = tx.Rollback(e.ctx)
	got, err := other.GetKey(e.ctx, keyRef("key-1"))
	noErr(t, err, "GetKey")
	if got.State != contract.KeyClaimed {
		t.Errorf("GetKey after a fenced CompleteKeyTx = %s, want the reclaimer's claim", fmtKey(got))
	}
}
