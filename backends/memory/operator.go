package memory

import (
	"context"

	"github.com/durable-go/durable/contract"
)

var (
	_ contract.RecordDeleter = (*Backend)(nil)
	_ contract.RecordLister  = (*Backend)(nil)
)

// DeleteRecord implements contract.RecordDeleter. Fencing tokens come from
// one counter for the whole Storage, so a lease deleted here never lets a
// later grant reuse a token.
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	switch kind {
	case contract.KindWorkflow, contract.KindKey, contract.KindLease:
	default:
		return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
	}
	rk, err := b.lock(ctx, scope, id)
	if err != nil {
		return false, err
	}
	defer b.s.mu.Unlock()
	var found bool
	switch kind {
	case contract.KindWorkflow:
		found = b.s.deleteWorkflow(rk)
	case contract.KindKey:
		found = b.s.deleteKey(rk)
		b.s.notify(rk)
	case contract.KindLease:
		found = b.s.deleteLease(rk)
	}
	return found, nil
}

var _ contract.InProcess = (*Backend)(nil)

// InProcess implements contract.InProcess: every call returns as soon as
// the store's lock allows, so the Store arms no timeout timer for it.
func (b *Backend) InProcess() bool { return true }

// ListKeys implements contract.RecordLister. It walks the index of the
// scope, or of the claimed keys of the scope, from the cursor; completed
// keys past ForgetAt (still stored until Cleanup) are skipped, and those
// past ExpiresAt are listed as their tombstones (KeyExpired, the code
// alone).
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	var out []contract.KeyRecord
	var packed []packedOutcome
	b.s.mu.Lock()
	now := b.s.now()
	visit := func(id string, _ struct{}) bool {
		r, ok := b.s.keys[recKey{q.Scope, id}]
		if ok && (q.State == "" || r.state(now) == q.State) && r.live(now) {
			rec := r.record(now, false) // outcome unpacked below, outside the lock
			p := r.out()
			if rec.State == contract.KeyExpired {
				p = "" // a tombstone: its code is all it shows
			}
			out = append(out, rec)
			packed = append(packed, p)
		}
		return q.Limit <= 0 || len(out) < q.Limit
	}
	if q.State == contract.KeyClaimed {
		b.s.idx.keysClaimed.ascend(q.Scope, q.After, visit)
	} else {
		b.s.idx.keys.ascend(q.Scope, q.After, visit) // completed: skips the few claimed keys
	}
	b.s.mu.Unlock()
	for i := range out {
		if packed[i] != "" {
			out[i].Outcome = packed[i].unpack()
		}
	}
	return out, nil
}

// ListLeases implements contract.RecordLister. It walks the index of the
// scope from the cursor; with Held, expired leases are skipped.
func (b *Backend) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	var out []contract.Lease
	b.s.mu.Lock()
	now := b.s.now()
	b.s.idx.leases.ascend(q.Scope, q.After, func(id string, _ struct{}) bool {
		if l := b.s.leases[recKey{q.Scope, id}]; l != nil && (!q.Held || l.ExpiresAt.After(now)) {
			out = append(out, *l)
		}
		return q.Limit <= 0 || len(out) < q.Limit
	})
	b.s.mu.Unlock()
	return out, nil
}
