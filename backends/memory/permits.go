package memory

import (
	"context"

	"github.com/durable-go/durable/contract"
)

var _ contract.PermitAcquirer = (*Backend)(nil)

// AcquirePermit implements contract.PermitAcquirer: under the store's lock,
// the lowest-numbered permit that AcquireLease would grant is granted as
// AcquireLease grants it. Tokens come from the store's one counter, so
// they increase across the permits and the plain lease of a resource.
func (b *Backend) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	if err := b.check(ctx); err != nil {
		return contract.Lease{}, err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	now := b.s.now()
	for n := 1; n <= req.Permits; n++ {
		k := recKey{req.Scope, contract.PermitResource(req.Resource, n)}
		if b.s.leaseFree(k, now) {
			return b.s.grantLease(k, req.Lease(n), now)
		}
	}
	return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
}
