package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

func cleanupScenarios() []scenario {
	return []scenario{
		{"KeepsLiveRecords", 0, testCleanupKeepsLiveRecords},
		{"DeletesOnlyOldTerminalWorkflows", needClock, testCleanupDeletesOnlyOldTerminalWorkflows},
		{"DeletesOnlyExpiredKeys", needClock, testCleanupDeletesOnlyExpiredKeys},
		{"DeletesOnlyExpiredLeases", needClock, testCleanupDeletesOnlyExpiredLeases},
		{"KeepsClaimsAndLeasesWithinTolerance", needClock | needTolerance, testCleanupKeepsClaimsAndLeasesWithinTolerance},
		{"LimitBoundsEachKindAndMoreReportsTheRest", needClock, testCleanupLimitBoundsEachKindAndMoreReportsTheRest},
		{"WaiterSeesACleanedUpClaimAsNotFound", needClock, testCleanupWaiterSeesACleanedUpClaimAsNotFound},
		{"CountMatchesWhatCleanupDeletes", needClock, testCleanupCountMatchesWhatCleanupDeletes},
		{"DeleteRecordRemovesOneRecordOfAnyState", 0, testDeleteRecordRemovesOneRecordOfAnyState},
		{"SeveralWaitersAllWakeOnCleanup", needClock, testCleanupSeveralWaitersAllWakeOnCleanup},
		{"CountAndMoreIgnoreLiveRecords", needClock, testCleanupCountsAndMoreIgnoreLiveRecords}, // exactmatch.go
	}
}

const terminalAge = time.Hour

func checkCleanup(t *testing.T, got, want contract.CleanupResult) {
	t.Helper()
	if got != want {
		t.Errorf("Cleanup = %+v, want %+v", got, want)
	}
}

func testCleanupKeepsLiveRecords(t *testing.T, e *env) {
	s := e.open()
	var kept []contract.Workflow
	for _, st := range []contract.Status{contract.StatusPending, contract.StatusRunning, statusWaiting} {
		kept = append(kept, mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-" + string(st), Status: st}))
	}
	for _, st := range contract.TerminalStatuses {
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-" + string(st), Status: contract.StatusRunning})
		kept = append(kept, mustFinish(t, e.ctx, s, w, st))
	}
	claim := mustClaim(t, e.ctx, s, e.claimReq("key-claimed"), contract.ClaimNew)
	c := mustClaim(t, e.ctx, s, e.claimReq("key-done"), contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("1")})
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))

	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{})
	for _, w := range kept {
		checkStored(t, e.ctx, s, w)
	}
	checkStoredKey(t, e.ctx, s, claim.Record)
	checkStoredKey(t, e.ctx, s, done)
	checkStoredLease(t, e.ctx, s, l)
}

func testCleanupDeletesOnlyOldTerminalWorkflows(t *testing.T, e *env) {
	s := e.open()
	var old, kept []contract.Workflow
	for _, st := range contract.TerminalStatuses {
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-old-" + string(st), Status: contract.StatusRunning})
		old = append(old, mustFinish(t, e.ctx, s, w, st))
	}
	for _, st := range []contract.Status{contract.StatusPending, contract.StatusRunning, statusWaiting} {
		kept = append(kept, mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-old-" + string(st), Status: st}))
	}
	late := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-finished-late", Status: contract.StatusRunning})

	e.advance(terminalAge + time.Minute)
	// Created long ago but finished just now: judged by UpdatedAt.
	late = mustFinish(t, e.ctx, s, late, contract.StatusFailed)
	recent := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-recent", Status: contract.StatusRunning})
	recent = mustFinish(t, e.ctx, s, recent, contract.StatusSucceeded)

	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Workflows: len(old)})
	for _, w := range old {
		checkNoWorkflow(t, e.ctx, s, "", w.ID)
	}
	for _, w := range append(kept, late, recent) {
		checkStored(t, e.ctx, s, w)
	}
	res, err = s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "second Cleanup")
	checkCleanup(t, res, contract.CleanupResult{})

	// An hour later the late ones are old too; running ones never are.
	e.advance(terminalAge + time.Minute)
	res, err = s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "third Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Workflows: 2})
	checkNoWorkflow(t, e.ctx, s, "", late.ID)
	checkNoWorkflow(t, e.ctx, s, "", recent.ID)
	for _, w := range kept {
		checkStored(t, e.ctx, s, w)
	}
}

func testCleanupDeletesOnlyExpiredKeys(t *testing.T, e *env) {
	s := e.open()
	const retain = time.Minute
	c := mustClaim(t, e.ctx, s, e.claimReq("key-done"), contract.ClaimNew)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("done"), Retain: retain})
	abandoned := mustClaim(t, e.ctx, s, e.claimReq("key-abandoned"), contract.ClaimNew)
	c = mustClaim(t, e.ctx, s, e.claimReq("key-kept"), contract.ClaimNew)
	kept := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("kept"), Retain: 24 * time.Hour})

	e.advance(max(retain, e.ttl) + e.tol + time.Second)
	live := mustClaim(t, e.ctx, s, e.claimReq("key-live"), contract.ClaimNew)
	// An expired claim is still there until it is reclaimed or cleaned up.
	checkStoredKey(t, e.ctx, s, abandoned.Record)

	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Keys: 2})
	checkNoKey(t, e.ctx, s, keyRef("key-done"))
	checkNoKey(t, e.ctx, s, keyRef("key-abandoned"))
	checkStoredKey(t, e.ctx, s, kept)
	checkStoredKey(t, e.ctx, s, live.Record)

	// The abandoned claim's token holds nothing, and the key is free.
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-abandoned"), Token: abandoned.Token, Outcome: testOutcome("late")})
	checkCode(t, err, contract.Fenced)
	req := e.claimReq("key-abandoned")
	req.Fingerprint = fp2
	mustClaim(t, e.ctx, s, req, contract.ClaimNew)
}

func testCleanupDeletesOnlyExpiredLeases(t *testing.T, e *env) {
	s := e.open()
	mustAcquire(t, e.ctx, s, e.leaseReq("res-old", "owner-1"))
	e.advance(e.pastTakeover())
	live := mustAcquire(t, e.ctx, s, e.leaseReq("res-live", "owner-1"))

	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Leases: 1})
	checkNoLease(t, e.ctx, s, "", "res-old")
	checkStoredLease(t, e.ctx, s, live)
}

func testCleanupKeepsClaimsAndLeasesWithinTolerance(t *testing.T, e *env) {
	s := e.open()
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	e.advance(e.ttl + e.tol/2)
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	if res.Keys != 0 || res.Leases != 0 {
		t.Errorf("Cleanup %v after expiry (tolerance %v) = %+v, want nothing deleted", e.tol/2, e.tol, res)
	}
	checkStoredKey(t, e.ctx, s, c.Record)
	checkStoredLease(t, e.ctx, s, l)

	e.advance(e.tol)
	res, err = s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Keys: 1, Leases: 1})
	checkNoKey(t, e.ctx, s, c.Record.KeyRef)
	checkNoLease(t, e.ctx, s, "", "res-1")
}

func testCleanupLimitBoundsEachKindAndMoreReportsTheRest(t *testing.T, e *env) {
	s := e.open()
	const n, limit = 5, 2
	for i := 0; i < n; i++ {
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: fmt.Sprintf("wf-%d", i), Status: contract.StatusRunning})
		mustFinish(t, e.ctx, s, w, contract.StatusClosed)
		c := mustClaim(t, e.ctx, s, e.claimReq(fmt.Sprintf("key-%d", i)), contract.ClaimNew)
		mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("x"), Retain: time.Minute})
		mustAcquire(t, e.ctx, s, e.leaseReq(fmt.Sprintf("res-%d", i), "owner-1"))
	}
	running := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-running", Status: contract.StatusRunning})
	e.advance(terminalAge + e.pastTakeover() + time.Minute)
	live := mustAcquire(t, e.ctx, s, e.leaseReq("res-live", "owner-1"))

	var total contract.CleanupResult
	for pass := 1; ; pass++ {
		if pass > 2*n {
			t.Fatalf("Cleanup still reports More after %d passes (deleted %+v so far)", pass-1, total)
		}
		res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge, Limit: limit})
		noErr(t, err, "Cleanup")
		if res.Workflows > limit || res.Keys > limit || res.Leases > limit {
			t.Errorf("pass %d: Cleanup(Limit %d) = %+v, more than the limit of some kind", pass, limit, res)
		}
		if res.More && res.Workflows+res.Keys+res.Leases == 0 {
			t.Fatalf("pass %d: Cleanup reports More but deleted nothing", pass)
		}
		total.Workflows += res.Workflows
		total.Keys += res.Keys
		total.Leases += res.Leases
		if !res.More {
			break
		}
	}
	checkCleanup(t, total, contract.CleanupResult{Workflows: n, Keys: n, Leases: n})
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge, Limit: limit})
	noErr(t, err, "final Cleanup")
	checkCleanup(t, res, contract.CleanupResult{})
	checkStored(t, e.ctx, s, running)
	checkStoredLease(t, e.ctx, s, live)
}

func testCleanupWaiterSeesACleanedUpClaimAsNotFound(t *testing.T, e *env) {
	owner, waiter := e.open(), e.open()
	mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	ch := startWait(e.ctx, waiter, keyRef("key-1"))
	checkStillWaiting(t, ch, "the expired claim is still stored")
	res, err := owner.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Keys: 1})
	r := awaitWait(t, ch)
	checkCode(t, r.err, contract.NotFound)
}

// testCleanupCountMatchesWhatCleanupDeletes checks the optional
// contract.CleanupCounter capability: a count deletes nothing and predicts
// what the next Cleanup deletes.
func testCleanupCountMatchesWhatCleanupDeletes(t *testing.T, e *env) {
	s := e.open()
	if c := contract.CleanupCounter(nil); !s.As(&c) {
		e.skipf("the backend does not implement contract.CleanupCounter (optional): Store.CountCleanup returns Unimplemented")
	}
	if _, err := s.CountCleanup(e.ctx, contract.CleanupRequest{}); contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend declines contract.CleanupCounter at run time (Unimplemented): Store.CountCleanup returns Unimplemented")
	}
	for _, id := range []string{"wf-a", "wf-b", "wf-c"} {
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: id, Status: contract.StatusRunning})
		mustFinish(t, e.ctx, s, w, contract.StatusSucceeded)
	}
	live := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-live", Status: contract.StatusRunning})
	c := mustClaim(t, e.ctx, s, e.claimReq("key-done"), contract.ClaimNew)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("x"), Retain: time.Minute})
	mustAcquire(t, e.ctx, s, e.leaseReq("res-old", "owner-1"))
	e.advance(max(terminalAge, e.pastTakeover()) + time.Minute)

	req := contract.CleanupRequest{TerminalAge: terminalAge, Limit: 2}
	want := contract.CleanupResult{Workflows: 2, Keys: 1, Leases: 1, More: true}
	got, err := s.CountCleanup(e.ctx, req)
	noErr(t, err, "CountCleanup")
	if got != want {
		t.Errorf("CountCleanup = %+v, want %+v", got, want)
	}
	// Counting twice gives the same answer: nothing was deleted.
	again, err := s.CountCleanup(e.ctx, req)
	noErr(t, err, "second CountCleanup")
	if again != want {
		t.Errorf("second CountCleanup = %+v, want %+v", again, want)
	}
	res, err := s.Cleanup(e.ctx, req)
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, want)
	got, err = s.CountCleanup(e.ctx, req)
	noErr(t, err, "CountCleanup after Cleanup")
	if got != (contract.CleanupResult{Workflows: 1}) {
		t.Errorf("CountCleanup after Cleanup = %+v, want one workflow left", got)
	}
	checkStored(t, e.ctx, s, live)
}

// testDeleteRecordRemovesOneRecordOfAnyState checks the optional
// contract.RecordDeleter capability: one record of each kind goes, live or
// not, its neighbours and other scopes stay, a waiter on a deleted key
// wakes, and a lease granted after deleting one gets a greater token.
func testDeleteRecordRemovesOneRecordOfAnyState(t *testing.T, e *env) {
	s, waiter := e.open(), e.open()
	if c := contract.RecordDeleter(nil); !s.As(&c) {
		e.skipf("the backend does not implement contract.RecordDeleter (optional): Store.DeleteRecord returns Unimplemented")
	}
	if _, err := s.DeleteRecord(e.ctx, contract.KindWorkflow, "", "wf-none"); contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend declines contract.RecordDeleter at run time (Unimplemented): Store.DeleteRecord returns Unimplemented")
	}
	const other = contract.Scope("scope-b")
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	keep := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Scope: other, Status: contract.StatusRunning})
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	ch := startWait(e.ctx, waiter, c.Record.KeyRef)
	checkStillWaiting(t, ch, "the claim is live")

	for _, d := range []struct {
		kind contract.RecordKind
		id   string
	}{{contract.KindWorkflow, w.ID}, {contract.KindKey, "key-1"}, {contract.KindLease, "res-1"}} {
		found, err := s.DeleteRecord(e.ctx, d.kind, "", d.id)
		noErr(t, err, "DeleteRecord "+string(d.kind))
		if !found {
			t.Errorf("DeleteRecord(%s) = false, want true for a stored record", d.kind)
		}
		found, err = s.DeleteRecord(e.ctx, d.kind, "", d.id)
		noErr(t, err, "DeleteRecord "+string(d.kind)+" again")
		if found {
			t.Errorf("DeleteRecord(%s) again = true, want false", d.kind)
		}
	}
	_, err := s.GetWorkflow(e.ctx, "", "wf-1")
	checkCode(t, err, contract.NotFound)
	checkStored(t, e.ctx, s, keep)
	checkNoKey(t, e.ctx, s, keyRef("key-1"))
	checkNoLease(t, e.ctx, s, "", "res-1")
	r := awaitWait(t, ch)
	checkCode(t, r.err, contract.NotFound)
	// The deleted claim's token is stale; the key can be claimed afresh.
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome("late")})
	checkCode(t, err, contract.Fenced)
	mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	// A new grant after the deletion still gets a greater token.
	l2 := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-2"))
	if l2.Token <= l.Token {
		t.Errorf("token after DeleteRecord = %d, want > %d", l2.Token, l.Token)
	}
	_, err = s.DeleteRecord(e.ctx, "bogus", "", "x")
	checkCode(t, err, contract.InvalidArgument)
}

func testCleanupSeveralWaitersAllWakeOnCleanup(t *testing.T, e *env) {
	owner := e.open()
	mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	chs := startWaiters(t, e, keyRef("key-1"), e.openN(waiterClients), severalWaiters, "the expired claim is still stored")
	res, err := owner.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Keys: 1})
	for i, ch := range chs {
		r := awaitWait(t, ch)
		if !checkCode(t, r.err, contract.NotFound) {
			t.Logf("  (waiter %d of %d, after Cleanup deleted the claim)", i, len(chs))
		}
	}
}
