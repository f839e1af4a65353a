package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
)

// leaseColumns are the columns of a lease, as leaseRow scans them.
var leaseColumns = []string{"owner", "token", "acquired_at", "expires_at", "value"}

// leaseRow is the scan target of leaseColumns. value is NULL (nil) for the
// empty value.
type leaseRow struct {
	owner             string
	token             int64
	acquired, expires time.Time
	value             []byte
}

func (r *leaseRow) dest() []any { return []any{&r.owner, &r.token, &r.acquired, &r.expires, &r.value} }

func (r *leaseRow) lease(scope contract.Scope, resource string) contract.Lease {
	return contract.Lease{
		Scope: scope, Resource: resource, Owner: r.owner, Token: r.token,
		AcquiredAt: utc(r.acquired), ExpiresAt: utc(r.expires), Value: string(r.value),
	}
}

// valueParam is a lease's value as @value: its bytes, or NULL when empty
// (bytea keeps any bytes: NUL, invalid UTF-8).
func valueParam(v string) []byte {
	if v == "" {
		return nil
	}
	return []byte(v)
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
//
// The grant stores req.Value, and notifies the lease's watchers when a
// WatchLease marks its row (see WatchLease).
func (b *Backend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	var r grantRow
	var found bool
	var err error
	if semaphore, ok := semaphoreOf(req.Resource); ok {
		found, err = qAcquireLeaseOnPermit.one(ctx, b, acquirePermitLeaseParams{b.acquireLeaseParams(req), semaphore}, &r)
	} else {
		found, err = qAcquireLease.one(ctx, b, b.acquireLeaseParams(req), &r)
	}
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "lease is held"}
	}
	return r.lease(req.Scope, req.Resource), nil
}

var _ contract.PermitAcquirer = (*Backend)(nil)

// maxPermitRounds bounds how often AcquirePermit runs its statement when
// each run loses its permit to a concurrent grant.
const maxPermitRounds = 32

// AcquirePermit implements contract.PermitAcquirer: one statement
// (qAcquirePermit) finds, in its snapshot, the lowest-numbered permit
// within req.Permits that AcquireLease would grant and grants it as
// AcquireLease does (insert, or take over a released or expired row),
// with a token from the backend's one sequence. Each permit is a row with
// the primary key (scope, "resource#n"), so no permit ever has two
// holders, and no more than req.Permits are held.
//
// Two callers may pick the same free permit; the one whose grant finds it
// taken (the other's row inserted, or taken over, first) gets no row, and
// the statement says that its snapshot showed a free permit: AcquirePermit
// runs it again, on a new snapshot, which sees the other's grant and
// picks the next free permit. Every lost run means another caller was
// granted one, so the rounds end; after maxPermitRounds lost runs
// AcquirePermit returns Unavailable (retryable), never LeaseBusy, which
// it returns only when a snapshot showed every permit held.
func (b *Backend) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	p := b.acquirePermitParams(req)
	for range maxPermitRounds {
		p.Now = b.nowParam()
		var r permitRow
		if _, err := qAcquirePermit.one(ctx, b, p, &r); err != nil {
			return contract.Lease{}, err
		}
		switch {
		case r.granted:
			return r.lease(req.Scope, r.resource), nil
		case !r.free:
			return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
		}
	}
	return contract.Lease{}, &contract.Error{Code: contract.Unavailable, Msg: "permits were granted concurrently on every attempt"}
}

// RenewLease implements contract.LeaseStore. One statement.
func (b *Backend) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	var r leaseRow
	found, err := qRenewLease.one(ctx, b, b.renewLeaseParams(l, ttl), &r)
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		return contract.Lease{}, &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
	}
	return r.lease(l.Scope, l.Resource), nil
}

// ReleaseLease implements contract.LeaseStore. One statement. The row is
// kept, marked released (its value dropped), until Cleanup; to every
// other operation it is gone. It notifies the lease's watchers when a
// WatchLease marks its row.
func (b *Backend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	var r releaseRow
	if semaphore, ok := semaphoreOf(l.Resource); ok {
		return qReleasePermit.one(ctx, b, releasePermitParams{b.releaseLeaseParams(l), semaphore}, &r)
	}
	return qReleaseLease.one(ctx, b, b.releaseLeaseParams(l), &r)
}

// semaphoreOf returns the semaphore's resource of a permit's resource: the
// part before the first "#", as the statements read it (split_part), and
// whether resource has one. A plain lease's statements skip the
// semaphore's mark.
func semaphoreOf(resource string) (string, bool) {
	base, _, ok := strings.Cut(resource, contract.PermitSeparator)
	return base, ok
}

// GetLease implements contract.LeaseStore. One statement.
func (b *Backend) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	var r leaseRow
	found, err := qGetLease.one(ctx, b, getLeaseParamsOf(scope, resource), &r)
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
// tombstones of completed keys past their end (ForgetAt), claims and leases
// expired more than the tolerance ago (and released leases past it), and
// notifies waiters of the deleted keys and watchers of the deleted leases
// (a watched lease's row comes back as a released row holding the
// watch's mark, which Cleanup leaves until the mark lapses); it also drops
// the payload of the completed keys past their retention (ExpiresAt),
// leaving their tombstones (CleanupResult.Outcomes).
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	var r cleanupRow
	_, err := qCleanup.one(ctx, b, b.cleanupParams(req), &r)
	if err != nil {
		return contract.CleanupResult{}, err
	}
	return contract.CleanupResult{
		Workflows: int(r.workflows), Keys: int(r.keys), Outcomes: int(r.outcomes), Leases: int(r.leases), More: r.more,
	}, nil
}

// CountCleanup implements contract.CleanupCounter: what Cleanup would
// delete now, deleting nothing. One read-only statement.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	limit := req.Limit // 1–100000: the Store filled the default
	var r countCleanupRow
	_, err := qCountCleanup.one(ctx, b, b.countCleanupParams(req), &r)
	if err != nil {
		return contract.CleanupResult{}, err
	}
	w, k, o, l, lim := r.workflows, r.keys, r.outcomes, r.leases, int64(limit)
	return contract.CleanupResult{
		Workflows: int(min(w, lim)), Keys: int(min(k, lim)), Outcomes: int(min(o, lim)), Leases: int(min(l, lim)),
		More: w > lim || k > lim || o > lim || l > lim,
	}, nil
}

// --- the parameters of each statement, from the request (see
// workflows.go) ---

func (b *Backend) acquireLeaseParams(req contract.LeaseRequest) acquireLeaseParams {
	return acquireLeaseParams{
		Now: b.nowParam(), Tol: b.tol, Scope: req.Scope, Resource: req.Resource, Owner: req.Owner, TTL: req.TTL,
		Value: valueParam(req.Value), Channel: b.channel, Payload: leaseNotifyPayload(req.Scope, req.Resource),
	}
}

func (b *Backend) acquirePermitParams(req contract.PermitRequest) acquirePermitParams {
	return acquirePermitParams{
		Now: b.nowParam(), Tol: b.tol, Scope: req.Scope, Resource: req.Resource, Owner: req.Owner, TTL: req.TTL,
		Value: valueParam(req.Value), Permits: req.Permits, Channel: b.channel, Payload: leaseNotifyPayload(req.Scope, req.Resource),
	}
}

func (b *Backend) renewLeaseParams(l contract.Lease, ttl time.Duration) renewLeaseParams {
	return renewLeaseParams{Now: b.nowParam(), Tol: b.tol, Scope: l.Scope, Resource: l.Resource, Owner: l.Owner, Token: l.Token, TTL: ttl}
}

func (b *Backend) releaseLeaseParams(l contract.Lease) releaseLeaseParams {
	return releaseLeaseParams{
		Now: b.nowParam(), Scope: l.Scope, Resource: l.Resource, Owner: l.Owner, Token: l.Token,
		Channel: b.channel, Payload: leaseNotifyPayload(l.Scope, l.Resource),
	}
}

func getLeaseParamsOf(scope contract.Scope, resource string) getLeaseParams {
	return getLeaseParams{Scope: scope, Resource: resource}
}

// fenceTxParams: fence is not nil (FenceTx checks).
func (b *Backend) fenceTxParams(scope contract.Scope, fence *contract.Fence) fenceTxParams {
	return fenceTxParams{
		Now: b.nowParam(), Tol: b.tol, Scope: scope,
		FenceResource: fence.Resource, FenceOwner: fence.Owner, FenceToken: fence.Token,
	}
}

// cleanupParams: req.Limit is 1–100000 (the Store filled the default).
func (b *Backend) cleanupParams(req contract.CleanupRequest) cleanupParams {
	return cleanupParams{Now: b.nowParam(), Tol: b.tol, TerminalAge: req.TerminalAge, Limit: req.Limit, Channel: b.channel}
}

func (b *Backend) countCleanupParams(req contract.CleanupRequest) countCleanupParams {
	return countCleanupParams{Now: b.nowParam(), Tol: b.tol, TerminalAge: req.TerminalAge, Limit: req.Limit}
}
