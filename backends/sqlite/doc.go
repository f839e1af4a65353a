// Package sqlite is the embedded durable backend: every rule of the
// contract on one SQLite database file, shared safely by any number of
// goroutines and processes on one machine, through the pure-Go driver
// modernc.org/sqlite (no cgo). It registers the DSN scheme "sqlite".
//
//	import _ "github.com/durable-go/durable/backends/sqlite"
//
//	store, err := durable.Open(ctx, "sqlite:///var/lib/app/durable.db")
//
// [Open] builds a Store from [Options] without the registry; like every
// backend package's Open and New it returns the validating
// *durable.Store (see package contract, "Constructors"). [NewBackend], the
// one function that returns the raw contract backend, gives a backend
// whose methods skip the Store's validation, defaults and time bounds: it
// is for conformance harnesses and decorators. From a *durable.Store,
// reach it with Store.As:
//
//	var b *sqlite.Backend
//	if store.As(&b) { … }
//
// Besides contract.Backend it implements the optional capabilities
// KeyWaiter, ToleranceReporter, CleanupCounter, RecordDeleter,
// RecordLister, LeaseRenewer (a batch of renewals in one transaction),
// PermitAcquirer (a semaphore's permit in one transaction), LeaseWatcher
// (within this process, see "Leases" below) and TxCompleter (an outcome
// stored in the caller's transaction, below), and [Backend.Doctor] checks
// the database for `durable doctor`.
//
// # DSN
//
//	sqlite:///abs/path/durable.db   an absolute path
//	sqlite://./durable.db           a path relative to the working directory
//	sqlite://data/durable.db        (also relative)
//	sqlite://:memory:               a private in-memory database (tests): one
//	                                per Open, gone when the Store closes
//
// The path is everything between "sqlite://" and "?", percent-decoded; it
// must not contain '?', '#' or NUL. A missing file is created (its
// directory must exist). Parameters:
//
//	journal_mode  wal (default), delete, truncate or persist. WAL lets
//	              readers run while a writer commits; the rollback-journal
//	              modes block readers during a commit. It is a property of
//	              the file: every process should open it with the same mode.
//	              Ignored for :memory:.
//	synchronous   full (default), normal or extra. With full, a write
//	              acknowledged survives a power loss; with normal (in WAL
//	              mode) it survives the process being killed, but the last
//	              writes before a power loss may roll back. See BENCHMARKS.md
//	              for what each costs.
//	busy_timeout  how long a statement waits for another process's lock, a
//	              Go duration (5s) or milliseconds (5000), within 0 and 1h;
//	              default 5s. After it, a write is retried a few times with
//	              jitter, then fails with ErrUnavailable (nothing applied).
//	tolerance     the clock tolerance, a Go duration within 0s and 1h
//	              (default 1s). A claim or lease is taken over only when it
//	              expired more than this long ago; a fence or a renewal needs
//	              this much time left. The Store's minimum TTL is 1s plus it.
//	migrate       auto (default): apply pending migrations; verify: only read
//	              the schema version and fail with ErrSchemaMismatch unless
//	              it is current; off: no check. Maintenance tools override it
//	              for one open with durable.WithMigrateMode (which reaches
//	              this package's driver through contract.OptionsDriver).
//	readers       read connections, 1–64 (default 4). Writes always go through
//	              one connection per backend.
//	coalesce      on (default) or off: whether the writes that queue for that
//	              connection are applied together, one transaction and one
//	              commit per batch (see Coalesced writes).
//
// Any other parameter, or one given twice, is rejected with
// ErrInvalidArgument. Errors never quote the DSN, the path or a value.
//
// # Concurrency and processes
//
// Every write operation is one BEGIN IMMEDIATE transaction on the
// backend's write connection: SQLite's write lock is taken at BEGIN, so the
// preconditions read inside the transaction hold until it commits, in every
// process. Within a process, writes queue for that connection (a waiting
// caller whose context ends gets Canceled, nothing sent), and those that
// queued together are applied in one transaction (see Coalesced writes);
// across processes
// they queue on SQLite's lock, each waiting up to busy_timeout. Reads run
// on a pool of read-only connections; in WAL mode they never wait for a
// writer. Several backends on one file in one process (several Opens) are
// as safe as several processes.
//
// The file must be on a local file system: SQLite's locks are not
// reliable on network file systems (NFS, SMB), and the processes sharing a
// file must share one clock (see Time), so one machine.
//
// # Coalesced writes
//
// With coalesce=on (the default), the writes that are one short
// transaction — CreateWorkflow, UpdateWorkflow, ClaimKey, CompleteKey,
// RenewKey, ReleaseKey, AcquireLease, RenewLease, RenewLeases,
// ReleaseLease, AcquirePermit and DeleteRecord — are coalesced. A write
// that finds no transaction of them in flight runs at once, on its
// caller's goroutine and under its context, in a transaction of its own,
// exactly as with coalesce=off. The writes that arrive while a transaction
// is in flight queue; when it ends, they are applied together as the next
// batch (at most 64): one BEGIN IMMEDIATE, then each write's statements in
// arrival order, each inside a SAVEPOINT of its own and reading the clock
// when its turn comes, then one COMMIT — one commit (with
// synchronous=full, one fsync) for the batch instead of one per write.
// Nothing waits on a timer: a batch is only what queued meanwhile.
//
// Each write gets its own result, the one it would get alone after the
// writes before it in its batch: a conditional failure (Conflict, Fenced,
// LeaseBusy, …) or any other error of one write rolls back to its
// savepoint, which undoes that write only, and the others commit. The
// waiters (WaitKey) and lease watches of this process are woken by the
// batch's writes only after its COMMIT, never while its transaction is
// open. When the batch fails as a whole:
//
//   - BEGIN IMMEDIATE fails (another process held the lock past
//     busy_timeout and the retries): nothing was applied, and each write
//     gets the error it would get alone (ErrUnavailable, or Canceled when
//     its context ended);
//   - a SAVEPOINT statement fails, or a statement or the COMMIT fails with
//     SQLITE_BUSY or SQLITE_LOCKED: the whole transaction is rolled back,
//     nothing of it applied, and each write runs again alone, in its own
//     transaction, as with coalesce=off;
//   - the COMMIT fails otherwise: every write of the batch gets what such
//     a failure means for a write alone, ErrOutcomeUnknown after an I/O
//     error, the classified error (nothing applied) after any other.
//
// A write that queued and whose context ends before its statements start
// is not applied: Canceled, whether its batch had been taken or not. One
// whose context ends once its statements have started, before its
// transaction has ended, returns at once with ErrOutcomeUnknown: the
// transaction goes on and may commit it. (A write that found nothing in
// flight, as every write with coalesce=off, returns only once its
// transaction has ended, whatever its context does.) Cleanup, migrations
// and BeginTx transactions are not coalesced, and take the write
// connection between batches. Between processes nothing changes: a batch
// is one BEGIN IMMEDIATE transaction like any other.
//
// # Time
//
// Expiry is judged on one clock, the machine's: every operation reads it
// once and compares stored times (INTEGER microseconds since the Unix
// epoch, UTC) with it inside its transaction. The processes sharing a file
// share that clock; the tolerance covers steps of it (NTP corrections)
// between a holder's check and another process's takeover. Tests inject a
// clock through [Options].Clock.
//
// # Fencing tokens
//
// Tokens come from one counter row (table lease_tokens), advanced in the
// transaction of each grant, for every resource: they only grow, across
// release, takeover, Cleanup, DeleteRecord and restarts. Only `durable
// migrate down`, which drops every table, resets it. Tokens never wrap:
// with the counter at the int64 maximum, AcquireLease fails with
// contract.ErrTokensExhausted (code Misconfigured), whose documentation
// says what an operator can do.
//
// # Leases: values, permits and watching
//
// A lease's value (contract.LeaseRequest.Value) is stored as a BLOB in the
// column value of leases (migration 3), so it comes back byte for byte,
// NUL bytes and invalid UTF-8 included; NULL is the empty value, which is
// also what the leases granted before migration 3 read as. A renewal keeps
// the stored value. Reverting migration 3 keeps the leases and drops their
// values.
//
// A semaphore's permit n is the lease on "resource#n" (contract.
// PermitResource), a row of leases like any other. AcquirePermit runs in
// one BEGIN IMMEDIATE transaction: one read of the primary key's range
// finds the permits that are held, and the lowest free one is granted with
// AcquireLease's statements, its token from the one lease_tokens counter.
// SQLite's write lock keeps every other writer, in any process, out from
// BEGIN to COMMIT, so a semaphore never has more live holders than
// Permits.
//
// WatchLease (contract.LeaseWatcher) works within one process: every
// grant, release, takeover, DeleteRecord and Cleanup of a lease made
// through a backend of this process signals, once its transaction has
// committed, the watches made through every backend of this process on the
// same database file (the same file by device and inode, whatever path
// opened it). Changes made by other processes on the file signal nothing:
// a waiter sees those only when it reads the lease again, which the Store's
// waiting does on its polling floor (see contract.LeaseWatcher), so a
// release by another process reaches it later, not at once. An in-memory
// database is private to its backend, and so are its watches. A watch
// lasts until its context ends or its backend closes (Close leaves a last
// signal in its channel).
//
// # Schema and migrations
//
// The tables workflows, idempotency_keys, leases and lease_tokens, and
// golang-migrate's schema_migrations (version, dirty), live in the
// database file. The migrations are plain SQL files embedded from
// migrations/ ([MigrationFiles]) and applied with golang-migrate (its iofs
// source) through a database driver that runs all of them
// in one BEGIN IMMEDIATE transaction: concurrent migrators, in any
// process, serialize on SQLite's write lock, and a failure rolls back
// everything, never leaving a migration half applied or dirty. A database
// whose version is newer than the code (or older, with migrate=verify, or
// dirty) makes Open fail with ErrSchemaMismatch, saying what to do.
// [Backend.Migrate], [Backend.MigrationStatus] and [Backend.Force] are the
// migration API (contract.Migrator), and [Backend.Doctor] the self-check
// (contract.Doctor); the durable CLI's migrate and doctor commands call
// them, after opening with durable.WithMigrateMode(MigrateOff).
// [MigrateMode], [Direction], [SchemaStatus] and [Check] are the
// contract's types under this package's names. The driver and the status
// logic are shared with the Postgres backend.
//
// # Idempotency keys: tokens and tombstones
//
// A ClaimRequest with its own Token stores that token, and a retry of the
// same request with the same token (compared byte for byte) gets its own
// claim back (ClaimNew, the lease set to now + TTL) as long as nobody has
// reclaimed or completed it.
//
// A completed key keeps its outcome until ExpiresAt and a tombstone until
// ForgetAt (the column forget_at, migration 2; keys completed before it
// have forget_at = expires_at). Between the two, reads report KeyExpired
// with the status code alone (never the payload, whether or not Cleanup
// has dropped it yet), ClaimKey of the same request returns
// OutcomeExpired and another request KeyConflict; past ForgetAt the key is
// free. Cleanup sets the payload columns of outcomes past ExpiresAt to
// NULL (CleanupResult.Outcomes) and deletes tombstones past ForgetAt with
// the abandoned claims (Keys).
//
// # Transactional completion
//
// The backend implements contract.TxCompleter: CompleteKeyTx stores a
// key's outcome in the same transaction as the caller's own writes to the
// same database file, so both commit or neither does. It takes
//
//   - a Tx from [Backend.BeginTx] (or its Raw *sql.Tx): a transaction on the
//     backend's write connection, begun with BEGIN IMMEDIATE; or
//   - the caller's own *sql.Tx on the same file, from a *sql.DB opened with
//     modernc's "sqlite" driver (the same SQLite library as the backend's:
//     two SQLite libraries in one process break each other's file locks).
//     Open it with a busy timeout and immediate transactions, for example
//     sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_txlock=immediate"):
//     a deferred transaction that read before it writes fails with
//     SQLITE_BUSY if another connection (such as the backend renewing the
//     claim) wrote in between, and a connection without a busy timeout
//     fails at once on a lock. A transaction on another file, or on an
//     in-memory database, is refused (InvalidArgument).
//
// Its one statement checks that the token holds the claim (and the fence,
// if any) and writes the outcome. SQLite has one writer: from that
// statement (with BeginTx, from BEGIN) to COMMIT or ROLLBACK the
// transaction holds the database's write lock, so no reclaim can take the
// key meanwhile; a reclaim waits, then sees the outcome (after a commit)
// or the claim as it was (after a rollback: the same token and lease).
//
// What waits while such a transaction is open, and for how long:
//
//   - Every other write of the same backend waits for the write
//     connection that a BeginTx transaction holds, until the transaction
//     ends or the waiting call's context does (the Store's operation
//     timeout, 10 s by default): then it fails with Canceled or
//     Unavailable and changes nothing. Reads do not wait in WAL mode (an
//     in-memory database's reads share the write connection, and wait).
//   - Writes of other backends and processes (and, for the caller's own
//     transaction, of this backend too) wait for SQLite's lock, up to
//     busy_timeout per attempt and a few attempts, never beyond their
//     context; then Unavailable.
//   - So nothing waits forever, but a transaction that stays open blocks
//     every writer of the file. This includes the renewal of the claim
//     itself: Store.DoTx renews the claim with RenewKey while its function
//     runs, before it completes in the transaction. While the transaction
//     holds the write lock a renewal cannot succeed; it is not needed
//     either, since nobody can reclaim the key until the transaction ends.
//     A renewal that timed out meanwhile is harmless; but if the
//     transaction then rolls back, the claim's lease is what it was before
//     (possibly run out).
//   - Do not call the Store's writes (a plain CompleteKey, another
//     ClaimKey) inside the transaction: they wait for it until their
//     timeout.
//
// What to do: keep the transaction short. Do slow work (remote calls,
// computation) before BeginTx, or, with your own transaction, begin it only
// once you are ready to write; keep the claim's TTL and the Store's
// operation timeout longer than the transaction; always end it (defer
// Rollback: after Commit it does nothing). A BeginTx transaction lasts
// until Commit or Rollback, or until the backend closes (rolled back);
// BeginTx's context bounds only the wait to begin.
//
// Waiters (WaitKey) of this process are woken when a BeginTx transaction
// commits; the commit of a caller's own transaction is seen by their
// polling (below). Commit reports a COMMIT that failed after it was sent
// as OutcomeUnknown: a retried ClaimKey then replays the outcome or, once
// the claim has expired, runs the request again, never both.
//
// # WaitKey
//
// A completion, release, Cleanup or DeleteRecord wakes the WaitKey callers
// of every backend of the same process on the same file (by any path) at
// once (through channels). Changes by other processes are seen by polling,
// from 5 ms doubling to 500 ms.
//
// # Errors
//
// SQLite's result codes are mapped once, and a message ends with the code's
// name, e.g. "(SQLITE_BUSY)" ([CodeName] reads it from an error):
// SQLITE_BUSY and SQLITE_LOCKED, after the busy timeout and a few retries
// → ErrUnavailable; a full disk (SQLITE_FULL) → ErrMisconfigured; a
// read-only file or directory (SQLITE_READONLY), SQLITE_PERM and
// SQLITE_AUTH → ErrPermissionDenied; a file that cannot be opened
// (SQLITE_CANTOPEN) or is not a database (SQLITE_NOTADB, SQLITE_CORRUPT) →
// ErrMisconfigured; missing tables → ErrSchemaMismatch; I/O errors →
// ErrUnavailable, except a failed COMMIT, which is ErrOutcomeUnknown; a
// context that ended → Canceled. Every write is one transaction that
// either committed or rolled back, so Unavailable and Canceled mean
// nothing was applied. A stored outcome header that cannot be decoded →
// ErrCorrupt (see durable delete). Error texts never contain the path, SQL
// text, parameter values or SQLite's message; the driver error stays
// reachable with errors.As.
package sqlite
