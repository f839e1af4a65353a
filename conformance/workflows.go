package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func workflowScenarios() []scenario {
	return []scenario{
		{"CreateStartsAtRevisionOne", 0, testCreateStartsAtRevisionOne},
		{"CreateDefaultsStatusToPending", 0, testCreateDefaultsStatusToPending},
		{"CreateOfExistingIDIsAlreadyExists", 0, testCreateOfExistingIDIsAlreadyExists},
		{"GetOfMissingIDIsNotFound", 0, testGetOfMissingIDIsNotFound},
		{"SnapshotRoundTripsByteForByte", 0, testSnapshotRoundTripsByteForByte},
		{"UpdateAppliesAndBumpsRevision", 0, testUpdateAppliesAndBumpsRevision},
		{"UpdateTakesUpdatedAtFromTheStoreClock", needClock, testUpdateTakesUpdatedAtFromTheStoreClock},
		{"UpdateWithZeroRevisionMatchesAnyRevision", 0, testUpdateWithZeroRevisionMatchesAnyRevision},
		{"UpdateOfMissingIDIsNotFound", 0, testUpdateOfMissingIDIsNotFound},
		{"UpdateWithWrongStatusIsConflict", 0, testUpdateWithWrongStatusIsConflict},
		{"UpdateWithStaleRevisionIsConflict", 0, testUpdateWithStaleRevisionIsConflict},
		{"UpdateOfTerminalToAnotherStatusIsTerminal", 0, testUpdateOfTerminalToAnotherStatusIsTerminal},
		{"UpdateOfTerminalWithSameStatusIsNoOp", 0, testUpdateOfTerminalWithSameStatusIsNoOp},
		{"UpdateWithUnheldFenceIsFenced", 0, testUpdateWithUnheldFenceIsFenced},
		{"UpdateWithValidFenceApplies", 0, testUpdateWithValidFenceApplies},
		{"ConcurrentCompareAndSetHasOneWinner", 0, testConcurrentCompareAndSetHasOneWinner},
		{"ConcurrentIncrementsAreNeverLost", 0, testConcurrentIncrementsAreNeverLost},
		{"ListOrdersByIDAndPages", 0, testListOrdersByIDAndPages},
		{"ListOrdersByBytes", 0, testListOrdersByBytes},
		{"ListFiltersByStatus", 0, testListFiltersByStatus},
		{"ListOfEmptyStorageIsEmpty", 0, testListOfEmptyStorageIsEmpty},
		{"StatusesAndIDsMatchExactly", 0, testWorkflowStatusesAndIDsMatchExactly}, // exactmatch.go
	}
}

// statusWaiting is an application-defined, non-terminal status.
const statusWaiting contract.Status = "waiting_for_input"

func testCreateStartsAtRevisionOne(t *testing.T, e *env) {
	s := e.open()
	in := contract.Workflow{
		ID: "wf-1", RequestID: "req-1", Status: contract.StatusRunning, Snapshot: binaryData("create"),
		// The Store ignores what the caller says about these.
		Revision: 7, CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0),
	}
	w, err := s.CreateWorkflow(e.ctx, in)
	noErr(t, err, "CreateWorkflow")
	if w.CreatedAt.IsZero() {
		t.Errorf("CreatedAt is zero")
	}
	if w.CreatedAt.Equal(time.Unix(1, 0)) {
		t.Errorf("CreatedAt %v is the caller's value, want the store clock", w.CreatedAt)
	}
	want := contract.Workflow{
		ID: "wf-1", RequestID: "req-1", Status: contract.StatusRunning, Revision: 1,
		Snapshot: in.Snapshot, CreatedAt: w.CreatedAt, UpdatedAt: w.CreatedAt,
	}
	checkWorkflow(t, "created workflow (want revision 1 and UpdatedAt == CreatedAt)", w, want)
	checkStored(t, e.ctx, s, want)
	// Another client sees the same record.
	checkStored(t, e.ctx, e.open(), want)
}

func testCreateDefaultsStatusToPending(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1"})
	if w.Status != contract.StatusPending {
		t.Errorf("created Status = %q, want %q", w.Status, contract.StatusPending)
	}
	if w.Revision != 1 {
		t.Errorf("created Revision = %d, want 1", w.Revision)
	}
	if len(w.Snapshot) != 0 {
		t.Errorf("created Snapshot = %x, want empty", w.Snapshot)
	}
	checkStored(t, e.ctx, s, w)
}

func testCreateOfExistingIDIsAlreadyExists(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	w := mustCreate(t, e.ctx, s1, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("first")})
	_, err := s2.CreateWorkflow(e.ctx, contract.Workflow{ID: "wf-1", Status: contract.StatusPending, Snapshot: []byte("second"), RequestID: "req-2"})
	checkCode(t, err, contract.AlreadyExists)
	checkStored(t, e.ctx, s1, w)
}

func testGetOfMissingIDIsNotFound(t *testing.T, e *env) {
	s := e.open()
	checkNoWorkflow(t, e.ctx, s, "", "wf-missing")
	mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1"})
	checkNoWorkflow(t, e.ctx, s, "", "wf-10")
	checkNoWorkflow(t, e.ctx, s, "", "wf")
}

func testSnapshotRoundTripsByteForByte(t *testing.T, e *env) {
	s := e.open()
	snaps := [][]byte{
		binaryData("one"),
		{0x00},
		{0xff},
		[]byte("\x00\x00\x00"),
		[]byte(`{"json": "\u0000", "x": 1}`),
		binaryData("two"),
	}
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-bin", Status: contract.StatusRunning, Snapshot: snaps[0]})
	checkStored(t, e.ctx, s, w)
	for i, snap := range snaps[1:] {
		w = mustUpdate(t, e.ctx, s, contract.Update{
			ID: w.ID, ExpectStatus: w.Status, ExpectRevision: w.Revision, Status: w.Status, Snapshot: snap,
		})
		if !bytes.Equal(w.Snapshot, snap) {
			t.Errorf("update %d returned Snapshot %x, want %x", i+1, head(w.Snapshot), head(snap))
		}
		checkStored(t, e.ctx, s, w)
	}
	page, err := s.ListWorkflows(e.ctx, contract.ListQuery{})
	noErr(t, err, "ListWorkflows")
	if len(page) != 1 {
		t.Fatalf("ListWorkflows returned %d workflows, want 1", len(page))
	}
	checkWorkflow(t, "listed workflow", page[0], w)
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

func testUpdateAppliesAndBumpsRevision(t *testing.T, e *env) {
	s := e.open()
	w0 := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, RequestID: "req-1", Snapshot: []byte("v1")})

	snap := binaryData("v2")
	w1, err := s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1,
		Status: statusWaiting, RequestID: "req-2", Snapshot: snap,
	})
	noErr(t, err, "UpdateWorkflow")
	checkWorkflow(t, "updated workflow", w1, contract.Workflow{
		ID: "wf-1", RequestID: "req-2", Status: statusWaiting, Revision: 2, Snapshot: snap,
		CreatedAt: w0.CreatedAt, UpdatedAt: w1.UpdatedAt,
	})
	if w1.UpdatedAt.Before(w0.UpdatedAt) {
		t.Errorf("UpdatedAt went back from %v to %v", w0.UpdatedAt, w1.UpdatedAt)
	}
	checkStored(t, e.ctx, e.open(), w1)

	// An empty RequestID replaces the old one; a nil snapshot replaces the
	// old one with an empty one.
	w2 := mustUpdate(t, e.ctx, s, contract.Update{
		ID: "wf-1", ExpectStatus: statusWaiting, ExpectRevision: 2, Status: contract.StatusRunning,
	})
	checkWorkflow(t, "second update", w2, contract.Workflow{
		ID: "wf-1", Status: contract.StatusRunning, Revision: 3, CreatedAt: w0.CreatedAt, UpdatedAt: w2.UpdatedAt,
	})
	checkStored(t, e.ctx, s, w2)

	// Into a terminal status.
	w3 := mustUpdate(t, e.ctx, s, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 3,
		Status: contract.StatusSucceeded, RequestID: "req-4", Snapshot: []byte("done"),
	})
	if w3.Revision != 4 || w3.Status != contract.StatusSucceeded {
		t.Errorf("terminal update = revision %d status %q, want 4 %q", w3.Revision, w3.Status, contract.StatusSucceeded)
	}
	checkStored(t, e.ctx, s, w3)
}

func testUpdateTakesUpdatedAtFromTheStoreClock(t *testing.T, e *env) {
	s := e.open()
	w0 := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	const step = 90 * time.Second
	e.advance(step)
	w1 := mustUpdate(t, e.ctx, s, contract.Update{ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning})
	if !w1.CreatedAt.Equal(w0.CreatedAt) {
		t.Errorf("CreatedAt changed from %v to %v", w0.CreatedAt, w1.CreatedAt)
	}
	checkAtLeast(t, "UpdatedAt advance after Advance(90s)", w1.UpdatedAt.Sub(w0.UpdatedAt), step)
	checkStored(t, e.ctx, s, w1)

	w2 := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-2"})
	checkAtLeast(t, "CreatedAt of a workflow created after Advance(90s), minus the first's", w2.CreatedAt.Sub(w0.CreatedAt), step)
}

func testUpdateWithZeroRevisionMatchesAnyRevision(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	for i := 0; i < 3; i++ {
		w = mustUpdate(t, e.ctx, s, contract.Update{ID: "wf-1", ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning, Snapshot: []byte{byte(i)}})
		if w.Revision != int64(i+2) {
			t.Errorf("update %d: Revision = %d, want %d", i, w.Revision, i+2)
		}
	}
	checkStored(t, e.ctx, s, w)
}

func testUpdateOfMissingIDIsNotFound(t *testing.T, e *env) {
	s := e.open()
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-missing", ExpectStatus: contract.StatusPending, Status: contract.StatusRunning})
	checkCode(t, err, contract.NotFound)
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-missing", ExpectStatus: contract.StatusPending, ExpectRevision: 1, Status: contract.StatusRunning})
	checkCode(t, err, contract.NotFound)
	// The failed update did not create it.
	checkNoWorkflow(t, e.ctx, s, "", "wf-missing")
}

// checkConflict asserts a Conflict whose Details say expected vs actual.
func checkConflict(t *testing.T, err error, want contract.Details) {
	t.Helper()
	if !checkCode(t, err, contract.Conflict) {
		return
	}
	var ce *contract.Error
	if !errors.As(err, &ce) || ce.Details == nil {
		t.Errorf("Conflict error %v has no Details", err)
		return
	}
	if *ce.Details != want {
		t.Errorf("Conflict Details = %+v, want %+v", *ce.Details, want)
	}
}

func testUpdateWithWrongStatusIsConflict(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("keep")})
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusPending, ExpectRevision: 1, Status: statusWaiting, Snapshot: []byte("lost"),
	})
	checkConflict(t, err, contract.Details{
		ExpectedStatus: contract.StatusPending, ActualStatus: contract.StatusRunning,
		ExpectedRevision: 1, ActualRevision: 1,
	})
	checkStored(t, e.ctx, s, w)
}

func testUpdateWithStaleRevisionIsConflict(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	mustCreate(t, e.ctx, s1, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("v1")})
	// Both clients read revision 1; the first writes.
	w2 := mustUpdate(t, e.ctx, s1, contract.Update{ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Snapshot: []byte("v2 by s1")})
	_, err := s2.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Snapshot: []byte("v2 by s2"),
	})
	checkConflict(t, err, contract.Details{
		ExpectedStatus: contract.StatusRunning, ActualStatus: contract.StatusRunning,
		ExpectedRevision: 1, ActualRevision: 2,
	})
	checkStored(t, e.ctx, s2, w2)
	// A revision from the future is stale too.
	_, err = s2.UpdateWorkflow(e.ctx, contract.Update{ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 3, Status: contract.StatusRunning})
	checkConflict(t, err, contract.Details{
		ExpectedStatus: contract.StatusRunning, ActualStatus: contract.StatusRunning,
		ExpectedRevision: 3, ActualRevision: 2,
	})
	checkStored(t, e.ctx, s2, w2)
}

func testUpdateOfTerminalToAnotherStatusIsTerminal(t *testing.T, e *env) {
	s := e.open()
	for _, final := range contract.TerminalStatuses {
		id := "wf-" + string(final)
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: id, Status: contract.StatusRunning})
		w = mustFinish(t, e.ctx, s, w, final)
		others := []contract.Status{contract.StatusRunning, contract.StatusPending, statusWaiting}
		for _, to := range contract.TerminalStatuses {
			if to != final {
				others = append(others, to)
			}
		}
		for _, to := range others {
			_, err := s.UpdateWorkflow(e.ctx, contract.Update{
				ID: id, ExpectStatus: final, ExpectRevision: w.Revision, Status: to, Snapshot: []byte("reopened"),
			})
			if !checkCode(t, err, contract.Terminal) {
				t.Logf("  (update %s → %s)", final, to)
			}
		}
		checkStored(t, e.ctx, s, w)
	}
}

func testUpdateOfTerminalWithSameStatusIsNoOp(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, RequestID: "req-1", Snapshot: []byte("v1")})
	w = mustFinish(t, e.ctx, s, w, contract.StatusSucceeded)
	if e.caps.Clock {
		e.advance(time.Minute) // a no-op must not move UpdatedAt
	}
	cases := []struct {
		name string
		u    contract.Update
	}{
		{"matching expectations", contract.Update{ExpectStatus: contract.StatusSucceeded, ExpectRevision: w.Revision}},
		{"any revision", contract.Update{ExpectStatus: contract.StatusSucceeded}},
		{"wrong expected status", contract.Update{ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision}},
		{"stale expected revision", contract.Update{ExpectStatus: contract.StatusSucceeded, ExpectRevision: 1}},
		{"unheld fence", contract.Update{ExpectStatus: contract.StatusSucceeded, Fence: &contract.Fence{Resource: "res-none", Owner: "owner-none", Token: 99}}},
	}
	for _, c := range cases {
		u := c.u
		u.ID, u.Status, u.RequestID, u.Snapshot = "wf-1", contract.StatusSucceeded, "req-retry", []byte("other snapshot")
		got, err := s.UpdateWorkflow(e.ctx, u)
		if err != nil {
			t.Errorf("%s: rewriting %q with its own status: got error %v, want the stored record", c.name, w.Status, err)
			continue
		}
		checkWorkflow(t, c.name+": no-op update returned", got, w)
	}
	checkStored(t, e.ctx, s, w)
}

func testUpdateWithUnheldFenceIsFenced(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	_, err := s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning,
		Snapshot: []byte("fenced"), Fence: &contract.Fence{Resource: "res-1", Owner: "owner-1", Token: 1},
	})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, s, w)
}

func testUpdateWithValidFenceApplies(t *testing.T, e *env) {
	s := e.open()
	mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
	l := mustAcquire(t, e.ctx, s, contract.LeaseRequest{Resource: "res-1", Owner: "owner-1", TTL: e.ttl})
	got := mustUpdate(t, e.ctx, e.open(), contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusSucceeded,
		Snapshot: []byte("fenced write"), Fence: l.Fence(),
	})
	if got.Revision != 2 || string(got.Snapshot) != "fenced write" {
		t.Errorf("fenced update = revision %d snapshot %q, want 2 %q", got.Revision, got.Snapshot, "fenced write")
	}
	checkStored(t, e.ctx, s, got)
	// The fenced write did not touch the lease.
	checkStoredLease(t, e.ctx, s, l)
}

func testConcurrentCompareAndSetHasOneWinner(t *testing.T, e *env) {
	stores := e.openN(raceClients)
	mustCreate(t, e.ctx, stores[0], contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("v1")})
	errs := make([]error, len(stores))
	race(len(stores), func(i int) {
		_, errs[i] = stores[i].UpdateWorkflow(e.ctx, contract.Update{
			ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: 1,
			Status: contract.StatusRunning, Snapshot: fmt.Appendf(nil, "written by client %d", i),
		})
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("clients %d and %d both updated revision 1", winner, i)
		case err == nil:
			winner = i
		default:
			checkCode(t, err, contract.Conflict)
		}
	}
	if winner < 0 {
		t.Fatalf("no client updated revision 1")
	}
	got, err := stores[0].GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	if got.Revision != 2 {
		t.Errorf("Revision after the race = %d, want 2", got.Revision)
	}
	if want := fmt.Sprintf("written by client %d", winner); string(got.Snapshot) != want {
		t.Errorf("Snapshot after the race = %q, want the winner's %q", got.Snapshot, want)
	}
}

func testConcurrentIncrementsAreNeverLost(t *testing.T, e *env) {
	stores := e.openN(counterWriter)
	mustCreate(t, e.ctx, stores[0], contract.Workflow{ID: "wf-counter", Status: contract.StatusRunning, Snapshot: counterSnapshot(0)})
	const maxAttempts = 100 * counterWriter * counterSteps
	var conflicts atomic.Int64
	failures := make([]error, len(stores))
	race(len(stores), func(i int) {
		s := stores[i]
		for done, attempts := 0, 0; done < counterSteps; attempts++ {
			if attempts == maxAttempts {
				failures[i] = fmt.Errorf("client %d gave up after %d attempts", i, attempts)
				return
			}
			w, err := s.GetWorkflow(e.ctx, "", "wf-counter")
			if err != nil {
				failures[i] = fmt.Errorf("client %d: GetWorkflow: %w", i, err)
				return
			}
			n := counterOf(t, w.Snapshot)
			_, err = s.UpdateWorkflow(e.ctx, contract.Update{
				ID: "wf-counter", ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision,
				Status: contract.StatusRunning, Snapshot: counterSnapshot(n + 1),
			})
			switch {
			case err == nil:
				done++
			case contract.CodeOf(err) == contract.Conflict:
				conflicts.Add(1)
			default:
				failures[i] = fmt.Errorf("client %d: UpdateWorkflow: %w (code %q)", i, err, contract.CodeOf(err))
				return
			}
		}
	})
	for _, err := range failures {
		if err != nil {
			t.Error(err)
		}
	}
	w, err := stores[0].GetWorkflow(e.ctx, "", "wf-counter")
	noErr(t, err, "GetWorkflow")
	const total = counterWriter * counterSteps
	if n := counterOf(t, w.Snapshot); n != total {
		t.Errorf("counter = %d after %d clients × %d increments, want %d (updates were lost)", n, counterWriter, counterSteps, total)
	}
	if w.Revision != 1+total {
		t.Errorf("Revision = %d, want %d", w.Revision, 1+total)
	}
	t.Logf("%d conflicts retried", conflicts.Load())
}

// listAll pages through a scope with the given page size and returns the
// IDs in order.
func listAll(t *testing.T, e *env, s *durable.Store, q contract.ListQuery) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("ListWorkflows paging did not end after 1000 pages")
		}
		page, err := s.ListWorkflows(e.ctx, q)
		noErr(t, err, "ListWorkflows")
		if q.Limit > 0 && len(page) > q.Limit {
			t.Errorf("ListWorkflows(Limit %d) returned %d workflows", q.Limit, len(page))
		}
		for _, w := range page {
			if w.Scope != q.Scope {
				t.Errorf("ListWorkflows(scope %q) returned %q of scope %q", q.Scope, w.ID, w.Scope)
			}
			if q.Status != "" && w.Status != q.Status {
				t.Errorf("ListWorkflows(status %q) returned %q with status %q", q.Status, w.ID, w.Status)
			}
			if w.ID <= q.After {
				t.Errorf("ListWorkflows(After %q) returned %q, not after the cursor", q.After, w.ID)
			}
			ids = append(ids, w.ID)
		}
		if len(page) == 0 || (q.Limit > 0 && len(page) < q.Limit) {
			return ids
		}
		q.After = page[len(page)-1].ID
	}
}

func testListOrdersByIDAndPages(t *testing.T, e *env) {
	s := e.open()
	ids := []string{"wf-07", "wf-03", "wf-10", "wf-01", "wf-05", "wf-02", "wf-09", "wf-04", "wf-08", "wf-06"}
	statuses := []contract.Status{contract.StatusPending, contract.StatusRunning, statusWaiting}
	created := map[string]contract.Workflow{}
	for i, id := range ids {
		created[id] = mustCreate(t, e.ctx, s, contract.Workflow{ID: id, Status: statuses[i%3], Snapshot: binaryData(id)})
	}
	want := slices.Clone(ids)
	sort.Strings(want)

	all, err := s.ListWorkflows(e.ctx, contract.ListQuery{Limit: 100})
	noErr(t, err, "ListWorkflows")
	var got []string
	for _, w := range all {
		got = append(got, w.ID)
		checkWorkflow(t, "listed "+w.ID, w, created[w.ID])
	}
	if !slices.Equal(got, want) {
		t.Errorf("ListWorkflows(Limit 100) = %q, want %q", got, want)
	}
	for _, limit := range []int{1, 3, 5, 10} {
		if got := listAll(t, e, s, contract.ListQuery{Limit: limit}); !slices.Equal(got, want) {
			t.Errorf("paging with Limit %d returned %q, want every workflow once in ID order %q", limit, got, want)
		}
	}
	// After is exclusive and need not name an existing workflow.
	for _, c := range []struct {
		after string
		want  []string
	}{
		{"wf-05", want[5:]},
		{"wf-05a", want[5:]},
		{"wf-0", want},
		{"wf-10", nil},
		{"zzz", nil},
	} {
		page, err := s.ListWorkflows(e.ctx, contract.ListQuery{After: c.after, Limit: 100})
		noErr(t, err, "ListWorkflows")
		var got []string
		for _, w := range page {
			got = append(got, w.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ListWorkflows(After %q) = %q, want %q", c.after, got, c.want)
		}
	}
}

func testListOrdersByBytes(t *testing.T, e *env) {
	s := e.open()
	// Byte order, not a locale's collation: upper case before lower case,
	// punctuation by its ASCII code.
	ids := []string{"a_b", "B", "a-c", "aB", "a.b", "Z9", "a:b", "9z", "a0", "a-b", "ab", "A", "a"}
	for _, id := range ids {
		mustCreate(t, e.ctx, s, contract.Workflow{ID: id})
	}
	want := slices.Clone(ids)
	sort.Strings(want)
	for _, limit := range []int{2, 100} {
		if got := listAll(t, e, s, contract.ListQuery{Limit: limit}); !slices.Equal(got, want) {
			t.Errorf("paging with Limit %d returned %q, want byte order %q", limit, got, want)
		}
	}
}

func testListFiltersByStatus(t *testing.T, e *env) {
	s := e.open()
	byStatus := map[contract.Status][]string{}
	statuses := []contract.Status{contract.StatusPending, contract.StatusRunning, statusWaiting, contract.StatusFailed}
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("wf-%02d", (i*7)%12)
		st := statuses[i%len(statuses)]
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: id, Status: contract.StatusRunning})
		if st != contract.StatusRunning {
			_ = mustUpdate(t, e.ctx, s, contract.Update{ID: id, ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: st})
		}
		byStatus[st] = append(byStatus[st], id)
	}
	for _, st := range statuses {
		want := byStatus[st]
		sort.Strings(want)
		for _, limit := range []int{2, 100} {
			if got := listAll(t, e, s, contract.ListQuery{Status: st, Limit: limit}); !slices.Equal(got, want) {
				t.Errorf("ListWorkflows(Status %q, Limit %d) = %q, want %q", st, limit, got, want)
			}
		}
	}
	if got := listAll(t, e, s, contract.ListQuery{Status: contract.StatusClosed, Limit: 5}); len(got) != 0 {
		t.Errorf("ListWorkflows(Status %q) = %q, want none", contract.StatusClosed, got)
	}
}

func testListOfEmptyStorageIsEmpty(t *testing.T, e *env) {
	s := e.open()
	page, err := s.ListWorkflows(e.ctx, contract.ListQuery{})
	noErr(t, err, "ListWorkflows")
	if len(page) != 0 {
		t.Errorf("ListWorkflows on empty storage returned %d workflows", len(page))
	}
	page, err = s.ListWorkflows(e.ctx, contract.ListQuery{Status: contract.StatusRunning, After: "wf-1", Limit: 10})
	noErr(t, err, "ListWorkflows")
	if len(page) != 0 {
		t.Errorf("ListWorkflows on empty storage returned %d workflows", len(page))
	}
}
