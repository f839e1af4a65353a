package contract

import (
	"context"
	"time"
)

// MaxRenewBatch is the largest number of leases one RenewLeases call
// takes. The Store rejects a longer batch with InvalidArgument before the
// backend sees it.
const MaxRenewBatch = 1000

// LeaseRenewal is the outcome of one lease of a batched renewal (see
// [LeaseRenewer]): the renewed lease (same token, ExpiresAt = now + ttl)
// when Err is nil, or, when that lease is no longer held (expired beyond
// the tolerance's margin, released, taken over, or never held by that
// owner and token), an Err with Code Fenced.
//
// Through the Store's fallback for backends without the capability (one
// RenewLease per lease), Err may also be the error of that lease's own
// call (Unavailable, OutcomeUnknown, Canceled …); like any failed renewal
// it may be retried.
type LeaseRenewal struct {
	Lease Lease
	Err   error
}

// LeaseRenewer is an optional capability of a Backend: it renews a batch
// of leases in one step (one statement, one round trip, on a database
// backend), for a worker that holds many. Each lease is judged exactly as
// RenewLease judges it, on one reading of the store clock for the whole
// batch, and gets its own outcome: the result has one LeaseRenewal per
// lease, in the order given, with Err nil (renewed to now+ttl, token
// unchanged) or Fenced for that lease alone. A lease that appears more than
// once gets the same outcome at each position. The error of the call itself
// is for failures of the whole batch (the backend was unreachable, the
// context ended …), and then nothing about the batch may be assumed, as
// for RenewLease's OutcomeUnknown; it is never Fenced.
//
// The Store guarantees 1 ≤ len(leases) ≤ [MaxRenewBatch], every lease as
// for RenewLease, and ttl as for RenewLease. Without this capability, or
// when it declines at run time with Code Unimplemented, Store.RenewLeases
// calls RenewLease once per lease, with the same outcomes.
type LeaseRenewer interface {
	RenewLeases(ctx context.Context, leases []Lease, ttl time.Duration) ([]LeaseRenewal, error)
}
