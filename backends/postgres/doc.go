// Package postgres is the PostgreSQL backend of durable, on pgx v5 or on
// any database/sql driver (lib/pq, pgx's stdlib), with one set of SQL
// statements for all of them. It registers the DSN schemes "postgres" and
// "postgresql" (the same driver); the DSN's driver parameter chooses the
// client library.
//
//	import _ "github.com/durable-go/durable/backends/postgres"
//
//	store, err := durable.Open(ctx, "postgres://app:secret@db.internal/app?schema=durable&sslmode=verify-full")
//	store, err := durable.Open(ctx, "postgres://app:secret@db.internal/app?driver=pq")
//
// [Open] is durable.Open for a postgres DSN (it refuses any other scheme),
// and [New] builds a Store on a pool you already have: a
// *pgxpool.Pool or a *sql.DB of any PostgreSQL driver, bypassing the
// registry. Like durable.Open they return the validating *durable.Store
// (every backend's Open and New do): the easy path is the safe one.
// [NewBackend] returns the raw contract backend on such a pool, whose
// methods skip the Store's validation, defaults and time bounds: it is for
// conformance harnesses and decorators. However it is built (on any client
// library) it is the same [Backend] with the same methods: the schema
// methods, [Backend.FenceTx] and [Backend.Doctor] included. From a
// *durable.Store, reach it with Store.As:
//
//	var b *postgres.Backend
//	if store.As(&b) { … }
//
// # DSN
//
//	postgres://[user[:password]@]host[:port]/dbname[?param=value&…]
//
// Parameters read by durable (only statement_timeout reaches the server, as
// that setting in milliseconds):
//
//	driver             the client library: pgx (default) for pgx's own
//	                   pool; pq for lib/pq through database/sql; pgx-stdlib
//	                   for pgx's stdlib through database/sql. All three run
//	                   the same statements (see "database/sql" below).
//	schema             the schema holding durable's tables (default
//	                   "durable"). It must match [a-z_][a-z0-9_]{0,62} and
//	                   not start with "pg_"; it is always quoted in SQL.
//	tolerance          the clock tolerance, a Go duration within 0s and 1h
//	                   (default 1s). A claim or lease is taken over only
//	                   when it expired more than this long ago; a fence or a
//	                   renewal needs this much time left.
//	migrate            auto (default): create the schema if missing and
//	                   apply pending migrations; verify: only read the
//	                   schema version and fail with ErrSchemaMismatch unless
//	                   it is current (no DDL, works for a role without
//	                   CREATE); off: no check. Maintenance tools override
//	                   it for one open with durable.WithMigrateMode (given
//	                   to durable.Open or [Open]).
//	listen             on (default): WaitKey and WatchLease use one LISTEN
//	                   connection per backend plus polling; off: polling
//	                   only. Behind a transaction pooler it is off
//	                   whatever it says (listen=on with pooler=transaction
//	                   is refused).
//	pooler             what stands between durable and PostgreSQL (see
//	                   [Pooler] and "Behind a connection pooler" below):
//	                   auto (default) detects a pooler on pgx and
//	                   pgx-stdlib; none: a direct connection; session: a
//	                   pooler that keeps sessions (PgBouncer
//	                   pool_mode=session); transaction: PgBouncer in
//	                   transaction (or statement) mode, or any pooler that
//	                   may run consecutive statements on different server
//	                   sessions.
//	coalesce           on (default): the writes that callers of one backend
//	                   send while earlier ones are in flight go to the
//	                   server together, as one pipelined transaction (see
//	                   "Coalesced writes"); off: every write alone. pgx and
//	                   pgx-stdlib only: with driver=pq, and behind a
//	                   transaction pooler, every write runs alone whatever
//	                   it says.
//	coalesce_inflight  how many batches of coalesced writes may be in
//	                   flight at once, each on a pooled connection: 1 to
//	                   64 (default 2, [DefaultCoalesceInFlight]).
//	statement_timeout  server-side statement timeout for every connection,
//	                   a Go duration (5s) or milliseconds (5000); default
//	                   none. A statement that times out → ErrUnavailable.
//	tcp_keepalive      idle time before the first TCP keepalive probe on a
//	                   connection durable dials; probes follow every third
//	                   of it and three unanswered ones drop the connection.
//	                   A Go duration or milliseconds, 0 turns keepalives
//	                   off; default 15s.
//	tcp_user_timeout   how long sent data may stay unacknowledged before
//	                   the kernel drops the connection (TCP_USER_TIMEOUT,
//	                   Linux only). A Go duration or milliseconds, 0 turns
//	                   it off; default 30s.
//
// Parameters passed through to the client library (see the pgx, lib/pq and
// libpq documentation), for every driver:
//
//	pool_max_conns     the pool size (default 16, [DefaultPoolSize]; with
//	                   database/sql both the open and the idle limit).
//	                   Every operation holds a connection for its round
//	                   trip, so size it to the operations a process keeps
//	                   in flight (concurrent callers), within the server's
//	                   max_connections shared by every process; a pool
//	                   smaller than that makes callers queue (pgxpool's own
//	                   default, 4 on a 2-CPU machine, ran 16 callers well
//	                   below the throughput of 16 connections: see
//	                   BENCHMARKS.md). A pool_min_conns above 16 raises the
//	                   default with it. With New or NewBackend the pool is
//	                   the caller's: pgxpool.Config.MaxConns, or
//	                   DB.SetMaxOpenConns and DB.SetMaxIdleConns (set both:
//	                   database/sql keeps only 2 idle connections by
//	                   default, and a closed connection loses its prepared
//	                   statements)
//	pool_max_conn_lifetime, pool_max_conn_idle_time
//	                   Go durations (defaults 1h and 30m)
//	connect_timeout    seconds to wait for a connection (libpq's meaning);
//	                   default 10 (durable's; libpq's is none)
//	host, port, dbname, user, password, passfile, service, sslmode, sslkey,
//	sslcert, sslrootcert, sslnegotiation, sslsni, krbspn, krbsrvname,
//	target_session_attrs, min_protocol_version, max_protocol_version,
//	application_name, options, lock_timeout,
//	idle_in_transaction_session_timeout
//
// for driver=pgx and driver=pgx-stdlib only:
//
//	servicefile, sslcertmode, sslpassword, channel_binding, require_auth,
//	statement_cache_capacity, description_cache_capacity,
//	default_query_exec_mode
//
// for driver=pgx only (pgxpool's): pool_min_conns, pool_min_idle_conns,
// pool_max_conn_lifetime_jitter, pool_health_check_period,
// pool_ping_timeout; and for driver=pq only: binary_parameters.
//
// With driver=pq, durable sets binary_parameters=yes unless the DSN says
// otherwise (lib/pq then sends each statement in one round trip instead of
// preparing it first in another), and sslmode=prefer, the default of
// libpq and pgx, unless given (lib/pq's own default is require).
//
// Any other parameter is rejected with ErrInvalidArgument, and so is a
// parameter the chosen driver does not take, or one given twice. Errors
// never quote the DSN or a value; an unknown parameter's name is quoted when
// it looks like one.
//
// # Behind a connection pooler
//
// PgBouncer in transaction mode (and poolers like it: pgcat, Supavisor,
// RDS Proxy) gives each transaction, and each statement outside one, to
// whichever server session is free, so nothing that lives in a session
// survives from one statement to the next. With pooler=transaction the
// backend relies on none of it:
//
//   - statements run without named prepared statements: pgx in its exec
//     mode (an unnamed statement with text-format values, still one round
//     trip), lib/pq with binary_parameters=yes (Open's default). The server
//     then parses and plans every statement anew, which costs the
//     statements with several steps (UpdateWorkflow, ClaimKey,
//     CompleteKey) a few hundred microseconds each (see BENCHMARKS.md).
//     Behind a pooler that keeps prepared statements across server
//     sessions (PgBouncer 1.21 and later with max_prepared_statements set)
//     add default_query_exec_mode=cache_statement to the DSN: a query mode
//     the DSN sets is kept;
//   - WaitKey polls (50 ms doubling to 1 s) instead of listening, since a
//     notification goes to a server session no client is attached to: a
//     waiter learns of a completion up to a second later; WatchLease
//     polls the same way (see "Watching leases");
//   - session settings in the DSN (statement_timeout, options, lock_timeout,
//     idle_in_transaction_session_timeout) are refused with
//     ErrInvalidArgument: PgBouncer refuses them at connect (or, when told
//     to ignore them, silently drops them). Set them on the role instead:
//     ALTER ROLE app SET statement_timeout = '5s';
//   - every statement and every migration names its objects with the
//     schema, and migrations take a transaction-scoped advisory lock in the
//     one transaction that applies them (see "Schema and migrations").
//
// With the default pooler=auto, Open on pgx or pgx-stdlib asks the server
// for the process running its first statement and compares it with the
// session key the connection was given at startup: a pooler hands out keys
// of its own, a direct connection the server process's. A pooler found that
// way is treated as a transaction pooler (say pooler=session to keep
// prepared statements and LISTEN behind a session pooler). lib/pq does not
// reveal the key, and New and NewBackend do no I/O to find out: say
// pooler=transaction (Options.Pooler = PoolerTransaction) there. (With
// driver=pq each new connection still checks, the same way, that it
// reaches the server directly before it prepares statements on it; see
// "database/sql".) If named
// prepared statements do meet a transaction pooler, the failure is
// ErrMisconfigured naming pooler=transaction, never a statement applied
// twice: such a statement is refused before it runs. The durable CLI's
// doctor command detects a pooler, reports the query mode, and checks that
// a NOTIFY reaches the LISTEN connection.
//
// # Schema and migrations
//
// Everything lives in one schema owned by the package: the tables
// workflows, idempotency_keys and leases, the sequence lease_tokens, and
// golang-migrate's version table schema_migrations (its layout: version
// bigint, dirty boolean). The migrations are plain SQL files embedded from
// migrations/ that name every object with the schema; [MigrationFiles]
// returns them for a schema, ready for another migration tool. The backend
// applies them with golang-migrate (its iofs source) through a database
// driver of its own that needs no session state, so it works through a
// transaction pooler and on every client library alike: one transaction
// holds golang-migrate's migration lock for the schema (the same key, taken
// as a transaction-scoped advisory lock, so migrators of this and older
// versions serialize), creates the schema and the version table if they
// are missing, applies every pending file and records the version. A
// failure rolls all of it back: no migration is ever left half applied or
// dirty by this runner. Several processes may migrate at once; one applies,
// the others find the schema current.
//
// A database whose version is newer than the code, older than it (with
// migrate=verify), or dirty makes Open fail with ErrSchemaMismatch; the
// message says what to do. So does a version table whose objects are not in
// the schema (older versions, migrating through a transaction pooler,
// created them in the role's default schema, usually public): the message
// names what is missing and where same-named tables are. migrate up repairs
// that case when none of the tables and sequences exist in the schema (it
// applies every migration again), and when only the function
// durable_claim_key is missing (it applies migration 5, which last defined
// it, and the later ones again: every migration from 5 on is written to
// run again, IF NOT EXISTS and IF EXISTS); when only some tables do, the
// schema must be repaired by hand.
//
// The methods [Backend.Migrate], [Backend.MigrationStatus] and
// [Backend.Force] are the one migration API, on whichever pool the backend
// runs. With only a pool at hand, build a backend on it that leaves the
// schema alone (no I/O happens then) and call them:
//
//	b, err := postgres.NewBackend(ctx, pool, postgres.Options{Migrate: postgres.MigrateOff})
//	…
//	err = b.Migrate(ctx, postgres.Up)
//
// # Maintenance
//
// The durable CLI's migrate and doctor commands open the application's DSN
// with durable.Open, read by this package's parser exactly as the
// application reads it, with the option durable.WithMigrateMode(MigrateOff)
// (which reaches this package's driver through contract.OptionsDriver;
// [Open] takes it too): opening then neither changes nor checks the
// schema, so that it works on a schema that is missing, behind, dirty or newer, while every parameter, migrate
// included, is still checked. They then ask the backend for what they need
// by the contract's capability interfaces: contract.Migrator (the schema
// methods) for migrate, contract.Doctor ([Backend.Doctor]: server, schema
// version, clock skew, LISTEN) for doctor. [MigrateMode], [Direction],
// [SchemaStatus] and [Check] are the contract's types under this package's
// names.
//
// # Statements
//
// Every fast-path operation is one SQL statement and one round trip:
// CreateWorkflow, GetWorkflow, UpdateWorkflow, ListWorkflows, ClaimKey,
// CompleteKey, RenewKey, ReleaseKey, GetKey, AcquireLease, RenewLease,
// ReleaseLease and GetLease, RenewLeases for a batch of up to 1,000
// leases (renew.go), and AcquirePermit (which runs its statement again
// when a concurrent grant took the permit it chose: see "Fenced
// semaphores"). A failed compare-and-set returns, in the same
// statement, the record its snapshot saw, which says why it failed. Only
// when that snapshot shows no reason (a concurrent commit after the
// statement began) does UpdateWorkflow read once more, and ClaimKey and
// CompleteKey run their statement again (bounded); after three such rounds
// ClaimKey decides in a short transaction that locks the key's row (see
// Idempotency keys), so a claim always ends in an answer. Cleanup and
// CountCleanup are one statement each, and so are the operator's
// DeleteRecord and the two lists of contract.RecordLister: ListKeys (one
// statement, the state filter a parameter) and ListLeases (ListLeases, or
// ListLeasesHeld with Held), each a keyset page in byte order read along
// the table's primary key. Open, New and NewBackend are not
// fast-path: Open pings, and all three read the schema version and may
// migrate (unless MigrateOff). WaitKey polls GetKey, or, while its LISTEN
// connection is up, the statement WaitKey (GetKey's read that also marks
// the claim waited). WatchLease sends its mark (the statement WatchLease,
// and WatchPermits for a semaphore's resource) or, without LISTEN, its
// first read (LeaseState) before it returns, and repeats them in the
// background (see "Watching leases"). ClaimKey's replay of a completed key and its answers
// InFlight and KeyConflict are a plain SELECT: its statement reads the key
// and calls the function durable_claim_key (migration 4, last defined by
// migration 5), which runs the INSERT … ON CONFLICT (or hands the caller's
// own claim back), only when that read finds the key free, reclaimable or
// the caller's own. (The application's role needs EXECUTE on that function,
// which PostgreSQL grants to PUBLIC unless the database's default
// privileges revoke it. The statement names the function whatever the
// read finds, so without EXECUTE every ClaimKey, a replay too, fails with
// ErrPermissionDenied, and with the function dropped, with
// ErrSchemaMismatch. migrate=verify and `durable doctor` report a dropped
// function, and `durable migrate up` (or Open with migrate=auto) applies
// migration 5 (and the later ones) again to recreate it, touching no
// data.) This holds on every
// client library, counted at the wire: on
// pgx and pgx's stdlib once a connection has prepared the statement, on
// lib/pq with driver=pq once a connection has prepared the statement (or
// with binary_parameters=yes, which driver=pq sets, where it runs the
// statement unnamed); lib/pq without binary_parameters through New
// spends a second round trip preparing every statement.
//
// Serialization failures and deadlocks (SQLSTATE 40001, 40P01) are retried
// up to three times with jitter, then reported as ErrUnavailable.
//
// # Coalesced writes
//
// With coalesce=on (the default; [Options].Coalesce) on pgx and pgx-stdlib,
// the writes that the callers of one backend send while earlier ones are
// in flight are sent together and committed once: UpdateWorkflow,
// ClaimKey's statement (not its locked form), CompleteKey, RenewKey,
// ReleaseKey, RenewLease and ReleaseLease (of a lease or a permit). A
// fenced UpdateWorkflow or CompleteKey runs alone (it also locks the
// fencing lease, see below), and so does every other operation.
//
// Nothing waits on a timer. A write that finds fewer than
// coalesce_inflight batches in flight and nothing waiting is sent at once,
// on its caller's goroutine and context, as the one statement it is
// without coalescing: alone, a write costs what it did. Writes that arrive
// while the in-flight limit is reached wait for the next batch, which
// takes all of them (up to 64) as soon as a batch ends: the batch is what
// accumulated during the previous round trip. [Backend.CoalesceStats]
// counts the batches.
//
// A batch of several writes is one pgx batch: their statements in one
// pipeline ended by one Sync, on one pooled connection, which PostgreSQL
// runs as one implicit transaction: one commit (one WAL flush) for all of
// them, all or nothing. Each statement sees what the earlier ones did, so
// writes of one row in one batch behave as if one ran after the other
// (of two updates expecting one revision, one applies and one gets
// ErrConflict; of two claims of one key, one wins), and every caller gets
// its own result, conditional failures included. Within a batch the
// statements run in the order of the row each one locks (table, scope,
// then ID, key or resource): every batch, of this process (with
// coalesce_inflight above 1) or of another, takes its row locks in that
// one order, so batches do not deadlock one another (which is why a write
// that locks two rows, a fenced one, runs alone). A batch can still
// deadlock with a transaction of the application's that holds several
// rows (CompleteKeyTx, FenceTx); PostgreSQL breaks that after
// deadlock_timeout by failing one of the two, and if it fails the batch,
// the batch's writes run again alone ([CoalesceStats].RolledBack counts
// such batches).
//
// Consecutive writes of a batch that are RenewLease calls, or
// UpdateWorkflow calls, of different rows go as one statement for all of
// them (an UPDATE … FROM unnest of their parameters, one array each, which
// returns each call's row tagged with its position): one statement instead
// of one per write, which is what made the server's and the client's work
// per write, not the commit, the limit at 16 clients
// ([CoalesceStats].Merged counts them). Each call still gets exactly the
// row its own statement would have returned. Such a statement locks its
// rows in the order of the batch when PostgreSQL plans it as a nested loop
// over the calls (the batch forbids, for its own transaction, the
// sequential scans and hash or merge joins a small table would invite, so
// it does); were a plan to lock them in another order and two batches
// deadlock, PostgreSQL fails one, whose writes then run again alone, as
// above.
//
// What a batch's failure means for its writes:
//
//   - a statement of it failed with a server error (or its commit did):
//     the transaction rolled back and nothing of it was applied, so every
//     write runs again, alone, and gets its own result (the failing one its
//     own error);
//   - the connection broke, the server ended the session, or the batch's
//     context ended, after it was sent: every write gets ErrOutcomeUnknown,
//     never a guess (the batch was applied entirely or not at all);
//   - no connection could be had: nothing was sent, as for a write alone.
//
// A write whose context ends while it waits for its batch is not sent
// (ErrCanceled, not applied); one whose context ends once its batch was
// sent gets ErrOutcomeUnknown: the batch goes on, on a context of its own
// (the values of its first write's context, not its cancellation, and the
// latest of the writes' deadlines when every one has a deadline), which is
// canceled once every write of it has given up.
//
// In a batch, now() is the batch transaction's start: every write of it
// runs on the same clock reading, taken after each of them was called and
// before any returns (an injected [Options].Clock is read per write). A
// NOTIFY that a write sends (to WaitKey and WatchLease) is delivered at
// the batch's commit, as a write alone's is at its own.
//
// lib/pq has no pipeline mode (and database/sql none of its own), so with
// driver=pq or a *sql.DB of lib/pq every write runs alone. Behind a
// transaction pooler (pooler=transaction, or a pooler Open detected) every
// write runs alone too: pgx sends a batch in the connection's default
// query mode, which prepares statements on the server session, and
// nothing ties those to the session the pooler gives the batch. See
// BENCHMARKS.md, "Coalesced writes (issue 31)", for what coalescing gains
// and how coalesce_inflight was chosen.
//
// # Time
//
// Expiry is judged on the database's clock only: every statement uses
// now() (the start of its transaction: a batch's, for coalesced writes)
// and TTLs travel as seconds. Tests
// can inject a clock through [Options].Clock; it is sent as a timestamptz
// parameter in place of now().
//
// # Hung servers
//
// Every call is bounded by its context; the durable Store adds a default
// operation timeout (durable.WithOperationTimeout, 10 s) when the caller's
// context has none. When a context ends while a statement is in flight on a
// server that has stopped answering with its TCP connection still open (a
// frozen server, pooler or proxy), pgx puts a deadline on the network
// connection at once. lib/pq would instead wait for the frozen server to
// answer its cancel request, forever; with driver=pq the backend therefore
// cuts such a connection one second after the context ended. (A *sql.DB of
// your own on lib/pq given to [New] has no such watchdog: its calls
// end when the kernel gives up on the connection.) Connections durable
// dials get TCP keepalives and TCP_USER_TIMEOUT (tcp_keepalive,
// tcp_user_timeout) and a connect timeout, so a vanished server machine is
// noticed even on an idle connection.
//
// A statement that timed out after it was sent is a write that may have
// applied: ErrOutcomeUnknown, which a retry resolves. One that never left
// the process (the pool had no free connection in time) is ErrUnavailable,
// or ErrCanceled when the caller's own context ended.
//
// # Idempotency keys
//
// A ClaimRequest with a Token (chosen by the caller, fresh for each logical
// call and reused by its retries) is stored as the claim's token; without
// one the backend draws a random token. A retried ClaimKey of the same
// request with the same token finds its own claim, live or lapsed, and
// gets it back (ClaimNew, the lease set to now + TTL), unless another
// caller reclaimed it or it was completed. Tokens are compared byte for
// byte.
//
// A completed key keeps its outcome until ExpiresAt (Completion.Retain)
// and a tombstone until ForgetAt (Completion.Tombstone; never before
// ExpiresAt): between the two, GetKey, ListKeys and WaitKey report the key
// as KeyExpired with the status code alone (never the payload), a ClaimKey
// of the same request is ErrOutcomeExpired, and a retried CompleteKey with
// the claim's token returns the tombstone. Cleanup sets the payload of
// completed keys past ExpiresAt to NULL (CleanupResult.Outcomes) and
// deletes tombstones past ForgetAt (CleanupResult.Keys), each bounded by
// the request's Limit. Keys completed before migration 5 have ForgetAt =
// ExpiresAt.
//
// ClaimKey's statement reads the key and writes only when it can take it;
// when a concurrent commit makes that read stale it runs again, and after
// three stale rounds (claims racing releases and reclaims of one key) it
// decides in a transaction instead: an INSERT … ON CONFLICT that inserts
// the claim or locks the stored row, the claim rule on that locked row,
// the write, COMMIT. It cannot lose a race, so ClaimKey never answers
// ErrUnavailable for contention.
//
// # Transactional completion
//
// The backend implements contract.TxCompleter: the outcome of an
// idempotency key can be stored in the same transaction as the effect it
// stands for, a write to your own tables in the same database, so that
// both commit or neither does. The hazard of the plain path (the effect
// commits, the process dies before CompleteKey, the claim expires and a
// retry runs the request again) is gone for such effects.
//
// [Backend.BeginTx] begins a transaction on the backend's pool; its Raw
// is a pgx.Tx on a pgx pool and a *sql.Tx on database/sql. Run your
// statements in it, then [Backend.CompleteKeyTx] with the claim's token,
// then Commit. CompleteKeyTx also takes a transaction of your own on the
// same database, a pgx.Tx or a *sql.Tx, as FenceTx does. Its one UPDATE
// checks that the token still holds the claim (and the fence, if given),
// stores the outcome, and keeps the key's row locked until the transaction
// ends: a reclaim waits for it, and then finds the key completed (commit)
// or the claim as it was (rollback). A COMMIT whose reply is lost is
// ErrOutcomeUnknown: a retried ClaimKey of the same request then replays
// the stored outcome, or, if nothing committed and the claim expired, runs
// the request again; never both. See ExampleBackend_CompleteKeyTx.
//
// Keep the transaction short (the row lock delays reclaims and the lock of
// a fence delays takeovers) and at READ COMMITTED. Behind a transaction
// pooler (PgBouncer in transaction mode) it works as well, relying on no
// session state; run your own statements in a BeginTx transaction on pgx
// with pgx.QueryExecModeExec (or set default_query_exec_mode=exec in the
// DSN), as the backend runs its own.
//
// # Fencing tokens
//
// Tokens come from the sequence lease_tokens (bigint, NO CYCLE), shared by
// every resource, so they only grow, across takeover, release, cleanup and
// restarts. See [Backend.AcquireLease] for the one residual hazard. At the
// bigint maximum the sequence cannot advance (tokens never wrap):
// AcquireLease fails with contract.ErrTokensExhausted (code Misconfigured,
// SQLSTATE 2200H), whose documentation says what an operator can do.
// [Backend.FenceTx] checks a fence inside your own transaction, a pgx.Tx or
// a *sql.Tx, and holds the lease row until it ends.
//
// # Lease values
//
// A grant stores LeaseRequest.Value in the column value (bytea, migration
// 6; NULL for the empty value), byte for byte: NUL bytes and invalid UTF-8
// come back as they were sent, on every client library. Every read of the
// lease (AcquireLease, RenewLease, RenewLeases, GetLease, ListLeases,
// AcquirePermit) returns it in the same statement; a renewal keeps it, a
// new grant replaces it, a release drops it with the lease.
//
// # Fenced semaphores
//
// Permit n of the semaphore on resource R is the lease row "R#n", like any
// other: RenewLease, ReleaseLease, GetLease, FenceTx and the fenced writes
// take it as they take a plain lease, and its tokens come from the one
// sequence every lease draws from (so R's permits and a plain lease on R
// share one increasing sequence). [Backend.AcquirePermit] grants a permit
// in one statement: it reads the permits' rows (one range of the primary
// key), picks the lowest-numbered permit within the request's Permits that
// is free in its snapshot (no row, released, or expired more than the
// tolerance ago), and grants it as AcquireLease would (INSERT … ON
// CONFLICT DO UPDATE, which re-checks the row it locks). Each permit is
// one row, so no permit ever has two holders and no more than Permits are
// held. Two callers may choose the same permit; the one that finds it
// taken runs the statement again (on a new snapshot, which shows the
// other's grant) instead of answering ErrLeaseBusy, which it answers only
// when a snapshot showed every permit held; after 32 lost rounds in a row
// it gives up with ErrUnavailable.
//
// # Watching leases
//
// [Backend.WatchLease] implements contract.LeaseWatcher with the LISTEN
// connection that WaitKey uses. The statements that grant, take over,
// release or delete a lease (AcquireLease, AcquirePermit, ReleaseLease,
// DeleteRecord, Cleanup) send a NOTIFY on the same channel, with the hex
// SHA-256 of scope "/" R "#" as payload, R being the lease's resource or,
// for a permit "R#n", its semaphore's: one payload wakes the watches of R
// and of all its permits (a watch of one permit is woken by its siblings
// too, spuriously). As with WaitKey, only leases someone watches notify:
// after it registered with the LISTEN connection, WatchLease marks the
// lease's row until 5 minutes ahead on the database's clock (column
// watched_until, migration 6), in a statement that locks the row,
// inserting a released row that holds only the mark (owner empty, token 0)
// when the lease has no row; a grant then takes that row over, keeping
// the mark. A watch of R then marks, in a second statement, every permit
// row of R that exists. A statement notifies a row whose own mark is live
// (read on the row it locked) or, for a permit, whose semaphore's row has
// a live mark (read in its snapshot). Together these signal every change
// that commits after WatchLease returned (the reasoning is on
// [Backend.WatchLease]), but one: a grant of a permit whose row did not
// exist, in flight while the watch marks, may go unsignaled. The release
// that follows is signaled, so a waiter for a free permit, which waits for
// releases, is never affected. DeleteRecord and Cleanup of a row with a
// live mark leave a released row holding the mark, in the same statement.
// A mark lasts across grants and releases. Stale marks clear themselves: a
// watch renews its marks every 100 s while its context lasts, nobody
// removes them, and a mark nobody renews lapses after 5 minutes (the lease
// stops notifying then); Cleanup deletes a released row once its mark has
// lapsed, and leaves it while the mark is live. Renewals never notify.
//
// While the LISTEN connection is down for more than a second (lost, or
// never up), a watch also polls, and signals once when it starts to.
// Without LISTEN at all (listen=off, pooler=transaction behind PgBouncer,
// a *sql.DB that cannot LISTEN) WatchLease still works, by polling: it
// reads a digest of the watched rows' tokens and released flags (statement
// LeaseState) from 50 ms doubling to 1 s and signals when it changes, so
// every grant, release and deletion signals within about a second; it
// sets no marks then. A watch ends, and stops polling and renewing, when
// its context ends or the backend is closed.
//
// # Errors
//
// Driver errors are mapped once, by SQLSTATE (pgx's *pgconn.PgError and
// lib/pq's *pq.Error alike), and every message of a server error ends with
// the SQLSTATE and its condition name, e.g. "(SQLSTATE 57P01
// admin_shutdown)"; [ConditionName] looks a code up. Connection failures
// and 57P0x → ErrUnavailable when the statement was certainly not applied,
// ErrOutcomeUnknown when a write may have been; 57014 (statement timeout)
// → ErrUnavailable, or a Canceled error when the caller's context ended;
// 23505 → ErrAlreadyExists; a missing schema or table → ErrSchemaMismatch;
// a closed pool → ErrClosed. Configuration and permission failures are not
// retryable and say what to fix (naming the database and host:port, never
// the user or password): a wrong password, an unknown role or a pg_hba.conf
// refusal (class 28) and a missing privilege (42501) → ErrPermissionDenied;
// a missing database (3D000), TLS required by one side and refused by the
// other, or an untrusted server certificate → ErrMisconfigured. A stored
// outcome header that cannot be decoded → ErrCorrupt (see durable delete).
// Error texts never contain the DSN, a password, SQL text, parameter values
// or the server's message text; the driver error stays reachable with
// errors.As (the CLI's --verbose prints it).
//
// # WaitKey
//
// CompleteKey, ReleaseKey, Cleanup and DeleteRecord send NOTIFY on the
// channel "durable_keys_<schema>" in the same statement, with the hex
// SHA-256 of scope "/" key as payload, for the keys a waiter marked:
// PostgreSQL serializes the commits of transactions that notify, so a
// completion nobody waits for does not. While its LISTEN connection is up,
// WaitKey reads the key with a statement that also marks a claim waited
// (column waited, migration 3); LISTEN is active before the mark, and the
// statements that complete or delete the key read the mark on the row they
// lock, so no wake-up is lost. Each backend keeps one LISTEN connection,
// opened on the first WaitKey and re-established with backoff after it
// dies: on pgx, a connection taken out of the pool for good; on pgx's
// stdlib, one of the *sql.DB's connections (its pgx connection, through
// (*sql.Conn).Raw), closed when the session ends; on lib/pq, a
// pq.ListenerConn dialed from the DSN (with New on a *sql.DB, from
// [Options].ListenDSN). Waiters also poll, from 50 ms doubling to 1 s, so a
// lost notification only delays them; with listen=off, or on a *sql.DB
// that cannot LISTEN (another driver, or lib/pq without ListenDSN), they
// poll alone.
//
// # database/sql
//
// With driver=pq or driver=pgx-stdlib, or [New] on a *sql.DB, the backend runs on
// database/sql, with the same statement texts and arguments as on pgx (see
// the queriers in internal/pgclient): durations as float8 seconds, times as
// timestamptz (sent cut to the microsecond, as pgx does; read back in UTC),
// bytea byte for byte, a nil []byte as NULL.
//
// database/sql re-sends a statement on another connection when the driver
// reports driver.ErrBadConn. That error is meant for failures before
// anything was sent, but lib/pq also returns it when the connection broke
// after the statement was sent (lib/pq issue 939: a write applied twice).
// So every statement on pgx's stdlib or driver=pq, and every write, takes a
// connection with DB.Conn (which database/sql may retry: nothing has been
// sent) and runs on it: on the driver connection directly (see "Prepared
// statements" below) or with Conn.QueryContext, which database/sql never
// retries; only reads through New on a *sql.DB of another driver (lib/pq
// included) run through DB.QueryContext, whose retry is harmless for a
// read. A write that fails once its connection is taken is reported as
// ErrOutcomeUnknown, unless the failure is certainly from before sending (a
// server error, preparing the statement, or on pgx's stdlib a failure
// pgconn marks as before sending).
// Consequence: with lib/pq, a write on a pooled connection that the server
// closed while it was idle reports ErrOutcomeUnknown (lib/pq cannot tell
// that nothing was sent); the retry that ErrOutcomeUnknown calls for is
// safe.
//
// [Backend.FenceTx] takes a *sql.Tx as it takes a pgx.Tx.
//
// Prepared statements: on pgx's stdlib (driver=pgx-stdlib, or New on
// a *sql.DB of pgx's stdlib) a statement runs on the *pgx.Conn under the
// connection (through Conn.Raw), with pgx's own per-connection cache of
// prepared statements, as on pgx. With driver=pq the backend prepares each
// statement once per connection, the first time that connection runs it,
// and keeps it with the connection (lib/pq has no cache, and database/sql's
// *sql.Stmt re-sends a statement after driver.ErrBadConn like
// DB.QueryContext); it runs on the driver connection directly, so it is
// never re-sent. It prepares only on a connection found, when it was
// opened, to reach the server directly (one extra statement per new
// connection), or with pooler=session; never with pooler=transaction or on
// a connection that goes through a pooler (lib/pq numbers its statements
// per connection, so on a transaction pooler one could run as another
// client's statement of the same name). Those, and New on a lib/pq *sql.DB,
// send every statement unnamed, which PostgreSQL parses and plans on every
// call: several hundred microseconds more for the larger statements
// (ClaimKey, CompleteKey, UpdateWorkflow). See BENCHMARKS.md, "database/sql
// drivers".
package postgres
