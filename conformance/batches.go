package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Rules a backend that reads its storage in batches, or keeps time in
// coarse units, gets wrong: a filtered listing that stops after one
// internal batch, and a TTL rounded up so that a lease stays valid past
// its expiry minus the tolerance.

// batchListingScenarios are in the Listing group.
func batchListingScenarios() []scenario {
	return []scenario{
		{"WorkflowsAreFoundPastAnyBatch", 0, testListWorkflowsPastAnyBatch},
		{"KeysAreFoundPastAnyBatch", 0, testListKeysPastAnyBatch},
		{"HeldLeasesAreFoundPastAnyBatch", needClock, testListHeldLeasesPastAnyBatch},
	}
}

// validityScenarios are in the Leases group.
func validityScenarios() []scenario {
	return []scenario{
		{"FractionalTTLsEndValidityOnTime", needClock, testFractionalTTLsEndValidityOnTime},
	}
}

// pastBatch is how many non-matching records the batch scenarios write
// before the matching ones: more than any internal batch a backend may
// read (a page of 100, the Store's default Limit, three times over).
const pastBatch = 300

// fillWorkers is how many calls the batch scenarios make at once to
// create their records.
const fillWorkers = 8

// fill calls create(0) … create(n-1), fillWorkers at a time, and fails
// the test with the first error. It returns how long it took.
func fill(t *testing.T, what string, n int, create func(i int) error) time.Duration {
	t.Helper()
	start := time.Now()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := upTo(n)
	for range fillWorkers {
		wg.Go(func() {
			for i := range next {
				if err := create(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("record %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	noErr(t, first, what)
	return took
}

// upTo returns a closed channel holding 0 … n-1.
func upTo(n int) <-chan int {
	ch := make(chan int, n)
	for i := range n {
		ch <- i
	}
	close(ch)
	return ch
}

// batchID names record i of a batch scenario, so that byte order is
// creation order and the matching records (i >= pastBatch) come last.
func batchID(prefix string, i int) string { return fmt.Sprintf("%s-%04d", prefix, i) }

// batchIDs returns the ids of records from … to-1.
func batchIDs(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, batchID(prefix, i))
	}
	return out
}

// timedList runs one listing and logs how long it took.
func timedList[T any](t *testing.T, what string, list func() ([]T, error)) []T {
	t.Helper()
	start := time.Now()
	page, err := list()
	noErr(t, err, what+" (a listing must find what matches within the operation timeout)")
	t.Logf("%s: %d records in %v", what, len(page), time.Since(start).Round(time.Microsecond))
	return page
}

func testListWorkflowsPastAnyBatch(t *testing.T, e *env) {
	s := e.open()
	const matching contract.Status = "matched"
	const n = pastBatch + 2
	took := fill(t, "CreateWorkflow", n, func(i int) error {
		w := contract.Workflow{ID: batchID("wf", i), Status: contract.StatusRunning}
		if i >= pastBatch {
			w.Status = matching
		}
		_, err := s.CreateWorkflow(e.ctx, w)
		return err
	})
	t.Logf("created %d workflows in %v", n, took.Round(time.Millisecond))
	id := func(w contract.Workflow) string { return w.ID }

	want := batchIDs("wf", pastBatch, n)
	for _, limit := range []int{1, 100} {
		what := fmt.Sprintf("ListWorkflows (Status %q, Limit %d) with %d other workflows before the matches", matching, limit, pastBatch)
		var got []string
		start := time.Now()
		got = pageAll(t, what, limit, func(after string) ([]contract.Workflow, error) {
			return s.ListWorkflows(e.ctx, contract.ListQuery{Status: matching, After: after, Limit: limit})
		}, id, func(w contract.Workflow) {
			if w.Status != matching {
				t.Errorf("%s listed %s", what, fmtWorkflow(w))
			}
		})
		t.Logf("%s: %v", what, time.Since(start).Round(time.Microsecond))
		checkIDs(t, what, got, want)
	}
	first := timedList(t, "ListWorkflows (Status matched, default Limit)", func() ([]contract.Workflow, error) {
		return s.ListWorkflows(e.ctx, contract.ListQuery{Status: matching})
	})
	checkIDs(t, "ListWorkflows (Status matched, default Limit): the first page", ids(first, id), want)

	// The non-matching ones, all of them, and everything unfiltered.
	for _, f := range []struct {
		status contract.Status
		want   []string
	}{
		{contract.StatusRunning, batchIDs("wf", 0, pastBatch)},
		{"", batchIDs("wf", 0, n)},
	} {
		for _, limit := range []int{100, 1000} {
			what := fmt.Sprintf("ListWorkflows (Status %q, Limit %d)", f.status, limit)
			got := pageAll(t, what, limit, func(after string) ([]contract.Workflow, error) {
				return s.ListWorkflows(e.ctx, contract.ListQuery{Status: f.status, After: after, Limit: limit})
			}, id, func(contract.Workflow) {})
			checkManyIDs(t, what, got, f.want)
		}
	}
}

// checkManyIDs is checkIDs for long listings: it reports the counts and
// the first difference, not every id.
func checkManyIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	at := func(ids []string) string {
		if i < len(ids) {
			return fmt.Sprintf("%q", ids[i])
		}
		return "the end"
	}
	t.Errorf("%s listed %d records, want %d (every record once, in byte order): the first difference is at position %d, %s where %s was due",
		what, len(got), len(want), i, at(got), at(want))
}

func ids[T any](page []T, id func(T) string) []string {
	out := make([]string, len(page))
	for i, r := range page {
		out[i] = id(r)
	}
	return out
}

func testListKeysPastAnyBatch(t *testing.T, e *env) {
	s := e.lister()
	const n = pastBatch + 2
	took := fill(t, "ClaimKey and CompleteKey", n, func(i int) error {
		req := e.claimReq(batchID("key", i))
		req.TTL = 4 * e.ttl
		c, err := s.ClaimKey(e.ctx, req)
		if err != nil || i < pastBatch {
			return err
		}
		_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour})
		return err
	})
	t.Logf("created %d keys in %v", n, took.Round(time.Millisecond))
	id := func(r contract.KeyRecord) string { return r.Key }

	want := batchIDs("key", pastBatch, n)
	for _, limit := range []int{1, 100} {
		what := fmt.Sprintf("ListKeys (State %q, Limit %d) with %d claimed keys before the completed ones", contract.KeyCompleted, limit, pastBatch)
		start := time.Now()
		got := pageAll(t, what, limit, func(after string) ([]contract.KeyRecord, error) {
			return s.ListKeys(e.ctx, contract.KeyListQuery{State: contract.KeyCompleted, After: after, Limit: limit})
		}, id, func(r contract.KeyRecord) {
			if r.State != contract.KeyCompleted {
				t.Errorf("%s listed %s", what, fmtKey(r))
			}
		})
		t.Logf("%s: %v", what, time.Since(start).Round(time.Microsecond))
		checkIDs(t, what, got, want)
	}
	first := timedList(t, "ListKeys (State completed, default Limit)", func() ([]contract.KeyRecord, error) {
		return s.ListKeys(e.ctx, contract.KeyListQuery{State: contract.KeyCompleted})
	})
	checkIDs(t, "ListKeys (State completed, default Limit): the first page", ids(first, id), want)

	for _, f := range []struct {
		state contract.KeyState
		want  []string
	}{
		{contract.KeyClaimed, batchIDs("key", 0, pastBatch)},
		{"", batchIDs("key", 0, n)},
	} {
		for _, limit := range []int{100, 1000} {
			what := fmt.Sprintf("ListKeys (State %q, Limit %d)", f.state, limit)
			got := pageAll(t, what, limit, func(after string) ([]contract.KeyRecord, error) {
				return s.ListKeys(e.ctx, contract.KeyListQuery{State: f.state, After: after, Limit: limit})
			}, id, func(contract.KeyRecord) {})
			checkManyIDs(t, what, got, f.want)
		}
	}
}

func testListHeldLeasesPastAnyBatch(t *testing.T, e *env) {
	s := e.lister()
	const n = pastBatch + 2
	took := fill(t, "AcquireLease", pastBatch, func(i int) error {
		_, err := s.AcquireLease(e.ctx, e.leaseReq(batchID("res", i), "owner-1"))
		return err
	})
	// Expired, not yet past the tolerance: records, not held.
	e.advance(e.ttl + e.g)
	took += fill(t, "AcquireLease", n-pastBatch, func(i int) error {
		_, err := s.AcquireLease(e.ctx, e.leaseReq(batchID("res", pastBatch+i), "owner-2"))
		return err
	})
	t.Logf("acquired %d leases in %v", n, took.Round(time.Millisecond))
	id := func(l contract.Lease) string { return l.Resource }

	want := batchIDs("res", pastBatch, n)
	for _, limit := range []int{1, 100} {
		what := fmt.Sprintf("ListLeases (Held, Limit %d) with %d expired leases before the held ones", limit, pastBatch)
		start := time.Now()
		got := pageAll(t, what, limit, func(after string) ([]contract.Lease, error) {
			return s.ListLeases(e.ctx, contract.LeaseListQuery{Held: true, After: after, Limit: limit})
		}, id, func(l contract.Lease) {
			if l.Owner != "owner-2" {
				t.Errorf("%s listed %s, held by %s, which expired %v ago", what, l.Resource, l.Owner, e.g)
			}
		})
		t.Logf("%s: %v", what, time.Since(start).Round(time.Microsecond))
		checkIDs(t, what, got, want)
	}
	first := timedList(t, "ListLeases (Held, default Limit)", func() ([]contract.Lease, error) {
		return s.ListLeases(e.ctx, contract.LeaseListQuery{Held: true})
	})
	checkIDs(t, "ListLeases (Held, default Limit): the first page", ids(first, id), want)

	for _, limit := range []int{100, 1000} {
		what := fmt.Sprintf("ListLeases (Limit %d): expired leases are records until Cleanup", limit)
		got := pageAll(t, what, limit, func(after string) ([]contract.Lease, error) {
			return s.ListLeases(e.ctx, contract.LeaseListQuery{After: after, Limit: limit})
		}, id, func(contract.Lease) {})
		checkManyIDs(t, what, got, batchIDs("res", 0, n))
	}
}

// testFractionalTTLsEndValidityOnTime: a lease of a fractional TTL (given
// at acquisition, by RenewLease or by RenewLeases) stops validating fenced
// writes and renewals once less than the tolerance is left. A backend
// that keeps coarse time may end validity up to one granularity early
// (rounding down); one that rounds the TTL up lets the holder write past
// the point where another may already take over, and fails here.
func testFractionalTTLsEndValidityOnTime(t *testing.T, e *env) {
	s := e.open()
	// Validity is checked surely inside (early, even after rounding down
	// by less than a granularity) and just past its end (expiry minus the
	// tolerance, plus a microsecond).
	const margin = 250 * time.Millisecond
	early := func(ttl time.Duration) time.Duration { return ttl - e.tol - e.g - margin }
	late := e.g + margin + time.Microsecond
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})

	// check runs the fenced writes at both times after the lease l got its
	// ttl, and the renewal renew at the late one.
	check := func(how string, l contract.Lease, ttl time.Duration, renew func(contract.Lease) error) {
		t.Helper()
		keep := e.claimReq("key-" + l.Resource + "-early")
		keep.TTL = 4 * e.ttl
		c1 := mustClaim(t, e.ctx, s, keep, contract.ClaimNew)
		lateReq := e.claimReq("key-" + l.Resource + "-late")
		lateReq.TTL = 4 * e.ttl
		c2 := mustClaim(t, e.ctx, s, lateReq, contract.ClaimNew)

		e.advance(early(ttl))
		inside := fmt.Sprintf("%s of TTL %v, %v before its expiry (tolerance %v, granularity %v)", how, ttl, ttl-early(ttl), e.tol, e.g)
		var err error
		w, err = s.UpdateWorkflow(e.ctx, contract.Update{
			ID: w.ID, ExpectStatus: w.Status, ExpectRevision: w.Revision, Status: w.Status,
			Snapshot: []byte(l.Resource), Fence: l.Fence(),
		})
		noErr(t, err, "fenced UpdateWorkflow under a lease "+inside)
		_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: c1.Record.KeyRef, Token: c1.Token, Outcome: contract.Outcome{Code: 200}, Fence: l.Fence()})
		noErr(t, err, "fenced CompleteKey under a lease "+inside)

		e.advance(late)
		past := fmt.Sprintf("%s of TTL %v, %v after its expiry minus the tolerance %v: a backend that rounds the TTL up keeps it valid too long", how, ttl, time.Microsecond, e.tol)
		_, err = s.UpdateWorkflow(e.ctx, contract.Update{
			ID: w.ID, ExpectStatus: w.Status, ExpectRevision: w.Revision, Status: w.Status,
			Snapshot: []byte("too late"), Fence: l.Fence(),
		})
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (fenced UpdateWorkflow under a lease %s)", past)
		}
		checkStored(t, e.ctx, s, w)
		w, err = s.GetWorkflow(e.ctx, w.Scope, w.ID)
		noErr(t, err, "GetWorkflow")
		_, err = s.CompleteKey(e.ctx, contract.Completion{KeyRef: c2.Record.KeyRef, Token: c2.Token, Outcome: contract.Outcome{Code: 200}, Fence: l.Fence()})
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (fenced CompleteKey under a lease %s)", past)
		}
		checkStoredKey(t, e.ctx, s, c2.Record)
		err = renew(l)
		if !checkCode(t, err, contract.Fenced) {
			t.Logf("  (renewing a lease %s)", past)
		} else if !errors.Is(err, durable.ErrFenced) {
			t.Errorf("renewing a lease %s: errors.Is(%v, durable.ErrFenced) is false", past, err)
		}
	}
	renewOne := func(l contract.Lease) error {
		_, err := s.RenewLease(e.ctx, l, e.ttl)
		return err
	}
	renewBatch := func(l contract.Lease) error {
		out := renewLeases(t, e, s, []contract.Lease{l}, e.ttl)
		if out[0].Err == nil {
			return nil
		}
		return out[0].Err
	}

	// Acquired with a fractional TTL.
	req := e.leaseReq("res-1", "owner-1")
	req.TTL = e.ttl + 500*time.Millisecond
	l := mustAcquire(t, e.ctx, s, req)
	check("acquired", l, req.TTL, renewOne)

	// Renewed with one.
	l = mustAcquire(t, e.ctx, s, e.leaseReq("res-2", "owner-1"))
	e.advance(time.Second)
	ttl := e.ttl + 250*time.Millisecond
	l, err := s.RenewLease(e.ctx, l, ttl)
	noErr(t, err, "RenewLease")
	check("renewed by RenewLease", l, ttl, renewBatch)

	// Renewed in a batch with one.
	l = mustAcquire(t, e.ctx, s, e.leaseReq("res-3", "owner-1"))
	e.advance(time.Second)
	ttl = e.ttl + 750*time.Millisecond
	out := renewLeases(t, e, s, []contract.Lease{l}, ttl)
	noErr(t, out[0].Err, "RenewLeases")
	check("renewed by RenewLeases", out[0].Lease, ttl, renewOne)
}
