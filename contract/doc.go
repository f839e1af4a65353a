// Package contract defines what a durable backend implements: the
// [Backend] interface, the record types and the error codes. It imports only
// the standard library.
//
// Users hold a *durable.Store, never a Backend. The Store validates every
// input once, fills defaults, wraps errors and adds helpers, so a backend
// only has to get storage semantics right.
//
// # Implementer checklist
//
// A backend must guarantee, for every method, under any number of concurrent
// callers in any number of processes sharing the storage:
//
//  1. Atomicity. Every write is one atomic step: it applies completely or not
//     at all, and its preconditions (status, revision, claim token, fence)
//     are checked in that same step.
//  2. One clock. Expiry is judged on the backend's clock only (a database's
//     now(), or an injectable clock), never on the caller's absolute time.
//     TTLs arrive as durations.
//  3. Clock tolerance. A claim or lease counts as expired for takeover only
//     when it expired more than the tolerance ago; a fence or a renewal is
//     valid only while the lease expires more than the tolerance from now.
//     This leaves a gap of 2×tolerance between a holder's last valid write
//     and the earliest takeover.
//  4. Fencing tokens. Every lease grant gets a token strictly greater than
//     every token ever issued for that resource: across takeover, release,
//     cleanup and restarts. A global monotonic sequence satisfies this.
//  5. Scopes. No operation in one scope observes or changes another scope's
//     records, Cleanup included.
//  6. Errors. Return *Error with the right Code, mapped once at the edge.
//     Unavailable (or Canceled, when ctx ended) only when the request
//     provably never left the process or was refused before it applied:
//     still waiting for a connection, refused before sending. Once a write
//     may have reached storage, a broken connection or an ended ctx is
//     OutcomeUnknown. Credentials and grants → PermissionDenied; a missing
//     database or a TLS mismatch → Misconfigured; a stored record that
//     cannot be decoded → Corrupt (fail closed). Keep context errors
//     reachable with errors.Is. Error() must never contain a DSN, password,
//     SQL text, parameter values or raw driver text: put the cause in Err.
//  9. Bounded calls. A call returns when its ctx ends, even if the server
//     or the network stopped answering (the Store gives every call a
//     deadline: see durable.WithOperationTimeout). Close wakes waiters.
//  7. Bytes. Snapshots, outcome bodies and headers round-trip byte for byte.
//  8. Close. Close releases resources and wakes calls still waiting in
//     WaitKey with Closed. (The Store makes no new calls after Close; see
//     [Backend] for everything the Store guarantees to a backend.)
//
// What the Store guarantees to a backend (validated input, filled
// defaults, deadlines, no calls after Close), the order in which a backend
// reports several failed preconditions, and the optional capabilities with
// their fallbacks are listed on [Backend].
//
// # Conformance
//
// One line in the backend's test file runs the whole suite:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }
//
// where newHarness opens clients on one shared storage and can move its
// clock; see package github.com/durable-go/durable/conformance.
package contract
