package memory

import (
	"context"
	"slices"
	"strings"

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
		_, found = b.s.workflows[rk]
		delete(b.s.workflows, rk)
	case contract.KindKey:
		_, found = b.s.keys[rk]
		delete(b.s.keys, rk)
		b.s.notify(rk)
	case contract.KindLease:
		_, found = b.s.leases[rk]
		delete(b.s.leases, rk)
	}
	return found, nil
}

var _ contract.InProcess = (*Backend)(nil)

// InProcess implements contract.InProcess: every call returns as soon as
// the store's lock allows, so the Store arms no timeout timer for it.
func (b *Backend) InProcess() bool { return true }

// ListKeys implements contract.RecordLister.
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	var out []contract.KeyRecord
	b.s.mu.Lock()
	now := b.s.now()
	for k, r := range b.s.keys {
		if k.scope == q.Scope && k.id > q.After && (q.State == "" || r.rec.State == q.State) && r.live(now) {
			out = append(out, r.rec) // outcome cloned below, after trimming
		}
	}
	b.s.mu.Unlock()
	slices.SortFunc(out, func(a, b contract.KeyRecord) int { return strings.Compare(a.Key, b.Key) })
	out = page(out, q.Limit)
	for i := range out {
		out[i].Outcome = cloneOutcome(out[i].Outcome)
	}
	return out, nil
}

// ListLeases implements contract.RecordLister.
func (b *Backend) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	var out []contract.Lease
	b.s.mu.Lock()
	now := b.s.now()
	for k, l := range b.s.leases {
		if k.scope == q.Scope && k.id > q.After && (!q.Held || l.ExpiresAt.After(now)) {
			out = append(out, *l)
		}
	}
	b.s.mu.Unlock()
	slices.SortFunc(out, func(a, b contract.Lease) int { return strings.Compare(a.Resource, b.Resource) })
	return page(out, q.Limit), nil
}

// page trims a sorted list to the page size (0: no limit).
func page[T any](s []T, limit int) []T {
	if limit > 0 && len(s) > limit {
		return s[:limit]
	}
	return s
}
