package broken

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
	"github.com/durable-go/durable/internal/exactmem"
)

// Writes coalesced wrongly: bugs that show only when many writes go
// through one client at once (the RacingWrites group). Each client keeps
// its own state, as a coalescing backend instance does; writes through
// different clients never meet, so the scenarios that race several
// clients, one write each, do not see these bugs.
func init() {
	register("racing-results-swapped", variant{
		doc:  "writes of one kind in flight at once through one client get each other's results (a batch's rows matched to the wrong callers)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return &resultsSwapped{Backend: b} },
	})
	register("racing-failure-spreads", variant{
		doc: "writes of one kind sent at once through one client are applied as a batch in which the first conditional failure (Conflict, Fenced, a release that found nothing) " +
			"is handed to every later member, unapplied (a pipelined transaction aborted by one row)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return newBatching(b, true) },
	})
	register("coalesces-correctly", variant{
		doc: "writes of one kind sent at once through one client are gathered into batches (internal/coalesce) and each member is applied " +
			"and answered on its own, as a coalescing backend must",
		control: true,
		wrap:    func(b *exactmem.Backend, _ *state) contract.Backend { return newBatching(b, false) },
	})
	register("racing-cas-failure-succeeds", variant{
		doc: "a conditional write (UpdateWorkflow, CompleteKey, RenewKey, RenewLease, ReleaseKey, ReleaseLease) that failed its condition while another of its kind was in flight " +
			"through the same client reports success (a batch's result counted as all rows applied)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &casFailureSucceeds{Backend: b, st: st} },
	})
}

// The write kinds the variants above tell apart.
const (
	kUpdate = iota
	kClaim
	kComplete
	kRenewKey
	kReleaseKey
	kRenewLease
	kReleaseLease
	nKinds
)

// gather is how long the variants hold a write before applying it, so
// that the writes the suite sends at once are in flight together, as they
// would be on a network (a round trip).
const gather = time.Millisecond

// result is what one write returned.
type result struct {
	v   any
	err error
}

// --- racing-results-swapped ---

type resultsSwapped struct {
	*exactmem.Backend
	sw [nKinds]swapper
}

// swapper hands a finished write the result of another of its kind that
// finishes while it is still in flight.
type swapper struct {
	mu       sync.Mutex
	inflight int
	parked   *parked
}

type parked struct {
	res result
	ch  chan result
}

func (s *swapper) do(f func() result) result {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
	time.Sleep(gather)
	r := f()
	s.mu.Lock()
	s.inflight--
	if p := s.parked; p != nil {
		s.parked = nil
		s.mu.Unlock()
		p.ch <- r // the bug: each gets the other's
		return p.res
	}
	if s.inflight > 0 {
		p := &parked{res: r, ch: make(chan result, 1)}
		s.parked = p
		s.mu.Unlock()
		return <-p.ch // another write in flight finishes and swaps with this one
	}
	s.mu.Unlock()
	return r
}

func as[T any](r result) (T, error) {
	v, _ := r.v.(T)
	return v, r.err
}

func (b *resultsSwapped) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	return as[contract.Workflow](b.sw[kUpdate].do(func() result { w, err := b.Backend.UpdateWorkflow(ctx, u); return result{w, err} }))
}

func (b *resultsSwapped) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	return as[contract.Claim](b.sw[kClaim].do(func() result { c, err := b.Backend.ClaimKey(ctx, req); return result{c, err} }))
}

func (b *resultsSwapped) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	return as[contract.KeyRecord](b.sw[kComplete].do(func() result { r, err := b.Backend.CompleteKey(ctx, c); return result{r, err} }))
}

func (b *resultsSwapped) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	return as[contract.KeyRecord](b.sw[kRenewKey].do(func() result { r, err := b.Backend.RenewKey(ctx, k, token, ttl); return result{r, err} }))
}

func (b *resultsSwapped) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	return as[bool](b.sw[kReleaseKey].do(func() result { ok, err := b.Backend.ReleaseKey(ctx, k, token); return result{ok, err} }))
}

func (b *resultsSwapped) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	return as[contract.Lease](b.sw[kRenewLease].do(func() result { r, err := b.Backend.RenewLease(ctx, l, ttl); return result{r, err} }))
}

func (b *resultsSwapped) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	return as[bool](b.sw[kReleaseLease].do(func() result { ok, err := b.Backend.ReleaseLease(ctx, l); return result{ok, err} }))
}

// --- racing-failure-spreads and coalesces-correctly ---

// failureSpreads batches the writes of each kind with internal/coalesce
// and applies a batch's members in order; with spread, only until one
// fails its condition.
type failureSpreads struct {
	*exactmem.Backend
	b [nKinds]*coalesce.Batcher[func() result, result]
}

func newBatching(m *exactmem.Backend, spread bool) *failureSpreads {
	f := &failureSpreads{Backend: m}
	flush := func(_ context.Context, calls []func() result) []coalesce.Result[result] {
		time.Sleep(gather) // the round trip, during which the next batch gathers
		out := make([]coalesce.Result[result], len(calls))
		var failed *result
		for i, call := range calls {
			if failed != nil {
				out[i].Val = *failed // the bug: not applied, and another's failure
				continue
			}
			r := call()
			out[i].Val = r
			if spread && conditionFailed(r) {
				failed = &r
			}
		}
		return out
	}
	for k := range f.b {
		f.b[k] = coalesce.New(flush, coalesce.Options{})
	}
	return f
}

// conditionFailed reports whether a write failed its condition.
func conditionFailed(r result) bool {
	switch contract.CodeOf(r.err) {
	case contract.Conflict, contract.Fenced, contract.Terminal, contract.KeyConflict, contract.NotFound:
		return true
	}
	ok, isBool := r.v.(bool)
	return r.err == nil && isBool && !ok
}

func (f *failureSpreads) do(ctx context.Context, k int, call func() result) result {
	r, err := f.b[k].Do(ctx, call)
	if err != nil {
		return result{err: err}
	}
	return r
}

func (f *failureSpreads) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	return as[contract.Workflow](f.do(ctx, kUpdate, func() result { w, err := f.Backend.UpdateWorkflow(ctx, u); return result{w, err} }))
}

func (f *failureSpreads) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	return as[contract.Claim](f.do(ctx, kClaim, func() result { c, err := f.Backend.ClaimKey(ctx, req); return result{c, err} }))
}

func (f *failureSpreads) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	return as[contract.KeyRecord](f.do(ctx, kComplete, func() result { r, err := f.Backend.CompleteKey(ctx, c); return result{r, err} }))
}

func (f *failureSpreads) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	return as[contract.KeyRecord](f.do(ctx, kRenewKey, func() result { r, err := f.Backend.RenewKey(ctx, k, token, ttl); return result{r, err} }))
}

func (f *failureSpreads) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	return as[bool](f.do(ctx, kReleaseKey, func() result { ok, err := f.Backend.ReleaseKey(ctx, k, token); return result{ok, err} }))
}

func (f *failureSpreads) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	return as[contract.Lease](f.do(ctx, kRenewLease, func() result { r, err := f.Backend.RenewLease(ctx, l, ttl); return result{r, err} }))
}

func (f *failureSpreads) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	return as[bool](f.do(ctx, kReleaseLease, func() result { ok, err := f.Backend.ReleaseLease(ctx, l); return result{ok, err} }))
}

// --- racing-cas-failure-succeeds ---

type casFailureSucceeds struct {
	*exactmem.Backend
	st *state
	mu sync.Mutex
	// Per kind: writes in flight, and writes begun so far.
	inflight, begun [nKinds]int
}

// raced runs f and reports whether another write of kind k was in flight
// through this client at any moment while f was.
func (b *casFailureSucceeds) raced(k int, f func()) bool {
	b.mu.Lock()
	b.inflight[k]++
	overlap, seq := b.inflight[k] > 1, b.begun[k]
	b.begun[k]++
	b.mu.Unlock()
	time.Sleep(gather)
	f()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight[k]--
	return overlap || b.begun[k] != seq+1
}

func (b *casFailureSucceeds) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	var w contract.Workflow
	var err error
	if b.raced(kUpdate, func() { w, err = b.Backend.UpdateWorkflow(ctx, u) }) && contract.CodeOf(err) == contract.Conflict {
		now := b.st.now()
		return contract.Workflow{ // the bug
			Scope: u.Scope, ID: u.ID, RequestID: u.RequestID, Status: u.Status, Revision: max(u.ExpectRevision, 1) + 1,
			Snapshot: u.Snapshot, CreatedAt: now, UpdatedAt: now,
		}, nil
	}
	return w, err
}

func (b *casFailureSucceeds) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	var r contract.KeyRecord
	var err error
	if b.raced(kComplete, func() { r, err = b.Backend.CompleteKey(ctx, c) }) && contract.CodeOf(err) == contract.Fenced {
		now := b.st.now()
		o := c.Outcome
		return contract.KeyRecord{ // the bug
			KeyRef: c.KeyRef, State: contract.KeyCompleted, Outcome: &o, CreatedAt: now, CompletedAt: now,
			ExpiresAt: now.Add(c.Retain), ForgetAt: now.Add(max(c.Retain, c.Tombstone)),
		}, nil
	}
	return r, err
}

func (b *casFailureSucceeds) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	var r contract.KeyRecord
	var err error
	if b.raced(kRenewKey, func() { r, err = b.Backend.RenewKey(ctx, k, token, ttl) }) && contract.CodeOf(err) == contract.Fenced {
		now := b.st.now()
		return contract.KeyRecord{KeyRef: k, State: contract.KeyClaimed, LeaseUntil: now.Add(ttl), CreatedAt: now}, nil // the bug
	}
	return r, err
}

func (b *casFailureSucceeds) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	var ok bool
	var err error
	if b.raced(kReleaseKey, func() { ok, err = b.Backend.ReleaseKey(ctx, k, token) }) && err == nil && !ok {
		return true, nil // the bug
	}
	return ok, err
}

func (b *casFailureSucceeds) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	var r contract.Lease
	var err error
	if b.raced(kRenewLease, func() { r, err = b.Backend.RenewLease(ctx, l, ttl) }) && contract.CodeOf(err) == contract.Fenced {
		l.ExpiresAt = b.st.now().Add(ttl)
		return l, nil // the bug
	}
	return r, err
}

func (b *casFailureSucceeds) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	var ok bool
	var err error
	if b.raced(kReleaseLease, func() { ok, err = b.Backend.ReleaseLease(ctx, l) }) && err == nil && !ok {
		return true, nil // the bug
	}
	return ok, err
}
