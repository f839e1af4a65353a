// Package durable gives services three coordination primitives behind one
// contract, on pluggable backends:
//
//   - Workflow state: durable snapshots with compare-and-set updates, so a
//     worker can never silently overwrite newer state.
//   - Idempotency keys: a key binds to one request; retries get the stored
//     outcome, a reused key with another payload is rejected, and an
//     abandoned claim can be reclaimed.
//   - Leases with fencing tokens: one owner at a time per resource, tokens
//     that only ever grow, and fenced writes that reject a stale owner after
//     takeover.
//
// # Opening a store
//
// Backends register like database/sql drivers and are chosen by the DSN's
// scheme. Import the backend for its side effect and call [Open]:
//
//	import _ "github.com/durable-go/durable/backends/memory"
//
//	store, err := durable.Open(ctx, "memory://")
//
// The memory backend is the reference and needs no setup; the Postgres
// backend ("postgres://…") is for production.
//
// Without the registry, a backend package's Open and New return a *Store
// too (memory.Open, postgres.New, …; see "Backends" below), so the easy
// path is the validated one. [New] wraps a raw backend value: one a
// backend package hands out for decorators and conformance harnesses
// (its NewBackend; memory.NewStorage(opts).Backend()), or your own. Raw
// backends trust their input; always use them through a Store.
// [Store.As] reaches the backend behind a Store for backend-specific
// features:
//
//	var b *memory.Backend
//	if store.As(&b) { … }
//
// # Workflow state
//
// [Store.CreateWorkflow] stores revision 1. [Store.UpdateWorkflow] is one
// atomic compare-and-set on the expected status and (optionally) revision:
// it fails with ErrConflict, ErrTerminal, ErrNotFound or ErrFenced and
// changes nothing. Terminal statuses (succeeded, failed, closed) are final;
// writing the same terminal status again is a no-op, so completion is safe
// to retry.
//
// # Idempotency keys
//
// [Store.ClaimKey] reports one of four outcomes: New (run the work, then
// [Store.CompleteKey] or [Store.ReleaseKey]), Reclaimed (a previous claimant
// vanished; run it), InFlight (someone else is running it; [Store.WaitKey]
// or retry later) and Completed (replay the stored [Outcome]). A key stays
// bound to its first request's fingerprint until it is released or its
// outcome's retention ends.
//
// [Store.Do] wraps the whole protocol for non-HTTP code: run a function at
// most once per key, renew the claim while it runs, release it on failure,
// and return the stored outcome on a retry. Package middleware/idempotency
// does the same for HTTP handlers, per the IETF Idempotency-Key draft.
//
// # Leases and fencing
//
// [Store.AcquireLease] grants a lease with a fencing token greater than any
// token issued before for the resource. Pass [Lease.Fence] in an [Update] or
// [Completion] and the write is applied only while the lease is still held,
// checked in the same atomic step. A clock tolerance keeps a gap between a
// holder's last valid write and the earliest takeover, so bounded clock
// error never yields two writers.
//
// [Store.RunWithLease] acquires a lease, renews it in the background, and
// cancels the work's context as soon as the lease can no longer be proven
// valid. [Store.Step] advances a workflow by one fenced compare-and-set,
// retrying on conflict.
//
// # Waiting for another holder
//
// The helpers never wait for someone else's claim or lease unless asked,
// and are asked the same way: [DoOptions] and [LeaseOptions] both have
// Wait (wait as long as ctx allows) and MaxWait (wait at most that long;
// a positive MaxWait implies Wait). By default [Store.Do] returns
// [ErrInFlight] and [Store.RunWithLease] returns [ErrLeaseBusy] at once,
// like the HTTP middleware's 409 without Options.WaitInFlight.
//
// [Store.WaitLease] and [Store.WaitPermit] wait for a lease or a
// semaphore's permit as long as ctx allows (RunWithLease and
// [Store.RunWithPermit] wait through them): the waiters of one Store on one
// resource are served in arrival order, and a release wakes them (the
// Store's own at once, another Store's through the backend's
// contract.LeaseWatcher), with a poll floor under both. Across Stores
// there is no order; see WaitLease.
//
// # Scopes
//
// Every record lives in a [Scope]. Use [TenantScope] to derive one per
// tenant; operations in one scope never see another's records.
//
// # Errors
//
// Every error is a *[Error] with a [Code]; test it with errors.Is and the
// Err* sentinels, or [CodeOf]. [Retryable] tells whether repeating a call may
// succeed. Each code says whether the write happened:
//
//   - ErrUnavailable and ErrCanceled: the request certainly was not applied
//     (it never left the process, or the backend refused it before applying
//     it). ErrCanceled is returned only when the caller's own context ended;
//     errors.Is(err, context.Canceled) (or DeadlineExceeded) holds too.
//   - ErrOutcomeUnknown: the write may or may not have applied (the
//     connection failed, or a context ended, after it was sent). Every
//     write is conditional, so retrying it never applies it twice. A
//     retried CompleteKey tells which happened; after ClaimKey,
//     AcquireLease, CreateWorkflow or UpdateWorkflow the retry's answer
//     alone does not (it finds what the lost call may have written:
//     InFlight, LeaseBusy, AlreadyExists, Conflict). contract.OutcomeUnknown
//     says, per operation, what tells.
//   - ErrPermissionDenied and ErrMisconfigured: the credentials, grants,
//     database name or TLS settings are wrong. Retrying will not help; the
//     message says what to fix.
//   - ErrCorrupt: a stored record cannot be decoded. The operation fails
//     closed for that record (it is neither replayed nor run again) until an
//     operator removes it ([Store.DeleteRecord], "durable delete").
//
// Error texts never contain DSNs, passwords, SQL or user data; database
// errors may name their SQLSTATE and its condition name.
//
// # Time bounds
//
// No call hangs: when the caller's context has no earlier deadline, every
// backend call is bounded by the Store's operation timeout (10 s by
// default, [WithOperationTimeout]); a call cut short by it fails with
// ErrUnavailable or ErrOutcomeUnknown, as above. [Store.WaitKey] without a
// deadline waits at most [WithMaxWait] (1 min). [Store.Close] wakes every
// waiting call with ErrClosed.
//
// A claim or lease TTL must be at least the backend's clock tolerance plus
// 1 s ([Store.MinTTL]: 1 s on memory, 2 s on Postgres by default); a
// shorter one would be granted dead on arrival and fails with
// ErrInvalidArgument naming the minimum.
//
// # Backends
//
// A backend implements the interfaces of package contract and is checked by
// the exported suite in package conformance. Input validation, defaults and
// error normalization live here in the Store, once for every backend, so a
// backend's methods trust their input. That is why users hold a *Store and
// never a raw backend, and why every backend package has one constructor
// shape (stated for implementers in package contract, "Constructors"):
//
//   - Its functions named Open or New return the validating *Store:
//     Open from what names the storage (postgres.Open and etcd.Open take a
//     DSN, as [Open] does; sqlite.Open and memory.Open take Options), New
//     on a client or pool the caller keeps (postgres.New on a
//     *pgxpool.Pool or a *sql.DB, etcd.New on a *clientv3.Client).
//   - One function, NewBackend, returns the raw backend, for decorators,
//     conformance harnesses and backend-specific methods (in package
//     memory, NewStorage(opts).Backend(), since several raw clients share
//     one storage).
//   - [Store.As] reaches the backend behind a Store for backend-specific
//     features.
//
// The record and request types ([Workflow], [LeaseRequest], …) are defined
// in package contract, so that backends need not import this package, and
// aliased here; each alias names its fields, documented on the contract
// type.
package durable
