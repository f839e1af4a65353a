package postgres

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testClock is a clock shared by every client of one harness: a fixed base
// plus an offset that Advance moves.
type testClock struct {
	base   time.Time
	offset atomic.Int64
}

func newTestClock() *testClock {
	return &testClock{base: time.Date(2031, 1, 2, 3, 4, 5, 678900000, time.UTC)}
}

func (c *testClock) now() time.Time          { return c.base.Add(time.Duration(c.offset.Load())) }
func (c *testClock) Now() time.Time          { return c.now() } // contract.Clock
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// testClient opens backends through one client library.
type testClient struct {
	name string
	// open opens a backend on dsn (a postgres:// URL, possibly with
	// pool_max_conns) that owns its pool; opts replace the DSN's options.
	open func(ctx context.Context, dsn string, opts Options) (*Backend, error)
}

// The client libraries the tests run on: pgx's pool, lib/pq and pgx's
// stdlib through database/sql as the DSN's driver parameter opens them
// (lib/pq with binary_parameters=yes), and the two through NewBackend on a
// *sql.DB the caller opened (lib/pq with its defaults: every statement
// prepared unnamed first).
var (
	tcPgx    = testClient{"pgx", openWithDriver("")}
	tcPQ     = testClient{"pq", openWithDriver("pq")}
	tcStdlib = testClient{"pgx-stdlib", openWithDriver("pgx-stdlib")}
	tcPQDB   = testClient{"pq-sql.DB", openPQDB}
	tcStdDB  = testClient{"pgx-stdlib-sql.DB", openStdlibDB}

	// dsnClients are the three values of the DSN's driver parameter.
	dsnClients = []testClient{tcPgx, tcPQ, tcStdlib}
	// sqlClients are the database/sql paths.
	sqlClients = []testClient{tcPQ, tcStdlib, tcPQDB, tcStdDB}
)

// openWithDriver opens a backend as Open does, with the driver parameter
// set and opts in place of the DSN's options.
func openWithDriver(driver string) func(context.Context, string, Options) (*Backend, error) {
	return func(ctx context.Context, dsn string, opts Options) (*Backend, error) {
		if driver != "" {
			dsn += "&driver=" + driver
		}
		cfg, err := parseDSN(dsn)
		if err != nil {
			return nil, err
		}
		cfg.opts = opts
		return openConfig(ctx, cfg)
	}
}

// splitPoolSize removes pool_max_conns from dsn and returns it (default 4).
func splitPoolSize(dsn string) (string, int, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", 0, err
	}
	q, err := pgclient.ParseQuery(u.RawQuery)
	if err != nil {
		return "", 0, err
	}
	n := 4
	if v := q.Get("pool_max_conns"); v != "" {
		if n, err = strconv.Atoi(v); err != nil {
			return "", 0, err
		}
		q.Del("pool_max_conns")
	}
	u.RawQuery = pgclient.EncodeQuery(q)
	return u.String(), n, nil
}

// openPQDB opens lib/pq the way its users do (pq.NewConnector and
// sql.OpenDB) and builds the backend with NewBackend on a *sql.DB.
func openPQDB(ctx context.Context, dsn string, opts Options) (*Backend, error) {
	dsn, n, err := splitPoolSize(dsn)
	if err != nil {
		return nil, err
	}
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	opts.ListenDSN = dsn
	return newFromOwnDB(ctx, db, opts)
}

// openStdlibDB opens pgx's stdlib with stdlib.OpenDB and builds the backend
// with NewBackend on a *sql.DB.
func openStdlibDB(ctx context.Context, dsn string, opts Options) (*Backend, error) {
	dsn, n, err := splitPoolSize(dsn)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return newFromOwnDB(ctx, db, opts)
}

// newFromOwnDB is NewBackend on a *sql.DB that the backend then owns (Close
// closes it).
func newFromOwnDB(ctx context.Context, db *sql.DB, opts Options) (*Backend, error) {
	b, err := NewBackend(ctx, db, opts)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	b.client = b.client.Owning()
	return b, nil
}

// harness runs the conformance suite on a fresh schema. Every client has
// its own pool (like separate processes) and shares the schema and clock.
type harness struct {
	t      *testing.T
	srv    *pgtest.Server
	client testClient
	schema string
	clock  *testClock
	params string     // extra DSN parameters
	listen ListenMode // WaitKey's mode
	// through, when set, is the PgBouncer the backends connect through
	// (the schema is migrated directly), with pooler as their setting.
	through *pgtest.Bouncer
	pooler  Pooler
	// tolerance is the backends' clock tolerance (zero: the default).
	tolerance time.Duration
}

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	return newHarnessWith(ctx, t, tcPgx, "", ListenOn)
}

func newHarnessWith(ctx context.Context, t *testing.T, client testClient, params string, listen ListenMode) (*harness, error) {
	srv := pgtest.Require(t)
	h := &harness{t: t, srv: srv, client: client, schema: srv.Schema(t), clock: newTestClock(), params: params, listen: listen}
	// Migrate once, so that Open only verifies.
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := migratePool(ctx, pool, h.schema, Up); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	dsn := h.srv.DSN()
	if h.through != nil {
		dsn = h.through.DSN()
	}
	return h.client.open(ctx, dsn+"&pool_max_conns=4"+h.params, Options{
		Schema: h.schema, Clock: h.clock, Migrate: MigrateVerify, Listen: h.listen, Pooler: h.pooler, Tolerance: h.tolerance,
	})
}

func (h *harness) Advance(d time.Duration) { h.clock.advance(d) }
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}
func (h *harness) Close() error { return nil } // the schema is dropped by pgtest

// openTestBackend opens a pgx backend that owns a new pool on dsn.
func openTestBackend(ctx context.Context, dsn string, opts Options) (*Backend, error) {
	return tcPgx.open(ctx, dsn, opts)
}

// The conformance suite runs once per client path, in parallel (each on
// schemas of its own).

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, newHarness)
}

// TestConformanceWideTolerance runs the tolerance-sensitive scenarios again
// with a tolerance several times the default one.
func TestConformanceWideTolerance(t *testing.T) {
	t.Parallel()
	conformance.RunToleranceSensitive(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		h, err := newHarness(ctx, t)
		if err != nil {
			return nil, err
		}
		h.(*harness).tolerance = 5 * time.Second
		return h, nil
	})
}

// TestConformanceSimpleProtocol runs the suite as behind a transaction
// pooler: pgx's simple protocol (arguments interpolated client-side, no
// prepared statements) and no LISTEN. It also checks that the statements do
// not depend on the extended protocol.
func TestConformanceSimpleProtocol(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessWith(ctx, t, tcPgx, "&default_query_exec_mode=simple_protocol", ListenOff)
	})
}

// TestConformanceLibPQ runs the suite on lib/pq opened by its users' usual
// route, pq.NewConnector and sql.OpenDB, with lib/pq's defaults (text
// parameters typed by a prepare round trip), through NewBackend on a *sql.DB, with
// lib/pq's ListenerConn for WaitKey.
func TestConformanceLibPQ(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessWith(ctx, t, tcPQDB, "", ListenOn)
	})
}

// TestConformanceLibPQFromDSN runs the suite on driver=pq as Open builds
// it: lib/pq with binary_parameters=yes (untyped text parameters, bytea in
// binary, one round trip).
func TestConformanceLibPQFromDSN(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessWith(ctx, t, tcPQ, "", ListenOn)
	})
}

// TestConformancePgxStdlib runs the suite on pgx's stdlib (stdlib.OpenDB)
// through NewBackend on a *sql.DB, listening through (*sql.Conn).Raw.
func TestConformancePgxStdlib(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessWith(ctx, t, tcStdDB, "", ListenOn)
	})
}
