package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// The RacingWrites group: many writes sent at once through ONE client (one
// Store over one backend instance), as a backend that coalesces them sees
// them: concurrent writes of one backend may be applied in one statement
// or one transaction, and every caller must still get exactly the result
// it would have got alone (its own record, its own conditional failure).
// The other groups race several clients, one write each; these race
// dozens of writes on one client and check every caller's result
// precisely, and what reads show afterwards.

// Sizes of the bursts of the RacingWrites group.
const (
	burstClients = 32 // goroutines sent at once through one client
	burstRounds  = 3  // bursts per scenario
)

func racingScenarios() []scenario {
	return []scenario{
		{"UpdatesOfOneWorkflowHaveOneWinnerPerRevision", 0, testRacingCASOneWorkflow},
		{"UnconditionalUpdatesOfOneWorkflowAllApply", 0, testRacingUnconditionalUpdates},
		{"UpdatesOfDistinctWorkflowsAreEachTheirOwn", 0, testRacingDistinctWorkflows},
		{"CompletionsOfDistinctKeysAreEachTheirOwn", 0, testRacingDistinctCompletions},
		{"CompletionsOfOneKeyHoldOnlyForItsToken", 0, testRacingOneKeyCompletions},
		{"RenewalsAreEachTheirOwn", 0, testRacingRenewals},
		{"ReleasesAreEachTheirOwn", 0, testRacingReleases},
		{"ClaimsAreEachTheirOwn", 0, testRacingClaims},
		{"MixedBurstsAreEachTheirOwn", 0, testRacingMixed},
	}
}

// burst is a set of writes sent at once through one client, each in its
// own goroutine, and the checks of their results, run once every write
// has returned. The builders below add to it; run sends them.
type burst struct {
	t      *testing.T
	e      *env
	s      *durable.Store
	ops    []func()
	checks []func()
	// scope is where the builders called next put their records.
	scope contract.Scope
	// now is the store clock during the burst when the harness controls
	// it (it stands still): the time every write of the burst reads.
	now time.Time
}

func newBurst(t *testing.T, e *env, s *durable.Store) *burst {
	return &burst{t: t, e: e, s: s}
}

// op adds one write, run in its own goroutine. It must not call t.Fatal;
// it stores its result for a check.
func (b *burst) op(f func()) { b.ops = append(b.ops, f) }

// then adds a check, run after every write returned.
func (b *burst) then(f func()) { b.checks = append(b.checks, f) }

// run sends every write at once, in a random order, and runs the checks.
func (b *burst) run() {
	rand.Shuffle(len(b.ops), func(i, j int) { b.ops[i], b.ops[j] = b.ops[j], b.ops[i] })
	race(len(b.ops), func(i int) { b.ops[i]() })
	for _, c := range b.checks {
		c()
	}
}

// clockNow records the store clock read by a write made while preparing
// the burst (when the harness controls the clock, it stands still).
func (b *burst) clockNow(at time.Time) {
	if b.e.caps.Clock {
		b.now = at
	}
}

// checkAt asserts got = b.now + d, when the clock is the harness's.
func (b *burst) checkAt(what string, got time.Time, d time.Duration) {
	b.t.Helper()
	if b.e.caps.Clock && !b.now.IsZero() {
		b.e.checkTime(b.t, what+" (want now + its own TTL)", got, b.now.Add(d))
	}
}

// key names a key in the builders' scope.
func (b *burst) key(key string) contract.KeyRef { return contract.KeyRef{Scope: b.scope, Key: key} }

// leaseReq is env.leaseReq in the builders' scope.
func (b *burst) leaseReq(resource, owner string) contract.LeaseRequest {
	req := b.e.leaseReq(resource, owner)
	req.Scope = b.scope
	return req
}

// ttl returns the i-th distinct TTL of a burst: whole seconds apart, so
// that a caller handed another's result is seen at any granularity.
func (b *burst) ttl(i int) time.Duration { return b.e.ttl + time.Duration(i)*time.Second }

// workflow returns the current record of id, creating it (running) first
// if it does not exist.
func (b *burst) workflow(id string) contract.Workflow {
	b.t.Helper()
	w, err := b.getOrCreate(b.scope, id)
	noErr(b.t, err, "GetWorkflow or CreateWorkflow("+id+")")
	return w
}

func (b *burst) getOrCreate(scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.s.GetWorkflow(b.e.ctx, scope, id)
	if contract.CodeOf(err) == contract.NotFound {
		return b.s.CreateWorkflow(b.e.ctx, contract.Workflow{Scope: scope, ID: id, Status: contract.StatusRunning, Snapshot: []byte("created " + id)})
	}
	return w, err
}

// prepare runs prep(0) … prep(n-1), a few at a time (a networked backend
// would take seconds one at a time), and fails the test with the first
// error. prep must not call t.Fatal.
func (b *burst) prepare(what string, n int, prep func(i int) error) {
	b.t.Helper()
	fill(b.t, what, n, prep)
}

// each runs check(0) … check(n-1), a few at a time. check must not call
// t.Fatal.
func each(n int, check func(i int)) {
	var wg sync.WaitGroup
	next := upTo(n)
	for range fillWorkers {
		wg.Go(func() {
			for i := range next {
				check(i)
			}
		})
	}
	wg.Wait()
}

// claimAs claims a key and checks what ClaimKey found.
func (b *burst) claimAs(req contract.ClaimRequest, kind contract.ClaimKind) (contract.Claim, error) {
	c, err := b.s.ClaimKey(b.e.ctx, req)
	switch {
	case err != nil:
		return c, err
	case c.Kind != kind:
		return c, fmt.Errorf("ClaimKey(%q, %q) = %v, want %v", req.Scope, req.Key, c.Kind, kind)
	case kind.Owned() && c.Token == "":
		return c, fmt.Errorf("ClaimKey(%q, %q) = %v with an empty token", req.Scope, req.Key, c.Kind)
	}
	return c, nil
}

// releaseBoth releases a lease and a claim that must be held.
func (b *burst) releaseBoth(l contract.Lease, k contract.KeyRef, token string) error {
	ok, err := b.s.ReleaseLease(b.e.ctx, l)
	if err != nil {
		return err
	}
	ok2, err := b.s.ReleaseKey(b.e.ctx, k, token)
	if err != nil {
		return err
	}
	if !ok || !ok2 {
		return fmt.Errorf("releases of a held lease and a held claim = %v, %v", ok, ok2)
	}
	return nil
}

// updateResult is what one UpdateWorkflow of a burst returned.
type updateResult struct {
	w   contract.Workflow
	err error
}

// casOneWorkflow adds n compare-and-sets of one workflow, all from its
// current revision: exactly one applies, and every other gets Conflict
// with the Details of the revision the winner wrote. One in eight expects
// the wrong status as well.
func (b *burst) casOneWorkflow(id string, n int) {
	t, e, s := b.t, b.e, b.s
	cur := b.workflow(id)
	us := make([]contract.Update, n)
	out := make([]updateResult, n)
	for i := range n {
		us[i] = contract.Update{
			Scope: cur.Scope, ID: id, ExpectStatus: cur.Status, ExpectRevision: cur.Revision, Status: cur.Status,
			RequestID: fmt.Sprintf("req-%d", i), Snapshot: fmt.Appendf(nil, "%s revision %d by caller %d", id, cur.Revision+1, i),
		}
		if i%8 == 7 {
			us[i].ExpectStatus = contract.StatusPending
		}
		b.op(func() { out[i].w, out[i].err = s.UpdateWorkflow(e.ctx, us[i]) })
	}
	b.then(func() {
		stored, err := s.GetWorkflow(e.ctx, cur.Scope, id)
		noErr(t, err, "GetWorkflow("+id+")")
		winner := -1
		for i, r := range out {
			what := fmt.Sprintf("%s: caller %d (of %d racing from revision %d)", id, i, n, cur.Revision)
			if us[i].ExpectStatus != cur.Status {
				// Judged before or after the winner: either revision.
				if !checkCode(t, r.err, contract.Conflict) {
					t.Errorf("%s expected the wrong status", what)
					continue
				}
				d := conflictDetails(r.err)
				if d == nil || d.ExpectedStatus != contract.StatusPending || d.ActualStatus != cur.Status || d.ExpectedRevision != cur.Revision ||
					(d.ActualRevision != cur.Revision && d.ActualRevision != cur.Revision+1) {
					t.Errorf("%s expected the wrong status: Conflict Details %+v, want status expected %q actual %q, revision expected %d actual %d or %d",
						what, d, contract.StatusPending, cur.Status, cur.Revision, cur.Revision, cur.Revision+1)
				}
				continue
			}
			if r.err != nil {
				if checkCode(t, r.err, contract.Conflict) {
					checkConflictIn(t, what+" lost", r.err, contract.Details{
						ExpectedStatus: cur.Status, ActualStatus: cur.Status, ExpectedRevision: cur.Revision, ActualRevision: cur.Revision + 1,
					})
				}
				continue
			}
			if winner >= 0 {
				t.Errorf("%s: callers %d and %d both applied revision %d", id, winner, i, cur.Revision)
			}
			winner = i
			checkWorkflow(t, what+": the winner's result", r.w, contract.Workflow{
				Scope: cur.Scope, ID: id, RequestID: us[i].RequestID, Status: cur.Status, Revision: cur.Revision + 1,
				Snapshot: us[i].Snapshot, CreatedAt: cur.CreatedAt, UpdatedAt: r.w.UpdatedAt,
			})
			checkWorkflow(t, what+": stored after the race, against the winner's result", stored, r.w)
		}
		if winner < 0 {
			t.Errorf("%s: none of %d callers applied revision %d; stored %s", id, n, cur.Revision, fmtWorkflow(stored))
		}
	})
}

// unconditionalUpdates adds n updates of one workflow with ExpectRevision
// 0: every one applies, each to its own revision, and returns its own
// write.
func (b *burst) unconditionalUpdates(id string, n int) {
	t, e, s := b.t, b.e, b.s
	cur := b.workflow(id)
	us := make([]contract.Update, n)
	out := make([]updateResult, n)
	for i := range n {
		us[i] = contract.Update{
			Scope: cur.Scope, ID: id, ExpectStatus: cur.Status, Status: cur.Status,
			RequestID: fmt.Sprintf("inc-%d", i), Snapshot: fmt.Appendf(nil, "%s unconditional write %d after revision %d", id, i, cur.Revision),
		}
		b.op(func() { out[i].w, out[i].err = s.UpdateWorkflow(e.ctx, us[i]) })
	}
	b.then(func() {
		stored, err := s.GetWorkflow(e.ctx, cur.Scope, id)
		noErr(t, err, "GetWorkflow("+id+")")
		seen := map[int64]int{}
		for i, r := range out {
			what := fmt.Sprintf("%s: caller %d of %d updating with ExpectRevision 0 from revision %d", id, i, n, cur.Revision)
			if r.err != nil {
				t.Errorf("%s: %v (code %q), want it applied", what, r.err, contract.CodeOf(r.err))
				continue
			}
			if j, dup := seen[r.w.Revision]; dup {
				t.Errorf("%s: callers %d and %d both got revision %d", id, j, i, r.w.Revision)
			}
			seen[r.w.Revision] = i
			if r.w.Revision <= cur.Revision || r.w.Revision > cur.Revision+int64(n) {
				t.Errorf("%s: revision %d, want one of %d…%d", what, r.w.Revision, cur.Revision+1, cur.Revision+int64(n))
			}
			checkWorkflow(t, what, r.w, contract.Workflow{
				Scope: cur.Scope, ID: id, RequestID: us[i].RequestID, Status: cur.Status, Revision: r.w.Revision,
				Snapshot: us[i].Snapshot, CreatedAt: cur.CreatedAt, UpdatedAt: r.w.UpdatedAt,
			})
			if r.w.Revision == cur.Revision+int64(n) {
				checkWorkflow(t, what+": stored after the race, against the last writer's result", stored, r.w)
			}
		}
		if stored.Revision != cur.Revision+int64(n) {
			t.Errorf("%s: revision %d after %d updates from revision %d, want %d (an update was lost)", id, stored.Revision, n, cur.Revision, cur.Revision+int64(n))
		}
	})
}

// distinctWorkflows adds one update to each of n workflows: most apply,
// and beside them some fail on their own condition (a revision from the
// future, the wrong status, a fence of a released grant), each with its
// own error, changing nothing. The workflows are named after ids (the
// same ids again update the same workflows), the rest after tag.
func (b *burst) distinctWorkflows(ids, tag string, n int) {
	t, e, s := b.t, b.e, b.s
	// A grant, released and granted again: the first one's fence is stale.
	fenceRes := "fence-" + tag
	old := mustAcquire(t, e.ctx, s, b.leaseReq(fenceRes, "fencer"))
	ok, err := s.ReleaseLease(e.ctx, old)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatalf("ReleaseLease of a held lease = false")
	}
	valid := mustAcquire(t, e.ctx, s, b.leaseReq(fenceRes, "fencer"))
	const (
		plain = iota
		futureRevision
		wrongStatus
		staleFence
		validFence
	)
	curs := make([]contract.Workflow, n)
	us := make([]contract.Update, n)
	modes := make([]int, n)
	out := make([]updateResult, n)
	scope := b.scope
	b.prepare("reading or creating the workflows", n, func(i int) (err error) {
		curs[i], err = b.getOrCreate(scope, fmt.Sprintf("wf-%s-%02d", ids, i))
		return err
	})
	for i := range n {
		cur := curs[i]
		id := cur.ID
		us[i] = contract.Update{
			Scope: cur.Scope, ID: id, ExpectStatus: cur.Status, ExpectRevision: cur.Revision, Status: contract.Status(fmt.Sprintf("step_%d", i)),
			RequestID: fmt.Sprintf("req-%s-%d", tag, i), Snapshot: fmt.Appendf(nil, "%s written by caller %d in burst %s", id, i, tag),
		}
		switch i % 8 {
		case 1:
			modes[i] = futureRevision
			us[i].ExpectRevision = cur.Revision + 1
		case 3:
			modes[i] = wrongStatus
			us[i].ExpectStatus = contract.StatusPending
		case 5:
			modes[i] = staleFence
			us[i].Fence = old.Fence()
		case 6:
			modes[i] = validFence
			us[i].Fence = valid.Fence()
		}
		b.op(func() { out[i].w, out[i].err = s.UpdateWorkflow(e.ctx, us[i]) })
	}
	b.then(func() {
		each(n, func(i int) {
			r, cur, u := out[i], curs[i], us[i]
			what := fmt.Sprintf("%s (caller %d of %d updating distinct workflows at once)", u.ID, i, n)
			stored, err := s.GetWorkflow(e.ctx, u.Scope, u.ID)
			if err != nil {
				t.Errorf("%s: GetWorkflow: %v", what, err)
				return
			}
			switch modes[i] {
			case futureRevision:
				checkConflictIn(t, what+" expecting a revision from the future", r.err, contract.Details{
					ExpectedStatus: cur.Status, ActualStatus: cur.Status, ExpectedRevision: cur.Revision + 1, ActualRevision: cur.Revision,
				})
			case wrongStatus:
				checkConflictIn(t, what+" expecting the wrong status", r.err, contract.Details{
					ExpectedStatus: contract.StatusPending, ActualStatus: cur.Status, ExpectedRevision: cur.Revision, ActualRevision: cur.Revision,
				})
			case staleFence:
				if !checkCode(t, r.err, contract.Fenced) {
					t.Errorf("%s: fenced by a released grant", what)
				}
			default:
				if r.err != nil {
					t.Errorf("%s: %v (code %q), want it applied", what, r.err, contract.CodeOf(r.err))
					return
				}
				checkWorkflow(t, what+": its result", r.w, contract.Workflow{
					Scope: u.Scope, ID: u.ID, RequestID: u.RequestID, Status: u.Status, Revision: cur.Revision + 1,
					Snapshot: u.Snapshot, CreatedAt: cur.CreatedAt, UpdatedAt: r.w.UpdatedAt,
				})
				checkWorkflow(t, what+": stored, against its result", stored, r.w)
				return
			}
			checkWorkflow(t, what+": stored after its failed update (want it unchanged)", stored, cur)
		})
	})
}

// conflictDetails returns the Details of a Conflict, or nil.
func conflictDetails(err error) *contract.Details {
	var ce *contract.Error
	if errors.As(err, &ce) {
		return ce.Details
	}
	return nil
}

// checkConflictIn is checkConflict, saying which call it checks.
func checkConflictIn(t *testing.T, what string, err error, want contract.Details) {
	t.Helper()
	if contract.CodeOf(err) != contract.Conflict {
		t.Errorf("%s: got %v (code %q), want Conflict", what, err, contract.CodeOf(err))
		return
	}
	d := conflictDetails(err)
	switch {
	case d == nil:
		t.Errorf("%s: Conflict without Details", what)
	case *d != want:
		t.Errorf("%s: Conflict Details %+v, want %+v (another caller's?)", what, *d, want)
	}
}

// keyResult is what one CompleteKey, RenewKey or GetKey of a burst
// returned.
type keyResult struct {
	rec contract.KeyRecord
	err error
}

// completeDistinct adds the completion of n keys claimed first, each with
// its own outcome and retention.
func (b *burst) completeDistinct(tag string, n int) {
	t, e, s := b.t, b.e, b.s
	claims := make([]contract.Claim, n)
	comps := make([]contract.Completion, n)
	out := make([]keyResult, n)
	refs := make([]contract.KeyRef, n)
	for i := range n {
		refs[i] = b.key(fmt.Sprintf("kc-%s-%02d", tag, i))
	}
	b.prepare("claiming the keys", n, func(i int) (err error) {
		claims[i], err = b.claimAs(contract.ClaimRequest{KeyRef: refs[i], Fingerprint: fmt.Sprintf("POST:/c/%s/%d", tag, i), TTL: e.ttl}, contract.ClaimNew)
		return err
	})
	b.clockNow(claims[0].Record.CreatedAt)
	for i := range n {
		comps[i] = contract.Completion{
			KeyRef: refs[i], Token: claims[i].Token, Outcome: testOutcome(fmt.Sprintf("%s caller %d", tag, i)),
			Retain: time.Hour + time.Duration(i)*time.Second,
		}
		b.op(func() { out[i].rec, out[i].err = s.CompleteKey(e.ctx, comps[i]) })
	}
	b.then(func() {
		each(n, func(i int) {
			r, c := out[i], comps[i]
			what := fmt.Sprintf("CompleteKey(%q) (caller %d of %d completing distinct keys at once)", c.Key, i, n)
			if r.err != nil {
				t.Errorf("%s: %v (code %q), want it completed", what, r.err, contract.CodeOf(r.err))
				return
			}
			checkKey(t, what, r.rec, contract.KeyRecord{
				KeyRef: c.KeyRef, Fingerprint: claims[i].Record.Fingerprint, State: contract.KeyCompleted, Outcome: &c.Outcome,
				LeaseUntil: r.rec.LeaseUntil, CreatedAt: claims[i].Record.CreatedAt, CompletedAt: r.rec.CompletedAt, ExpiresAt: r.rec.ExpiresAt,
			})
			e.checkDur(t, what+": ExpiresAt - CompletedAt (want its own Retain)", r.rec.ExpiresAt.Sub(r.rec.CompletedAt), c.Retain)
			b.checkAt(what+": CompletedAt", r.rec.CompletedAt, 0)
			got, err := s.GetKey(e.ctx, c.KeyRef)
			if err != nil {
				t.Errorf("GetKey(%q) after its completion: %v", c.Key, err)
				return
			}
			checkKey(t, what+": read back, against its result", got, r.rec)
		})
	})
}

// oneKey adds completions of one key sent at once: with the claim's token
// (several outcomes, and one outcome sent several times, as retries after
// a lost reply would be), and with tokens that do not hold it (the key's
// released earlier claim, a live claim of another key, a token never
// issued). Every completion with the token succeeds and returns the one
// stored record; every other is Fenced; the other key's claim is intact.
func (b *burst) oneKey(tag string, n int) {
	t, e, s := b.t, b.e, b.s
	req := contract.ClaimRequest{KeyRef: b.key("k1-" + tag), Fingerprint: "POST:/one/" + tag, TTL: e.ttl}
	first := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	ok, err := s.ReleaseKey(e.ctx, req.KeyRef, first.Token)
	noErr(t, err, "ReleaseKey")
	if !ok {
		t.Fatalf("ReleaseKey of a held claim = false")
	}
	claim := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	otherReq := contract.ClaimRequest{KeyRef: b.key("k1o-" + tag), Fingerprint: "POST:/other/" + tag, TTL: e.ttl}
	other := mustClaim(t, e.ctx, s, otherReq, contract.ClaimNew)
	retry := contract.Outcome{Code: 202, Body: []byte("the retried outcome " + tag), Ref: "retry-" + tag}
	comps := make([]contract.Completion, n)
	holds := make([]bool, n)
	out := make([]keyResult, n)
	for i := range n {
		c := contract.Completion{KeyRef: req.KeyRef, Token: claim.Token, Retain: time.Hour}
		switch i % 8 {
		case 0, 1, 2:
			c.Outcome = contract.Outcome{Code: 200 + i, Body: fmt.Appendf(nil, "outcome of caller %d", i), Ref: fmt.Sprintf("ref-%d", i)}
			holds[i] = true
		case 3, 4:
			c.Outcome = retry
			holds[i] = true
		case 5:
			c.Token, c.Outcome = first.Token, contract.Outcome{Code: 409, Body: []byte("released claim")}
		case 6:
			c.Token, c.Outcome = other.Token, contract.Outcome{Code: 409, Body: []byte("other key's claim")}
		case 7:
			c.Token, c.Outcome = fmt.Sprintf("%032x", i), contract.Outcome{Code: 409, Body: []byte("never issued")}
		}
		comps[i] = c
		b.op(func() { out[i].rec, out[i].err = s.CompleteKey(e.ctx, comps[i]) })
	}
	b.then(func() {
		stored, err := s.GetKey(e.ctx, req.KeyRef)
		noErr(t, err, "GetKey")
		if stored.State != contract.KeyCompleted {
			t.Errorf("k1-%s after the race: %s, want completed", tag, fmtKey(stored))
		}
		mine := false
		for i, r := range out {
			what := fmt.Sprintf("CompleteKey(%q) by caller %d of %d", req.Key, i, n)
			if !holds[i] {
				if !checkCode(t, r.err, contract.Fenced) {
					t.Errorf("%s with a token that does not hold the key", what)
				}
				continue
			}
			if r.err != nil {
				t.Errorf("%s with the claim's token: %v (code %q), want the stored record", what, r.err, contract.CodeOf(r.err))
				continue
			}
			checkKey(t, what+" with the claim's token, against the stored record", r.rec, stored)
			if diffOutcome(stored.Outcome, &comps[i].Outcome) == "" {
				mine = true
			}
		}
		if !mine {
			t.Errorf("k1-%s: the stored outcome %+v is none of those sent with the claim's token", tag, stored.Outcome)
		}
		checkStoredKey(t, e.ctx, s, other.Record)
		mustComplete(t, e.ctx, s, contract.Completion{KeyRef: otherReq.KeyRef, Token: other.Token, Outcome: contract.Outcome{Code: 200}})
	})
}

// leaseResult is what one RenewLease of a burst returned.
type leaseResult struct {
	l   contract.Lease
	err error
}

// renewals adds renewals of n/2 leases and n/2 claims, each with its own
// TTL. One in four records was released and granted again (or claimed
// again), and both the old grant and the new one are renewed at once;
// one in four only the old one. The old ones are Fenced, and their
// record stays the new holder's; the rest are renewed to now + their own
// TTL. With takeover (the harness's clock), the old grants and claims were
// taken over instead, after they expired beyond the tolerance.
func (b *burst) renewals(tag string, n int, takeover bool) {
	t, e, s := b.t, b.e, b.s
	half := max(n/2, 1)
	type leaseCase struct {
		old, cur      contract.Lease
		stale, renews bool // old is stale; cur is renewed too
		oldOut, out   leaseResult
		ttl           time.Duration
	}
	leases := make([]*leaseCase, half)
	type keyCase struct {
		req           contract.ClaimRequest
		old, cur      contract.Claim
		stale, renews bool
		oldOut, out   keyResult
		ttl           time.Duration
	}
	keys := make([]*keyCase, half)
	lreqs := make([]contract.LeaseRequest, half)
	for j := range half {
		leases[j] = &leaseCase{ttl: b.ttl(j), stale: takeover || j%4 < 2, renews: takeover || j%4 == 0}
		lreqs[j] = b.leaseReq(fmt.Sprintf("lr-%s-%02d", tag, j), fmt.Sprintf("owner-%d", j))
		keys[j] = &keyCase{ttl: b.ttl(half - 1 - j), stale: takeover || j%4 < 2, renews: takeover || j%4 == 0}
		keys[j].req = contract.ClaimRequest{KeyRef: b.key(fmt.Sprintf("kr-%s-%02d", tag, j)), Fingerprint: fmt.Sprintf("POST:/r/%s/%d", tag, j), TTL: e.ttl}
	}
	b.prepare("acquiring the leases and claiming the keys", half, func(j int) (err error) {
		lc, kc := leases[j], keys[j]
		if lc.old, err = s.AcquireLease(e.ctx, lreqs[j]); err != nil {
			return err
		}
		if kc.old, err = b.claimAs(kc.req, contract.ClaimNew); err != nil {
			return err
		}
		if !takeover && kc.stale {
			return b.releaseBoth(lc.old, kc.req.KeyRef, kc.old.Token)
		}
		return nil
	})
	if takeover {
		e.advance(e.pastTakeover())
	}
	b.prepare("granting the leases and claiming the keys again", half, func(j int) (err error) {
		lc, kc := leases[j], keys[j]
		lc.cur, kc.cur = lc.old, kc.old
		if !lc.stale {
			return nil
		}
		next := lreqs[j]
		next.Owner = fmt.Sprintf("next-%d", j)
		if lc.cur, err = s.AcquireLease(e.ctx, next); err != nil {
			return err
		}
		kind := contract.ClaimNew
		if takeover {
			kind = contract.ClaimReclaimed
		}
		kc.cur, err = b.claimAs(kc.req, kind)
		return err
	})
	for j := range half {
		lc, kc := leases[j], keys[j]
		b.clockNow(lc.cur.AcquiredAt)
		if lc.stale {
			b.op(func() { lc.oldOut.l, lc.oldOut.err = s.RenewLease(e.ctx, lc.old, lc.ttl) })
			b.op(func() { kc.oldOut.rec, kc.oldOut.err = s.RenewKey(e.ctx, kc.req.KeyRef, kc.old.Token, kc.ttl) })
		}
		if !lc.stale || lc.renews {
			b.op(func() { lc.out.l, lc.out.err = s.RenewLease(e.ctx, lc.cur, lc.ttl) })
		}
		if !kc.stale || kc.renews {
			b.op(func() { kc.out.rec, kc.out.err = s.RenewKey(e.ctx, kc.req.KeyRef, kc.cur.Token, kc.ttl) })
		}
	}
	b.then(func() {
		each(half, func(j int) {
			lc := leases[j]
			what := fmt.Sprintf("RenewLease(%q) (lease %d of %d renewed at once", lc.cur.Resource, j, half)
			if lc.stale {
				if !checkCode(t, lc.oldOut.err, contract.Fenced) {
					t.Errorf("%s, with a grant that was released or taken over)", what)
				}
			}
			want := lc.cur
			if !lc.stale || lc.renews {
				if lc.out.err != nil {
					t.Errorf("%s, by its holder): %v (code %q), want it renewed", what, lc.out.err, contract.CodeOf(lc.out.err))
					return
				}
				want.ExpiresAt = lc.out.l.ExpiresAt
				if d := diffLease(lc.out.l, want); d != "" {
					t.Errorf("%s, by its holder): %s", what, d)
				}
				b.checkAt(what+"): ExpiresAt", lc.out.l.ExpiresAt, lc.ttl)
			}
			checkStoredLease(t, e.ctx, s, want)
		})
		each(half, func(j int) {
			kc := keys[j]
			what := fmt.Sprintf("RenewKey(%q) (claim %d of %d renewed at once", kc.req.Key, j, half)
			if kc.stale {
				if !checkCode(t, kc.oldOut.err, contract.Fenced) {
					t.Errorf("%s, with a token that was released or reclaimed)", what)
				}
			}
			want := kc.cur.Record
			if !kc.stale || kc.renews {
				if kc.out.err != nil {
					t.Errorf("%s, by its holder): %v (code %q), want it renewed", what, kc.out.err, contract.CodeOf(kc.out.err))
					return
				}
				want.LeaseUntil = kc.out.rec.LeaseUntil
				checkKey(t, what+", by its holder)", kc.out.rec, want)
				b.checkAt(what+"): LeaseUntil", kc.out.rec.LeaseUntil, kc.ttl)
			}
			checkStoredKey(t, e.ctx, s, want)
		})
	})
}

// releases adds releases of n/2 leases and n/2 claims: some released twice
// at once with the same grant (exactly one true), some with a grant
// released and granted again (false, the new holder keeps it), some with
// both the old and the new grant (false and true), the rest once (true).
// Afterwards, every freed lease is granted again with a greater token and
// every freed key is claimed with a token never issued before.
func (b *burst) releases(tag string, n int) {
	t, e, s := b.t, b.e, b.s
	half := max(n/2, 1)
	const (
		twice = iota
		staleOnly
		staleAndCurrent
		once
	)
	type leaseCase struct {
		mode     int
		old, cur contract.Lease
		oldOk    bool
		oks      [2]bool
		errs     [3]error
	}
	type keyCase struct {
		mode     int
		req      contract.ClaimRequest
		old, cur contract.Claim
		oldOk    bool
		oks      [2]bool
		errs     [3]error
	}
	leases := make([]*leaseCase, half)
	keys := make([]*keyCase, half)
	lreqs := make([]contract.LeaseRequest, half)
	for j := range half {
		mode := min(j%4, once)
		leases[j] = &leaseCase{mode: mode}
		lreqs[j] = b.leaseReq(fmt.Sprintf("ll-%s-%02d", tag, j), fmt.Sprintf("owner-%d", j))
		keys[j] = &keyCase{mode: mode}
		keys[j].req = contract.ClaimRequest{KeyRef: b.key(fmt.Sprintf("kl-%s-%02d", tag, j)), Fingerprint: fmt.Sprintf("POST:/l/%s/%d", tag, j), TTL: e.ttl}
	}
	b.prepare("acquiring the leases and claiming the keys", half, func(j int) (err error) {
		lc, kc := leases[j], keys[j]
		if lc.old, err = s.AcquireLease(e.ctx, lreqs[j]); err != nil {
			return err
		}
		if kc.old, err = b.claimAs(kc.req, contract.ClaimNew); err != nil {
			return err
		}
		lc.cur, kc.cur = lc.old, kc.old
		if lc.mode != staleOnly && lc.mode != staleAndCurrent {
			return nil
		}
		if err := b.releaseBoth(lc.old, kc.req.KeyRef, kc.old.Token); err != nil {
			return err
		}
		next := lreqs[j]
		next.Owner = fmt.Sprintf("next-%d", j)
		if lc.cur, err = s.AcquireLease(e.ctx, next); err != nil {
			return err
		}
		kc.cur, err = b.claimAs(kc.req, contract.ClaimNew)
		return err
	})
	tokens := map[string]bool{} // every claim token issued
	var tokensMu sync.Mutex
	maxToken := map[string]int64{}
	for j := range half {
		lc, kc := leases[j], keys[j]
		mode := lc.mode
		tokens[kc.old.Token], tokens[kc.cur.Token] = true, true
		maxToken[lc.cur.Resource] = lc.cur.Token
		switch mode {
		case twice:
			for k := range 2 {
				b.op(func() { lc.oks[k], lc.errs[k] = s.ReleaseLease(e.ctx, lc.cur) })
				b.op(func() { kc.oks[k], kc.errs[k] = s.ReleaseKey(e.ctx, kc.req.KeyRef, kc.cur.Token) })
			}
		case staleOnly, staleAndCurrent:
			b.op(func() { lc.oldOk, lc.errs[2] = s.ReleaseLease(e.ctx, lc.old) })
			b.op(func() { kc.oldOk, kc.errs[2] = s.ReleaseKey(e.ctx, kc.req.KeyRef, kc.old.Token) })
			if mode == staleAndCurrent {
				b.op(func() { lc.oks[0], lc.errs[0] = s.ReleaseLease(e.ctx, lc.cur) })
				b.op(func() { kc.oks[0], kc.errs[0] = s.ReleaseKey(e.ctx, kc.req.KeyRef, kc.cur.Token) })
			}
		case once:
			b.op(func() { lc.oks[0], lc.errs[0] = s.ReleaseLease(e.ctx, lc.cur) })
			b.op(func() { kc.oks[0], kc.errs[0] = s.ReleaseKey(e.ctx, kc.req.KeyRef, kc.cur.Token) })
		}
	}
	// judge checks the results of one record's releases and says whether
	// it was freed.
	judge := func(what string, mode int, oks [2]bool, oldOk bool, errs [3]error) (freed bool) {
		t.Helper()
		for _, err := range errs {
			if err != nil {
				t.Errorf("%s: %v (code %q)", what, err, contract.CodeOf(err))
				return false
			}
		}
		if (mode == staleOnly || mode == staleAndCurrent) && oldOk {
			t.Errorf("%s: the release with the released grant or token returned true, want false (it no longer held it)", what)
		}
		switch mode {
		case twice:
			if oks[0] == oks[1] {
				t.Errorf("%s, twice at once with the same grant or token: %v and %v, want exactly one true", what, oks[0], oks[1])
			}
			return true
		case staleAndCurrent, once:
			if !oks[0] {
				t.Errorf("%s by its holder: false, want true", what)
			}
			return true
		}
		return false
	}
	b.then(func() {
		each(half, func(j int) {
			lc := leases[j]
			what := fmt.Sprintf("ReleaseLease(%q) (lease %d of %d released at once)", lc.cur.Resource, j, half)
			if judge(what, lc.mode, lc.oks, lc.oldOk, lc.errs) {
				checkNoLease(t, e.ctx, s, lc.cur.Scope, lc.cur.Resource)
				again := e.leaseReq(lc.cur.Resource, "after")
				again.Scope = lc.cur.Scope
				l, err := s.AcquireLease(e.ctx, again)
				switch {
				case err != nil:
					t.Errorf("%s: AcquireLease after it was freed: %v", what, err)
				case l.Token <= maxToken[lc.cur.Resource]:
					t.Errorf("%s: granted again with token %d, want more than %d", what, l.Token, maxToken[lc.cur.Resource])
				}
			} else {
				checkStoredLease(t, e.ctx, s, lc.cur)
			}
		})
		each(half, func(j int) {
			kc := keys[j]
			what := fmt.Sprintf("ReleaseKey(%q) (claim %d of %d released at once)", kc.req.Key, j, half)
			if judge(what, kc.mode, kc.oks, kc.oldOk, kc.errs) {
				checkNoKey(t, e.ctx, s, kc.req.KeyRef)
				c, err := s.ClaimKey(e.ctx, kc.req)
				switch {
				case err != nil:
					t.Errorf("%s: ClaimKey after it was freed: %v", what, err)
				case c.Kind != contract.ClaimNew:
					t.Errorf("%s: ClaimKey after it was freed = %v, want new", what, c.Kind)
				default:
					tokensMu.Lock()
					reused := tokens[c.Token]
					tokens[c.Token] = true
					tokensMu.Unlock()
					if reused {
						t.Errorf("%s: claimed again with a token issued before", what)
					}
				}
			} else {
				checkStoredKey(t, e.ctx, s, kc.cur.Record)
			}
		})
	})
}

// claimResult is what one ClaimKey of a burst returned.
type claimResult struct {
	c   contract.Claim
	err error
}

// claims adds claims sent at once: n/2 of distinct free keys (each new,
// with its own record and TTL), n/4 of one free key (one new, the others
// in flight, shown the winner's claim), one of a key claimed before (in
// flight) and one of it with another fingerprint (KeyConflict), one of a
// completed key (its outcome), and two of one free key with the same
// caller token (both get the claim, as a retry would).
func (b *burst) claims(tag string, n int) {
	t, e, s := b.t, b.e, b.s
	distinct := max(n/2, 1)
	shared := max(n/4, 2)
	dreqs := make([]contract.ClaimRequest, distinct)
	dout := make([]claimResult, distinct)
	for i := range distinct {
		dreqs[i] = contract.ClaimRequest{
			KeyRef: b.key(fmt.Sprintf("kn-%s-%02d", tag, i)), Fingerprint: fmt.Sprintf("POST:/n/%s/%d", tag, i),
			WorkflowID: fmt.Sprintf("wf-%d", i), TTL: b.ttl(i),
		}
		b.op(func() { dout[i].c, dout[i].err = s.ClaimKey(e.ctx, dreqs[i]) })
	}
	sreq := contract.ClaimRequest{KeyRef: b.key("ks-" + tag), Fingerprint: "POST:/s/" + tag, TTL: e.ttl}
	sout := make([]claimResult, shared)
	for i := range shared {
		b.op(func() { sout[i].c, sout[i].err = s.ClaimKey(e.ctx, sreq) })
	}
	breq := contract.ClaimRequest{KeyRef: b.key("kb-" + tag), Fingerprint: "POST:/b/" + tag, TTL: e.ttl}
	bound := mustClaim(t, e.ctx, s, breq, contract.ClaimNew)
	b.clockNow(bound.Record.CreatedAt)
	otherFp := breq
	otherFp.Fingerprint = "POST:/b/other/" + tag
	var bout [2]claimResult
	var cout [1]claimResult
	b.op(func() { bout[0].c, bout[0].err = s.ClaimKey(e.ctx, breq) })
	b.op(func() { bout[1].c, bout[1].err = s.ClaimKey(e.ctx, otherFp) })
	creq := contract.ClaimRequest{KeyRef: b.key("kd-" + tag), Fingerprint: "POST:/d/" + tag, TTL: e.ttl}
	cc := mustClaim(t, e.ctx, s, creq, contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: creq.KeyRef, Token: cc.Token, Outcome: testOutcome("done " + tag), Retain: time.Hour})
	b.op(func() { cout[0].c, cout[0].err = s.ClaimKey(e.ctx, creq) })
	treq := contract.ClaimRequest{KeyRef: b.key("kt-" + tag), Fingerprint: "POST:/t/" + tag, TTL: e.ttl, Token: "caller-token-" + tag + "-0123456789abcdef"}
	tout := make([]claimResult, 2)
	for i := range 2 {
		b.op(func() { tout[i].c, tout[i].err = s.ClaimKey(e.ctx, treq) })
	}
	b.then(func() {
		tokens := map[string]string{bound.Token: breq.Key, cc.Token: creq.Key}
		token := func(what string, c contract.Claim) {
			if prev, dup := tokens[c.Token]; dup {
				t.Errorf("%s: token already issued for %q", what, prev)
			}
			tokens[c.Token] = what
		}
		for i, r := range dout {
			req := dreqs[i]
			what := fmt.Sprintf("ClaimKey(%q) (caller %d of %d claiming distinct keys at once)", req.Key, i, distinct)
			if r.err != nil || r.c.Kind != contract.ClaimNew || r.c.Token == "" {
				t.Errorf("%s = %v, token %t, %v (code %q); want a new claim", what, r.c.Kind, r.c.Token != "", r.err, contract.CodeOf(r.err))
				continue
			}
			token(what, r.c)
			checkKey(t, what, r.c.Record, contract.KeyRecord{
				KeyRef: req.KeyRef, Fingerprint: req.Fingerprint, WorkflowID: req.WorkflowID, State: contract.KeyClaimed,
				LeaseUntil: r.c.Record.LeaseUntil, CreatedAt: r.c.Record.CreatedAt,
			})
			e.checkDur(t, what+": LeaseUntil - CreatedAt (want its own TTL)", r.c.Record.LeaseUntil.Sub(r.c.Record.CreatedAt), req.TTL)
			b.checkAt(what+": CreatedAt", r.c.Record.CreatedAt, 0)
			checkStoredKey(t, e.ctx, s, r.c.Record)
		}
		winner := -1
		for i, r := range sout {
			what := fmt.Sprintf("ClaimKey(%q) (caller %d of %d claiming one key at once)", sreq.Key, i, shared)
			switch {
			case r.err != nil:
				t.Errorf("%s: %v (code %q)", what, r.err, contract.CodeOf(r.err))
			case r.c.Kind == contract.ClaimNew:
				if winner >= 0 {
					t.Errorf("%s: callers %d and %d both got a new claim", what, winner, i)
				}
				winner = i
				token(what, r.c)
			case r.c.Kind != contract.ClaimInFlight:
				t.Errorf("%s = %v, want %v or %v", what, r.c.Kind, contract.ClaimNew, contract.ClaimInFlight)
			case r.c.Token != "":
				t.Errorf("%s = in flight with a token", what)
			}
		}
		if winner < 0 {
			t.Errorf("ClaimKey(%q): none of %d callers got the claim", sreq.Key, shared)
		} else {
			w := sout[winner].c.Record
			checkKey(t, fmt.Sprintf("ClaimKey(%q): the winner's record", sreq.Key), w, contract.KeyRecord{
				KeyRef: sreq.KeyRef, Fingerprint: sreq.Fingerprint, State: contract.KeyClaimed, LeaseUntil: w.LeaseUntil, CreatedAt: w.CreatedAt,
			})
			for i, r := range sout {
				if i != winner && r.err == nil && r.c.Kind == contract.ClaimInFlight {
					checkKey(t, fmt.Sprintf("ClaimKey(%q) in flight (caller %d), against the winner's claim", sreq.Key, i), r.c.Record, w)
				}
			}
			checkStoredKey(t, e.ctx, s, w)
		}
		if r := bout[0]; r.err != nil || r.c.Kind != contract.ClaimInFlight || r.c.Token != "" {
			t.Errorf("ClaimKey(%q) of a claimed key = %v, token %t, %v; want in flight", breq.Key, r.c.Kind, r.c.Token != "", r.err)
		} else {
			checkKey(t, fmt.Sprintf("ClaimKey(%q) in flight", breq.Key), r.c.Record, bound.Record)
		}
		if !checkCode(t, bout[1].err, contract.KeyConflict) {
			t.Errorf("ClaimKey(%q) with another fingerprint, racing a claim with its own", breq.Key)
		}
		checkStoredKey(t, e.ctx, s, bound.Record)
		if r := cout[0]; r.err != nil || r.c.Kind != contract.ClaimCompleted || r.c.Token != "" {
			t.Errorf("ClaimKey(%q) of a completed key = %v, token %t, %v; want completed", creq.Key, r.c.Kind, r.c.Token != "", r.err)
		} else {
			checkKey(t, fmt.Sprintf("ClaimKey(%q) of a completed key: the replay", creq.Key), r.c.Record, done)
		}
		for i, r := range tout {
			what := fmt.Sprintf("ClaimKey(%q) with a caller token, sent twice at once (call %d)", treq.Key, i)
			if r.err != nil || r.c.Kind != contract.ClaimNew || r.c.Token != treq.Token {
				t.Errorf("%s = %v, own token %t, %v (code %q); want the caller's claim (new, with its token)", what, r.c.Kind, r.c.Token == treq.Token, r.err, contract.CodeOf(r.err))
				continue
			}
			want := contract.KeyRecord{KeyRef: treq.KeyRef, Fingerprint: treq.Fingerprint, State: contract.KeyClaimed, LeaseUntil: r.c.Record.LeaseUntil, CreatedAt: r.c.Record.CreatedAt}
			if e.caps.Clock && i == 1 && tout[0].err == nil {
				want = tout[0].c.Record // the clock stood still: the same claim
			}
			checkKey(t, what, r.c.Record, want)
		}
	})
}

func testRacingCASOneWorkflow(t *testing.T, e *env) {
	s := e.open()
	for range burstRounds {
		b := newBurst(t, e, s)
		b.casOneWorkflow("wf-cas", burstClients)
		b.run()
	}
}

func testRacingUnconditionalUpdates(t *testing.T, e *env) {
	s := e.open()
	for range burstRounds {
		b := newBurst(t, e, s)
		b.unconditionalUpdates("wf-inc", burstClients)
		b.run()
	}
	w, err := s.GetWorkflow(e.ctx, "", "wf-inc")
	noErr(t, err, "GetWorkflow")
	if want := int64(1 + burstRounds*burstClients); w.Revision != want {
		t.Errorf("revision after %d rounds of %d unconditional updates = %d, want %d", burstRounds, burstClients, w.Revision, want)
	}
}

// inRounds sends burstRounds bursts through s, each made by add.
func inRounds(t *testing.T, e *env, s *durable.Store, add func(b *burst, round string)) {
	for r := range burstRounds {
		b := newBurst(t, e, s)
		add(b, fmt.Sprint("r", r))
		b.run()
	}
}

func testRacingDistinctWorkflows(t *testing.T, e *env) {
	// The same workflows every round: each moves on from wherever the
	// round before left it.
	inRounds(t, e, e.open(), func(b *burst, r string) { b.distinctWorkflows("d", r, burstClients) })
}

func testRacingDistinctCompletions(t *testing.T, e *env) {
	inRounds(t, e, e.open(), func(b *burst, r string) { b.completeDistinct(r, burstClients) })
}

func testRacingOneKeyCompletions(t *testing.T, e *env) {
	inRounds(t, e, e.open(), func(b *burst, r string) { b.oneKey(r, burstClients) })
}

func testRacingRenewals(t *testing.T, e *env) {
	s := e.open()
	inRounds(t, e, s, func(b *burst, r string) { b.renewals(r, burstClients, false) })
	if e.caps.Clock {
		b := newBurst(t, e, s)
		b.renewals("takeover", burstClients, true)
		b.run()
	}
}

func testRacingReleases(t *testing.T, e *env) {
	inRounds(t, e, e.open(), func(b *burst, r string) { b.releases(r, burstClients) })
}

func testRacingClaims(t *testing.T, e *env) {
	inRounds(t, e, e.open(), func(b *burst, r string) { b.claims(r, burstClients) })
}

// testRacingMixed sends every kind of write above at once through one
// client, a few of each, with the same names in two scopes (a batch must
// not confuse records that differ only in their scope).
func testRacingMixed(t *testing.T, e *env) {
	s := e.open()
	for r := range burstRounds {
		tag := fmt.Sprint("m", r)
		b := newBurst(t, e, s)
		for _, scope := range []contract.Scope{"", "tenant-a"} {
			b.scope = scope
			b.casOneWorkflow("wf-cas", 4)
			b.unconditionalUpdates("wf-inc", 3)
			b.distinctWorkflows("m", tag, 4)
			b.completeDistinct(tag, 3)
			b.oneKey(tag, 8)
			b.renewals(tag, 8, false)
			b.releases(tag, 8)
			b.claims(tag, 4)
		}
		if len(b.ops) < 2*burstClients {
			t.Fatalf("internal error: a mixed burst of %d writes", len(b.ops))
		}
		b.run()
	}
}
