package postgres

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
)

type leaseRow struct {
	owner             string
	token             int64
	acquired, expires time.Time
}

func (r *leaseRow) dest() []any { return []any{&r.owner, &r.token, &r.acquired, &r.expires} }

func (r *leaseRow) lease(scope contract.Scope, resource string) contract.Lease {
	return contract.Lease{
		Scope: scope, Resource: resource, Owner: r.owner, Token: r.token,
		AcquiredAt: utc(r.acquired), ExpiresAt: utc(r.expires),
	}
}

// AcquireLease implements contract.LeaseStore. One statement: an INSERT
// whose ON CONFLICT branch takes over a released lease or one that expired
// more than the tolerance ago.
//
// Tokens come from one sequence that never cycles. A takeover draws its
// token in the ON CONFLICT DO UPDATE branch, after it has locked the row, so
// it is greater than the token it replaces. ReleaseLease keeps the row
// (marked released) and only Cleanup deletes rows, and only those expired
// more than the tolerance ago, so the insert branch runs only for a
// resource that has no row.
//
// Residual hazard: the insert branch draws its token before PostgreSQL
// checks the primary key. If, between those two moments, another client
// acquires the same resource (a larger token), that grant expires beyond
// the tolerance, and Cleanup deletes its row, the insert then succeeds with
// the smaller token. This needs one statement to stall between evaluating
// its row and inserting it for longer than another grant's whole TTL (at
// least 1 s) plus the tolerance, with a cleanup pass in that window. Within
// durable this is harmless, because a fence is valid only while it matches
// the stored row's owner and token, and the smaller grant is the only row.
// An external system that keeps the highest token it has seen, however,
// would reject the new holder as stale until its next grant.
func (b *Backend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	var r leaseRow
	var found bool
	err := b.do(ctx, write, func() (err error) {
		found, err = b.q.queryRow(ctx, write, b.st.acquireLease, []any{
			b.now(), b.tolSecs, string(req.Scope), req.Resource, req.Owner, seconds(req.TTL),
		}, r.dest()...)
		return err
	})
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "lease is held"}
	}
	return r.lease(req.Scope, req.Resource), nil
}

// RenewLease implements contract.LeaseStore. One statement.
func (b *Backend) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	var r leaseRow
	var found bool
	err := b.do(ctx, write, func() (err error) {
		found, err = b.q.queryRow(ctx, write, b.st.renewLease, []any{
			b.now(), b.tolSecs, string(l.Scope), l.Resource, l.Owner, l.Token, seconds(ttl),
		}, r.dest()...)
		return err
	})
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		return contract.Lease{}, &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
	}
	return r.lease(l.Scope, l.Resource), nil
}

// ReleaseLease implements contract.LeaseStore. One statement. The row is
// kept, marked released, until Cleanup; to every other operation it is
// gone.
func (b *Backend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	var token int64
	var found bool
	err := b.do(ctx, write, func() (err error) {
		found, err = b.q.queryRow(ctx, write, b.st.releaseLease, []any{
			b.now(), string(l.Scope), l.Resource, l.Owner, l.Token,
		}, &token)
		return err
	})
	return found, err
}

// GetLease implements contract.LeaseStore. One statement.
func (b *Backend) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	var r leaseRow
	var found bool
	err := b.do(ctx, read, func() (err error) {
		found, err = b.q.queryRow(ctx, read, b.st.getLease, []any{string(scope), resource}, r.dest()...)
		return err
	})
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		return contract.Lease{}, &contract.Error{Code: contract.NotFound, Msg: "lease not found"}
	}
	return r.lease(scope, resource), nil
}

// Cleanup implements contract.Backend. One statement deletes, each kind
// bounded by req.Limit, terminal workflows not updated for TerminalAge,
// completed keys past retention, claims and leases expired more than the
// tolerance ago (and released leases past it), and notifies waiters of the
// deleted keys.
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	var res contract.CleanupResult
	var w, k, l, notified int64
	limit := req.Limit
	if limit <= 0 {
		limit = 1000
	}
	err := b.do(ctx, write, func() error {
		_, err := b.q.queryRow(ctx, write, b.st.cleanup, []any{
			b.now(), b.tolSecs, seconds(req.TerminalAge), limit, b.channel,
		}, &w, &k, &l, &res.More, &notified)
		return err
	})
	if err != nil {
		return contract.CleanupResult{}, err
	}
	res.Workflows, res.Keys, res.Leases = int(w), int(k), int(l)
	return res, nil
}

// CountCleanup implements contract.CleanupCounter: what Cleanup would
// delete now, deleting nothing. One read-only statement.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	var w, k, l int64
	limit := req.Limit
	if limit <= 0 {
		limit = 1000
	}
	err := b.do(ctx, read, func() error {
		_, err := b.q.queryRow(ctx, read, b.st.countCleanup, []any{
			b.now(), b.tolSecs, seconds(req.TerminalAge), limit,
		}, &w, &k, &l)
		return err
	})
	if err != nil {
		return contract.CleanupResult{}, err
	}
	lim := int64(limit)
	return contract.CleanupResult{
		Workflows: int(min(w, lim)), Keys: int(min(k, lim)), Leases: int(min(l, lim)),
		More: w > lim || k > lim || l > lim,
	}, nil
}
