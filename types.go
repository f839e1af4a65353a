package durable

import "github.com/durable-go/durable/contract"

// The record and request types are defined in package contract, so that
// backends need not import this package, and aliased here, so that users
// need only one import. Each alias has its own doc comment naming its
// fields; `go doc` does not list an alias's fields, so each field's full
// comment is on the contract type: go doc
// github.com/durable-go/durable/contract.LeaseRequest, for example.
//
// Every claim and lease TTL must be at least [Store.MinTTL]: 1 s
// ([TTLMargin]) plus the backend's clock tolerance, because another owner can
// take over only after expiry plus that tolerance and a fenced write needs
// more than the tolerance left.

// Scope is a tenant namespace: "" or an identifier; see [TenantScope] and
// contract.Scope.
type Scope = contract.Scope

// Status is a workflow status, [a-z][a-z0-9_]{0,63}; succeeded, failed and
// closed are terminal (Status.Terminal). See contract.Status.
type Status = contract.Status

// Workflow is a stored workflow: Scope, ID, RequestID, Status, Revision,
// Snapshot, CreatedAt, UpdatedAt. See contract.Workflow.
type Workflow = contract.Workflow

// Update is one compare-and-set for [Store.UpdateWorkflow]: Scope, ID,
// ExpectStatus, ExpectRevision (0 = any), Fence (optional), and the new
// Status, RequestID and Snapshot. See contract.Update.
type Update = contract.Update

// ListQuery selects a page for [Store.ListWorkflows]: Scope, Status
// (optional filter), After (the last ID of the previous page) and Limit.
// See contract.ListQuery.
type ListQuery = contract.ListQuery

// KeyListQuery selects a page for [Store.ListKeys]: Scope, State (optional
// filter: KeyClaimed or KeyCompleted), After (the last Key of the previous
// page) and Limit. See contract.KeyListQuery.
type KeyListQuery = contract.KeyListQuery

// LeaseListQuery selects a page for [Store.ListLeases]: Scope, Held (only
// leases that have not expired), After (the last Resource of the previous
// page) and Limit. See contract.LeaseListQuery.
type LeaseListQuery = contract.LeaseListQuery

// Fence names a lease grant for a fenced write: Resource, Owner, Token.
// Get one from [Lease.Fence]. See contract.Fence.
type Fence = contract.Fence

// KeyRef names an idempotency key: Scope, Key. See contract.KeyRef.
type KeyRef = contract.KeyRef

// ClaimRequest asks [Store.ClaimKey] or [Store.Do] for a key: KeyRef,
// Fingerprint (identifies the request), WorkflowID (optional), TTL
// (0 = the Store's default claim TTL, 1 min; otherwise at least
// [Store.MinTTL], the clock tolerance plus 1 s, and at most 24 h) and
// Token (optional: the caller's own claim token, 16–128 bytes of printable
// ASCII, which lets a retry after a lost reply recover its claim; see
// [NewClaimToken]). See contract.ClaimRequest.
type ClaimRequest = contract.ClaimRequest

// ClaimKind says what ClaimKey found: ClaimNew, ClaimReclaimed,
// ClaimInFlight or ClaimCompleted. See contract.ClaimKind.
type ClaimKind = contract.ClaimKind

// Claim is the result of [Store.ClaimKey]: Kind, Token (for new and
// reclaimed claims) and the key's Record. See contract.Claim.
type Claim = contract.Claim

// KeyState is the state of a key record: KeyClaimed, KeyCompleted, or
// KeyExpired (a tombstone: the outcome's retention ended, the key stays
// bound to its request until ForgetAt). See contract.KeyState.
type KeyState = contract.KeyState

// KeyRecord is the stored state of an idempotency key: KeyRef,
// Fingerprint, WorkflowID, State, LeaseUntil, Outcome (only its Code on a
// tombstone), CreatedAt, CompletedAt, ExpiresAt (the outcome's retention
// ends), ForgetAt (the tombstone ends). See contract.KeyRecord.
type KeyRecord = contract.KeyRecord

// Outcome is what a completed key replays: Code, Header, Body, Ref. See
// contract.Outcome.
type Outcome = contract.Outcome

// Completion stores a claimed key's outcome with [Store.CompleteKey] or
// [Store.CompleteKeyTx]: KeyRef, Token, Outcome, Retain (0 = the Store's
// key retention), Tombstone (0 = the Store's tombstone retention) and
// Fence (optional). See contract.Completion.
type Completion = contract.Completion

// LeaseRequest asks [Store.AcquireLease] or [Store.RunWithLease] for a
// lease: Scope, Resource, Owner and TTL (0 = the Store's default lease
// TTL, 30 s; otherwise at least [Store.MinTTL], the clock tolerance plus
// 1 s, and at most 24 h). See contract.LeaseRequest.
type LeaseRequest = contract.LeaseRequest

// PermitRequest asks [Store.AcquirePermit] for one of Permits leases on a
// resource (a fenced semaphore): Scope, Resource, Owner, TTL, Value and
// Permits (1–1000). See contract.PermitRequest.
type PermitRequest = contract.PermitRequest

// Lease is a granted lease: Scope, Resource, Owner, Token (the fencing
// token), AcquiredAt, ExpiresAt, Value; Lease.Fence returns its fence. See
// contract.Lease.
type Lease = contract.Lease

// CleanupRequest bounds one [Store.Cleanup] pass: TerminalAge, Limit (per
// kind; 0 = 1000). See contract.CleanupRequest.
type CleanupRequest = contract.CleanupRequest

// CleanupResult counts what one cleanup pass deleted (or would delete):
// Workflows, Keys (tombstones past ForgetAt and abandoned claims), Outcomes
// (payloads dropped past ExpiresAt, each leaving its tombstone), Leases,
// and More when a kind hit the limit. See contract.CleanupResult.
type CleanupResult = contract.CleanupResult

// Tx is a transaction begun by [Store.BeginTx]: Raw (the client library's
// transaction, such as a pgx.Tx or a *sql.Tx), Commit and Rollback. See
// contract.Tx.
type Tx = contract.Tx

// TxCompleter is the optional capability of a backend that stores an
// outcome inside the caller's transaction (PostgreSQL, SQLite); see
// [Store.CompleteKeyTx], [DoTx] and contract.TxCompleter.
type TxCompleter = contract.TxCompleter

// Error is the type of every error the Store returns: Code, Op, Msg,
// Details (for conflicts) and the cause Err. See contract.Error.
type Error = contract.Error

// Code classifies an [Error]; test it with errors.Is and the Err*
// sentinels, or [CodeOf]. See contract.Code.
type Code = contract.Code

// Details explains a failed compare-and-set: ExpectedStatus, ActualStatus,
// ExpectedRevision, ActualRevision. See contract.Details.
type Details = contract.Details

// RecordKind names one of the three kinds of record for
// [Store.DeleteRecord]: KindWorkflow, KindKey or KindLease. See
// contract.RecordKind.
type RecordKind = contract.RecordKind

// RecordRef names one record: its kind, scope and id. An ErrCorrupt error
// names the record that cannot be decoded in it where the backend knows it
// ([CorruptRecord]).
type RecordRef = contract.RecordRef

// CorruptRecord returns the record an ErrCorrupt error names, if it names
// one: a list fails its whole page on a record that cannot be decoded, and
// this is how an operator's tool finds which record to delete.
func CorruptRecord(err error) (RecordRef, bool) { return contract.CorruptRecord(err) }

// Statuses, claim kinds, key states and record kinds, re-exported from
// package contract.
const (
	StatusPending   = contract.StatusPending
	StatusRunning   = contract.StatusRunning
	StatusSucceeded = contract.StatusSucceeded
	StatusFailed    = contract.StatusFailed
	StatusClosed    = contract.StatusClosed

	ClaimNew       = contract.ClaimNew
	ClaimReclaimed = contract.ClaimReclaimed
	ClaimInFlight  = contract.ClaimInFlight
	ClaimCompleted = contract.ClaimCompleted

	KeyClaimed   = contract.KeyClaimed
	KeyCompleted = contract.KeyCompleted
	KeyExpired   = contract.KeyExpired

	KindWorkflow = contract.KindWorkflow
	KindKey      = contract.KindKey
	KindLease    = contract.KindLease
)

// Error sentinels for errors.Is, re-exported from package contract.
var (
	ErrNotFound         = contract.ErrNotFound
	ErrAlreadyExists    = contract.ErrAlreadyExists
	ErrConflict         = contract.ErrConflict
	ErrTerminal         = contract.ErrTerminal
	ErrKeyConflict      = contract.ErrKeyConflict
	ErrLeaseBusy        = contract.ErrLeaseBusy
	ErrFenced           = contract.ErrFenced
	ErrInvalidArgument  = contract.ErrInvalidArgument
	ErrUnavailable      = contract.ErrUnavailable
	ErrOutcomeUnknown   = contract.ErrOutcomeUnknown
	ErrSchemaMismatch   = contract.ErrSchemaMismatch
	ErrClosed           = contract.ErrClosed
	ErrUnimplemented    = contract.ErrUnimplemented
	ErrCanceled         = contract.ErrCanceled
	ErrPermissionDenied = contract.ErrPermissionDenied
	ErrMisconfigured    = contract.ErrMisconfigured
	ErrCorrupt          = contract.ErrCorrupt
	// ErrInFlight: another caller holds a live claim on the key (Store.Do
	// without waiting or after its wait, Store.WaitKey after its max wait).
	// ErrLeaseBusy does not match it.
	ErrInFlight = contract.ErrInFlight
	// ErrOutcomeExpired: the key was completed for this request, but its
	// outcome's retention ended and only a tombstone is left: nothing can
	// be replayed and the request must not run again (Store.ClaimKey,
	// Store.Do). Retrying with the same key does not help until the
	// tombstone ends.
	ErrOutcomeExpired = contract.ErrOutcomeExpired
	// ErrTokensExhausted: AcquireLease found the fencing-token counter at
	// its maximum; tokens never wrap, so no lease is granted (code
	// Misconfigured, so ErrMisconfigured matches too). See
	// contract.ErrTokensExhausted for what an operator can do.
	ErrTokensExhausted = contract.ErrTokensExhausted
)

// CodeOf returns the Code of err; see contract.CodeOf.
func CodeOf(err error) Code { return contract.CodeOf(err) }

// Retryable reports whether repeating the same call may succeed; see
// contract.Retryable.
func Retryable(err error) bool { return contract.Retryable(err) }
