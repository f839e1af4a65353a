// Package redis is a durable backend on Redis 7 (one node, or a Redis
// Cluster): workflow state with compare-and-set, idempotency keys and
// fenced leases, each operation one Lua script run atomically on the
// server, with expiry judged on the server's clock. It registers the DSN
// schemes "redis" and "rediss" (TLS).
//
//	import _ "github.com/durable-go/durable/backends/redis"
//
//	store, err := durable.Open(ctx, "redis://localhost:6379/0?prefix=myapp")
//
// [Open] is durable.Open for these schemes; [New] builds the Store on a
// *goredis.Client or *goredis.ClusterClient the caller keeps; [NewBackend]
// returns the raw backend (for harnesses and decorators).
//
// # DSN
//
//	redis://[user[:password]@]host[:port][/db][?param=value&…]
//	rediss://…                                   the same over TLS
//	redis://host1:port,host2:port,…/?cluster=true  a Redis Cluster (seed nodes)
//
// Parameters (unknown ones are rejected with InvalidArgument; errors never
// contain the DSN or any part of it):
//
//	db             database number (also the path /N; default 0; a cluster has only 0)
//	prefix         key namespace, 1-64 bytes of [A-Za-z0-9_.:-] (default "durable")
//	tolerance      clock tolerance, a Go duration from 0s to 1h (default 1s)
//	dial_timeout   bound on connecting and on Open's checks (default 5s)
//	read_timeout   socket read timeout (default go-redis's, 3s)
//	write_timeout  socket write timeout (default go-redis's, 3s)
//	pool_size      connections per node (default go-redis's, 10 per CPU)
//	wait           replicas that must acknowledge each write (Redis WAIT; default 0)
//	wait_timeout   bound on that WAIT (default 1s)
//	poll_floor     longest sleep of WaitKey between reads without a message (default 1s)
//	coalesce       on (default), pipeline or off: how scripts sent at the same time travel (below)
//	coalesce_inflight  with pipeline (or wait): pipelines in flight at once per node, 1-64 (default 4)
//	cluster        true: the addresses are seed nodes of a Redis Cluster
//	username, password  credentials (also in the authority); never in an error
//	ca_file        PEM CA bundle for the server certificate (rediss only)
//	server_name    name to verify in the server certificate (rediss only)
//
// Open pings every primary and refuses a server whose maxmemory-policy is
// not noeviction (Misconfigured): an evicted key is a lost idempotency key,
// lease or fence. Where CONFIG GET is refused (managed Redis), Open
// proceeds and Doctor reports that it cannot verify.
//
// # Atomicity and time
//
// Every operation is one Lua script, sent with EVALSHA (and EVAL when the
// server answers NOSCRIPT, after a restart or SCRIPT FLUSH), so its checks
// and writes are one atomic step. Scripts read the time with TIME, on the
// server: client clocks never decide expiry. Options.Clock exists for tests
// only (the conformance suite's manual clock): it makes the client pass its
// time to every script instead. Records carry no Redis EXPIRE: reads judge
// expiry, and Cleanup deletes what has expired, as on PostgreSQL.
//
// The client never retries a command by itself (MaxRetries -1): a write
// that failed after it was sent is OutcomeUnknown; one that certainly did
// not reach the server (no connection, refused before running: MOVED,
// READONLY, LOADING, OOM) is Unavailable. ClaimKey, AcquireLease,
// CreateWorkflow and UpdateWorkflow carry a random request id that lets a
// retried script recognise its own earlier success.
//
// # Key layout; one scope is one slot
//
// Under the prefix P, every key of scope S has the hash tag {sS'}, where
// S' is S with every byte outside [A-Za-z0-9_.:-] written as %XX: all the
// records and indexes of one scope hash to ONE cluster slot, so every
// script (a fenced UpdateWorkflow or CompleteKey included, which checks a
// lease and writes a workflow or key) touches one slot. Spread load across
// scopes: one scope lives on one primary.
//
//	P:{sS}:w:ID       workflow (hash)
//	P:{sS}:k:KEY      idempotency key (hash; its outcome in internal/outcomecodec's form)
//	P:{sS}:l:RES      lease (string: token, acquired, expires, owner, request id, value,
//	                  packed; "" once released, until Cleanup)
//	P:{sS}:i:…        sorted-set indexes: workflows (all, by status, terminal by
//	                  UpdatedAt), keys (all, claimed, claims by LeaseUntil, completed
//	                  by ExpiresAt and ForgetAt), leases (every resource leased
//	                  since the last Cleanup: a release leaves its entry)
//	P:{sS}:t:TR       the fencing-token counter of token resource TR (string; never deleted)
//	P:{sS}:c:KEY      the pub/sub channel WaitKey listens on (not a key)
//	P:{sS}:h:TR       the pub/sub channel WatchLease listens on (not a key)
//	P:{sS}:m:TR       watch mark: somebody watches TR's leases (string with a TTL)
//	P:{sS}:u:NAME     the caller's own keys in the scope's slot (ScopeKey; durable never touches them)
//	P:scopes          the registry of scopes, which Cleanup walks (never deleted)
//
// Listing pages with ZRANGEBYLEX on the indexes, in byte order; Cleanup and
// CountCleanup run one script per registered scope and find expired
// workflows and keys through the expiry indexes, never by scanning live
// ones. TR is contract.TokenResource of a lease's resource: R for a
// permit "R#n" of a semaphore on R, the resource itself otherwise.
// Leases have no expiry index: a grant and a release, the hot path
// of a lock, write only the lease and its counter, so Cleanup reads the
// expiry of every lease of the scope (one read each; a scope holds one
// lease per resource in use) and drops released ones. A
// filtered ListKeys (completed, expired) and ListLeases walk the scope's
// index inside one script until the page is full, skipping released
// leases.
//
// The lease record is one string: a format byte, the token, acquired and
// expires times, then the owner, the grant's request id and the value,
// each with its length (Lua's struct.pack), so a grant reads the record
// and the watch mark in one MGET and writes it with one SET. A release
// does not delete the record: it leaves a tombstone, the empty string,
// with the resource's entry in the lease index, and the next grant of the
// resource overwrites both with no index write (a resource leased and
// released over and over, the common lock, writes one key per step).
// Cleanup removes tombstones with their index entries, and so does
// DeleteRecord; neither counts a tombstone as a lease. A record left as a
// hash by an earlier version of this backend (fields o, t, a, e, n, v) is
// read as the lease it is by every script (a grant finds it held or
// expired exactly as before), and the next grant, renewal or release
// rewrites it as a string. Anything else at a lease key (a value written
// by hand) fails the operations that read it; none takes it for a free
// resource. The converse does not hold: a process of the earlier version
// reads a string record with HMGET, which Redis refuses (WRONGTYPE: it
// reports Corrupt, and takes nothing), so during a rolling upgrade the
// old processes fail on every lease a new one has written. Upgrade all
// the processes of a prefix together, or expect those errors until the
// last old one stops.
//
// # Fencing tokens; keys an operator must never delete
//
// A grant's token is the next value of the counter P:{sS}:t:TR of the
// resource's token resource TR, which the grant's script INCRs: a
// resource R and the permits "R#1", "R#2", … of a semaphore on it share
// one counter, whether a permit is granted by AcquirePermit or by
// AcquireLease on its name (the Store's fallback). The counter has the
// scope's hash tag, so a grant is one script and one round trip on one
// node and on a cluster alike. (The first write of a Backend in a scope
// also adds the scope to P:scopes: one ZADD, once per scope and Backend.)
// Tokens are strictly increasing per scope and token resource (a
// resource with all its permits), across
// takeover, release, Cleanup, DeleteRecord and restarts (with AOF; see
// Durability for what a crash without it loses); the same token is issued
// for other resources and in other scopes, as contract rule 4 allows, so
// a fence names its scope, resource, owner and token together. The
// scripts count in Lua numbers, exact only up to 2^53, so a token
// resource's tokens end there: with its counter (or the token of the
// lease a grant would replace) at 2^53, AcquireLease and AcquirePermit
// fail with contract.ErrTokensExhausted (code
// Misconfigured), whose documentation says what an operator can do, and
// never issues a rounded, repeated token. Only a counter set outside
// durable gets near that.
//
// No TTL, release, Cleanup, DeleteRecord, `durable cleanup` or `durable
// delete` removes a counter: each token resource ever leased keeps one
// small string key for good (a workload that leases unboundedly many
// distinct resource names grows these keys without bound; a semaphore's
// permits add none of their own). An operator must never delete:
//
//   - a counter P:{sS}:t:TR. While the lease record a grant replaces
//     exists, that grant still goes past the record's token (but not past
//     the tokens of the resource's other permits); once the records are
//     gone too (released, cleaned up, deleted), the tokens of TR and its
//     permits start again at 1 and repeat earlier ones. A stale holder's fence
//     (scope, resource, owner, token) can then become valid again when a
//     later grant to the same owner reaches its token, and a downstream
//     store that keeps the highest token it has seen refuses the new
//     holders until the counter passes it.
//   - an entry of a lease index P:{sS}:i:l while its resource's record
//     (a lease or a tombstone) exists: a grant that finds a record adds
//     no entry, so the lease would be missing from ListLeases, `durable
//     inspect` and Cleanup until it is released and cleaned up. Delete the
//     record and its entry together (`durable delete` does), or neither.
//   - the registry P:scopes. Tokens do not depend on it, but Cleanup finds
//     scopes only through it, and a backend adds a scope only on its
//     own first write there: the records of an unregistered scope are not
//     cleaned up until a backend opened afterwards writes in that scope.
//
// Nor delete every key of the prefix (DEL by pattern, FLUSHDB, FLUSHALL)
// while any fence of the prefix may still be presented, nor let Redis
// evict (maxmemory-policy noeviction): eviction can remove a counter as
// well as a record.
//
// # Durability
//
// What an acknowledged write survives depends on the server's persistence,
// which durable cannot change; `durable doctor` reports it:
//
//	appendonly yes, appendfsync always    a crash of Redis or of the machine: nothing acknowledged is lost
//	appendonly yes, appendfsync everysec  a crash of the machine: up to ~1 s of writes; of Redis alone: up to
//	                                      ~2 s while a slow fsync holds its AOF writes back
//	appendonly yes, appendfsync no        a crash of the machine: whatever the kernel had not written (doctor fails)
//	appendonly no (RDB snapshots or none) a restart: everything since the last snapshot (doctor fails)
//
// Replication is asynchronous: a failover to a replica can lose writes the
// old primary acknowledged, including a fencing-token grant (tokens could
// then repeat) or a completion. wait=N makes every write script be
// followed, on the same connection, by WAIT N wait_timeout; fewer than N
// acknowledgements (or a timeout) is OutcomeUnknown, never success. WAIT
// narrows the window but is not a consensus protocol: a failover can still
// pick a replica that missed a write whose WAIT was never confirmed.
//
// # Shared connections
//
// With coalesce=on (the default; Options.Coalesce), the backend sends the
// scripts its callers send to a node while others are in flight there on
// one connection of its own (per node, besides the client's pool), many
// in flight at once. A script alone (none other of the backend's in
// flight to its node) goes on a pooled connection, exactly as with
// coalesce=off, its caller reading its own reply. On the shared
// connection, a script that finds nobody writing is written at once (by
// its caller's goroutine when the connection is idle, else by the
// backend's own, so that no caller is held in a write for others); the
// scripts that arrive while a write is in the kernel go out together in
// the next one. Nothing waits on a timer. One goroutine reads the
// replies, in order, and hands each to its caller. Each script is still its own atomic step
// with its own reply; scripts that travel together are not a transaction
// (MULTI), so one script's failure does not undo another's. What each
// caller gets is what it would get alone:
//
//   - its own reply, or the error of its own script;
//   - a script the node did not run (NOSCRIPT after a restart or SCRIPT
//     FLUSH, a cluster's MOVED or ASK) is sent again alone, on a pooled
//     connection, where those are handled;
//   - a failed connection fails each script in flight on it as it would
//     fail alone: a write that may have been sent is OutcomeUnknown; the
//     next script dials a new connection (read_timeout bounds how long a
//     silent server holds the scripts in flight);
//   - a caller whose context ends before its script is written gets
//     Canceled and its script is never sent; once written, a write is
//     OutcomeUnknown and a read Canceled (the others go on).
//
// The connection is dialed with the client's own dialer (TLS included)
// and sends AUTH, SELECT and CLIENT SETNAME as the client would. A client
// with credential providers or an OnConnect hook, and a backend with
// wait=N, use coalesce=pipeline instead.
//
// With coalesce=pipeline, a script that finds fewer than
// coalesce_inflight pipelines in flight to its node is sent at once,
// alone, on a pooled connection; the scripts that arrive while that many
// are in flight wait for the first to return and then go out together,
// as one pipeline on one pooled connection (at most 64 a pipeline), with
// the same rules as above. With wait=N, one WAIT follows the pipeline's
// scripts on the same connection and covers all of them: fewer than N
// acknowledgements make every write of the pipeline OutcomeUnknown.
//
// What either buys is fewer system calls on both sides — one write and
// one read of a socket for many scripts, and for the server one fsync
// turn (appendfsync always) for all the writes it read together — so many
// callers of one Store get more operations per second from the same two
// cores; one caller alone sees no difference. See BENCHMARKS.md for the
// figures. CoalesceStats counts the writes and pipelines.
//
// # WaitKey
//
// WaitKey subscribes to the key's channel on one pub/sub connection shared
// by the backend (every completion, release, deletion and cleanup of the
// key publishes on it), waits for the server to confirm the subscription
// (at most poll_floor), then reads the key; it reads again on each
// message and, at the latest, every poll_floor, so a lost message (a
// reconnect, a failover) costs at most the floor. A failure of the pub/sub
// connection wakes every waiter at once. Close wakes waiters with Closed.
//
// # Lease values
//
// A grant stores LeaseRequest.Value (any bytes, at most
// contract.MaxLeaseValueBytes) in the lease's record, byte for byte;
// AcquireLease, AcquirePermit, RenewLease, RenewLeases, GetLease and
// ListLeases return it; a renewal keeps it; the next grant replaces it.
//
// # Fenced semaphores (PermitAcquirer)
//
// Permit n of a semaphore on R is the lease on "R#n", a record
// P:{sS}:l:R#n like any lease's. AcquirePermit is one script: it reads
// permits 1, 2, … in turn (one HMGET each) and grants the first that
// AcquireLease would grant (no record, or one expired more than the
// tolerance ago by the script's clock), with a token from R's counter;
// LeaseBusy when all are held. The permits and the counter have the
// scope's hash tag, so the script runs on one node, on a cluster too,
// and no race can admit more than Permits holders. A request whose
// permits are all held reads all of them: Permits HMGETs in one script.
//
// # Watching leases (LeaseWatcher)
//
// WatchLease subscribes, on the shared pub/sub connection, to the channel
// P:{sS}:h:TR of the resource's token resource (so a watch of R hears R
// and all its permits; a watch of a permit hears its siblings too, which
// the contract allows as spurious signals), and sets the watch mark
// P:{sS}:m:TR, a string with a TTL of a minute that the backend refreshes
// every 15 s while any of its watches of TR lasts. A grant (a takeover
// included), a release, a DeleteRecord and a Cleanup of a lease PUBLISH
// on the channel when the mark exists: a lock nobody watches costs one
// EXISTS per grant and release, not a PUBLISH, which on a cluster goes to
// every node. A mark outlives its last watch (or a crashed process) by
// up to a minute. WatchLease returns after the server has confirmed the
// subscription (a PING answered after the SUBSCRIBE) and the mark is
// set, so every change after it signals. A message can be lost when the
// pub/sub connection fails (go-redis connects and subscribes again) or a
// mark lapses (a refresh that failed for a minute, or an operator who
// deleted it): then every watch concerned is signalled, so that its
// owner reads the lease again; the Store's polling floor bounds the rest.
// A mark may be deleted by an operator at this cost; it is not a record.
//
// # Exactly-once effects in Redis (TxCompleter)
//
// For an effect written to Redis itself (a counter, a list, a hash), the
// backend implements contract.TxCompleter: the effect and the key's
// completion are applied together or not at all, so Do's hazard (an
// effect applied whose outcome was never stored) cannot happen. BeginTx
// returns a [*Tx] (also its Raw, so DoTx takes a func(ctx, *redis.Tx));
// queue your commands with Tx.Queue, complete with CompleteKeyTx, and
// Commit sends them, on one connection of the node of the key's slot, as
//
//	WATCH <key record> [<fence's lease record>]
//	EVALSHA <check: the token still holds the claim, the fence is valid, on the server's clock>
//	MULTI  <your commands…>  <the completion's writes>  PUBLISH <the key's channel>  EXEC
//	[WAIT wait wait_timeout]
//
// Build every key your commands touch with [Backend.ScopeKey] (or
// Tx.ScopeKey) and the completion's scope: it has the scope's hash tag,
// so the transaction is one slot. Before sending anything, Commit refuses
// (InvalidArgument) a command with an argument that starts with the prefix
// and "{" but hashes to another slot; on a cluster the server refuses a
// transaction whose other keys are in another slot (InvalidArgument too),
// on one node it does not.
//
// Semantics differ from PostgreSQL's in one respect: nothing is locked
// while a Tx is open. CompleteKeyTx checks the claim (Fenced at once if
// the token does not hold it) and returns the record a commit stores;
// a reclaim meanwhile does not wait for the Tx: instead Commit fails with
// Fenced, applying nothing, if the key's record (or the fence's lease
// record) changed since — reclaimed, released, completed, cleaned up.
// The effect and the completion are never applied under a lost claim, and
// never one without the other, except in one case Redis makes possible:
// a queued command that fails when it runs (INCR of a non-integer, a
// WRONGTYPE) does not roll the transaction back. Commit then reports code
// Unknown with a [*CommandError] naming the command: the completion and
// your other commands were applied, and a retry replays the outcome. A
// command the server refuses when queued (unknown, wrong arity, a key on
// another node) aborts the whole transaction: InvalidArgument, nothing
// applied. A failure after EXEC was sent is OutcomeUnknown: all of it or
// none of it applied, and a retried claim replays or runs again, never
// both. See [Tx.Commit] for every error.
//
// # Optional capabilities
//
// The backend implements KeyWaiter, ToleranceReporter, CleanupCounter,
// RecordDeleter, RecordLister, LeaseRenewer (one script per scope in the
// batch), PermitAcquirer, LeaseWatcher, SystemNamer, Doctor and
// TxCompleter (above).
//
// Doctor's checks are connect, eviction (maxmemory-policy noeviction) and
// persistence (appendonly yes and appendfsync always or everysec), on every
// primary.
package redis
