package broken

import (
	"context"
	"slices"
	"strings"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// The operator's listings (contract.RecordLister).
func init() {
	register("list-cursor-inclusive", variant{
		doc:  "ListKeys and ListLeases page with Key >= After, so every page repeats the last record of the one before",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return listInclusive{b} },
	})
	register("list-case-insensitive-order", variant{
		doc:  "ListKeys orders and pages keys case-insensitively, as a database collation would, not in byte order",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return listFolded{b} },
	})
	register("list-held-ignored", variant{
		doc:  "ListLeases ignores Held and lists expired leases too",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return listHeldIgnored{b} },
	})
	register("list-state-ignored", variant{
		doc:  "ListKeys ignores the state filter",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return listStateIgnored{b} },
	})
	register("list-keys-past-retention", variant{
		doc:  "ListKeys still lists completed keys past their retention (GetKey says NotFound)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return listPastRetention{b, st} },
	})
}

// all lists every key of the scope in byte order, with the state filter.
func allKeys(ctx context.Context, b *exactmem.Backend, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	q.After, q.Limit = "", 0
	return b.ListKeys(ctx, q)
}

// trim applies a limit of 0 (none) or more.
func trim[T any](s []T, limit int) []T {
	if limit > 0 && len(s) > limit {
		return s[:limit]
	}
	return s
}

type listInclusive struct{ *exactmem.Backend }

func (b listInclusive) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	all, err := allKeys(ctx, b.Backend, q)
	i := 0
	for i < len(all) && all[i].Key < q.After {
		i++
	}
	return trim(all[i:], q.Limit), err
}

func (b listInclusive) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	after, limit := q.After, q.Limit
	q.After, q.Limit = "", 0
	all, err := b.Backend.ListLeases(ctx, q)
	i := 0
	for i < len(all) && all[i].Resource < after {
		i++
	}
	return trim(all[i:], limit), err
}

type listFolded struct{ *exactmem.Backend }

func (b listFolded) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	all, err := allKeys(ctx, b.Backend, q)
	fold := strings.ToLower
	slices.SortStableFunc(all, func(x, y contract.KeyRecord) int { return strings.Compare(fold(x.Key), fold(y.Key)) })
	var out []contract.KeyRecord
	for _, r := range all {
		if fold(r.Key) > fold(q.After) {
			out = append(out, r)
		}
	}
	return trim(out, q.Limit), err
}

type listHeldIgnored struct{ *exactmem.Backend }

func (b listHeldIgnored) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	q.Held = false
	return b.Backend.ListLeases(ctx, q)
}

type listStateIgnored struct{ *exactmem.Backend }

func (b listStateIgnored) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	q.State = ""
	return b.Backend.ListKeys(ctx, q)
}

// listPastRetention remembers every completion and lists it again once
// the memory backend stops listing it.
type listPastRetention struct {
	*exactmem.Backend
	st *state
}

func (b listPastRetention) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	r, err := b.Backend.CompleteKey(ctx, c)
	if err == nil {
		b.st.mu.Lock()
		b.st.completed = append(b.st.completed, r)
		b.st.mu.Unlock()
	}
	return r, err
}

func (b listPastRetention) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	all, err := allKeys(ctx, b.Backend, q)
	if q.State == "" || q.State == contract.KeyCompleted {
		b.st.mu.Lock()
		for _, r := range b.st.completed {
			if r.Scope == q.Scope && !slices.ContainsFunc(all, func(x contract.KeyRecord) bool { return x.Key == r.Key }) {
				all = append(all, r)
			}
		}
		b.st.mu.Unlock()
	}
	slices.SortFunc(all, func(x, y contract.KeyRecord) int { return strings.Compare(x.Key, y.Key) })
	var out []contract.KeyRecord
	for _, r := range all {
		if r.Key > q.After {
			out = append(out, r)
		}
	}
	return trim(out, q.Limit), err
}
