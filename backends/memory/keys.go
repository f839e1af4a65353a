package memory

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
)

// live reports whether a key record still counts at now: a completed record
// past ExpiresAt counts as absent.
func (r *keyRec) live(now time.Time) bool {
	return r.rec.State != contract.KeyCompleted || now.Before(r.rec.ExpiresAt)
}

// notify wakes every WaitKey on k. s.mu must be held.
func (s *Storage) notify(k recKey) {
	for _, ch := range s.waiters[k] {
		close(ch)
	}
	delete(s.waiters, k)
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

// ClaimKey implements contract.IdempotencyStore.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	k, err := b.lock(ctx, req.Scope, req.Key)
	if err != nil {
		return contract.Claim{}, err
	}
	defer b.s.mu.Unlock()
	now := b.s.now()
	r, ok := b.s.keys[k]
	if ok && r.live(now) {
		if r.rec.Fingerprint != req.Fingerprint || (req.WorkflowID != "" && req.WorkflowID != r.rec.WorkflowID) {
			return contract.Claim{}, &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
		}
		switch {
		case r.rec.State == contract.KeyCompleted:
			return contract.Claim{Kind: contract.ClaimCompleted, Record: r.record()}, nil
		case !r.rec.LeaseUntil.Add(b.s.tolerance).Before(now):
			return contract.Claim{Kind: contract.ClaimInFlight, Record: r.record()}, nil
		}
		// An abandoned claim: take it over with a new token.
		r.token = newToken()
		r.rec.LeaseUntil = now.Add(req.TTL)
		return contract.Claim{Kind: contract.ClaimReclaimed, Token: r.token, Record: r.record()}, nil
	}
	nr := &keyRec{
		token: newToken(),
		rec: contract.KeyRecord{
			KeyRef: req.KeyRef, Fingerprint: req.Fingerprint, WorkflowID: req.WorkflowID,
			State: contract.KeyClaimed, LeaseUntil: now.Add(req.TTL), CreatedAt: now,
		},
	}
	b.s.putKey(k, r, nr) // replaces (and unindexes) r, an expired record, if any
	return contract.Claim{Kind: contract.ClaimNew, Token: nr.token, Record: nr.record()}, nil
}

// CompleteKey implements contract.IdempotencyStore.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	k, err := b.lock(ctx, c.Scope, c.Key)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	defer b.s.mu.Unlock()
	now := b.s.now()
	r, ok := b.s.keys[k]
	if !ok || !r.live(now) || r.token != c.Token {
		return contract.KeyRecord{}, errFencedKey()
	}
	if r.rec.State == contract.KeyCompleted {
		return r.record(), nil // a retry after a lost reply
	}
	if c.Fence != nil && !b.s.fenceValid(c.Scope, c.Fence, now) {
		return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	b.s.setKeyState(k, r, contract.KeyCompleted)
	r.out = packOutcome(&c.Outcome)
	r.rec.CompletedAt = now
	r.rec.ExpiresAt = now.Add(c.Retain)
	r.rec.LeaseUntil = time.Time{}
	b.s.notify(k)
	// The caller gets its own outcome back, as CreateWorkflow returns the
	// caller's snapshot: the store keeps a private copy, so a second one
	// is not needed.
	out := r.rec
	o := c.Outcome
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
	if !ok || r.rec.State != contract.KeyClaimed || r.token != token {
		return contract.KeyRecord{}, errFencedKey()
	}
	r.rec.LeaseUntil = b.s.now().Add(ttl)
	return r.record(), nil
}

// ReleaseKey implements contract.IdempotencyStore.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	k, err := b.lock(ctx, ref.Scope, ref.Key)
	if err != nil {
		return false, err
	}
	defer b.s.mu.Unlock()
	r, ok := b.s.keys[k]
	if !ok || r.rec.State != contract.KeyClaimed || r.token != token {
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
	if !ok || !r.live(b.s.now()) {
		return contract.KeyRecord{}, &contract.Error{Code: contract.NotFound, Msg: "key not found"}
	}
	return r.record(), nil
}

// WaitKey implements contract.KeyWaiter: it sleeps on a channel that
// CompleteKey, ReleaseKey and Cleanup close.
func (b *Backend) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	k := recKey{ref.Scope, ref.Key}
	for {
		if err := b.check(ctx); err != nil {
			return contract.KeyRecord{}, err
		}
		b.s.mu.Lock()
		r, ok := b.s.keys[k]
		if !ok || !r.live(b.s.now()) {
			b.s.mu.Unlock()
			return contract.KeyRecord{}, &contract.Error{Code: contract.NotFound, Msg: "key not found"}
		}
		if r.rec.State == contract.KeyCompleted {
			out := r.record()
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
