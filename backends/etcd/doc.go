// Package etcd is a durable backend on an etcd v3 cluster: workflow state
// with compare-and-set, idempotency keys and fenced leases, each operation
// a single etcd transaction (plus an etcd lease grant where a TTL is
// needed), with expiry judged by one clock: etcd's own lease timers. It
// registers the DSN scheme "etcd".
//
// It is a nested Go module (github.com/durable-go/durable/backends/etcd),
// so gRPC and the etcd client enter only the builds that import it.
//
// # Opening a store
//
//	import _ "github.com/durable-go/durable/backends/etcd"
//
//	store, err := durable.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp?tolerance=1s")
//
// [Open] is durable.Open for an etcd DSN (it refuses any other scheme),
// and [New] builds the Store on an existing *clientv3.Client instead (the
// caller keeps and closes the client). Both return the validating
// *durable.Store, as every backend's Open and New do. [NewBackend] returns
// the raw backend on a client, whose methods skip the Store's validation,
// defaults and time bounds: it is for conformance harnesses and
// decorators. From a Store, reach the backend with Store.As:
//
//	var b *etcd.Backend
//	if store.As(&b) { … }
//
// # DSN
//
//	etcd://[user[:password]@]host:port[,host:port…][/prefix][?param=value&…]
//
// The endpoints are the cluster members' client URLs (host:port; http, or
// https when any TLS parameter is given). The path is the key prefix
// (default "durable"): every key lives under "<prefix>/", so stores with
// different prefixes share nothing, and etcd roles can be granted on the
// prefix. Parameters:
//
//	tolerance     clock tolerance, whole seconds (default 1s; see Time)
//	dial_timeout  bound on connecting and on the first read (default 5s)
//	username      etcd user (also as user@ in the authority)
//	password      its password (also as user:password@); never in an error
//	tls           true: connect with TLS using the system roots
//	ca_file       PEM CA bundle for the server certificates (implies tls)
//	cert_file     client certificate, with key_file (implies tls)
//	key_file      client key
//	server_name   name to verify in the server certificate (implies tls)
//
// Unknown parameters are rejected; errors never contain the DSN or any
// part of it. Open connects and reads once under the prefix, so wrong
// endpoints, credentials or TLS settings fail at Open (Unavailable,
// PermissionDenied or Misconfigured).
//
// # Key layout
//
// Under the prefix P, for a record in scope S ("" for the unscoped
// namespace; scopes and ids never contain "/"):
//
//	P/w/S/ID        workflow: status \0 request id \0 updatedAt snapshot; revision = the key's etcd Version
//	P/wc/S/ID       workflow creation time (written once)
//	P/wt/T/S/ID     index of terminal workflows by the time T (hex µs) they became terminal, for Cleanup
//	P/k/S/KEY       idempotency key: createdAt, fingerprint, workflow id (written once per claim)
//	P/kt/S/KEY      claim token \0 state (claimed|completed) leaseUntil
//	P/ko/S/KEY      outcome (completedAt, expiresAt, code, ref, body, headers), on an etcd lease of Retain
//	P/kx/S/KEY      tombstone (completedAt, expiresAt, forgetAt, code), on an etcd lease of max(Retain, Tombstone)
//	P/kb/S/KEY      claim busy marker, on an etcd lease of TTL + tolerance
//	P/l/S/RES       lease record: owner \0 acquiredAt [uvarint(len(value)) value] expiresAt; its CreateRevision is the fencing token
//	P/lh/S/RES      lease holder key: owner, on an etcd lease of TTL − tolerance; CreateRevision = token
//	P/lb/S/RES      lease busy marker, on an etcd lease of TTL + tolerance
//
// Listing a scope is a range read of P/w/S/ (or kt, l) in byte order.
//
// Permit n of a semaphore on RES is the lease on "RES#n"
// (contract.PermitResource), stored under these keys like any lease: the
// permits of RES are the keys under P/l/S/RES# and P/lb/S/RES#, which
// hold nothing else (an identifier has no "#" or "/").
//
// A lease record without a value has the backend's first format (owner
// \0 acquiredAt expiresAt), so records written before values existed read
// with no value, and a version without values reads the records of leases
// granted without one; a record with a value is Corrupt to such a
// version. Mixing versions while values are in use therefore needs every
// process upgraded first.
//
// # Time
//
// Every expiry is decided by etcd, never by a client's clock: a claim or a
// lease, or a completed outcome's retention, ends when the etcd lease its
// marker key is attached to expires on the etcd leader's timer and the
// key disappears, and every conditional write compares those keys in the
// same transaction as the write:
//
//   - A fence {Resource, Owner, Token} is valid while the holder key
//     P/lh/S/RES exists with CreateRevision = Token and value = Owner. It
//     lives TTL − tolerance (rounded down to whole seconds), so a fenced
//     write or a renewal is impossible in the last tolerance of a lease.
//   - A takeover needs the busy marker P/lb/S/RES gone: TTL + tolerance
//     (rounded up). Between the two lies the contract's gap of twice the
//     tolerance. A takeover also deletes the old holder key in its
//     transaction, so even if etcd revoked the two leases out of order
//     (after a leader change, say) no two grants are ever valid at once:
//     that is structural, not a matter of timing.
//   - A claim is in flight while P/kb/S/KEY exists (TTL + tolerance,
//     rounded up), and can be reclaimed once it is gone.
//   - A completed outcome P/ko/S/KEY lives on an etcd lease of Retain
//     (rounded up); its tombstone P/kx/S/KEY on a second etcd lease of
//     max(Retain, Tombstone) (rounded up), granted together with the
//     first and written in the same transaction. Once the outcome is gone
//     the key reads as its tombstone (KeyExpired, the code alone); once
//     both are gone it counts as absent. When Tombstone is not longer than
//     Retain there is no tombstone record (and no second grant): ForgetAt
//     is ExpiresAt. Keys completed before tombstones existed have none
//     either, and read the same way.
//
// When the etcd leader changes, the new leader restarts every lease's
// countdown (unless the cluster runs with lease checkpointing), so holder
// keys and busy markers can outlive their TTL: a holder stays valid longer
// than its ExpiresAt says and a takeover comes later, never the reverse.
// Clients that stop work by ExpiresAt − tolerance (durable's lease runner)
// stay safe either way. The same restart cannot make a tombstone end
// before its outcome: both countdowns restart from their full TTLs, and
// the tombstone's is the longer. An outcome kept past its reported
// ExpiresAt that way is not returned: reads compare ExpiresAt with the
// local clock and report the tombstone (the one place the local clock
// decides, and it only hides a payload early; whether the key still binds
// its request is decided by the two records' existence alone).
//
// Fencing tokens are etcd cluster revisions (the CreateRevision of the
// grant's keys): they only ever grow, across takeover, release, cleanup,
// deletion, member loss and restarts of the whole cluster. (Restoring a
// cluster from a snapshot older than tokens already handed out would break
// this, as it would for any sequence.)
//
// The times records report (CreatedAt, UpdatedAt, AcquiredAt, ExpiresAt,
// LeaseUntil, CompletedAt) are read once per operation from the local
// clock, plus the TTL. They are reports; no decision about expiry uses
// them. etcd has no server time to read, so TerminalAge in Cleanup (a
// retention policy, not a safety rule) and ListLeases' Held filter compare
// stored times with the local clock.
//
// # Granularity
//
// etcd lease TTLs are whole seconds, so the backend declares a time
// granularity of one second. A lease of TTL t reports ExpiresAt = now + t
// exactly, and its etcd leases are floor(t − tolerance) and ceil(t +
// tolerance) seconds: the holder can lose validity up to a second early
// and a takeover can come up to a second late, never the other way. A
// claim's LeaseUntil is now + TTL; its busy marker is ceil(TTL + tolerance).
// A completed key's ExpiresAt is now + the retention etcd granted (Retain
// rounded up to whole seconds), which is when it really disappears. etcd
// grants at least its minimum lease TTL (1.5 election timeouts rounded up
// to a second: 2 s with the default 1 s election timeout); when the holder
// key's lease comes back longer than asked, ExpiresAt reports the later
// expiry (holder TTL + tolerance) and the busy marker is extended to match,
// so the reports stay true. The tolerance must be whole seconds.
//
// # Tolerance
//
// The tolerance (default 1 s) bounds how far the client's view of a lease
// may lag etcd's: a lease runner stops work by ExpiresAt − tolerance,
// which is when etcd stops accepting its fenced writes. It covers the
// latency of a renewal and the difference between the rate of the local
// clock and the etcd leader's. The Store's minimum TTL is 1 s + tolerance.
//
// # Round trips
//
// Reads are one transaction. Writes without a TTL (CreateWorkflow,
// UpdateWorkflow, ReleaseKey, ReleaseLease) are one transaction, which on
// failure also reads why. ClaimKey, CompleteKey and RenewKey add one etcd
// lease grant before their transaction; AcquireLease and RenewLease two,
// sent together. etcd cannot attach a TTL to a key without a lease object,
// and a lease grant is its own request. Slow paths take one more
// transaction: reclaiming an abandoned claim, taking over an expired lease
// (delete the old grant, then create), and a renewal whose caller passed a
// stale AcquiredAt or Value. Leases left unused are revoked in the
// background.
//
// AcquirePermit sends AcquireLease's two grants and, alongside them, one
// read of every permit's record and busy marker (two range reads, keys
// only), then grants the lowest free permit n in one transaction,
// conditional on permit n having no record and on permits 1 to n−1 still
// being held (their busy markers exist): about AcquireLease's latency.
// etcd allows 128 comparisons in a transaction, so the lower permits
// compared are the first 127: a grant of permit 129 or above may pass over
// a permit from 128 up freed since the read (it stays free for the next
// caller). Taking over an expired permit adds the deletion transaction.
// When the grant's comparison fails (another caller took permit n, or a
// lower permit was freed), its transaction reads the permits again in its
// else branch and the lowest free one is tried, so LeaseBusy means a read
// found every permit held; after 2×Permits+16 such failures in one call
// (each a change of the permits by someone else) it returns Unavailable
// with nothing granted. WatchLease reads once (for the revision to watch
// from).
//
// # Idempotency keys: tokens, tombstones, no shared transaction
//
// A ClaimRequest with its own Token stores it in the token record, and a
// retry of the same request with the same token (compared byte for byte)
// gets its own claim back (ClaimNew, a new busy marker, LeaseUntil = now +
// TTL) as long as nobody has reclaimed or completed it: one more
// transaction, conditional on the token record not having changed since
// the read.
//
// Between ExpiresAt and ForgetAt a completed key is its tombstone: reads
// report KeyExpired with the status code alone, ClaimKey of the same
// request returns OutcomeExpired and another request KeyConflict, and a
// completion retried with the same token returns the tombstone. See Time
// for the records and Cleanup for what Cleanup counts.
//
// The backend does not implement contract.TxCompleter: etcd has no
// transaction that a caller's own effect (in another database) could
// share, so Store.CompleteKeyTx and Store.DoTx return Unimplemented. Use
// the plain path (Store.Do, or ClaimKey, the effect, CompleteKey) and mind
// its hazard: an effect that committed before the process died (or before
// etcd became unreachable for longer than the claim's TTL) is unknown to
// the key, and a retry after the claim expires runs the request again. To
// close that hazard, keep the key in the same database as the effect
// (PostgreSQL, SQLite) and complete it in the effect's transaction.
//
// # WaitKey
//
// WaitKey watches the key's token record from the revision after a read,
// so completions, releases and cleanups wake it at once. A tombstone ends
// the wait like a completion.
//
// # WatchLease
//
// WatchLease watches, with etcd watches (so across processes), the
// lease's record and busy marker — for a plain resource also its permits'
// — from the revision after a read made before it returns, so no change
// committed after it returns is missed. A grant, a release, DeleteRecord,
// Cleanup and a takeover signal, and so does a busy marker ending on
// etcd's timer: the moment a takeover becomes possible (an expiry the
// contract lets pass silently; here it wakes the waiters when the lease
// is actually free). Renewals signal nothing. A watch etcd ends (no
// leader: the watches require one; a compaction; a lost connection)
// signals once and is started again from where it stopped, with a pause
// of 50 ms doubling to 1 s while it keeps ending. Each WatchLease runs one
// goroutine and two etcd watches (multiplexed on the client's watch
// stream) until its context ends or the backend is closed.
//
// # Cleanup
//
// Expired markers vanish by themselves; Cleanup removes what they leave
// behind — abandoned claims, completed keys past their tombstone, expired
// lease records — and terminal workflows older than TerminalAge (one range
// read of a time-ordered index), each kind bounded by Limit, in
// transactions of a few conditional deletions. Finding expired keys and
// leases scans their records (keys only for the markers), a page at a
// time. An outcome's payload vanishes by itself at ExpiresAt (its etcd
// lease), so Cleanup has none to drop: CleanupResult.Outcomes (and
// CountCleanup's) is always 0 on this backend.
package etcd
