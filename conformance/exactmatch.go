package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// This file holds two properties a key-value backend gets wrong more
// easily than a SQL one: counting what Cleanup deletes without counting
// live records (a scan over every claim or lease, filtered afterwards,
// counts them too), and matching names exactly (a key-value store reads
// ranges of keys, and a range read by prefix also finds the longer name).

// counts reports whether the client's backend counts cleanups
// (contract.CleanupCounter, not declined at run time), logging why not.
func (e *env) counts(s *durable.Store) bool {
	e.t.Helper()
	if c := contract.CleanupCounter(nil); !s.As(&c) {
		e.t.Logf("the backend does not implement contract.CleanupCounter (optional): the CountCleanup part of this scenario is NOT checked")
		return false
	}
	if _, err := s.CountCleanup(e.ctx, contract.CleanupRequest{}); contract.CodeOf(err) == contract.Unimplemented {
		e.t.Logf("the backend declines contract.CleanupCounter at run time (Unimplemented): the CountCleanup part of this scenario is NOT checked")
		return false
	}
	return true
}

// lists reports whether the client's backend lists keys and leases
// (contract.RecordLister, not declined at run time), logging why not.
func (e *env) lists(s *durable.Store) bool {
	e.t.Helper()
	if l := contract.RecordLister(nil); !s.As(&l) {
		e.t.Logf("the backend does not implement contract.RecordLister (optional): the ListKeys and ListLeases part of this scenario is NOT checked")
		return false
	}
	if _, err := s.ListKeys(e.ctx, contract.KeyListQuery{Limit: 1}); contract.CodeOf(err) == contract.Unimplemented {
		e.t.Logf("the backend declines contract.RecordLister at run time (Unimplemented): the ListKeys and ListLeases part of this scenario is NOT checked")
		return false
	}
	return true
}

// testCleanupCountsAndMoreIgnoreLiveRecords: with many live claims, live
// leases, completed keys within retention, running and young terminal
// workflows present, CountCleanup counts only the one record of each kind
// Cleanup deletes, and Cleanup's More turns false once only live records
// remain, however small the Limit.
func testCleanupCountsAndMoreIgnoreLiveRecords(t *testing.T, e *env) {
	s := e.open()
	counter := e.counts(s)
	const live, limit = 4, 2

	// One deletable record of each kind.
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-old", Status: contract.StatusRunning})
	mustFinish(t, e.ctx, s, w, contract.StatusSucceeded)
	mustClaim(t, e.ctx, s, e.claimReq("key-abandoned"), contract.ClaimNew)
	mustAcquire(t, e.ctx, s, e.leaseReq("res-expired", "owner-1"))
	e.advance(max(terminalAge, e.pastTakeover()) + time.Minute)

	// More live records of each kind than the Limit.
	var keep []func()
	for i := range live {
		r := mustCreate(t, e.ctx, s, contract.Workflow{ID: fmt.Sprintf("wf-running-%d", i), Status: contract.StatusRunning})
		y := mustCreate(t, e.ctx, s, contract.Workflow{ID: fmt.Sprintf("wf-young-%d", i), Status: contract.StatusRunning})
		y = mustFinish(t, e.ctx, s, y, contract.StatusFailed)
		c := mustClaim(t, e.ctx, s, e.claimReq(fmt.Sprintf("key-live-%d", i)), contract.ClaimNew)
		d := mustClaim(t, e.ctx, s, e.claimReq(fmt.Sprintf("key-done-%d", i)), contract.ClaimNew)
		done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: d.Record.KeyRef, Token: d.Token, Outcome: testOutcome("kept"), Retain: 24 * time.Hour})
		l := mustAcquire(t, e.ctx, s, e.leaseReq(fmt.Sprintf("res-live-%d", i), "owner-1"))
		keep = append(keep, func() {
			checkStored(t, e.ctx, s, r)
			checkStored(t, e.ctx, s, y)
			checkStoredKey(t, e.ctx, s, c.Record)
			checkStoredKey(t, e.ctx, s, done)
			checkStoredLease(t, e.ctx, s, l)
		})
	}

	req := contract.CleanupRequest{TerminalAge: terminalAge, Limit: limit}
	want := contract.CleanupResult{Workflows: 1, Keys: 1, Leases: 1}
	if counter {
		got, err := s.CountCleanup(e.ctx, req)
		noErr(t, err, "CountCleanup")
		if got != want {
			t.Errorf("CountCleanup(Limit %d) = %+v, want %+v: only the old terminal workflow, the abandoned claim and the expired lease can be deleted (%d live records of each kind must not be counted)",
				limit, got, want, live)
		}
	}
	res, err := s.Cleanup(e.ctx, req)
	noErr(t, err, "Cleanup")
	if res != want {
		t.Errorf("Cleanup(Limit %d) = %+v, want %+v: More must be false once only live records remain", limit, res, want)
	}
	for pass := 2; res.More; pass++ {
		if pass > 5 {
			t.Fatalf("Cleanup(Limit %d) still reports More after %d passes with only live records left (last %+v)", limit, pass-1, res)
		}
		res, err = s.Cleanup(e.ctx, req)
		noErr(t, err, "Cleanup")
	}
	res, err = s.Cleanup(e.ctx, req)
	noErr(t, err, "Cleanup of live records only")
	checkCleanup(t, res, contract.CleanupResult{})
	if counter {
		got, err := s.CountCleanup(e.ctx, req)
		noErr(t, err, "CountCleanup of live records only")
		if got != (contract.CleanupResult{}) {
			t.Errorf("CountCleanup with only live records left = %+v, want nothing", got)
		}
	}
	checkNoWorkflow(t, e.ctx, s, "", "wf-old")
	checkNoKey(t, e.ctx, s, keyRef("key-abandoned"))
	checkNoLease(t, e.ctx, s, "", "res-expired")
	for _, check := range keep {
		check()
	}
}

// Statuses, ids, keys, resources and scopes that are prefixes of one
// another.
const (
	statusShort contract.Status = "run"
	statusLong  contract.Status = "running" // contract.StatusRunning
)

// testWorkflowStatusesAndIDsMatchExactly: ExpectStatus, the status filter
// of ListWorkflows and reads by id never match a longer (or shorter) name.
func testWorkflowStatusesAndIDsMatchExactly(t *testing.T, e *env) {
	s := e.open()
	short := mustCreate(t, e.ctx, s, contract.Workflow{ID: "k", Status: statusShort})
	long := mustCreate(t, e.ctx, s, contract.Workflow{ID: "k1", Status: statusLong})

	for _, c := range []struct {
		w      contract.Workflow
		expect contract.Status
	}{{short, statusLong}, {long, statusShort}, {long, "runnin"}, {short, "ru"}} {
		_, err := s.UpdateWorkflow(e.ctx, contract.Update{ID: c.w.ID, ExpectStatus: c.expect, ExpectRevision: c.w.Revision, Status: statusWaiting})
		if !checkCode(t, err, contract.Conflict) {
			t.Logf("  (UpdateWorkflow of %q, whose status is %q, with ExpectStatus %q)", c.w.ID, c.w.Status, c.expect)
		}
	}
	checkStored(t, e.ctx, s, short)
	checkStored(t, e.ctx, s, long)

	for _, c := range []struct {
		status contract.Status
		want   []string
	}{{statusShort, []string{"k"}}, {statusLong, []string{"k1"}}, {"ru", nil}, {"runn", nil}} {
		page, err := s.ListWorkflows(e.ctx, contract.ListQuery{Status: c.status})
		noErr(t, err, "ListWorkflows")
		var got []string
		for _, w := range page {
			got = append(got, w.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("ListWorkflows(Status %q) = %q, want %q", c.status, got, c.want)
		}
	}

	// A read or write by id never finds the longer or the shorter id.
	only := mustCreate(t, e.ctx, s, contract.Workflow{ID: "only1", Status: statusShort})
	checkNoWorkflow(t, e.ctx, s, "", "only")
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{ID: "only", ExpectStatus: statusShort, Status: statusLong})
	checkCode(t, err, contract.NotFound)
	checkNoWorkflow(t, e.ctx, s, "", "only12")
	checkStored(t, e.ctx, s, only)
	// And the short one moves without touching the long one.
	short = mustUpdate(t, e.ctx, s, contract.Update{ID: "k", ExpectStatus: statusShort, ExpectRevision: short.Revision, Status: statusWaiting})
	checkStored(t, e.ctx, s, short)
	checkStored(t, e.ctx, s, long)
}

// testKeysMatchExactly: claims, completions, reads, releases, listings and
// cleanup of key "k" never touch "k1", and the other way round.
func testKeysMatchExactly(t *testing.T, e *env) {
	s := e.open()
	long := mustClaim(t, e.ctx, s, e.claimReq("k1"), contract.ClaimNew)
	checkNoKey(t, e.ctx, s, keyRef("k"))
	// Another fingerprint on "k" is not "k1"'s conflict, nor its flight.
	req := e.claimReq("k")
	req.Fingerprint = "fp-other"
	short := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	if ok, err := s.ReleaseKey(e.ctx, keyRef("k"), long.Token); err != nil || ok {
		t.Errorf("ReleaseKey(%q) with the token of %q = %v, %v; want false", "k", "k1", ok, err)
	}
	_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("k"), Token: long.Token, Outcome: testOutcome("wrong")})
	checkCode(t, err, contract.Fenced)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("k"), Token: short.Token, Outcome: testOutcome("short"), Retain: 24 * time.Hour})
	checkStoredKey(t, e.ctx, s, long.Record)
	checkStoredKey(t, e.ctx, s, done)

	// "k12" expires with its claim abandoned; Cleanup deletes it alone.
	mustClaim(t, e.ctx, s, e.claimReq("k12"), contract.ClaimNew)
	e.advance(e.pastTakeover())
	long = mustClaim(t, e.ctx, s, e.claimReq("k1"), contract.ClaimReclaimed)
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Keys: 1})
	checkNoKey(t, e.ctx, s, keyRef("k12"))
	checkStoredKey(t, e.ctx, s, long.Record)
	checkStoredKey(t, e.ctx, s, done)

	if e.lists(s) {
		page, err := s.ListKeys(e.ctx, contract.KeyListQuery{State: contract.KeyClaimed})
		noErr(t, err, "ListKeys")
		if len(page) != 1 || page[0].Key != "k1" {
			var got []string
			for _, r := range page {
				got = append(got, r.Key)
			}
			t.Errorf("ListKeys(State claimed) = %q, want [k1]", got)
		}
	}
}

// testLeaseResourcesMatchExactly: grants, renewals, releases, reads,
// fences, listings and cleanup of resource "a" never touch "ab".
func testLeaseResourcesMatchExactly(t *testing.T, e *env) {
	s := e.open()
	ab := mustAcquire(t, e.ctx, s, e.leaseReq("ab", "owner-1"))
	checkNoLease(t, e.ctx, s, "", "a")
	// "ab"'s grant is no grant on "a".
	as := ab
	as.Resource = "a"
	_, err := s.RenewLease(e.ctx, as, e.ttl)
	checkCode(t, err, contract.Fenced)
	if ok, err := s.ReleaseLease(e.ctx, as); err != nil || ok {
		t.Errorf("ReleaseLease of %q with the grant of %q = %v, %v; want false", "a", "ab", ok, err)
	}
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: w.ID, ExpectStatus: w.Status, ExpectRevision: w.Revision, Status: statusWaiting,
		Fence: &contract.Fence{Resource: "a", Owner: ab.Owner, Token: ab.Token}})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, s, w)

	a := mustAcquire(t, e.ctx, s, e.leaseReq("a", "owner-2"))
	checkStoredLease(t, e.ctx, s, ab)
	checkStoredLease(t, e.ctx, s, a)
	if ok, err := s.ReleaseLease(e.ctx, a); err != nil || !ok {
		t.Errorf("ReleaseLease(%q) = %v, %v; want true", "a", ok, err)
	}
	checkNoLease(t, e.ctx, s, "", "a")
	checkStoredLease(t, e.ctx, s, ab)

	// "abc" expires; "ab" is renewed. Cleanup deletes "abc" alone.
	mustAcquire(t, e.ctx, s, e.leaseReq("abc", "owner-1"))
	e.advance(e.ttl / 2)
	ab, err = s.RenewLease(e.ctx, ab, e.ttl)
	noErr(t, err, "RenewLease")
	e.advance(e.ttl/2 + e.tol + time.Second)
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: terminalAge})
	noErr(t, err, "Cleanup")
	checkCleanup(t, res, contract.CleanupResult{Leases: 1})
	checkNoLease(t, e.ctx, s, "", "abc")
	checkStoredLease(t, e.ctx, s, ab)

	if e.lists(s) {
		page, err := s.ListLeases(e.ctx, contract.LeaseListQuery{Held: true})
		noErr(t, err, "ListLeases")
		if len(page) != 1 || page[0].Resource != "ab" {
			t.Errorf("ListLeases(Held) = %+v, want the lease on ab alone", page)
		}
	}
}

// testScopesMatchExactly: every read and listing in scope "a" misses the
// records of scope "ab", and the other way round.
func testScopesMatchExactly(t *testing.T, e *env) {
	s := e.open()
	const short, long contract.Scope = "a", "ab"
	w := mustCreate(t, e.ctx, s, contract.Workflow{Scope: long, ID: "wf-1", Status: contract.StatusRunning})
	req := e.claimReq("key-1")
	req.Scope = long
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	lreq := e.leaseReq("res-1", "owner-1")
	lreq.Scope = long
	l := mustAcquire(t, e.ctx, s, lreq)

	for _, sc := range []contract.Scope{short, "abc"} {
		checkNoWorkflow(t, e.ctx, s, sc, "wf-1")
		checkNoKey(t, e.ctx, s, contract.KeyRef{Scope: sc, Key: "key-1"})
		checkNoLease(t, e.ctx, s, sc, "res-1")
		page, err := s.ListWorkflows(e.ctx, contract.ListQuery{Scope: sc})
		noErr(t, err, "ListWorkflows")
		if len(page) != 0 {
			t.Errorf("ListWorkflows(scope %q) = %d records, want none (they are in scope %q)", sc, len(page), long)
		}
		page, err = s.ListWorkflows(e.ctx, contract.ListQuery{Scope: sc, Status: contract.StatusRunning})
		noErr(t, err, "ListWorkflows")
		if len(page) != 0 {
			t.Errorf("ListWorkflows(scope %q, Status running) = %d records, want none (they are in scope %q)", sc, len(page), long)
		}
	}
	if e.lists(s) {
		keys, err := s.ListKeys(e.ctx, contract.KeyListQuery{Scope: short})
		noErr(t, err, "ListKeys")
		leases, err := s.ListLeases(e.ctx, contract.LeaseListQuery{Scope: short})
		noErr(t, err, "ListLeases")
		if len(keys)+len(leases) != 0 {
			t.Errorf("ListKeys and ListLeases of scope %q = %d keys and %d leases, want none (they are in scope %q)", short, len(keys), len(leases), long)
		}
	}
	// A claim, a grant and a creation in "a" are new, and leave "ab" alone.
	req.Scope, lreq.Scope = short, short
	mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	la := mustAcquire(t, e.ctx, s, lreq)
	mustCreate(t, e.ctx, s, contract.Workflow{Scope: short, ID: "wf-1", Status: contract.StatusRunning})
	if ok, err := s.ReleaseLease(e.ctx, la); err != nil || !ok {
		t.Errorf("ReleaseLease in scope %q = %v, %v; want true", short, ok, err)
	}
	checkStored(t, e.ctx, s, w)
	checkStoredKey(t, e.ctx, s, c.Record)
	checkStoredLease(t, e.ctx, s, l)
}
