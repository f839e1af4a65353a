package postgres

import (
	"context"
	"database/sql"

	"github.com/durable-go/durable/contract"
)

var _ contract.RecordLister = (*Backend)(nil)

// ListKeys implements contract.RecordLister. One statement (qListKeys,
// with or without the state filter). Each row is decoded as GetKey decodes
// its row, so a completed key whose stored outcome cannot be decoded fails
// the whole page with the same Corrupt error (no key, no user data in it).
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	out := make([]contract.KeyRecord, 0, min(max(q.Limit, 1), 128))
	// One scan target for every row: each scan allocates fresh strings,
	// times and bytes, so the records copied out never alias.
	var r keyRow
	reset := func() { out = out[:0] }
	row := func() error {
		rec, err := r.record()
		if err != nil {
			return err
		}
		out = append(out, rec)
		return nil
	}
	s, args := b.listKeysStatement(q)
	if err := s.each(ctx, b, args, r.dest(), reset, row); err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// ListLeases implements contract.RecordLister. One statement (see
// listLeasesStatement).
func (b *Backend) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	out := make([]contract.Lease, 0, min(max(q.Limit, 1), 128))
	var r listedLeaseRow
	reset := func() { out = out[:0] }
	row := func() error {
		out = append(out, r.lease(contract.Scope(r.scope), r.resource))
		return nil
	}
	s, args := b.listLeasesStatement(q)
	if err := s.each(ctx, b, args, r.dest(), reset, row); err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// --- the parameters of each statement, from the request (see
// workflows.go) ---

// pageLimit is a page size as @limit: 0 is NULL, no limit.
func pageLimit(n int) sql.Null[int] { return sql.Null[int]{V: n, Valid: n > 0} }

// listKeysStatement returns the statement ListKeys sends for q and its
// arguments: one statement, whatever the state filter.
func (b *Backend) listKeysStatement(q contract.KeyListQuery) (*statement, []any) {
	return qListKeys.statement, qListKeys.args(listKeysParams{
		Now: b.nowParam(), Scope: q.Scope, After: q.After, Limit: pageLimit(q.Limit), State: q.State,
	})
}

// listLeasesStatement returns the statement ListLeases sends for q (every
// lease not released, or only the held ones) and its arguments.
func (b *Backend) listLeasesStatement(q contract.LeaseListQuery) (*statement, []any) {
	if !q.Held {
		return qListLeases.statement, qListLeases.args(listLeasesParams{Scope: q.Scope, After: q.After, Limit: pageLimit(q.Limit)})
	}
	return qListLeasesHeld.statement, qListLeasesHeld.args(listLeasesHeldParams{
		Now: b.nowParam(), Scope: q.Scope, After: q.After, Limit: pageLimit(q.Limit),
	})
}
