package sqlite

import (
	"context"
	"database/sql"

	"github.com/durable-go/durable/contract"
)

var _ contract.PermitAcquirer = (*Backend)(nil)

// sqlPermitsHeld lists the resources of a semaphore's permits that
// AcquireLease would not grant (expired no more than the tolerance ago, or
// not at all): the rows of the primary key's range (scope, "R#") to
// (scope, "R$"), which holds exactly the resources "R#…", since '$' follows
// '#' and an identifier has neither.
const sqlPermitsHeld = `SELECT resource FROM leases WHERE scope = ? AND resource > ? AND resource < ? AND expires_at >= ?`

// AcquirePermit implements contract.PermitAcquirer in one BEGIN IMMEDIATE
// transaction: one range read of the primary key finds the permits that
// are held, and the lowest free one among 1–req.Permits is granted with
// AcquireLease's statements (the token from the one lease_tokens counter,
// the value stored). SQLite's write lock, held from BEGIN to COMMIT in
// every process, keeps another caller from granting a permit in between,
// so no more than req.Permits holders are ever live.
func (b *Backend) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	var out contract.Lease
	gone, err := b.write(ctx, func(ctx context.Context) error {
		out = contract.Lease{}
		now := b.now()
		held := make([]bool, req.Permits+1)
		err := b.ws.query(ctx, sqlPermitsHeld,
			[]any{string(req.Scope), req.Resource + contract.PermitSeparator, req.Resource + "$", now - micros(b.tol)},
			func(r *sql.Rows) error {
				var resource string
				if err := r.Scan(&resource); err != nil {
					return err
				}
				if base, n, ok := contract.SplitPermit(resource); ok && base == req.Resource && n <= req.Permits {
					held[n] = true
				}
				return nil
			})
		if err != nil {
			return err
		}
		for n := 1; n <= req.Permits; n++ {
			if !held[n] {
				out, err = b.grant(ctx, req.Lease(n), now)
				return err
			}
		}
		return &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
	}, func(err error) {
		if out.Resource != "" {
			// Granted (or, with an unknown outcome, perhaps granted).
			b.signalLease(err, req.Scope, out.Resource)
		}
	})
	if gone || err != nil {
		return contract.Lease{}, err
	}
	return out, nil
}
