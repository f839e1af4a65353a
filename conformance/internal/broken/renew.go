package broken

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Batched lease renewal (contract.LeaseRenewer).
func init() {
	register("renew-leases-whole-batch-fails", variant{
		doc:  "RenewLeases fails the whole batch with Fenced when one lease in it is no longer held",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return renewLeasesAllOrNothing{b} },
	})
	register("renew-leases-revives-expired", variant{
		doc:  "RenewLeases reports a lease that expired (but was not taken over) as renewed, checking only owner and token",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return renewLeasesRevives{b, st} },
	})
	register("renew-leases-ignores-scope", variant{
		doc:  "RenewLeases looks every lease up in the unscoped namespace, whatever its scope",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return renewLeasesIgnoresScope{b} },
	})
	register("renew-leases-drops-duplicates", variant{
		doc:  "RenewLeases renews a lease given twice once and reports the second occurrence Fenced (rows matched by position)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return renewLeasesDropsDuplicates{b} },
	})
}

// declines declines LeaseRenewer too (see backend.go): the Store falls
// back to one RenewLease per lease.
func (d declines) RenewLeases(context.Context, []contract.Lease, time.Duration) ([]contract.LeaseRenewal, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "batched renewal is not supported here"}
}

type renewLeasesAllOrNothing struct{ *exactmem.Backend }

func (b renewLeasesAllOrNothing) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out, err := b.Backend.RenewLeases(ctx, leases, ttl)
	if err != nil {
		return nil, err
	}
	for _, o := range out {
		if o.Err != nil {
			return nil, o.Err // the bug
		}
	}
	return out, nil
}

type renewLeasesRevives struct {
	*exactmem.Backend
	st *state
}

func (b renewLeasesRevives) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out, err := b.Backend.RenewLeases(ctx, leases, ttl)
	if err != nil {
		return nil, err
	}
	for i, o := range out {
		if o.Err == nil {
			continue
		}
		cur, err := b.Backend.GetLease(ctx, leases[i].Scope, leases[i].Resource)
		if err == nil && cur.Owner == leases[i].Owner && cur.Token == leases[i].Token {
			cur.ExpiresAt = b.st.now().Add(ttl) // the bug: expiry not checked
			out[i] = contract.LeaseRenewal{Lease: cur}
		}
	}
	return out, nil
}

type renewLeasesIgnoresScope struct{ *exactmem.Backend }

func (b renewLeasesIgnoresScope) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	unscoped := make([]contract.Lease, len(leases))
	for i, l := range leases {
		l.Scope = "" // the bug
		unscoped[i] = l
	}
	out, err := b.Backend.RenewLeases(ctx, unscoped, ttl)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Err == nil {
			out[i].Lease.Scope = leases[i].Scope
		}
	}
	return out, nil
}

type renewLeasesDropsDuplicates struct{ *exactmem.Backend }

func (b renewLeasesDropsDuplicates) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out, err := b.Backend.RenewLeases(ctx, leases, ttl)
	if err != nil {
		return nil, err
	}
	seen := map[contract.Lease]bool{}
	for i, l := range leases {
		if seen[l] && out[i].Err == nil {
			out[i] = contract.LeaseRenewal{Err: &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}} // the bug
		}
		seen[l] = true
	}
	return out, nil
}
