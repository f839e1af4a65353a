package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Two paths a key-value backend gets wrong because no other scenario takes
// them: a fenced write made after the lease was renewed (the everyday case
// of every long job under RunWithLease), and the old holder's late
// completion racing another client's reclaim of the same expired claim.

// lateRounds is how many keys the late-completion race is run on, one
// round each.
const lateRounds = 20

// testRenewalKeepsTheGrant: after RenewLease and after RenewLeases, the
// lease's fence still applies to a fenced UpdateWorkflow, a fenced
// CompleteKey and (with the optional TxCompleter) a fenced CompleteKeyTx,
// each made after the first grant would have ended; GetLease and
// ListLeases report the same token; a later takeover gets a greater token.
func testRenewalKeepsTheGrant(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("v0")})
	claims := map[string]contract.Claim{}
	for _, key := range []string{"key-1", "key-2", "key-tx-1", "key-tx-2"} {
		req := e.claimReq(key)
		req.TTL = 10 * e.ttl // the claims outlive every lease below
		claims[key] = mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	}
	l := mustAcquire(t, e.ctx, s, e.leaseReq("res-1", "owner-1"))
	tc := contract.TxCompleter(nil)
	txOK := s.As(&tc)
	if txOK {
		tx, err := s.BeginTx(e.ctx)
		if contract.CodeOf(err) == contract.Unimplemented {
			txOK = false
		} else {
			noErr(t, err, "BeginTx")
			noErr(t, tx.Rollback(e.ctx), "Rollback")
		}
	}
	if !txOK {
		t.Logf("no contract.TxCompleter: the fenced CompleteKeyTx after renewal is not checked (optional)")
	}
	lister := contract.RecordLister(nil)
	listOK := s.As(&lister)
	if listOK {
		if _, err := s.ListLeases(e.ctx, contract.LeaseListQuery{Limit: 1}); contract.CodeOf(err) == contract.Unimplemented {
			listOK = false
		}
	}

	// writes makes every fenced write with the lease's fence, as the
	// holder would after a renewal.
	writes := func(when, key, txKey string) {
		t.Helper()
		w = mustUpdate(t, e.ctx, s, contract.Update{
			ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: contract.StatusRunning,
			Snapshot: []byte("after " + when), Fence: l.Fence(),
		})
		checkStored(t, e.ctx, other, w)
		out := testOutcome(when)
		rec := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef(key), Token: claims[key].Token, Outcome: out, Retain: time.Hour, Fence: l.Fence()})
		if rec.State != contract.KeyCompleted || diffOutcome(rec.Outcome, &out) != "" {
			t.Errorf("fenced CompleteKey(%q) after %s = %s, want it completed with the outcome", key, when, fmtKey(rec))
		}
		if !txOK {
			return
		}
		tx, err := s.BeginTx(e.ctx)
		noErr(t, err, "BeginTx")
		_, err = s.CompleteKeyTx(e.ctx, tx, contract.Completion{KeyRef: keyRef(txKey), Token: claims[txKey].Token, Outcome: out, Retain: time.Hour, Fence: l.Fence()})
		if err != nil {
			_ = tx.Rollback(e.ctx)
			t.Errorf("fenced CompleteKeyTx(%q) after %s: %v (code %q), want it applied with the lease's fence", txKey, when, err, contract.CodeOf(err))
			return
		}
		noErr(t, tx.Commit(e.ctx), "Commit")
		got, err := other.GetKey(e.ctx, keyRef(txKey))
		noErr(t, err, "GetKey after Commit")
		if got.State != contract.KeyCompleted {
			t.Errorf("GetKey(%q) after a fenced CompleteKeyTx committed after %s = %s, want it completed", txKey, when, fmtKey(got))
		}
	}
	// reports checks that GetLease and ListLeases (all, and Held) report
	// the renewed grant: its token, its AcquiredAt, its new ExpiresAt.
	reports := func(when string, want contract.Lease) {
		t.Helper()
		checkStoredLease(t, e.ctx, other, want)
		if !listOK {
			return
		}
		for _, held := range []bool{false, true} {
			got, err := other.ListLeases(e.ctx, contract.LeaseListQuery{Held: held})
			noErr(t, err, "ListLeases")
			if len(got) != 1 {
				t.Errorf("ListLeases(Held %v) after %s = %d leases, want the renewed one", held, when, len(got))
				continue
			}
			if d := diffLease(got[0], want); d != "" {
				t.Errorf("ListLeases(Held %v) after %s: %s", held, when, d)
			}
		}
	}

	// Renewed halfway, for 2×TTL; then past the first grant's end and its
	// tolerance, when only the renewal keeps it.
	step := e.ttl / 2
	e.advance(step)
	r1, err := s.RenewLease(e.ctx, l, 2*e.ttl)
	noErr(t, err, "RenewLease")
	want := l
	want.ExpiresAt = r1.ExpiresAt
	if d := diffLease(r1, want); d != "" {
		t.Errorf("RenewLease: %s (renewal changes ExpiresAt alone)", d)
	}
	e.checkTime(t, "ExpiresAt after RenewLease (now + ttl)", r1.ExpiresAt, l.AcquiredAt.Add(step+2*e.ttl))
	e.advance(e.pastTakeover() - step)
	_, err = other.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	checkCode(t, err, contract.LeaseBusy)
	writes("RenewLease", "key-1", "key-tx-1")
	reports("RenewLease", r1)

	// Renewed again through RenewLeases (the optional LeaseRenewer or the
	// Store's fallback); then past the first renewal's end.
	out := renewLeases(t, e, s, []contract.Lease{r1}, 2*e.ttl)
	if out[0].Err != nil {
		t.Fatalf("RenewLeases of the held lease: %v", out[0].Err)
	}
	r2 := out[0].Lease
	want.ExpiresAt = r2.ExpiresAt
	if d := diffLease(r2, want); d != "" {
		t.Errorf("RenewLeases: %s (renewal changes ExpiresAt alone)", d)
	}
	e.advance(r1.ExpiresAt.Sub(l.AcquiredAt.Add(e.pastTakeover())) + e.tol + time.Second)
	_, err = other.AcquireLease(e.ctx, e.leaseReq("res-1", "owner-2"))
	checkCode(t, err, contract.LeaseBusy)
	writes("RenewLeases", "key-2", "key-tx-2")
	reports("RenewLeases", r2)

	// Once the renewed grant has ended, a takeover gets a greater token,
	// and the old fence no longer applies.
	now := r1.ExpiresAt.Add(e.tol + time.Second)
	e.advance(r2.ExpiresAt.Sub(now) + e.tol + time.Second)
	next := mustAcquire(t, e.ctx, other, e.leaseReq("res-1", "owner-2"))
	if next.Token <= l.Token {
		t.Errorf("token after takeover of a renewed lease = %d, want > %d", next.Token, l.Token)
	}
	_, err = s.UpdateWorkflow(e.ctx, contract.Update{
		ID: "wf-1", ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: contract.StatusRunning,
		Snapshot: []byte("stale"), Fence: l.Fence(),
	})
	checkCode(t, err, contract.Fenced)
	checkStored(t, e.ctx, other, w)
}

// testLateCompletionRacingAReclaim: after a claim expired beyond the
// tolerance, its old holder's CompleteKey and another client's ClaimKey
// start together, on many keys: exactly one wins each round (the
// completion, and the claim replays it; or the reclaim, and the completion
// is Fenced), and a completed record is never turned back into a claim.
func testLateCompletionRacingAReclaim(t *testing.T, e *env) {
	old, reclaimer, reader := e.open(), e.open(), e.open()
	held := make([]contract.Claim, lateRounds)
	for i := range held {
		held[i] = mustClaim(t, e.ctx, old, e.claimReq(fmt.Sprintf("late-%d", i)), contract.ClaimNew)
	}
	e.advance(e.pastTakeover())
	var completions, reclaims int
	for i, h := range held {
		key := keyRef(fmt.Sprintf("late-%d", i))
		out := testOutcome(fmt.Sprintf("late %d", i))
		var (
			rec    contract.KeyRecord
			c      contract.Claim
			cerr   error
			clmErr error
		)
		race(2, func(j int) {
			if j == 0 {
				rec, cerr = old.CompleteKey(e.ctx, contract.Completion{KeyRef: key, Token: h.Token, Outcome: out, Retain: time.Hour})
			} else {
				c, clmErr = reclaimer.ClaimKey(e.ctx, e.claimReq(key.Key))
			}
		})
		if clmErr != nil {
			t.Fatalf("round %d: ClaimKey racing a late completion: %v (code %q), want %v or %v", i, clmErr, contract.CodeOf(clmErr), contract.ClaimReclaimed, contract.ClaimCompleted)
		}
		if cerr != nil && contract.CodeOf(cerr) != contract.Fenced {
			t.Fatalf("round %d: late CompleteKey racing a reclaim: %v (code %q), want success or Fenced", i, cerr, contract.CodeOf(cerr))
		}
		completed := cerr == nil
		switch {
		case completed && c.Kind.Owned():
			t.Fatalf("round %d: both won: the late CompleteKey stored its outcome (%s) and the racing ClaimKey = %v with a token", i, fmtKey(rec), c.Kind)
		case !completed && !c.Kind.Owned():
			t.Fatalf("round %d: neither won: the late CompleteKey was Fenced and the racing ClaimKey = %v (%s)", i, c.Kind, fmtKey(c.Record))
		case completed:
			completions++
			if c.Kind != contract.ClaimCompleted {
				t.Errorf("round %d: ClaimKey after the completion won = %v, want %v", i, c.Kind, contract.ClaimCompleted)
			}
			got, err := reader.GetKey(e.ctx, key)
			noErr(t, err, "GetKey")
			if got.State != contract.KeyCompleted || diffOutcome(got.Outcome, &out) != "" {
				t.Errorf("round %d: the completion won, but GetKey = %s: a completed record was turned back into a claim", i, fmtKey(got))
			}
			again := mustClaim(t, e.ctx, reader, e.claimReq(key.Key), contract.ClaimCompleted)
			if diffOutcome(again.Record.Outcome, &out) != "" {
				t.Errorf("round %d: a later ClaimKey replays %s, want the late completion's outcome", i, fmtKey(again.Record))
			}
		default:
			reclaims++
			if c.Kind != contract.ClaimReclaimed || c.Token == h.Token {
				t.Errorf("round %d: the reclaim won with Kind %v and the old token %v", i, c.Kind, c.Token == h.Token)
			}
			got, err := reader.GetKey(e.ctx, key)
			noErr(t, err, "GetKey")
			if got.State != contract.KeyClaimed || got.Outcome != nil {
				t.Errorf("round %d: the late completion was Fenced, but GetKey = %s, want the reclaimer's claim", i, fmtKey(got))
			}
			mustComplete(t, e.ctx, reclaimer, contract.Completion{KeyRef: key, Token: c.Token, Outcome: testOutcome("reclaimer"), Retain: time.Hour})
			_, err = old.CompleteKey(e.ctx, contract.Completion{KeyRef: key, Token: h.Token, Outcome: out, Retain: time.Hour})
			checkCode(t, err, contract.Fenced)
		}
	}
	t.Logf("%d rounds: the late completion won %d, the reclaim %d", lateRounds, completions, reclaims)
}

// keepAliveEvery is the renewal period the runner scenario asks
// RunWithLease for, in real time; the scenario moves the harness clock
// between renewals.
const keepAliveEvery = 10 * time.Millisecond

// testRunnerKeepAliveKeepsTheGrant: under RunWithLease, whose keep-alive
// renews the lease in the background (through RenewLeases), the lease's
// fence still applies to a fenced UpdateWorkflow and a fenced CompleteKey
// made after the first grant would have ended; GetLease reports the same
// token and another owner finds the lease busy; once the runner has
// released it, a takeover gets a greater token.
func testRunnerKeepAliveKeepsTheGrant(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-run", Status: contract.StatusRunning})
	req := e.claimReq("key-run")
	req.TTL = 10 * e.ttl // outlives the lease below
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)

	var held contract.Lease
	err := s.RunWithLease(e.ctx, e.leaseReq("res-run", "runner"), durable.LeaseOptions{RenewEvery: keepAliveEvery},
		func(ctx context.Context, l contract.Lease) error {
			held = l
			// Move time a quarter TTL at a time, each step only after the
			// keep-alive has renewed at the new time, until the first
			// grant is over and past its tolerance.
			step := e.ttl / 4
			last := l.ExpiresAt
			for moved := time.Duration(0); moved < e.pastTakeover(); moved += step {
				e.advance(step)
				got, ok := waitRenewed(ctx, other, l, last)
				if !ok {
					t.Errorf("the runner's keep-alive did not renew the lease after the clock moved %v (ExpiresAt still %v; ctx: %v)",
						moved+step, last, context.Cause(ctx))
					return nil
				}
				last = got.ExpiresAt
			}
			// The first grant has ended; only the keep-alive holds it.
			_, err := other.AcquireLease(e.ctx, e.leaseReq("res-run", "owner-2"))
			checkCode(t, err, contract.LeaseBusy)
			w = mustUpdate(t, e.ctx, s, contract.Update{
				ID: w.ID, ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision, Status: contract.StatusSucceeded,
				Snapshot: []byte("kept alive"), Fence: l.Fence(),
			})
			out := testOutcome("kept alive")
			rec := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: out, Retain: time.Hour, Fence: l.Fence()})
			if rec.State != contract.KeyCompleted || diffOutcome(rec.Outcome, &out) != "" {
				t.Errorf("fenced CompleteKey under the runner's keep-alive = %s, want it completed with the outcome", fmtKey(rec))
			}
			if err := ctx.Err(); err != nil {
				t.Errorf("the runner canceled the function while its lease was kept alive: %v", context.Cause(ctx))
			}
			return nil
		})
	noErr(t, err, "RunWithLease")
	checkStored(t, e.ctx, other, w)
	next := mustAcquire(t, e.ctx, other, e.leaseReq("res-run", "owner-2"))
	if next.Token <= held.Token {
		t.Errorf("token after the runner released its kept-alive lease = %d, want > %d", next.Token, held.Token)
	}
}

// waitRenewed polls GetLease until the lease l reports an ExpiresAt after
// last, with l's token; false if ctx ends or the operation timeout passes
// first.
func waitRenewed(ctx context.Context, s *durable.Store, l contract.Lease, last time.Time) (contract.Lease, bool) {
	deadline := time.Now().Add(renewWaitLimit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		got, err := s.GetLease(ctx, l.Scope, l.Resource)
		if err == nil && got.Token == l.Token && got.ExpiresAt.After(last) {
			return got, true
		}
		time.Sleep(keepAliveEvery / 2)
	}
	return contract.Lease{}, false
}

// renewWaitLimit bounds how long the runner scenario waits, in real time,
// for one keep-alive renewal that is due every keepAliveEvery.
const renewWaitLimit = 10 * time.Second
