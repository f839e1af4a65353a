package memory

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
	"github.com/durable-go/durable/internal/outcomecodec"
)

// notify wakes every WaitKey on k. s.mu must be held.
func (s *Storage) notify(k recKey) {
	if len(s.waiters) == 0 {
		return // the usual case: no lookup
	}
	ws, ok := s.waiters[k]
	if !ok {
		return
	}
	for _, ch := range ws {
		close(ch)
	}
	delete(s.waiters, k)
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

// errOutcomeExpired is ClaimKey's answer for the same request on a
// tombstone.
func errOutcomeExpired() error {
	return &contract.Error{Code: contract.OutcomeExpired, Msg: "the key's outcome is no longer retained; the request must not run again"}
}

// ClaimKey implements contract.IdempotencyStore. A request with its own
// token (ClaimRequest.Token) stores that token, and gets its own claim back
// (claimrule's Held) while nobody has reclaimed or completed it.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	k, err := b.lock(ctx, req.Scope, req.Key)
	if err != nil {
		return contract.Claim{}, err
	}
	defer b.s.mu.Unlock()
	now := b.s.now()
	r, ok := b.s.keys[k]
	var f claimrule.Facts // no record
	if ok {
		f = claimrule.Stored{
			Live:      r.live(now),
			Lapsed:    r.lapsed(now, b.s.tolerance),
			Match:     claimrule.SameRequest(r.fingerprint(), r.workflowID(), req.Fingerprint, req.WorkflowID),
			Completed: r.completed,
			Expired:   r.expired(now),
			Own:       !r.completed && req.Token != "" && r.token() == req.Token,
		}.Facts()
	}
	switch claimrule.Decide(f) {
	case claimrule.Conflict:
		return contract.Claim{}, &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
	case claimrule.Gone:
		return contract.Claim{}, errOutcomeExpired()
	case claimrule.Replay:
		return contract.Claim{Kind: contract.ClaimCompleted, Record: r.record(now, true)}, nil
	case claimrule.InFlight:
		return contract.Claim{Kind: contract.ClaimInFlight, Record: r.record(now, true)}, nil
	case claimrule.Held:
		// The caller's own claim, whose reply it lost: its lease starts
		// again; the strings are unchanged, so no index changes.
		r.until = micros(now.Add(req.TTL))
		b.s.keys[r.id()] = r
		return contract.Claim{Kind: contract.ClaimNew, Token: r.token(), Record: r.record(now, false)}, nil
	case claimrule.Reclaim:
		// An abandoned claim: take it over with a new token.
		var nr keyRec
		if req.Token != "" {
			nr = r.withData(req.Token, nil)
		} else {
			tok := newToken()
			nr = r.withData(string(tok[:]), nil)
		}
		nr.until = micros(now.Add(req.TTL))
		b.s.putKey(r, true, nr)
		return contract.Claim{Kind: contract.ClaimReclaimed, Token: nr.token(), Record: nr.record(now, true)}, nil
	}
	// New: no record, or a completed one past its tombstone.
	var nr keyRec
	if req.Token != "" {
		nr = newKeyRec(req.Scope, req.Key, req.Fingerprint, req.WorkflowID, req.Token, nil)
	} else {
		tok := newToken()
		nr = newKeyRec(req.Scope, req.Key, req.Fingerprint, req.WorkflowID, string(tok[:]), nil)
	}
	nr.until, nr.createdAt = micros(now.Add(req.TTL)), micros(now)
	b.s.putKey(r, ok, nr) // replaces r, a forgotten record, if any
	return contract.Claim{Kind: contract.ClaimNew, Token: nr.token(), Record: nr.record(now, false)}, nil
}

// CompleteKey implements contract.IdempotencyStore. A retry with the same
// token on the record it completed returns that record: the outcome, or,
// past ExpiresAt, its tombstone.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	k, err := b.lock(ctx, c.Scope, c.Key)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	defer b.s.mu.Unlock()
	now := b.s.now()
	r, ok := b.s.keys[k]
	if !ok || !r.live(now) || r.token() != c.Token {
		return contract.KeyRecord{}, errFencedKey()
	}
	if r.completed {
		return r.record(now, true), nil // a retry after a lost reply
	}
	if c.Fence != nil && !b.s.fenceValid(c.Scope, c.Fence, now) {
		return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	nr := r.withData(r.token(), &c.Outcome)
	nr.completed = true
	nr.completedAt, nr.expiresAt = micros(now), micros(now.Add(c.Retain))
	nr.until = micros(now.Add(max(c.Retain, c.Tombstone))) // ForgetAt
	b.s.putKey(r, true, nr)
	b.s.notify(k)
	out := nr.record(now, false)
	if out.State == contract.KeyExpired {
		return out, nil // Retain 0 (the Store never sends it): already a tombstone
	}
	// The caller gets its own outcome back, as CreateWorkflow returns the
	// caller's snapshot: the store keeps a private copy, so a second one
	// is not needed. Only a header name with an empty, non-nil value list
	// needs a copy, to read back with a nil list like every other read.
	o := c.Outcome
	if hasEmptyValues(o.Header) {
		o.Header = outcomecodec.CloneHeader(o.Header)
	}
	out.Outcome = &o
	return out, nil
}

// RenewKey implements contract.IdempotencyStore.
func (b *Backend) RenewKey(ctx context.Context, ref contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	k, err := b.lock(ctx, ref.Scope, ref.Key)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	defer b.s.mu.Unlock()
	r, ok := b.s.keys[k]
	if !ok || r.completed || r.token() != token {
		return contract.KeyRecord{}, errFencedKey()
	}
	now := b.s.now()
	r.until = micros(now.Add(ttl))
	b.s.keys[r.id()] = r // the same data: no index changes
	return r.record(now, false), nil
}

// ReleaseKey implements contract.IdempotencyStore.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	k, err := b.lock(ctx, ref.Scope, ref.Key)
	if err != nil {
		return false, err
	}
	defer b.s.mu.Unlock()
	r, ok := b.s.keys[k]
	if !ok || r.completed || r.token() != token {
		return false, nil
	}
	b.s.deleteKey(k)
	b.s.notify(k)
	return true, nil
}

// GetKey implements contract.IdempotencyStore.
func (b *Backend) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	k, err := b.lock(ctx, ref.Scope, ref.Key)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	defer b.s.mu.Unlock()
	r, ok := b.s.keys[k]
	now := b.s.now()
	if !ok || !r.live(now) {
		return contract.KeyRecord{}, &contract.Error{Code: contract.NotFound, Msg: "key not found"}
	}
	return r.record(now, true), nil
}

// WaitKey implements contract.KeyWaiter: it sleeps on a channel that
// CompleteKey, ReleaseKey and Cleanup close. A tombstone ends the wait
// like a completion (the record reads as KeyExpired).
func (b *Backend) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	k := recKey{ref.Scope, ref.Key}
	for {
		if err := b.check(ctx); err != nil {
			return contract.KeyRecord{}, err
		}
		b.s.mu.Lock()
		r, ok := b.s.keys[k]
		now := b.s.now()
		if !ok || !r.live(now) {
			b.s.mu.Unlock()
			return contract.KeyRecord{}, &contract.Error{Code: contract.NotFound, Msg: "key not found"}
		}
		if r.completed { // its outcome, or its tombstone
			out := r.record(now, true)
			b.s.mu.Unlock()
			return out, nil
		}
		ch := make(chan struct{})
		b.s.waiters[k] = append(b.s.waiters[k], ch)
		b.s.mu.Unlock()
		select {
		case <-ch:
		case <-b.done:
			b.forget(k, ch)
			return contract.KeyRecord{}, &contract.Error{Code: contract.Closed, Msg: "backend is closed"}
		case <-ctx.Done():
			b.forget(k, ch)
			return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
		}
	}
}

// forget removes the waiter ch of key k.
func (b *Backend) forget(k recKey, ch chan struct{}) {
	b.s.mu.Lock()
	ws := b.s.waiters[k]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(b.s.waiters, k)
	} else {
		b.s.waiters[k] = ws
	}
	b.s.mu.Unlock()
}
