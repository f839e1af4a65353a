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
//     now(), or an injected [Clock]), never on the caller's absolute time.
//     TTLs arrive as durations.
//  3. Clock tolerance. A claim or lease counts as expired for takeover only
//     when it expired more than the tolerance ago; a fence or a renewal is
//     valid only while the lease expires more than the tolerance from now.
//     This leaves a gap of 2×tolerance between a holder's last valid write
//     and the earliest takeover.
//  4. Fencing tokens. Every lease grant gets a token strictly greater than
//     every token ever issued for that resource: across takeover, release,
//     cleanup and restarts. A global monotonic sequence satisfies this,
//     and so does a counter per scope and resource: the same token may be
//     issued in another scope or for another resource, so a grant or
//     fence is identified by its scope, resource, owner and token together.
//     A semaphore's permits and a plain lease on its resource share one
//     sequence: a per-resource counter is keyed by [TokenResource].
//     Tokens never wrap: a backend that can issue no greater token fails
//     the grant with [TokensExhausted].
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
//  7. Bounded calls. A call returns when its ctx ends, even if the server
//     or the network stopped answering (the Store gives every call a
//     deadline: see durable.WithOperationTimeout). Close wakes waiters.
//  8. Bytes. Snapshots, outcome bodies, refs, fingerprints and header
//     names and values round-trip byte for byte (no canonicalization of
//     header names; value order and duplicates kept), with one rule for
//     nil and empty, stated on [Outcome] and [Workflow]: a zero-length
//     Snapshot or Body reads back with length zero (nil or empty); a nil
//     Header reads back as nil, an empty one with no names (nil or
//     empty); a header name with a nil or empty value list reads back,
//     with a nil list.
//  9. Close. Close releases resources and wakes calls still waiting in
//     WaitKey with Closed. (The Store makes no new calls after Close; see
//     [Backend] for everything the Store guarantees to a backend.)
//  10. Time arithmetic. Each operation reads its clock once, as "now", and
//     derives every time it writes from that one reading, exactly: a new
//     claim's LeaseUntil and a grant's ExpiresAt are now + TTL, a renewal's
//     now + ttl (earlier or later than before), a completion's ExpiresAt
//     now + Retain; fractions of a second are kept. Times are kept to the
//     microsecond (a database timestamp's precision), in UTC: a time the
//     backend returns equals, to the microsecond, the one it computed. A
//     backend whose storage is coarser (etcd's lease TTLs are whole
//     seconds) says so in its conformance harness
//     (conformance.Capabilities.Granularity), and the suite then accepts
//     an error below one unit; nothing else may be approximate.
//  11. Tokens. Claim tokens are unpredictable and printable (see
//     [IdempotencyStore].ClaimKey for the exact properties the suite
//     checks); lease tokens are positive and increase (item 4).
//  12. Paging. Listings page by keyset (After, exclusive, in byte order),
//     as described below.
//  13. Lease values and permits. A grant stores LeaseRequest.Value byte
//     for byte and every read of the lease returns it (renewal keeps it).
//     A permit's resource ("name#n") is a lease like any other in every
//     call; [PermitAcquirer] and [LeaseWatcher] are optional.
//
// # Paging
//
// ListWorkflows, ListKeys and ListLeases return one page per call; the
// caller passes the last ID (key, resource) of a page as After to get the
// next. A backend must guarantee, also while other callers write:
//
//   - Every record listed is a state it had, as one write left it (never
//     half of one write and half of another), and matches the filter in
//     that state.
//   - Pages hold IDs in strictly increasing byte order, each greater than
//     After, so a listing never returns a record twice and always ends.
//   - A record that exists, and matches the filter (Status, State, Held),
//     from the first page to the last is listed exactly once.
//
// A listing is not one snapshot: a record created, deleted or changed to
// or from the filter's value during a listing may or may not be listed,
// and two records listed (on one page or on two) may be as of different
// moments, since a backend may read a page in several steps. The conformance suite checks order, the cursor, filters and
// completeness on storage nobody writes to during the listing
// (Workflows/ListOrdersByIDAndPages, Listing/KeysArePagedInByteOrder and
// the others); the guarantees under concurrent writes are not checked by
// the suite; a backend keeps them by reading each record whole and by the
// keyset condition ID > After, in byte order.
//
// What the Store guarantees to a backend (validated input, filled
// defaults, deadlines, no calls after Close), the order in which a backend
// reports several failed preconditions, and the optional capabilities with
// their fallbacks are listed on [Backend].
//
// # Constructors
//
// A backend package's exported constructors have one shape, so that users
// meet the same API on every backend:
//
//   - Functions named Open or New return the validating *durable.Store
//     (with durable.Option values configuring it), never the backend:
//     Open from what names the storage (a DSN, a file), New on a client
//     or pool the caller already has and keeps. An Open taking a DSN
//     accepts only its own schemes and honours durable.WithMigrateMode as
//     durable.Open does (calling durable.Open is the simplest way).
//   - One function, NewBackend, returns the raw backend, whose methods
//     trust their input: for conformance harnesses, decorators and the
//     backend's own methods. Paths that open a raw backend from a DSN
//     stay unexported, behind the registered [Driver].
//   - Users holding a Store reach the backend with its As method.
//
// The memory backend's raw path is NewStorage(opts).Backend(), since
// several raw clients share one storage; it stands for NewBackend there.
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
