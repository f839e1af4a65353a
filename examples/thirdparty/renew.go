package thirdparty

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseRenewer = (*Counting)(nil)

// RenewLeases forwards the optional LeaseRenewer capability. Without it the
// Store renews the batch with one RenewLease per lease, which this
// decorator counts one by one.
func (c *Counting) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	c.count("RenewLeases")
	if r, ok := c.next.(contract.LeaseRenewer); ok {
		return r.RenewLeases(ctx, leases, ttl)
	}
	return nil, declined("LeaseRenewer")
}
