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

// Backend is what a storage implementation provides. Every method must be
// safe for concurrent use, by any number of goroutines and processes
// sharing the storage.
//
// # What the Store guarantees to every call
//
// Users hold a *durable.Store, which calls the backend; a backend may rely
// on the following and need not check it again:
//
//   - ctx is not nil and had not ended when the call began. Unless the
//     backend reports [InProcess], ctx has a deadline (the Store's operation
//     timeout, 10 s by default, when the caller gave none; WaitKey excepted).
//   - Every identifier (workflow ID, key, resource, owner, ListQuery.After
//     when not "", RequestID and WorkflowID when not "") is 1–128 bytes of
//     [A-Za-z0-9_.:-] starting with a letter or digit. A Scope is "" or an
//     identifier of the same form. A Status is [a-z][a-z0-9_]{0,63}. A
//     lease's resource (in every lease call, a Fence, DeleteRecord of a
//     lease and LeaseListQuery.After) may also be a permit's: an identifier,
//     "#" and a number within 1–MaxPermits without leading zeros
//     (PermitResource); it is stored, ordered and compared like any other.
//   - A Fingerprint is 1–256 bytes of printable ASCII; a claim token is
//     1–128 bytes of printable ASCII; an Outcome.Ref is "" or 1–1024 bytes
//     of printable ASCII; Outcome.Code is within 0–999.
//   - Zero values have been replaced by the Store's defaults: every TTL
//     lies within the Store's minimum (the backend's clock tolerance plus
//     1 s, see [ToleranceReporter]) and 24 h; Completion.Retain is positive;
//     ListQuery.Limit is within 1–1000; CleanupRequest.Limit within
//     1–100000 and TerminalAge is not negative.
//   - A Snapshot and an Outcome.Body are within the Store's size limits
//     (1 MiB each by default); Outcome.Header totals at most 64 KiB. A
//     LeaseRequest.Value (and PermitRequest.Value) is at most
//     MaxLeaseValueBytes; a Lease passed back carries the Value the backend
//     returned, which RenewLease and ReleaseLease ignore (renewal keeps the
//     stored value). PermitRequest.Permits is within 1–MaxPermits.
//   - A Fence, when not nil, names a valid resource and owner and a
//     positive token; a Lease passed back has a positive token.
//   - In CreateWorkflow, Revision, CreatedAt and UpdatedAt are zero and
//     Status is set.
//   - Slices and maps passed in belong to the caller once the call returns:
//     a backend copies what it keeps. Slices and maps it returns belong to
//     the caller: it must not keep or later change them.
//   - Once Store.Close has been called, the Store makes no new calls other
//     than Close itself (exactly once). Calls already running when Close
//     began may continue; the backend should end them promptly (a waiting
//     WaitKey with Closed).
//
// The Store also does for every backend: input validation (bad input never
// reaches the backend), the mapping of a context that ended into Canceled,
// the operation timeout, ErrClosed after Close, the fallbacks of missing
// optional capabilities (see below), and every helper (Do, Step,
// RunWithLease, the middleware).
//
// # What a backend must do
//
// See the implementer checklist in the package documentation. Where one
// call fails several preconditions, it reports the first in this order:
//
//   - UpdateWorkflow: NotFound; then Terminal (or, for the same terminal
//     status, the stored record unchanged, without checking the rest);
//     then Fenced; then Conflict.
//   - ClaimKey (on a live record): KeyConflict; then the record's state
//     (Completed, InFlight or Reclaimed).
//   - CompleteKey: Fenced when the token does not hold the key; then, for
//     a record already completed with that token, the stored record (the
//     fence is not checked again); then Fenced for an invalid fence.
//   - RenewKey, ReleaseKey, RenewLease, ReleaseLease: Fenced (or false)
//     when the token or owner does not hold the record, whatever else.
//
// # Optional capabilities
//
// Small interfaces a backend may also implement, found by type assertion
// on the backend the Store was given (a decorator must implement them
// itself to pass them on). A backend may decline one at run time by
// returning an error with Code Unimplemented, like
// database/sql/driver.ErrSkip; the Store then does what it does without it
// (where the list below names a fallback). The Store looks for:
//
//   - [KeyWaiter]: WaitKey without polling. Without it the Store polls
//     GetKey with backoff, with the same results.
//   - [ToleranceReporter]: the clock tolerance. Without it the Store and its
//     helpers assume none.
//   - [CleanupCounter]: dry-run counts for Cleanup. Without it
//     Store.CountCleanup returns Unimplemented.
//   - [RecordDeleter]: an operator's single-record delete. Without it
//     Store.DeleteRecord returns Unimplemented.
//   - [RecordLister]: pages of keys and leases, for operators. Without it
//     Store.ListKeys and Store.ListLeases return Unimplemented.
//   - [LeaseRenewer]: many leases renewed in one step. Without it
//     Store.RenewLeases calls RenewLease once per lease.
//   - [PermitAcquirer]: a semaphore's permit granted in one step. Without
//     it Store.AcquirePermit tries AcquireLease on each permit in turn.
//   - [LeaseWatcher]: a signal when a lease changes hands. Without it
//     waiting for a lease (Store.WaitLease, RunWithLease with Wait) polls
//     with backoff, with the same results, later.
//   - [InProcess]: calls that cannot hang. Without it the Store arms its
//     operation timeout on every call.
//   - [SystemNamer]: the storage system's name for telemetry
//     (db.system.name). Without it the Store uses the registry scheme the
//     backend was opened with, or "unknown".
//   - durable.Instrumentable (in the root package, because it names the
//     OpenTelemetry metric API and this package imports only the standard
//     library): Instrument(logger, meter provider), called once when the
//     Store is created. Without it the backend gets neither.
//   - As(target any) bool: other views of the backend for
//     durable.Store.As, asked before the Store's own assignment of the
//     backend itself. Without it Store.As offers the backend's own type and
//     the interfaces it implements.
type Backend interface {
	StateStore
	IdempotencyStore
	LeaseStore
	// Cleanup deletes expired and old records, each kind bounded by Limit:
	// terminal workflows not updated for TerminalAge, key records past
	// ForgetAt (tombstones whose time ended), and claims and leases
	// expired more than the tolerance ago; and it drops the outcome of
	// completed keys past ExpiresAt, keeping their tombstone until
	// ForgetAt (CleanupResult.Outcomes; a backend whose storage drops an
	// expired outcome by itself, as etcd's leases do, counts 0 there). It
	// never touches running workflows, live claims, live leases or a
	// completed key before its ExpiresAt.
	Cleanup(ctx context.Context, req CleanupRequest) (CleanupResult, error)
	// Close releases resources. It is called once.
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
	// Failures, in this order: NotFound, Terminal, Fenced, Conflict (with
	// Details). Writing a terminal record with its own terminal status
	// returns it unchanged.
	UpdateWorkflow(ctx context.Context, u Update) (Workflow, error)
	// ListWorkflows returns up to q.Limit records with ID > q.After in byte
	// order, by ID in byte order (whatever a database's collation), with
	// Status = q.Status when that is not "". A shorter page than q.Limit
	// means there are no more. See "Paging" in the package documentation
	// for what a listing sees while others write.
	ListWorkflows(ctx context.Context, q ListQuery) ([]Workflow, error)
}

// IdempotencyStore binds keys to requests and stores their outcomes.
type IdempotencyStore interface {
	// ClaimKey claims a key or reports who has it; see ClaimKind. A live
	// record with another Fingerprint, or another non-empty WorkflowID, →
	// KeyConflict, even when its claim expired. A new claim has CreatedAt
	// = now and LeaseUntil = now + req.TTL exactly; a reclaimed one gets
	// LeaseUntil = now + req.TTL.
	//
	// A claim token is fresh, random and unpredictable: 16–128 bytes of
	// printable ASCII (0x21–0x7e), never issued before, with no byte
	// position that is the same in every token and no half shared with the
	// previous token (16 or more random bytes, hex encoded, satisfy this;
	// a counter or a timestamp does not). The suite checks exactly these
	// properties (Keys/ClaimTokensAreUnpredictable).
	ClaimKey(ctx context.Context, req ClaimRequest) (Claim, error)
	// CompleteKey stores the outcome while token still holds the claim,
	// with CompletedAt = now, ExpiresAt = now + Retain and ForgetAt = now +
	// max(Retain, Tombstone) exactly. The
	// outcome it returns reads as a later GetKey would (see Outcome for nil
	// and empty). Retrying a successful completion with
	// the same token returns the stored record. A stale token or an invalid
	// fence → Fenced; a completed record is never overwritten.
	CompleteKey(ctx context.Context, c Completion) (KeyRecord, error)
	// RenewKey sets LeaseUntil of the claim held by token to exactly
	// now + ttl (earlier or later than before); otherwise Fenced.
	RenewKey(ctx context.Context, k KeyRef, token string, ttl time.Duration) (KeyRecord, error)
	// ReleaseKey deletes the claim held by token; false if token does not
	// hold it. It never deletes a completed record.
	ReleaseKey(ctx context.Context, k KeyRef, token string) (bool, error)
	// GetKey returns the record or NotFound. A completed record past its
	// ExpiresAt reads as its tombstone (State KeyExpired, Outcome holding
	// the Code alone) until ForgetAt; past ForgetAt it is NotFound.
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
	// for the same owner). The grant has AcquiredAt = now and ExpiresAt =
	// now + req.TTL exactly, and a positive token (at least 1), greater than
	// every earlier token for the resource (for a permit's resource: for the
	// semaphore's resource and all its permits, see TokenResource). The
	// grant stores req.Value and returns it.
	AcquireLease(ctx context.Context, req LeaseRequest) (Lease, error)
	// RenewLease sets l's ExpiresAt to exactly now + ttl (earlier or later
	// than before) while l is still valid; otherwise Fenced. The token and
	// AcquiredAt are unchanged.
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

// RecordRef names one record, as DeleteRecord takes it.
type RecordRef struct {
	Kind  RecordKind
	Scope Scope
	ID    string // a workflow's id, a key, or a lease's resource
}

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

// RecordLister is an optional capability of a Backend, for operators: it
// lists the idempotency keys and the leases of one scope a page at a time,
// like ListWorkflows lists workflows. The Store validates the query and
// fills a zero Limit before calling it.
type RecordLister interface {
	// ListKeys returns up to q.Limit key records with Key > q.After in byte
	// order, by Key in byte order, with State = q.State when that is not
	// "". It lists what GetKey would return: a completed record past its
	// ExpiresAt is listed as its tombstone (KeyExpired) until ForgetAt,
	// then not at all; a claimed record is, live or abandoned, until
	// Cleanup deletes it (compare LeaseUntil with the time).
	ListKeys(ctx context.Context, q KeyListQuery) ([]KeyRecord, error)
	// ListLeases returns up to q.Limit leases with Resource > q.After in
	// byte order, by Resource in byte order: the leases GetLease would
	// return (released ones are not), or with q.Held only those whose
	// ExpiresAt is after the store clock's now.
	//
	// Both page like ListWorkflows; see "Paging" in the package
	// documentation. A page that holds a record that cannot be decoded
	// fails whole with Corrupt; the error should name that record
	// (Error.Record), so that an operator can delete it.
	ListLeases(ctx context.Context, q LeaseListQuery) ([]Lease, error)
}

// SystemNamer is an optional capability of a Backend: it names its storage
// system for telemetry, the db.system.name attribute of the Store's spans
// and metrics, such as "postgresql" or "memory". Without it the Store uses
// the registry scheme the backend was opened with, or "unknown".
type SystemNamer interface {
	SystemName() string
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
