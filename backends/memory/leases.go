package memory

import (
	"context"
	"math"
	"time"

	"github.com/durable-go/durable/contract"
)

// nextToken issues a fencing token, or fails when the counter is at its
// maximum: tokens never wrap. s.mu must be held.
func (s *Storage) nextToken() (int64, error) {
	if s.tokens == math.MaxInt64 {
		return 0, contract.TokensExhausted(nil)
	}
	s.tokens++
	return s.tokens, nil
}

// AcquireLease implements contract.LeaseStore.
func (b *Backend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	k, err := b.lock(ctx, req.Scope, req.Resource)
	if err != nil {
		return contract.Lease{}, err
	}
	defer b.s.mu.Unlock()
	now := b.s.now()
	if !b.s.leaseFree(k, now) {
		return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "lease is held"}
	}
	return b.s.grantLease(k, req, now)
}

// leaseFree reports whether AcquireLease would grant the lease on k at
// now: none is stored, or it expired more than the tolerance ago. s.mu
// must be held.
func (s *Storage) leaseFree(k recKey, now time.Time) bool {
	l, ok := s.leases[k]
	return !ok || l.ExpiresAt.Add(s.tolerance).Before(now)
}

// grantLease stores a new grant of req on k with a fresh token. s.mu must
// be held.
func (s *Storage) grantLease(k recKey, req contract.LeaseRequest, now time.Time) (contract.Lease, error) {
	token, err := s.nextToken()
	if err != nil {
		return contract.Lease{}, err
	}
	l := &contract.Lease{
		Scope: req.Scope, Resource: req.Resource, Owner: req.Owner,
		Token: token, AcquiredAt: now, ExpiresAt: now.Add(req.TTL), Value: req.Value,
	}
	s.putLease(k, l)
	return *l, nil
}

// RenewLease implements contract.LeaseStore.
func (b *Backend) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	k, err := b.lock(ctx, l.Scope, l.Resource)
	if err != nil {
		return contract.Lease{}, err
	}
	defer b.s.mu.Unlock()
	now := b.s.now()
	cur, ok := b.s.leases[k]
	if !ok || cur.Owner != l.Owner || cur.Token != l.Token || !cur.ExpiresAt.After(now.Add(b.s.tolerance)) {
		return contract.Lease{}, &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
	}
	next := *cur
	next.ExpiresAt = now.Add(ttl)
	b.s.leases[k] = &next
	return next, nil
}

// ReleaseLease implements contract.LeaseStore.
func (b *Backend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	k, err := b.lock(ctx, l.Scope, l.Resource)
	if err != nil {
		return false, err
	}
	defer b.s.mu.Unlock()
	cur, ok := b.s.leases[k]
	if !ok || cur.Owner != l.Owner || cur.Token != l.Token {
		return false, nil
	}
	b.s.deleteLease(k)
	return true, nil
}

// GetLease implements contract.LeaseStore.
func (b *Backend) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	k, err := b.lock(ctx, scope, resource)
	if err != nil {
		return contract.Lease{}, err
	}
	defer b.s.mu.Unlock()
	l, ok := b.s.leases[k]
	if !ok {
		return contract.Lease{}, &contract.Error{Code: contract.NotFound, Msg: "lease not found"}
	}
	return *l, nil
}

// Cleanup implements contract.Backend. Each kind is bounded by req.Limit;
// More is set when a kind had more to delete than the limit allowed.
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, true)
}

// CountCleanup implements contract.CleanupCounter.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, false)
}

func (b *Backend) cleanup(ctx context.Context, req contract.CleanupRequest, del bool) (contract.CleanupResult, error) {
	if err := b.check(ctx); err != nil {
		return contract.CleanupResult{}, err
	}
	now := b.s.now()
	tol := b.s.tolerance
	var res contract.CleanupResult
	// take counts one record of a kind against the limit; false means the
	// limit was reached and there is more.
	take := func(n *int) bool {
		if *n == req.Limit {
			res.More = true
			return false
		}
		*n++
		return true
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for k, w := range b.s.workflows {
		if w.Status.Terminal() && !w.UpdatedAt.Add(req.TerminalAge).After(now) {
			if !take(&res.Workflows) {
				break
			}
			if del {
				b.s.deleteWorkflow(k)
			}
		}
	}
	// Keys: a tombstone past ForgetAt or an abandoned claim is deleted
	// (Keys); a completed key past ExpiresAt keeps its tombstone and loses
	// its payload (Outcomes). A key whose ForgetAt is its ExpiresAt goes
	// at once.
	for k, r := range b.s.keys {
		switch {
		case !r.live(now) || r.lapsed(now, tol):
			if !take(&res.Keys) {
				continue
			}
			if del {
				b.s.deleteKey(k)
				b.s.notify(k)
			}
		case r.expired(now) && !r.out().dropped():
			if !take(&res.Outcomes) {
				continue
			}
			if del {
				b.s.putKey(r, true, r.withoutPayload())
			}
		}
		if res.More && res.Keys == req.Limit && res.Outcomes == req.Limit {
			break
		}
	}
	for k, l := range b.s.leases {
		if l.ExpiresAt.Add(tol).Before(now) {
			if !take(&res.Leases) {
				break
			}
			if del {
				b.s.deleteLease(k)
			}
		}
	}
	return res, nil
}
