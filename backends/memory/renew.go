package memory

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseRenewer = (*Backend)(nil)

// RenewLeases implements contract.LeaseRenewer: every lease judged as
// RenewLease judges it, under one lock and one reading of the clock. A
// lease given twice is renewed twice to the same ExpiresAt: the same
// outcome.
func (b *Backend) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	now := b.s.now()
	until := now.Add(ttl)
	out := make([]contract.LeaseRenewal, len(leases))
	for i, l := range leases {
		k := recKey{l.Scope, l.Resource}
		cur, ok := b.s.leases[k]
		switch {
		case !ok || cur.Owner != l.Owner || cur.Token != l.Token || !cur.ExpiresAt.After(now.Add(b.s.tolerance)):
			out[i].Err = &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
			continue
		default:
			next := *cur
			next.ExpiresAt = until
			b.s.leases[k] = &next // the set of ids is unchanged (see putLease)
			cur = &next
		}
		out[i].Lease = *cur
	}
	return out, nil
}
