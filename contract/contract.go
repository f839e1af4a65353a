package contract

import (
	"context"
	"time"
)

// Driver opens backends by DSN. A backend package registers one Driver per
// scheme with durable.Register in its init function.
type Driver interface {
	// Open returns a Backend for dsn. The DSN's scheme has already been
	// matched; Open must reject parameters it does not know with
	// InvalidArgument, and must not put the DSN in any error text.
	Open(ctx context.Context, dsn string) (Backend, error)
}

// Backend is what a storage implementation provides. Inputs have been
// validated by the Store; a backend may assume well-formed identifiers,
// statuses and durations. Every method must be safe for concurrent use.
type Backend interface {
	StateStore
	IdempotencyStore
	LeaseStore
	// Cleanup deletes expired and old records, each kind bounded by Limit.
	Cleanup(ctx context.Context, req CleanupRequest) (CleanupResult, error)
	// Close releases resources. Calls after Close return Closed.
	Close() error
}

// StateStore holds workflow snapshots with compare-and-set updates.
type StateStore interface {
	// CreateWorkflow inserts w with revision 1 and CreatedAt = UpdatedAt =
	// the store clock. An existing (scope, id) → AlreadyExists.
	CreateWorkflow(ctx context.Context, w Workflow) (Workflow, error)
	// GetWorkflow returns the record or NotFound.
	GetWorkflow(ctx context.Context, scope Scope, id string) (Workflow, error)
	// UpdateWorkflow applies u atomically or not at all; see Update.
	// Failures: NotFound, Terminal, Conflict (with Details), Fenced. Writing
	// a terminal record with its own terminal status returns it unchanged.
	UpdateWorkflow(ctx context.Context, u Update) (Workflow, error)
	// ListWorkflows returns up to q.Limit records with ID > q.After, by ID.
	ListWorkflows(ctx context.Context, q ListQuery) ([]Workflow, error)
}

// IdempotencyStore binds keys to requests and stores their outcomes.
type IdempotencyStore interface {
	// ClaimKey claims a key or reports who has it; see ClaimKind.
	ClaimKey(ctx context.Context, req ClaimRequest) (Claim, error)
	// CompleteKey stores the outcome while token still holds the claim.
	// Retrying a successful completion with the same token returns the
	// stored record. A stale token → Fenced.
	CompleteKey(ctx context.Context, c Completion) (KeyRecord, error)
	// RenewKey extends the claim held by token to now+ttl; otherwise Fenced.
	RenewKey(ctx context.Context, k KeyRef, token string, ttl time.Duration) (KeyRecord, error)
	// ReleaseKey deletes the claim held by token; false if token does not hold it.
	ReleaseKey(ctx context.Context, k KeyRef, token string) (bool, error)
	// GetKey returns the record or NotFound. A completed record past its
	// ExpiresAt is NotFound.
	GetKey(ctx context.Context, k KeyRef) (KeyRecord, error)
}

// KeyWaiter is an optional capability of a Backend. WaitKey blocks until the
// key is completed (it returns the record) or has no record any more
// (released or cleaned up: it returns NotFound), or until ctx ends (it
// returns an error for which errors.Is(err, ctx.Err()) holds). A claim that
// is merely expired does not end the wait. Without this capability the Store
// polls GetKey with backoff, with the same results.
type KeyWaiter interface {
	WaitKey(ctx context.Context, k KeyRef) (KeyRecord, error)
}

// LeaseStore grants leases with fencing tokens.
type LeaseStore interface {
	// AcquireLease grants the lease when none exists or the stored one
	// expired more than the clock tolerance ago; otherwise LeaseBusy (also
	// for the same owner). The token is greater than every earlier token for
	// the resource.
	AcquireLease(ctx context.Context, req LeaseRequest) (Lease, error)
	// RenewLease extends l to now+ttl while l is still valid; otherwise
	// Fenced. The token is unchanged.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease deletes the lease held by l's owner and token; false if
	// they no longer hold it.
	ReleaseLease(ctx context.Context, l Lease) (bool, error)
	// GetLease returns the stored lease (even if expired) or NotFound.
	GetLease(ctx context.Context, scope Scope, resource string) (Lease, error)
}

// ToleranceReporter is an optional capability of a Backend: it reports the
// clock tolerance the backend judges expiry with. Helpers that must stop
// work before a lease can be taken over (durable's lease runner) subtract
// it from their deadlines; without it they assume zero.
type ToleranceReporter interface {
	ClockTolerance() time.Duration
}

// CleanupCounter is an optional capability of a Backend: it counts what
// Cleanup would delete right now, without deleting anything (for dry runs).
// Counts are bounded by req.Limit like Cleanup's, and More has the same
// meaning.
type CleanupCounter interface {
	CountCleanup(ctx context.Context, req CleanupRequest) (CleanupResult, error)
}

// RecordKind names one of the three kinds of record, for operator tools.
type RecordKind string

// The record kinds.
const (
	KindWorkflow RecordKind = "workflow"
	KindKey      RecordKind = "key"
	KindLease    RecordKind = "lease"
)

// RecordDeleter is an optional capability of a Backend, for operators: it
// deletes one record (a workflow by id, an idempotency key by key, a lease
// by resource) whatever its state, and reports whether it existed. It is
// the way out for a record that cannot be decoded (Code Corrupt), and for
// a claim or lease an operator knows to be abandoned.
//
// Deleting must keep every other rule: a later lease grant on the resource
// still gets a token greater than every token issued before (as after
// Cleanup), and WaitKey callers waiting on a deleted key return as after
// ReleaseKey. The Store validates kind, scope and id before calling it.
type RecordDeleter interface {
	DeleteRecord(ctx context.Context, kind RecordKind, scope Scope, id string) (bool, error)
}

// InProcess is an optional capability of a Backend whose calls never wait
// on I/O or on another process (the memory backend): every call returns as
// soon as its locks allow. When InProcess reports true the Store does not
// arm its operation timeout for the call, since a timer per call would cost
// more than the call itself; WaitKey stays bounded. A decorator that may
// block (a network hop, injected faults) must not report true.
type InProcess interface {
	InProcess() bool
}
