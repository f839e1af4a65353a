package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func scopeScenarios() []scenario {
	return []scenario{
		{"WorkflowsAreIsolated", 0, testWorkflowsAreIsolated},
		{"ListSeesOnlyItsScope", 0, testListSeesOnlyItsScope},
		{"KeysAreIsolated", 0, testKeysAreIsolated},
		{"LeasesAreIsolated", 0, testLeasesAreIsolated},
		{"FenceFromAnotherScopeIsNotValid", 0, testFenceFromAnotherScopeIsNotValid},
		{"WaitKeyStaysInItsScope", 0, testWaitKeyStaysInItsScope},
		{"CleanupStaysInItsScope", needClock, testCleanupStaysInItsScope},
		{"ScopedCallsDoNotSeeUnscopedRecords", 0, testScopedCallsDoNotSeeUnscopedRecords},
		{"UnscopedCallsDoNotSeeScopedRecords", 0, testUnscopedCallsDoNotSeeScopedRecords},
		{"ScopesMatchExactly", 0, testScopesMatchExactly}, // exactmatch.go
	}
}

// The scopes the scenarios use: two tenants and the unscoped namespace.
var (
	scopeA = durable.TenantScope("a")
	scopeB = durable.TenantScope("b")
)

var allScopes = []contract.Scope{scopeA, scopeB, ""}

func scopeName(s contract.Scope) string {
	switch s {
	case scopeA:
		return "A"
	case scopeB:
		return "B"
	case "":
		return `""`
	}
	return string(s)
}

func testWorkflowsAreIsolated(t *testing.T, e *env) {
	s := e.open()
	wa := mustCreate(t, e.ctx, s, contract.Workflow{Scope: scopeA, ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("A")})
	if wa.Scope != scopeA {
		t.Errorf("created Scope = %q, want %q", wa.Scope, scopeA)
	}
	for _, other := range []contract.Scope{scopeB, ""} {
		checkNoWorkflow(t, e.ctx, s, other, "wf-1")
		_, err := s.UpdateWorkflow(e.ctx, contract.Update{Scope: other, ID: "wf-1", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded})
		if !checkCode(t, err, contract.NotFound) {
			t.Logf("  (update of A's workflow from scope %s)", scopeName(other))
		}
	}
	checkStored(t, e.ctx, s, wa)

	// The same id is free in the other scopes.
	wb := mustCreate(t, e.ctx, s, contract.Workflow{Scope: scopeB, ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("B")})
	wu := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusPending, Snapshot: []byte("unscoped")})
	if wb.Revision != 1 || wu.Revision != 1 {
		t.Errorf("revisions of the same id in B and \"\" = %d, %d, want 1, 1", wb.Revision, wu.Revision)
	}
	_, err := s.CreateWorkflow(e.ctx, contract.Workflow{Scope: scopeA, ID: "wf-1"})
	checkCode(t, err, contract.AlreadyExists)

	// Updates stay in their scope.
	wa = mustUpdate(t, e.ctx, s, contract.Update{Scope: scopeA, ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Snapshot: []byte("A2")})
	wa = mustUpdate(t, e.ctx, s, contract.Update{Scope: scopeA, ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 2, Status: contract.StatusSucceeded, Snapshot: []byte("A3")})
	checkStored(t, e.ctx, s, wa)
	checkStored(t, e.ctx, s, wb)
	checkStored(t, e.ctx, s, wu)
	// A's revision is not B's.
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{Scope: scopeB, ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: wa.Revision, Status: contract.StatusRunning})
	checkCode(t, err, contract.Conflict)
	// A is terminal, B is not.
	wb = mustUpdate(t, e.ctx, s, contract.Update{Scope: scopeB, ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: statusWaiting, Snapshot: []byte("B2")})
	checkStored(t, e.ctx, s, wa)
	checkStored(t, e.ctx, s, wb)
	checkStored(t, e.ctx, s, wu)
}

func testListSeesOnlyItsScope(t *testing.T, e *env) {
	s := e.open()
	want := map[contract.Scope][]string{}
	for i, sc := range allScopes {
		for j := 0; j <= i+1; j++ {
			id := fmt.Sprintf("wf-%d", j*2+i) // interleaved ids across scopes
			mustCreate(t, e.ctx, s, contract.Workflow{Scope: sc, ID: id, Status: contract.StatusRunning})
			want[sc] = append(want[sc], id)
		}
	}
	for _, sc := range allScopes {
		slices.Sort(want[sc])
		for _, limit := range []int{1, 100} {
			got := listAll(t, e, s, contract.ListQuery{Scope: sc, Limit: limit})
			if !slices.Equal(got, want[sc]) {
				t.Errorf("ListWorkflows(scope %s, Limit %d) = %q, want %q", scopeName(sc), limit, got, want[sc])
			}
			got = listAll(t, e, s, contract.ListQuery{Scope: sc, Status: contract.StatusRunning, Limit: limit})
			if !slices.Equal(got, want[sc]) {
				t.Errorf("ListWorkflows(scope %s, Status running, Limit %d) = %q, want %q", scopeName(sc), limit, got, want[sc])
			}
		}
	}
	if got := listAll(t, e, s, contract.ListQuery{Scope: durable.TenantScope("c")}); len(got) != 0 {
		t.Errorf("ListWorkflows of an unused scope = %q, want none", got)
	}
}

func testKeysAreIsolated(t *testing.T, e *env) {
	s := e.open()
	claims := map[contract.Scope]contract.Claim{}
	for _, sc := range allScopes {
		req := e.claimReq("key-1")
		req.Scope = sc
		c, err := s.ClaimKey(e.ctx, req)
		noErr(t, err, "ClaimKey in scope "+scopeName(sc))
		if c.Kind != contract.ClaimNew {
			t.Errorf("ClaimKey in scope %s = %v, want %v: the same key in another scope must be free", scopeName(sc), c.Kind, contract.ClaimNew)
		}
		if c.Record.Scope != sc {
			t.Errorf("claim in scope %s has Scope %q", scopeName(sc), c.Record.Scope)
		}
		claims[sc] = c
	}
	a, b, u := claims[scopeA], claims[scopeB], claims[""]
	if a.Token == b.Token || a.Token == u.Token {
		t.Errorf("claims in different scopes share a token")
	}

	// A's token means nothing in B or "".
	for _, other := range []contract.Scope{scopeB, ""} {
		ref := contract.KeyRef{Scope: other, Key: "key-1"}
		_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: ref, Token: a.Token, Outcome: testOutcome("cross")})
		checkCode(t, err, contract.Fenced)
		_, err = s.RenewKey(e.ctx, ref, a.Token, e.ttl)
		checkCode(t, err, contract.Fenced)
		ok, err := s.ReleaseKey(e.ctx, ref, a.Token)
		noErr(t, err, "ReleaseKey")
		if ok {
			t.Errorf("ReleaseKey in scope %s with A's token = true, want false", scopeName(other))
		}
	}

	// Completing in A leaves B and "" claimed.
	doneA := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: a.Record.KeyRef, Token: a.Token, Outcome: testOutcome("A")})
	for _, other := range []contract.Scope{scopeB, ""} {
		req := e.claimReq("key-1")
		req.Scope = other
		c, err := s.ClaimKey(e.ctx, req)
		noErr(t, err, "ClaimKey")
		if c.Kind != contract.ClaimInFlight {
			t.Errorf("ClaimKey in scope %s after A completed = %v, want %v", scopeName(other), c.Kind, contract.ClaimInFlight)
		}
		checkStoredKey(t, e.ctx, s, claims[other].Record)
	}
	checkStoredKey(t, e.ctx, s, doneA)

	// Releasing in B leaves A and "".
	ok, err := s.ReleaseKey(e.ctx, b.Record.KeyRef, b.Token)
	noErr(t, err, "ReleaseKey")
	if !ok {
		t.Errorf("ReleaseKey in B = false, want true")
	}
	checkNoKey(t, e.ctx, s, b.Record.KeyRef)
	checkStoredKey(t, e.ctx, s, doneA)
	checkStoredKey(t, e.ctx, s, u.Record)

	// Fingerprints bind per scope.
	for i, sc := range allScopes {
		req := e.claimReq("key-2")
		req.Scope, req.Fingerprint = sc, fmt.Sprintf("fp-%d", i)
		mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	}
}

func testLeasesAreIsolated(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	leases := map[contract.Scope]contract.Lease{}
	for i, sc := range allScopes {
		req := e.leaseReq("res-1", fmt.Sprintf("owner-%d", i))
		req.Scope = sc
		l, err := s1.AcquireLease(e.ctx, req)
		if err != nil {
			t.Fatalf("AcquireLease in scope %s: %v, want a grant: the same resource in another scope is free", scopeName(sc), err)
		}
		if l.Scope != sc {
			t.Errorf("lease in scope %s has Scope %q", scopeName(sc), l.Scope)
		}
		leases[sc] = l
	}
	for _, sc := range allScopes {
		checkStoredLease(t, e.ctx, s2, leases[sc])
	}
	// A's grant, presented in B, is not B's.
	a := leases[scopeA]
	inB := a
	inB.Scope = scopeB
	_, err := s2.RenewLease(e.ctx, inB, e.ttl)
	checkCode(t, err, contract.Fenced)
	ok, err := s2.ReleaseLease(e.ctx, inB)
	noErr(t, err, "ReleaseLease")
	if ok {
		t.Errorf("ReleaseLease of A's grant in scope B = true, want false")
	}
	// Releasing A leaves B and "" held.
	ok, err = s2.ReleaseLease(e.ctx, a)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Errorf("ReleaseLease in A = false, want true")
	}
	checkNoLease(t, e.ctx, s2, scopeA, "res-1")
	checkStoredLease(t, e.ctx, s2, leases[scopeB])
	checkStoredLease(t, e.ctx, s2, leases[""])
	req := e.leaseReq("res-1", "owner-9")
	req.Scope = scopeB
	_, err = s2.AcquireLease(e.ctx, req)
	checkCode(t, err, contract.LeaseBusy)
}

func testFenceFromAnotherScopeIsNotValid(t *testing.T, e *env) {
	s := e.open()
	reqA := e.leaseReq("res-1", "owner-1")
	reqA.Scope = scopeA
	la := mustAcquire(t, e.ctx, s, reqA)
	wb := mustCreate(t, e.ctx, s, contract.Workflow{Scope: scopeB, ID: "wf-1", Status: contract.StatusRunning})
	claimB := e.claimReq("key-1")
	claimB.Scope = scopeB
	cb := mustClaim(t, e.ctx, s, claimB, contract.ClaimNew)

	check := func(when string) {
		t.Helper()
		_, err := s.UpdateWorkflow(e.ctx, contract.Update{
			Scope: scopeB, ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: wb.Revision,
			Status: contract.StatusRunning, Snapshot: []byte("cross-scope"), Fence: la.Fence(),
		})
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (update in B with A's fence, %s)", when)
		}
		_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: cb.Record.KeyRef, Token: cb.Token, Outcome: testOutcome("cross"), Fence: la.Fence()})
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (completion in B with A's fence, %s)", when)
		}
		checkStored(t, e.ctx, s, wb)
		checkStoredKey(t, e.ctx, s, cb.Record)
	}
	check("no lease in B")
	// B's lease on the same resource belongs to another owner.
	reqB := e.leaseReq("res-1", "owner-2")
	reqB.Scope = scopeB
	lb := mustAcquire(t, e.ctx, s, reqB)
	check("another owner holds the resource in B")

	wb = mustUpdate(t, e.ctx, s, contract.Update{
		Scope: scopeB, ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: wb.Revision,
		Status: contract.StatusRunning, Snapshot: []byte("B's fence"), Fence: lb.Fence(),
	})
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: cb.Record.KeyRef, Token: cb.Token, Outcome: testOutcome("B"), Fence: lb.Fence()})
	checkStoredLease(t, e.ctx, s, la)
}

func testWaitKeyStaysInItsScope(t *testing.T, e *env) {
	owner, waiter := e.open(), e.open()
	claims := map[contract.Scope]contract.Claim{}
	for _, sc := range []contract.Scope{scopeA, scopeB} {
		req := e.claimReq("key-1")
		req.Scope = sc
		claims[sc] = mustClaim(t, e.ctx, owner, req, contract.ClaimNew)
	}
	refB := claims[scopeB].Record.KeyRef
	ch := startWait(e.ctx, waiter, refB)
	checkStillWaiting(t, ch, "the key is claimed in B")
	mustComplete(t, e.ctx, owner, contract.Completion{KeyRef: claims[scopeA].Record.KeyRef, Token: claims[scopeA].Token, Outcome: testOutcome("A")})
	checkStillWaiting(t, ch, "only A's key completed")
	outB := testOutcome("B")
	doneB := mustComplete(t, e.ctx, owner, contract.Completion{KeyRef: refB, Token: claims[scopeB].Token, Outcome: outB})
	r := awaitWait(t, ch)
	if r.err != nil {
		t.Fatalf("WaitKey in B: %v, want B's record", r.err)
	}
	checkKey(t, "record returned by WaitKey in B", r.rec, doneB)
}

func testCleanupStaysInItsScope(t *testing.T, e *env) {
	s := e.open()
	const age = time.Hour
	// Old, expired records in A.
	reqA := e.leaseReq("res-1", "owner-1")
	reqA.Scope = scopeA
	mustAcquire(t, e.ctx, s, reqA)
	wa := mustCreate(t, e.ctx, s, contract.Workflow{Scope: scopeA, ID: "wf-1", Status: contract.StatusRunning})
	mustFinish(t, e.ctx, s, wa, contract.StatusSucceeded)
	claimA := e.claimReq("key-1")
	claimA.Scope = scopeA
	ca := mustClaim(t, e.ctx, s, claimA, contract.ClaimNew)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: ca.Record.KeyRef, Token: ca.Token, Outcome: testOutcome("A"), Retain: time.Minute})

	e.advance(age + e.pastTakeover())

	// Live records with the same names in B.
	reqB := e.leaseReq("res-1", "owner-1")
	reqB.Scope = scopeB
	lb := mustAcquire(t, e.ctx, s, reqB)
	wb := mustCreate(t, e.ctx, s, contract.Workflow{Scope: scopeB, ID: "wf-1", Status: contract.StatusRunning})
	wb = mustFinish(t, e.ctx, s, wb, contract.StatusSucceeded)
	wb2 := mustCreate(t, e.ctx, s, contract.Workflow{Scope: scopeB, ID: "wf-2", Status: contract.StatusRunning})
	claimB := e.claimReq("key-1")
	claimB.Scope = scopeB
	cb := mustClaim(t, e.ctx, s, claimB, contract.ClaimNew)
	claimB.Key = "key-2"
	cb2 := mustClaim(t, e.ctx, s, claimB, contract.ClaimNew)
	doneB2 := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: cb2.Record.KeyRef, Token: cb2.Token, Outcome: testOutcome("B"), Retain: age})

	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: age})
	noErr(t, err, "Cleanup")
	if res.Workflows != 1 || res.Keys != 1 || res.Leases != 1 || res.More {
		t.Errorf("Cleanup = %+v, want 1 workflow, 1 key, 1 lease (all in A) and no more", res)
	}
	checkNoWorkflow(t, e.ctx, s, scopeA, "wf-1")
	checkNoKey(t, e.ctx, s, ca.Record.KeyRef)
	checkNoLease(t, e.ctx, s, scopeA, "res-1")
	checkStored(t, e.ctx, s, wb)
	checkStored(t, e.ctx, s, wb2)
	checkStoredKey(t, e.ctx, s, cb.Record)
	checkStoredKey(t, e.ctx, s, doneB2)
	checkStoredLease(t, e.ctx, s, lb)
}

func testScopedCallsDoNotSeeUnscopedRecords(t *testing.T, e *env) {
	checkInvisibleAcross(t, e, "", scopeA)
}

func testUnscopedCallsDoNotSeeScopedRecords(t *testing.T, e *env) {
	checkInvisibleAcross(t, e, scopeA, "")
}

// checkInvisibleAcross stores one record of each kind (a workflow, a live
// claim, a completed key, a lease) in scope home only, then checks that
// every call in scope away acts as if they did not exist, and that the
// records in home are untouched.
func checkInvisibleAcross(t *testing.T, e *env, home, away contract.Scope) {
	s, other := e.open(), e.open()
	where := fmt.Sprintf("in scope %s, for records only in scope %s", scopeName(away), scopeName(home))
	var deleter contract.RecordDeleter
	hasDeleter := s.As(&deleter)

	w := mustCreate(t, e.ctx, s, contract.Workflow{Scope: home, ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("home")})
	claimReq := e.claimReq("key-1")
	claimReq.Scope = home
	claimed := mustClaim(t, e.ctx, s, claimReq, contract.ClaimNew)
	claimReq.Key = "key-2"
	c2 := mustClaim(t, e.ctx, s, claimReq, contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c2.Record.KeyRef, Token: c2.Token, Outcome: testOutcome("home")})
	leaseReq := e.leaseReq("res-1", "owner-1")
	leaseReq.Scope = home
	l := mustAcquire(t, e.ctx, s, leaseReq)
	awayKey := func(k string) contract.KeyRef { return contract.KeyRef{Scope: away, Key: k} }

	// Reads.
	checkNoWorkflow(t, e.ctx, other, away, "wf-1")
	for _, st := range []contract.Status{"", contract.StatusRunning} {
		page, err := other.ListWorkflows(e.ctx, contract.ListQuery{Scope: away, Status: st})
		noErr(t, err, "ListWorkflows")
		if len(page) != 0 {
			t.Errorf("ListWorkflows(status %q) %s returned %d workflows, want none", st, where, len(page))
		}
	}
	checkNoKey(t, e.ctx, other, awayKey("key-1"))
	checkNoKey(t, e.ctx, other, awayKey("key-2"))
	for _, k := range []string{"key-1", "key-2"} {
		ctx, cancel := context.WithTimeout(e.ctx, waitGuard)
		_, err := other.WaitKey(ctx, awayKey(k))
		cancel()
		if !checkCode(t, err, contract.NotFound) {
			t.Logf("  (WaitKey of %s %s)", k, where)
		}
	}
	checkNoLease(t, e.ctx, other, away, "res-1")

	// Writes that need the record.
	_, err := other.UpdateWorkflow(e.ctx, contract.Update{Scope: away, ID: "wf-1", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded})
	if !checkCode(t, err, contract.NotFound) {
		t.Logf("  (UpdateWorkflow %s)", where)
	}
	_, err = other.CompleteKey(e.ctx, contract.Completion{KeyRef: awayKey("key-1"), Token: claimed.Token, Outcome: testOutcome("away")})
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (CompleteKey with the home claim's token %s)", where)
	}
	_, err = other.CompleteKey(e.ctx, contract.Completion{KeyRef: awayKey("key-2"), Token: c2.Token, Outcome: testOutcome("away")})
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (CompleteKey retried with the completed home key's token %s)", where)
	}
	_, err = other.RenewKey(e.ctx, awayKey("key-1"), claimed.Token, e.ttl)
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (RenewKey %s)", where)
	}
	if ok, err := other.ReleaseKey(e.ctx, awayKey("key-1"), claimed.Token); err != nil || ok {
		t.Errorf("ReleaseKey %s = %v, %v; want false, nil", where, ok, err)
	}
	lAway := l
	lAway.Scope = away
	_, err = other.RenewLease(e.ctx, lAway, e.ttl)
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (RenewLease %s)", where)
	}
	if ok, err := other.ReleaseLease(e.ctx, lAway); err != nil || ok {
		t.Errorf("ReleaseLease %s = %v, %v; want false, nil", where, ok, err)
	}
	if hasDeleter {
		for kind, id := range map[contract.RecordKind]string{contract.KindWorkflow: "wf-1", contract.KindKey: "key-1", contract.KindLease: "res-1"} {
			found, err := other.DeleteRecord(e.ctx, kind, away, id)
			if contract.CodeOf(err) == contract.Unimplemented {
				break
			}
			noErr(t, err, "DeleteRecord")
			if found {
				t.Errorf("DeleteRecord(%s, %q) %s = true, want false", kind, id, where)
			}
		}
	}
	// A fence from home is not valid in away.
	wAway := mustCreate(t, e.ctx, other, contract.Workflow{Scope: away, ID: "wf-2", Status: contract.StatusRunning})
	_, err = other.UpdateWorkflow(e.ctx, contract.Update{Scope: away, ID: "wf-2", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: l.Fence()})
	if !checkCode(t, err, contract.Fenced) {
		t.Logf("  (a fenced write with the home lease %s)", where)
	}
	checkStored(t, e.ctx, other, wAway)

	// The names are free in away.
	req := e.claimReq("key-1")
	req.Scope, req.Fingerprint = away, fp2
	mustClaim(t, e.ctx, other, req, contract.ClaimNew)
	req.Key, req.Fingerprint = "key-2", fp1
	mustClaim(t, e.ctx, other, req, contract.ClaimNew)
	lr := e.leaseReq("res-1", "owner-2")
	lr.Scope = away
	mustAcquire(t, e.ctx, other, lr)
	mustCreate(t, e.ctx, other, contract.Workflow{Scope: away, ID: "wf-1", Status: contract.StatusPending})

	// And home is as it was.
	checkStored(t, e.ctx, s, w)
	checkStoredKey(t, e.ctx, s, claimed.Record)
	checkStoredKey(t, e.ctx, s, done)
	checkStoredLease(t, e.ctx, s, l)
}
