// Package pgclient is everything of the PostgreSQL backend that depends on
// the client library: pgx's own pool, lib/pq and pgx's stdlib through
// database/sql. It runs the backend's statements (Querier: the queriers,
// lib/pq's statement cache and watchdog; Pipeliner: the batches of
// coalesced writes, on pgx only), opens its LISTEN sessions
// (Listener), dials, detects a pooler, parses the client's part of a DSN
// and opens its pool (Config), runs the migration transaction and a
// caller's transaction (MigrationTx, UserTx), and reads the client
// libraries' errors into client-neutral facts (errors.go). Package postgres
// holds the operations, their SQL, the schema and the diagnostics, and
// branches on no client library; it hands this package plain values.
package pgclient

import (
	"context"
	"database/sql"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

// Client is the pool a backend runs on: exactly one of pool (pgx) and db
// (database/sql) is set. Everything that depends on the client library
// (statements, LISTEN, migrations, the ping) asks it. The zero Client has
// neither; only a backend that sends nothing may hold one.
type Client struct {
	pool *pgxpool.Pool // pgx's own pool
	db   *sql.DB       // database/sql, any PostgreSQL driver
	// own: Open created the pool, so CloseOwn closes it (and a failed
	// open does); a pool given to FromPool or FromDB stays the caller's.
	own bool
	// watch, set by Open with driver=pq, cuts the connection of a statement
	// that goes on after its context ended; see pqConnector.
	watch *pqConnector
	// cfg is the parsed DSN of Open; nil for FromPool and FromDB.
	cfg *Config
}

// FromPool returns a Client on a pgx pool of the caller's.
func FromPool(pool *pgxpool.Pool) Client { return Client{pool: pool} }

// FromDB returns a Client on a database/sql pool of the caller's, of any
// PostgreSQL driver.
func FromDB(db *sql.DB) Client { return Client{db: db} }

// From returns a Client on the caller's pool, a pgx pool or a database/sql
// pool of any PostgreSQL driver: the one place the backend's generic
// constructors tell the two apart. A nil pool is InvalidArgument.
func From[C *pgxpool.Pool | *sql.DB](c C) (Client, error) {
	switch c := any(c).(type) {
	case *pgxpool.Pool:
		if c != nil {
			return FromPool(c), nil
		}
		return Client{}, invalid("pool must not be nil")
	case *sql.DB:
		if c != nil {
			return FromDB(c), nil
		}
		return Client{}, invalid("db must not be nil")
	}
	panic("unreachable: the type set of C is *pgxpool.Pool and *sql.DB")
}

// Pool returns the pgx pool c runs on, or nil.
func (c Client) Pool() *pgxpool.Pool { return c.pool }

// DB returns the database/sql pool c runs on, or nil.
func (c Client) DB() *sql.DB { return c.db }

// Config returns the parsed DSN c was opened from, or nil.
func (c Client) Config() *Config { return c.cfg }

// Querier returns what runs the backend's statements on c.
func (c Client) Querier() Querier {
	if c.pool != nil {
		return pgxQuerier{pool: c.pool}
	}
	q := newSQLQuerier(c.db)
	q.watch = c.watch
	q.prepare = PQPrepare.Load() > 0 && c.watch != nil && c.watch.prepare
	return q
}

// Listener returns how a backend on c opens its LISTEN sessions, or nil
// when it cannot (a *sql.DB on a driver other than pgx's stdlib, without
// listenDSN): WaitKey then polls only.
func (c Client) Listener(listenDSN string) (Listener, error) {
	switch {
	case c.pool != nil:
		return pgxPoolListener{pool: c.pool}, nil
	case listenDSN != "":
		if _, err := pq.NewConfig(listenDSN); err != nil {
			return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid ListenDSN", Err: redacted{err}}
		}
		return pqListener{dsn: listenDSN}, nil
	case IsStdlib(c.db):
		return stdlibListener{db: c.db}, nil
	}
	return nil, nil
}

// Ping checks that the server answers.
func (c Client) Ping(ctx context.Context) error {
	if c.pool != nil {
		return c.pool.Ping(ctx)
	}
	return c.db.PingContext(ctx)
}

// CloseOwn closes the pool if Open created it.
func (c Client) CloseOwn() error {
	switch {
	case !c.own:
	case c.pool != nil:
		c.pool.Close()
	default:
		// database/sql closes every connection and reports the first error
		// of a driver's Close: for lib/pq, failing to say goodbye on a
		// connection the network or the server already broke. The pool is
		// closed all the same and nothing is left to do, so that is not a
		// failure of Close (pgxpool's Close reports none either).
		_ = c.db.Close()
	}
	return nil
}

func invalid(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Msg: msg}
}

// redacted hides the text of an error whose message may quote the DSN (the
// error itself stays reachable through errors.As for debugging).
type redacted struct{ err error }

func (r redacted) Error() string { return "postgres: DSN could not be parsed" }
func (r redacted) Unwrap() error { return r.err }

// Owning returns c owning its pool: CloseOwn closes it (for tests that
// hand a pool of their own to the backend).
func (c Client) Owning() Client {
	c.own = true
	return c
}

// Inert returns a Client on a pgx pool that was never opened, for a
// backend that never sends a statement (the mock generator of package
// pgmock, which builds the statements a backend would send).
func Inert() Client { return Client{pool: new(pgxpool.Pool)} }
