package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func inputScenarios() []scenario {
	return []scenario{
		{"RejectsBadWorkflowIDs", 0, testRejectsBadWorkflowIDs},
		{"RejectsBadKeysAndFingerprints", 0, testRejectsBadKeysAndFingerprints},
		{"RejectsBadOwnersAndResources", 0, testRejectsBadOwnersAndResources},
		{"RejectsBadScopes", 0, testRejectsBadScopes},
		{"RejectsBadStatuses", 0, testRejectsBadStatuses},
		{"RejectsOutOfRangeTTLs", 0, testRejectsOutOfRangeTTLs},
		{"RejectsOversizeSnapshot", 0, testRejectsOversizeSnapshot},
		{"RejectsOversizeOutcomeBody", 0, testRejectsOversizeOutcomeBody},
		{"RejectsNegativeExpectRevision", 0, testRejectsNegativeExpectRevision},
		{"RejectsBadLimits", 0, testRejectsBadLimits},
		{"InvalidArgumentDoesNotEchoInput", 0, testInvalidArgumentDoesNotEchoInput},
		{"AcceptsLongestNames", 0, testAcceptsLongestNames},
		{"AcceptsBoundaryTTLs", 0, testAcceptsBoundaryTTLs},
		{"AcceptsSnapshotAtTheLimit", 0, testAcceptsSnapshotAtTheLimit},
		{"ClosedStoreReturnsClosed", 0, testClosedStoreReturnsClosed},
		{"ClosingOneClientLeavesOthersWorking", 0, testClosingOneClientLeavesOthersWorking},
		{"CanceledContextIsVisible", 0, testCanceledContextIsVisible},
		{"ExpiredDeadlineIsVisible", 0, testExpiredDeadlineIsVisible},
	}
}

const injection = "x'; DROP TABLE workflows; --"

type badName struct{ label, s string }

// badNames are invalid as workflow ids, keys, owners and resources.
var badNames = []badName{
	{"empty", ""},
	{"129 bytes", strings.Repeat("a", 129)},
	{"a space", "a b"},
	{"a slash", "a/b"},
	{"non-ASCII", "é"},
	{"a leading dash", "-a"},
	{"a NUL byte", "a\x00b"},
	{"SQL injection", injection},
}

// badScopes are invalid scopes ("" is the valid unscoped namespace).
var badScopes = badNames[1:]

// checkInvalid asserts InvalidArgument for one bad input.
func checkInvalid(t *testing.T, err error, what string) {
	t.Helper()
	if !checkCode(t, err, contract.InvalidArgument) {
		t.Logf("  (%s)", what)
	}
}

// seed stores one record of each kind so that the Input scenarios can check
// that rejected calls changed nothing.
type seed struct {
	w     contract.Workflow
	claim contract.Claim
	lease contract.Lease
}

func (e *env) seed(t *testing.T, s *durable.Store) seed {
	t.Helper()
	return seed{
		w:     mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-ok", Status: contract.StatusRunning, Snapshot: []byte("ok")}),
		claim: mustClaim(t, e.ctx, s, e.claimReq("key-ok"), contract.ClaimNew),
		lease: mustAcquire(t, e.ctx, s, e.leaseReq("res-ok", "owner-ok")),
	}
}

// check asserts that the seeded records are unchanged and that they are the
// only workflows.
func (sd seed) check(t *testing.T, ctx context.Context, s *durable.Store) {
	t.Helper()
	checkStored(t, ctx, s, sd.w)
	checkStoredKey(t, ctx, s, sd.claim.Record)
	checkStoredLease(t, ctx, s, sd.lease)
	page, err := s.ListWorkflows(ctx, contract.ListQuery{})
	noErr(t, err, "ListWorkflows")
	if len(page) != 1 {
		var ids []string
		for _, w := range page {
			ids = append(ids, w.ID)
		}
		t.Errorf("workflows stored = %q, want only %q: a rejected call stored something", ids, sd.w.ID)
	}
}

func testRejectsBadWorkflowIDs(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	for _, b := range badNames {
		_, err := s.CreateWorkflow(e.ctx, contract.Workflow{ID: b.s, Status: contract.StatusRunning})
		checkInvalid(t, err, "CreateWorkflow with "+b.label)
		_, err = s.GetWorkflow(e.ctx, "", b.s)
		checkInvalid(t, err, "GetWorkflow with "+b.label)
		_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: b.s, ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded})
		checkInvalid(t, err, "UpdateWorkflow with "+b.label)
		if b.s != "" { // an empty cursor is the first page, an empty request id is "none"
			_, err = s.ListWorkflows(e.ctx, contract.ListQuery{After: b.s})
			checkInvalid(t, err, "ListWorkflows with After "+b.label)
			_, err = s.CreateWorkflow(e.ctx, contract.Workflow{ID: "wf-req", RequestID: b.s})
			checkInvalid(t, err, "CreateWorkflow with RequestID "+b.label)
			_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded, RequestID: b.s})
			checkInvalid(t, err, "UpdateWorkflow with RequestID "+b.label)
			_, err = s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: keyRef("key-wf"), Fingerprint: fp1, WorkflowID: b.s, TTL: e.ttl})
			checkInvalid(t, err, "ClaimKey with WorkflowID "+b.label)
		}
	}
	checkNoWorkflow(t, e.ctx, s, "", "wf-req")
	checkNoKey(t, e.ctx, s, keyRef("key-wf"))
	sd.check(t, e.ctx, s)
}

func testRejectsBadKeysAndFingerprints(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	for _, b := range badNames {
		ref := keyRef(b.s)
		_, err := s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: fp1, TTL: e.ttl})
		checkInvalid(t, err, "ClaimKey with "+b.label)
		_, err = s.GetKey(e.ctx, ref)
		checkInvalid(t, err, "GetKey with "+b.label)
		_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: ref, Token: sd.claim.Token, Outcome: testOutcome("x")})
		checkInvalid(t, err, "CompleteKey with "+b.label)
		_, err = s.RenewKey(e.ctx, ref, sd.claim.Token, e.ttl)
		checkInvalid(t, err, "RenewKey with "+b.label)
		_, err = s.ReleaseKey(e.ctx, ref, sd.claim.Token)
		checkInvalid(t, err, "ReleaseKey with "+b.label)
		_, err = s.WaitKey(e.ctx, ref)
		checkInvalid(t, err, "WaitKey with "+b.label)
	}
	for _, fp := range []badName{{"empty", ""}, {"257 bytes", strings.Repeat("f", 257)}, {"a space", "a b"}, {"non-ASCII", "é"}, {"a newline", "a\nb"}} {
		_, err := s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: keyRef("key-fp"), Fingerprint: fp.s, TTL: e.ttl})
		checkInvalid(t, err, "ClaimKey with fingerprint "+fp.label)
	}
	checkNoKey(t, e.ctx, s, keyRef("key-fp"))
	for _, tok := range []badName{{"empty", ""}, {"a space", "a b"}, {"129 bytes", strings.Repeat("t", 129)}} {
		_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: tok.s, Outcome: testOutcome("x")})
		checkInvalid(t, err, "CompleteKey with token "+tok.label)
		_, err = s.RenewKey(e.ctx, sd.claim.Record.KeyRef, tok.s, e.ttl)
		checkInvalid(t, err, "RenewKey with token "+tok.label)
		_, err = s.ReleaseKey(e.ctx, sd.claim.Record.KeyRef, tok.s)
		checkInvalid(t, err, "ReleaseKey with token "+tok.label)
	}
	for _, tok := range []badName{{"15 bytes", strings.Repeat("t", 15)}, {"a space", "a caller token with spaces"}, {"129 bytes", strings.Repeat("t", 129)}, {"non-ASCII", "caller-token-é-0123456789"}} {
		req := e.claimReq("key-tok")
		req.Token = tok.s
		_, err := s.ClaimKey(e.ctx, req)
		checkInvalid(t, err, "ClaimKey with caller token "+tok.label)
	}
	checkNoKey(t, e.ctx, s, keyRef("key-tok"))
	_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: testOutcome("x"), Retain: -time.Minute})
	checkInvalid(t, err, "CompleteKey with a negative Retain")
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: testOutcome("x"), Tombstone: -time.Minute})
	checkInvalid(t, err, "CompleteKey with a negative Tombstone")
	for _, code := range []int{-1, 1000} {
		_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: contract.Outcome{Code: code}})
		checkInvalid(t, err, "CompleteKey with an out-of-range outcome code")
	}
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: contract.Outcome{Code: 200, Header: map[string][]string{"Bad Name": {"v"}}}})
	checkInvalid(t, err, "CompleteKey with a header name containing a space")
	sd.check(t, e.ctx, s)
}

func testRejectsBadOwnersAndResources(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	for _, b := range badNames {
		_, err := s.AcquireLease(e.ctx, contract.LeaseRequest{Resource: "res-new", Owner: b.s, TTL: e.ttl})
		checkInvalid(t, err, "AcquireLease with owner "+b.label)
		_, err = s.AcquireLease(e.ctx, contract.LeaseRequest{Resource: b.s, Owner: "owner-ok", TTL: e.ttl})
		checkInvalid(t, err, "AcquireLease with resource "+b.label)
		_, err = s.GetLease(e.ctx, "", b.s)
		checkInvalid(t, err, "GetLease with resource "+b.label)

		l := sd.lease
		l.Owner = b.s
		_, err = s.RenewLease(e.ctx, l, e.ttl)
		checkInvalid(t, err, "RenewLease with owner "+b.label)
		_, err = s.ReleaseLease(e.ctx, l)
		checkInvalid(t, err, "ReleaseLease with owner "+b.label)
		l = sd.lease
		l.Resource = b.s
		_, err = s.RenewLease(e.ctx, l, e.ttl)
		checkInvalid(t, err, "RenewLease with resource "+b.label)
		_, err = s.ReleaseLease(e.ctx, l)
		checkInvalid(t, err, "ReleaseLease with resource "+b.label)

		for _, f := range []contract.Fence{
			{Resource: b.s, Owner: sd.lease.Owner, Token: sd.lease.Token},
			{Resource: sd.lease.Resource, Owner: b.s, Token: sd.lease.Token},
		} {
			_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded, Fence: &f})
			checkInvalid(t, err, "UpdateWorkflow with a fence naming "+b.label)
			_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: testOutcome("x"), Fence: &f})
			checkInvalid(t, err, "CompleteKey with a fence naming "+b.label)
		}
	}
	for _, tok := range []int64{0, -1} {
		l := sd.lease
		l.Token = tok
		_, err := s.RenewLease(e.ctx, l, e.ttl)
		checkInvalid(t, err, "RenewLease with a non-positive token")
		_, err = s.ReleaseLease(e.ctx, l)
		checkInvalid(t, err, "ReleaseLease with a non-positive token")
		f := sd.lease.Fence()
		f.Token = tok
		_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded, Fence: f})
		checkInvalid(t, err, "UpdateWorkflow with a non-positive fence token")
	}
	checkNoLease(t, e.ctx, s, "", "res-new")
	sd.check(t, e.ctx, s)
}

func testRejectsBadScopes(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	for _, b := range badScopes {
		sc := contract.Scope(b.s)
		_, err := s.CreateWorkflow(e.ctx, contract.Workflow{Scope: sc, ID: "wf-scoped"})
		checkInvalid(t, err, "CreateWorkflow in scope "+b.label)
		_, err = s.GetWorkflow(e.ctx, sc, "wf-ok")
		checkInvalid(t, err, "GetWorkflow in scope "+b.label)
		_, err = s.UpdateWorkflow(e.ctx, contract.Update{Scope: sc, ID: "wf-ok", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded})
		checkInvalid(t, err, "UpdateWorkflow in scope "+b.label)
		_, err = s.ListWorkflows(e.ctx, contract.ListQuery{Scope: sc})
		checkInvalid(t, err, "ListWorkflows in scope "+b.label)
		_, err = s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: sc, Key: "key-scoped"}, Fingerprint: fp1, TTL: e.ttl})
		checkInvalid(t, err, "ClaimKey in scope "+b.label)
		_, err = s.GetKey(e.ctx, contract.KeyRef{Scope: sc, Key: "key-ok"})
		checkInvalid(t, err, "GetKey in scope "+b.label)
		_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: contract.KeyRef{Scope: sc, Key: "key-ok"}, Token: sd.claim.Token, Outcome: testOutcome("x")})
		checkInvalid(t, err, "CompleteKey in scope "+b.label)
		_, err = s.AcquireLease(e.ctx, contract.LeaseRequest{Scope: sc, Resource: "res-scoped", Owner: "owner-ok", TTL: e.ttl})
		checkInvalid(t, err, "AcquireLease in scope "+b.label)
		_, err = s.GetLease(e.ctx, sc, "res-ok")
		checkInvalid(t, err, "GetLease in scope "+b.label)
		l := sd.lease
		l.Scope = sc
		_, err = s.RenewLease(e.ctx, l, e.ttl)
		checkInvalid(t, err, "RenewLease in scope "+b.label)
	}
	checkNoWorkflow(t, e.ctx, s, "", "wf-scoped")
	checkNoKey(t, e.ctx, s, keyRef("key-scoped"))
	checkNoLease(t, e.ctx, s, "", "res-scoped")
	sd.check(t, e.ctx, s)
}

func testRejectsBadStatuses(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	bad := []badName{
		{"upper case", "Running"},
		{"a leading digit", "1x"},
		{"65 bytes", strings.Repeat("s", 65)},
		{"a space", "a b"},
		{"a dash", "a-b"},
		{"SQL injection", injection},
	}
	for _, b := range bad {
		st := contract.Status(b.s)
		_, err := s.CreateWorkflow(e.ctx, contract.Workflow{ID: "wf-status", Status: st})
		checkInvalid(t, err, "CreateWorkflow with status "+b.label)
		_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: st})
		checkInvalid(t, err, "UpdateWorkflow with status "+b.label)
		_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: st, ExpectRevision: 1, Status: contract.StatusRunning})
		checkInvalid(t, err, "UpdateWorkflow with expected status "+b.label)
		_, err = s.ListWorkflows(e.ctx, contract.ListQuery{Status: st})
		checkInvalid(t, err, "ListWorkflows with status "+b.label)
	}
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, ExpectRevision: 1})
	checkInvalid(t, err, "UpdateWorkflow with an empty status")
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectRevision: 1, Status: contract.StatusRunning})
	checkInvalid(t, err, "UpdateWorkflow with an empty expected status")
	// The longest valid status is accepted.
	long := contract.Status("s" + strings.Repeat("_0", 31) + "z")
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-long-status", Status: long})
	if w.Status != long {
		t.Errorf("Status = %q, want the 64-byte %q", w.Status, long)
	}
	checkNoWorkflow(t, e.ctx, s, "", "wf-status")
	checkStored(t, e.ctx, s, sd.w)
	checkStoredKey(t, e.ctx, s, sd.claim.Record)
}

func testRejectsOutOfRangeTTLs(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	// Below the Store's minimum: under 1 s, at the clock tolerance (a lease
	// that would be dead on arrival) and just under tolerance + 1 s.
	for _, ttl := range []time.Duration{500 * time.Millisecond, max(e.tol, time.Millisecond), s.MinTTL() - time.Millisecond,
		25 * time.Hour, -time.Second, 24*time.Hour + time.Microsecond} {
		what := " with TTL " + ttl.String()
		_, err := s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: keyRef("key-ttl"), Fingerprint: fp1, TTL: ttl})
		checkInvalid(t, err, "ClaimKey"+what)
		_, err = s.AcquireLease(e.ctx, contract.LeaseRequest{Resource: "res-ttl", Owner: "owner-ok", TTL: ttl})
		checkInvalid(t, err, "AcquireLease"+what)
		_, err = s.RenewKey(e.ctx, sd.claim.Record.KeyRef, sd.claim.Token, ttl)
		checkInvalid(t, err, "RenewKey"+what)
		_, err = s.RenewLease(e.ctx, sd.lease, ttl)
		checkInvalid(t, err, "RenewLease"+what)
	}
	checkNoKey(t, e.ctx, s, keyRef("key-ttl"))
	checkNoLease(t, e.ctx, s, "", "res-ttl")
	sd.check(t, e.ctx, s)
}

func testRejectsOversizeSnapshot(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	big := make([]byte, durable.DefaultMaxSnapshot+1)
	_, err := s.CreateWorkflow(e.ctx, contract.Workflow{ID: "wf-big", Snapshot: big})
	checkInvalid(t, err, "CreateWorkflow with a snapshot of 1 MiB + 1")
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Snapshot: big})
	checkInvalid(t, err, "UpdateWorkflow with a snapshot of 1 MiB + 1")
	checkNoWorkflow(t, e.ctx, s, "", "wf-big")
	sd.check(t, e.ctx, s)
}

func testRejectsOversizeOutcomeBody(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	out := testOutcome("big")
	out.Body = make([]byte, durable.DefaultMaxBody+1)
	_, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: out})
	checkInvalid(t, err, "CompleteKey with a body of 1 MiB + 1")
	out.Body = []byte("small")
	out.Header = map[string][]string{"X-Big": {strings.Repeat("h", 64<<10)}}
	_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: out})
	checkInvalid(t, err, "CompleteKey with 64 KiB of headers")
	sd.check(t, e.ctx, s)
	// The claim is intact: a valid completion still works.
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: testOutcome("ok")})
}

func testRejectsNegativeExpectRevision(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-ok", ExpectStatus: contract.StatusRunning, ExpectRevision: -1, Status: contract.StatusSucceeded})
	checkInvalid(t, err, "UpdateWorkflow with ExpectRevision -1")
	sd.check(t, e.ctx, s)
}

func testRejectsBadLimits(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	for _, limit := range []int{-1, durable.MaxListLimit + 1} {
		_, err := s.ListWorkflows(e.ctx, contract.ListQuery{Limit: limit})
		checkInvalid(t, err, "ListWorkflows with a bad limit")
	}
	for _, req := range []contract.CleanupRequest{{Limit: -1}, {Limit: durable.MaxCleanupLimit + 1}, {TerminalAge: -time.Second}} {
		_, err := s.Cleanup(e.ctx, req)
		checkInvalid(t, err, "Cleanup with a bad request")
	}
	sd.check(t, e.ctx, s)
}

func testInvalidArgumentDoesNotEchoInput(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	sc := contract.Scope(injection)
	calls := map[string]func() error{
		"workflow id": func() error {
			_, err := s.CreateWorkflow(e.ctx, contract.Workflow{ID: injection})
			return err
		},
		"scope": func() error {
			_, err := s.GetWorkflow(e.ctx, sc, "wf-ok")
			return err
		},
		"request id": func() error {
			_, err := s.CreateWorkflow(e.ctx, contract.Workflow{ID: "wf-x", RequestID: injection})
			return err
		},
		"key": func() error {
			_, err := s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: keyRef(injection), Fingerprint: fp1, TTL: e.ttl})
			return err
		},
		"token": func() error {
			_, err := s.ReleaseKey(e.ctx, keyRef("key-ok"), injection)
			return err
		},
		"owner": func() error {
			_, err := s.AcquireLease(e.ctx, contract.LeaseRequest{Resource: "res-x", Owner: injection, TTL: e.ttl})
			return err
		},
		"resource": func() error {
			_, err := s.GetLease(e.ctx, "", injection)
			return err
		},
		"status": func() error {
			_, err := s.ListWorkflows(e.ctx, contract.ListQuery{Status: contract.Status(injection)})
			return err
		},
	}
	for field, call := range calls {
		err := call()
		checkInvalid(t, err, "SQL injection as the "+field)
		if err == nil {
			continue
		}
		msg := err.Error()
		for _, frag := range []string{injection, "DROP TABLE", "x'"} {
			if strings.Contains(msg, frag) {
				t.Errorf("error for an invalid %s echoes the input (%q): %s", field, frag, msg)
			}
		}
	}
	sd.check(t, e.ctx, s)
}

func testAcceptsLongestNames(t *testing.T, e *env) {
	s := e.open()
	name := func(c byte) string {
		b := []byte("Az09_.:-")
		for len(b) < 128 {
			b = append(b, c)
		}
		return string(b)
	}
	sc := contract.Scope(name('s'))
	id, key, res, owner := name('w'), name('k'), name('r'), name('o')
	w := mustCreate(t, e.ctx, s, contract.Workflow{Scope: sc, ID: id, RequestID: name('q'), Status: contract.StatusRunning})
	checkStored(t, e.ctx, s, w)
	if got := listAll(t, e, s, contract.ListQuery{Scope: sc, After: id[:127]}); len(got) != 1 || got[0] != id {
		t.Errorf("ListWorkflows of the 128-byte scope after a 127-byte cursor = %q, want the 128-byte id", got)
	}
	req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: sc, Key: key}, Fingerprint: strings.Repeat("f", 256), WorkflowID: id, TTL: e.ttl}
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	checkStoredKey(t, e.ctx, s, c.Record)
	l := mustAcquire(t, e.ctx, s, contract.LeaseRequest{Scope: sc, Resource: res, Owner: owner, TTL: e.ttl})
	checkStoredLease(t, e.ctx, s, l)
	mustUpdate(t, e.ctx, s, contract.Update{Scope: sc, ID: id, ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: l.Fence()})
	out := testOutcome("long")
	out.Ref = strings.Repeat("r", 1024)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: out, Fence: l.Fence()})
	checkStoredKey(t, e.ctx, s, done)
	// Names that differ only in their last byte are different records.
	checkNoWorkflow(t, e.ctx, s, sc, id[:127]+"x")
}

func testAcceptsBoundaryTTLs(t *testing.T, e *env) {
	s := e.open()
	if got, want := s.MinTTL(), durable.TTLMargin+e.tol; got != want {
		t.Errorf("Store.MinTTL() = %v, want 1s plus the declared tolerance %v", got, e.tol)
	}
	for _, ttl := range []time.Duration{s.MinTTL(), durable.MaxTTL} {
		c := mustClaim(t, e.ctx, s, contract.ClaimRequest{KeyRef: keyRef("key-" + ttl.String()), Fingerprint: fp1, TTL: ttl}, contract.ClaimNew)
		e.checkDur(t, "claim LeaseUntil - CreatedAt", c.Record.LeaseUntil.Sub(c.Record.CreatedAt), ttl)
		l := mustAcquire(t, e.ctx, s, contract.LeaseRequest{Resource: "res-" + ttl.String(), Owner: "owner-1", TTL: ttl})
		e.checkDur(t, "lease ExpiresAt - AcquiredAt", l.ExpiresAt.Sub(l.AcquiredAt), ttl)
	}
}

func testAcceptsSnapshotAtTheLimit(t *testing.T, e *env) {
	s := e.open()
	snap := make([]byte, durable.DefaultMaxSnapshot)
	copy(snap, binaryData("limit"))
	copy(snap[len(snap)-16:], []byte{0xff, 0x00, 0xfe, 0x00, 0xff, 0x00, 0xfe, 0x00, 0xff, 0x00, 0xfe, 0x00, 0xff, 0x00, 0xfe, 0x00})
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-limit", Status: contract.StatusRunning, Snapshot: snap})
	checkStored(t, e.ctx, s, w)
	w = mustUpdate(t, e.ctx, s, contract.Update{ID: "wf-limit", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Snapshot: snap[1:]})
	checkStored(t, e.ctx, s, w)
	c := mustClaim(t, e.ctx, s, e.claimReq("key-limit"), contract.ClaimNew)
	out := testOutcome("limit")
	out.Body = snap
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: out})
	checkStoredKey(t, e.ctx, s, done)
}

// allCalls returns one call of every Store method, on valid input.
func allCalls(ctx context.Context, s *durable.Store, sd seed) map[string]func() error {
	ttl := 10 * time.Second
	return map[string]func() error{
		"CreateWorkflow": func() error {
			_, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf-new"})
			return err
		},
		"GetWorkflow": func() error {
			_, err := s.GetWorkflow(ctx, "", sd.w.ID)
			return err
		},
		"UpdateWorkflow": func() error {
			_, err := s.UpdateWorkflow(ctx, contract.Update{ID: sd.w.ID, ExpectStatus: sd.w.Status, ExpectRevision: sd.w.Revision, Status: contract.StatusSucceeded})
			return err
		},
		"ListWorkflows": func() error {
			_, err := s.ListWorkflows(ctx, contract.ListQuery{})
			return err
		},
		"ClaimKey": func() error {
			_, err := s.ClaimKey(ctx, contract.ClaimRequest{KeyRef: keyRef("key-new"), Fingerprint: fp1, TTL: ttl})
			return err
		},
		"CompleteKey": func() error {
			_, err := s.CompleteKey(ctx, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: testOutcome("x")})
			return err
		},
		"RenewKey": func() error {
			_, err := s.RenewKey(ctx, sd.claim.Record.KeyRef, sd.claim.Token, ttl)
			return err
		},
		"ReleaseKey": func() error {
			_, err := s.ReleaseKey(ctx, sd.claim.Record.KeyRef, sd.claim.Token)
			return err
		},
		"GetKey": func() error {
			_, err := s.GetKey(ctx, sd.claim.Record.KeyRef)
			return err
		},
		"WaitKey": func() error {
			_, err := s.WaitKey(ctx, sd.claim.Record.KeyRef)
			return err
		},
		"AcquireLease": func() error {
			_, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-new", Owner: "owner-new", TTL: ttl})
			return err
		},
		"RenewLease": func() error {
			_, err := s.RenewLease(ctx, sd.lease, ttl)
			return err
		},
		"ReleaseLease": func() error {
			_, err := s.ReleaseLease(ctx, sd.lease)
			return err
		},
		"GetLease": func() error {
			_, err := s.GetLease(ctx, "", sd.lease.Resource)
			return err
		},
		"Cleanup": func() error {
			_, err := s.Cleanup(ctx, contract.CleanupRequest{TerminalAge: time.Nanosecond})
			return err
		},
	}
}

// checkNothingNew asserts that none of allCalls' writes landed.
func checkNothingNew(t *testing.T, ctx context.Context, s *durable.Store, sd seed) {
	t.Helper()
	sd.check(t, ctx, s)
	checkNoKey(t, ctx, s, keyRef("key-new"))
	checkNoLease(t, ctx, s, "", "res-new")
}

func testClosedStoreReturnsClosed(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	sd := e.seed(t, other)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, call := range allCalls(e.ctx, s, sd) {
		if !checkCode(t, call(), contract.Closed) {
			t.Logf("  (%s after Close)", name)
		}
	}
	checkNothingNew(t, e.ctx, other, sd)
}

func testClosingOneClientLeavesOthersWorking(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	sd := e.seed(t, s1)
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	sd.check(t, e.ctx, s2)
	w := mustUpdate(t, e.ctx, s2, contract.Update{ID: sd.w.ID, ExpectStatus: sd.w.Status, ExpectRevision: sd.w.Revision, Status: contract.StatusSucceeded, Fence: sd.lease.Fence()})
	checkStored(t, e.ctx, e.open(), w)
	mustComplete(t, e.ctx, s2, contract.Completion{KeyRef: sd.claim.Record.KeyRef, Token: sd.claim.Token, Outcome: testOutcome("x")})
}

func testCanceledContextIsVisible(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	for name, call := range allCalls(ctx, s, sd) {
		if err := call(); !checkCtxErr(t, err, context.Canceled) {
			t.Logf("  (%s with a cancelled context)", name)
		}
	}
	checkNothingNew(t, e.ctx, s, sd)
}

func testExpiredDeadlineIsVisible(t *testing.T, e *env) {
	s := e.open()
	sd := e.seed(t, s)
	ctx, cancel := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
	defer cancel()
	for name, call := range allCalls(ctx, s, sd) {
		if err := call(); !checkCtxErr(t, err, context.DeadlineExceeded) {
			t.Logf("  (%s with an expired deadline)", name)
		}
	}
	checkNothingNew(t, e.ctx, s, sd)
}
