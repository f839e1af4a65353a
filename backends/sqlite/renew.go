package sqlite

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseRenewer = (*Backend)(nil)

// RenewLeases implements contract.LeaseRenewer: one BEGIN IMMEDIATE
// transaction renews the whole batch, on one reading of the clock, each
// lease judged as RenewLease judges it (held by its owner and token and
// expiring more than the tolerance after now) and keeping its stored
// value. A lease not renewed is Fenced; a lease given twice is renewed
// once and both positions get the same outcome.
func (b *Backend) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out := make([]contract.LeaseRenewal, len(leases))
	gone, err := b.write(ctx, func(ctx context.Context) error {
		now := b.now()
		expires := now + micros(ttl)
		first := make(map[contract.Lease]int, len(leases)) // the position that decided each lease
		for i, l := range leases {
			out[i] = contract.LeaseRenewal{}
			k := contract.Lease{Scope: l.Scope, Resource: l.Resource, Owner: l.Owner, Token: l.Token}
			if j, ok := first[k]; ok {
				out[i] = out[j]
				continue
			}
			first[k] = i
			r, err := b.renew(ctx, l, now, expires)
			if contract.CodeOf(err) == contract.Fenced {
				out[i].Err = err
				continue
			}
			if err != nil {
				return err
			}
			out[i].Lease = r
		}
		return nil
	}, nil)
	if gone || err != nil {
		return nil, err
	}
	return out, nil
}
