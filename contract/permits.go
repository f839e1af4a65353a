package contract

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// MaxLeaseValueBytes bounds LeaseRequest.Value: a lease's value says who
// holds it and where to reach them (a leader's address), not what they
// work on. It is a string so that a Lease stays comparable; it may hold any
// bytes.
const MaxLeaseValueBytes = 1024

// MaxPermits bounds PermitRequest.Permits.
const MaxPermits = 1000

// PermitSeparator joins a semaphore's resource and a permit's number in the
// permit's lease resource: "exports#2" is permit 2 of "exports". It cannot
// occur in an identifier, so a permit's name never collides with a plain
// lease's.
const PermitSeparator = "#"

// PermitResource returns the lease resource of permit n (1-based) of the
// semaphore on resource: resource + "#" + n in decimal.
func PermitResource(resource string, n int) string {
	return resource + PermitSeparator + strconv.Itoa(n)
}

// SplitPermit parses a permit's lease resource into the semaphore's
// resource and the permit's number. ok is false for a plain resource and for
// anything that PermitResource would not produce for n within 1–MaxPermits
// (a leading zero, a sign, a second separator).
func SplitPermit(resource string) (base string, n int, ok bool) {
	i := strings.LastIndex(resource, PermitSeparator)
	if i <= 0 || i == len(resource)-1 {
		return "", 0, false
	}
	base, num := resource[:i], resource[i+1:]
	if strings.Contains(base, PermitSeparator) || num[0] == '0' {
		return "", 0, false
	}
	for _, c := range []byte(num) {
		if c < '0' || c > '9' {
			return "", 0, false
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > MaxPermits {
		return "", 0, false
	}
	return base, n, true
}

// TokenResource is the resource whose tokens a lease on resource extends:
// the semaphore's resource for a permit, resource itself otherwise. A
// backend that keeps a token counter per resource keys it by
// TokenResource, so that the tokens of a semaphore's permits (and of a
// plain lease on its resource) form one strictly increasing sequence.
func TokenResource(resource string) string {
	if base, _, ok := SplitPermit(resource); ok {
		return base
	}
	return resource
}

// PermitRequest asks for one of Permits leases on a resource: a fenced
// semaphore. Permit n is the lease on PermitResource(Resource, n); the
// Lease granted names it, and RenewLease, ReleaseLease, GetLease, Fence and
// the fenced writes take it like any other lease.
type PermitRequest struct {
	Scope    Scope         // the tenant namespace ("" = unscoped)
	Resource string        // an identifier: what the semaphore is on
	Owner    string        // an identifier: who holds the permit (an owner may hold several permits of one semaphore)
	TTL      time.Duration // as LeaseRequest.TTL, per permit
	Value    string        // as LeaseRequest.Value
	Permits  int           // how many holders at once, 1–MaxPermits
}

// Lease returns the request for permit n as a plain lease request.
func (r PermitRequest) Lease(n int) LeaseRequest {
	return LeaseRequest{Scope: r.Scope, Resource: PermitResource(r.Resource, n), Owner: r.Owner, TTL: r.TTL, Value: r.Value}
}

// PermitAcquirer is an optional capability of a Backend: a fenced semaphore
// in one atomic step. AcquirePermit grants the lowest-numbered permit n in
// 1–req.Permits whose lease (on PermitResource(req.Resource, n)) AcquireLease
// would grant — none is stored, or the stored one was released or expired
// more than the clock tolerance ago — exactly as AcquireLease would grant it
// (AcquiredAt, ExpiresAt, Value, a token greater than every token issued
// for the resource or any of its permits). When every permit is held it
// returns LeaseBusy. It never admits more than req.Permits live holders,
// also when callers race. Without this capability the Store tries
// AcquireLease on permits 1 to Permits in turn (one round trip each), with
// the same guarantees but not the lowest-free order under races.
type PermitAcquirer interface {
	AcquirePermit(ctx context.Context, req PermitRequest) (Lease, error)
}

// LeaseWatcher is an optional capability of a Backend: being told at once
// when a lease changes hands, so that waiters need not poll.
//
// WatchLease registers a watch on the lease of (scope, resource) and
// returns a channel with room for one signal. After WatchLease returns,
// every grant, release or deletion (ReleaseLease, DeleteRecord, Cleanup, a
// takeover) of that lease — and, when resource is not itself a permit's, of
// any of its permits (PermitResource(resource, n)) — made through any Store
// on the same storage leaves a signal in the channel (signals coalesce: one
// pending signal stands for any number of changes). A renewal need not
// signal, and an expiry by itself signals nothing: a waiter still sets a
// timer for ExpiresAt plus the tolerance. Spurious signals are allowed. A
// backend that cannot see another process's changes (SQLite's other
// processes, for one) says so in its documentation; the Store's polling
// floor covers them.
//
// The watch lasts until ctx ends; the backend then drops it (the channel is
// not closed). An error means no watch was set up; the Store then polls.
type LeaseWatcher interface {
	WatchLease(ctx context.Context, scope Scope, resource string) (<-chan struct{}, error)
}
