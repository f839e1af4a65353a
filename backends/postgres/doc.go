// Package postgres is the PostgreSQL backend of durable, on pgx v5. It
// registers the DSN schemes "postgres" and "postgresql" (the same driver).
//
//	import _ "github.com/durable-go/durable/backends/postgres"
//
//	store, err := durable.Open(ctx, "postgres://app:secret@db.internal/app?schema=durable&sslmode=verify-full")
//
// [New] builds a backend on a *pgxpool.Pool you already have, bypassing
// the registry.
//
// # DSN
//
//	postgres://[user[:password]@]host[:port]/dbname[?param=value&…]
//
// Parameters read by durable (only statement_timeout reaches the server, as
// that setting in milliseconds):
//
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
//	                   CREATE); off: no check.
//	listen             on (default): WaitKey uses one LISTEN connection per
//	                   backend plus polling; off: polling only (for
//	                   transaction poolers such as PgBouncer in transaction
//	                   mode, where LISTEN does not work).
//	statement_timeout  server-side statement timeout for every connection,
//	                   a Go duration (5s) or milliseconds (5000); default
//	                   none. A statement that times out → ErrUnavailable.
//
// Parameters passed through to pgx (see the pgx and libpq documentation):
//
//	pool_max_conns     the pool size (default: the greater of 4 and the
//	                   number of CPUs), and the other pool_ parameters:
//	                   pool_min_conns, pool_min_idle_conns,
//	                   pool_max_conn_lifetime, pool_max_conn_idle_time,
//	                   pool_max_conn_lifetime_jitter,
//	                   pool_health_check_period, pool_ping_timeout
//	connect_timeout    seconds to wait for a connection (libpq's meaning)
//	host, port, dbname, user, password, passfile, service, servicefile,
//	sslmode, sslkey, sslcert, sslcertmode, sslrootcert, sslnegotiation,
//	sslpassword, sslsni, channel_binding, require_auth, krbspn, krbsrvname,
//	target_session_attrs, min_protocol_version, max_protocol_version,
//	application_name, options, lock_timeout,
//	idle_in_transaction_session_timeout, statement_cache_capacity,
//	description_cache_capacity, default_query_exec_mode
//
// Any other parameter is rejected with ErrInvalidArgument (so is a
// parameter given twice). Errors never quote the DSN or a value; an unknown
// parameter's name is quoted when it looks like one.
//
// # Schema and migrations
//
// Everything lives in one schema owned by the package: the tables
// workflows, idempotency_keys and leases, the sequence lease_tokens, and
// golang-migrate's version table schema_migrations. The migrations are
// plain SQL files embedded from migrations/ (see [Migrations]) with
// unqualified names, applied with golang-migrate through its iofs source
// and its pgx/v5 driver with search_path set to the schema; other tools can
// apply them the same way. [Migrate], [MigrationStatus] and [Force] are the
// API of the `durable migrate` command. A database whose version is newer
// than the code, older than it (with migrate=verify), or dirty makes Open
// fail with ErrSchemaMismatch; the message says what to do.
//
// # Statements
//
// Every fast-path operation is one SQL statement and one round trip:
// CreateWorkflow, GetWorkflow, UpdateWorkflow, ListWorkflows, ClaimKey,
// CompleteKey, RenewKey, ReleaseKey, GetKey, AcquireLease, RenewLease,
// ReleaseLease and GetLease. A failed compare-and-set returns, in the same
// statement, the record its snapshot saw, which says why it failed. Only
// when that snapshot shows no reason (a concurrent commit after the
// statement began) does UpdateWorkflow read once more, and ClaimKey and
// CompleteKey run their statement again (bounded). Cleanup and
// CountCleanup are one statement each. Open and New are not fast-path: they
// ping, read the schema version and may migrate. WaitKey polls GetKey.
//
// Serialization failures and deadlocks (SQLSTATE 40001, 40P01) are retried
// up to three times with jitter, then reported as ErrUnavailable.
//
// # Time
//
// Expiry is judged on the database's clock only: every statement uses
// now() (the start of its transaction) and TTLs travel as seconds. Tests
// can inject a clock through [Options].Clock; it is sent as a timestamptz
// parameter in place of now().
//
// # Fencing tokens
//
// Tokens come from the sequence lease_tokens (bigint, NO CYCLE), shared by
// every resource, so they only grow, across takeover, release, cleanup and
// restarts. See [Backend.AcquireLease] for the one residual hazard.
// [Backend.FenceTx] checks a fence inside your own transaction and holds the
// lease row until it ends.
//
// # Errors
//
// Driver errors are mapped once, by SQLSTATE: connection failures and
// 57P0x → ErrUnavailable when the statement was certainly not applied,
// ErrOutcomeUnknown when a write may have been; 57014 (statement timeout)
// → ErrUnavailable, or a Canceled error when the caller's context ended;
// 23505 → ErrAlreadyExists; a missing schema or table → ErrSchemaMismatch.
// Error texts never contain the DSN, a password, SQL text, parameter values
// or driver text; the driver error stays reachable with errors.As.
//
// # WaitKey
//
// CompleteKey, ReleaseKey and Cleanup send NOTIFY on the channel
// "durable_keys_<schema>" in the same statement, with the hex SHA-256 of
// scope "/" key as payload. Each backend keeps one LISTEN connection,
// taken out of its pool on the first WaitKey and re-established with
// backoff after it dies. Waiters also poll, from 50 ms doubling to 1 s, so
// a lost notification only delays them; with listen=off they poll alone.
package postgres
