package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

func init() {
	durable.Register("postgres", pgDriver{})
	durable.Register("postgresql", pgDriver{})
}

// Defaults.
const (
	DefaultSchema    = "durable"
	DefaultTolerance = time.Second
)

// MigrateMode says what opening a backend does about the schema:
// [contract.MigrateMode], named here for the callers of this package.
type MigrateMode = contract.MigrateMode

const (
	// MigrateAuto creates the schema if it is missing and applies every
	// pending migration (the default). Concurrent openers serialize on a
	// PostgreSQL advisory lock; all of them succeed.
	MigrateAuto = contract.MigrateAuto
	// MigrateVerify only reads the schema's migration version and fails
	// with SchemaMismatch unless it is current. It runs no DDL, so it works
	// for a role without CREATE.
	MigrateVerify = contract.MigrateVerify
	// MigrateOff skips every check.
	MigrateOff = contract.MigrateOff
)

// ListenMode says how WaitKey learns of completions.
type ListenMode int

const (
	// ListenOn keeps one LISTEN connection per backend, plus polling (the
	// default).
	ListenOn ListenMode = iota
	// ListenOff polls only: for transaction poolers (PgBouncer in
	// transaction mode) where LISTEN does not work.
	ListenOff
)

// Pooler says what stands between the backend and PostgreSQL, which
// decides whether the backend may rely on session state.
type Pooler int

const (
	// PoolerAuto (the default) detects a pooler when [Open] opens a DSN on
	// pgx or pgx's stdlib, and then behaves as PoolerTransaction: a
	// pooler shows itself because the session key it hands the client is
	// not the server process's. lib/pq does not reveal that key, and
	// [New] and [NewFromDB] do no I/O to find out, so there PoolerAuto
	// means PoolerNone.
	PoolerAuto Pooler = iota
	// PoolerNone: a direct connection (or one that keeps sessions, as
	// PoolerSession). The backend uses cached prepared statements (pgx)
	// and LISTEN.
	PoolerNone
	// PoolerSession: a pooler that gives each client one server session
	// for as long as it is connected (PgBouncer pool_mode=session).
	// Nothing changes from PoolerNone; saying so stops [Backend.Doctor]
	// from flagging the pooler.
	PoolerSession
	// PoolerTransaction: a pooler that may hand each transaction (each
	// statement, outside a transaction) to another server session
	// (PgBouncer pool_mode=transaction, or statement). The backend then
	// relies on no session state: statements run without named prepared
	// statements (pgx's exec mode; lib/pq with binary_parameters=yes),
	// WaitKey polls instead of listening (LISTEN needs a session), and
	// session settings in the DSN (statement_timeout, options,
	// lock_timeout, idle_in_transaction_session_timeout) are refused:
	// set them on the role (ALTER ROLE … SET …) instead.
	PoolerTransaction
)

// String returns the DSN value of p: auto, none, session or transaction.
func (p Pooler) String() string {
	for name, v := range poolerNames {
		if v == p {
			return name
		}
	}
	return "Pooler(" + strconv.Itoa(int(p)) + ")"
}

var poolerNames = map[string]Pooler{"auto": PoolerAuto, "none": PoolerNone, "session": PoolerSession, "transaction": PoolerTransaction}

// Options configures a Backend built with [New] or [NewFromDB]. [Open]
// fills it from the DSN's parameters.
type Options struct {
	// Schema holds the backend's tables (default "durable"). It must match
	// [a-z_][a-z0-9_]{0,62} and not start with "pg_".
	Schema string
	// Tolerance is the clock tolerance. Zero means DefaultTolerance (1 s);
	// a negative value means no tolerance.
	Tolerance time.Duration
	// Migrate says whether building the backend migrates, verifies or
	// ignores the schema. A user who migrates separately builds the
	// backend with MigrateOff and calls [Backend.Migrate].
	Migrate MigrateMode
	// Listen says whether WaitKey uses LISTEN/NOTIFY. With
	// PoolerTransaction it is always off.
	Listen ListenMode
	// Pooler says what stands between the backend and the server (see
	// [Pooler]). Behind PgBouncer in transaction mode set
	// PoolerTransaction: New and NewFromDB do not detect it.
	Pooler Pooler
	// Clock, when set, replaces the database's now() in every statement
	// (its Now is sent as a timestamptz parameter). For tests only, with a
	// contract.ManualClock: production code leaves it nil so that one
	// clock, the database's, judges expiry.
	Clock contract.Clock
	// ListenDSN is, for NewFromDB, a lib/pq connection string (URL or
	// key=value) from which WaitKey's LISTEN connection is dialed with
	// lib/pq's ListenerConn: a *sql.DB does not reveal its own, and
	// database/sql cannot wait for notifications. Without it, a *sql.DB on
	// pgx's stdlib listens on one of its own connections (through
	// (*sql.Conn).Raw), and any other driver polls only, as with
	// listen=off. New ignores it.
	ListenDSN string
	// Logger receives the backend's own log lines: the LISTEN connection
	// lost (Warn) and regained (Info), retried statements (Debug). The
	// default is the Store's logger (durable.WithLogger), handed over
	// through durable.Instrumentable; before that, nothing is logged.
	Logger *slog.Logger
}

// Backend is the PostgreSQL backend. It implements contract.Backend and
// contract.KeyWaiter and is safe for concurrent use. It runs on a pgx pool
// ([New], or Open with driver=pgx) or on a database/sql pool ([NewFromDB],
// or Open with driver=pq or driver=pgx-stdlib), with the same statements;
// every method, the schema methods (Migrate, Force, MigrationStatus),
// FenceTx and Doctor included, works the same on either.
type Backend struct {
	client  // the pool it runs on
	q       querier
	st      *statements
	schema  string
	tol     time.Duration
	tolSecs float64
	clock   contract.Clock
	channel string
	listen  bool
	// pooler is the configured Pooler; poolerSeen, that Open found one in
	// front (PoolerAuto then behaves as PoolerTransaction).
	pooler     Pooler
	poolerSeen bool
	closed     atomic.Bool

	hub       *hub
	closeOnce sync.Once

	tele      atomic.Pointer[telemetry] // logger and instruments, see observe.go
	ownLogger bool                      // Options.Logger was set
}

var (
	_ contract.Backend           = (*Backend)(nil)
	_ contract.KeyWaiter         = (*Backend)(nil)
	_ contract.ToleranceReporter = (*Backend)(nil)
	_ contract.CleanupCounter    = (*Backend)(nil)
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSchema reports whether name is accepted as a schema name:
// [a-z_][a-z0-9_]{0,62}, not starting with "pg_" (reserved by PostgreSQL).
func ValidSchema(name string) bool {
	return schemaRE.MatchString(name) && !strings.HasPrefix(name, "pg_")
}

func invalid(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Msg: msg}
}

// New returns a Store on pool, a pgx pool you already have, bypassing the
// registry: the safe path, with the Store's validation, defaults, time
// bounds and helpers (storeOpts configure it). Reach the *Backend, for
// FenceTx or the migration methods, with store.As. The pool stays yours:
// closing the Store does not close it. Depending on opts.Migrate, New
// migrates or verifies the schema first.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	b, err := NewBackend(ctx, pool, opts)
	if err != nil {
		return nil, err
	}
	return storeOn(b, storeOpts)
}

// NewFromDB is [New] for a database/sql pool of any PostgreSQL driver
// (lib/pq, pgx's stdlib, …); see [NewBackendFromDB].
func NewFromDB(ctx context.Context, db *sql.DB, opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	b, err := NewBackendFromDB(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	return storeOn(b, storeOpts)
}

func storeOn(b *Backend, storeOpts []durable.Option) (*durable.Store, error) {
	s, err := durable.New(b, storeOpts...)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return s, nil
}

// NewBackend returns the raw backend on pool, a pgx pool: the
// contract.Backend for conformance harnesses and decorators. Its methods
// skip the Store's validation, defaults and time bounds; applications use
// [New] (or durable.New on the result). The pool stays the caller's: Close
// does not close it. Depending on opts.Migrate, NewBackend migrates or
// verifies the schema first.
func NewBackend(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Backend, error) {
	if pool == nil {
		return nil, invalid("pool must not be nil")
	}
	return newBackend(ctx, client{pool: pool}, opts)
}

// NewBackendFromDB returns the raw backend on db, a database/sql pool of
// any PostgreSQL driver (lib/pq, pgx's stdlib, …), bypassing the registry.
// It is [NewBackend] for database/sql: the same statements, options and
// methods, and the same caveat (applications use [NewFromDB]). The pool
// stays the caller's: Close does not close it. Depending on opts.Migrate,
// NewBackendFromDB migrates or verifies the schema first (migrations run in
// one transaction on db and change no session state).
//
// Writes never rely on database/sql's re-sending of a statement after
// driver.ErrBadConn: a write whose connection broke after it was sent is
// reported as OutcomeUnknown. See the package documentation, "database/sql".
//
// With lib/pq, set binary_parameters=yes in its connection string: without
// it lib/pq spends two round trips on every statement (one to prepare it).
// WaitKey listens as [Options].ListenDSN says.
func NewBackendFromDB(ctx context.Context, db *sql.DB, opts Options) (*Backend, error) {
	if db == nil {
		return nil, invalid("db must not be nil")
	}
	return newBackend(ctx, client{db: db}, opts)
}

// client is the pool a backend runs on: exactly one of pool (pgx) and db
// (database/sql) is set. Everything that depends on the client library
// (statements, LISTEN, migrations, the ping) asks it.
type client struct {
	pool *pgxpool.Pool // pgx's own pool
	db   *sql.DB       // database/sql, any PostgreSQL driver
	// own: Open created the pool, so Close closes it (and a failed open
	// does); a pool given to New or NewFromDB stays the caller's.
	own bool
	// watch, set by Open with driver=pq, cuts the connection of a statement
	// that goes on after its context ended; see pqConnector.
	watch *pqConnector
	// cfg is the parsed DSN of Open, which names the server in the message
	// of a failed first connection; nil for New and NewFromDB.
	cfg *config
}

// querier returns what runs the backend's statements on c.
func (c client) querier() querier {
	if c.pool != nil {
		return pgxQuerier{pool: c.pool}
	}
	q := newSQLQuerier(c.db)
	q.watch = c.watch
	q.prepare = pqPrepare.Load() > 0 && c.watch != nil && c.watch.prepare
	return q
}

// listener returns how a backend on c opens its LISTEN sessions, or nil
// when it cannot (a *sql.DB on a driver other than pgx's stdlib, without
// listenDSN): WaitKey then polls only.
func (c client) listener(listenDSN string) (listener, error) {
	switch {
	case c.pool != nil:
		return pgxPoolListener{pool: c.pool}, nil
	case listenDSN != "":
		if _, err := pq.NewConfig(listenDSN); err != nil {
			return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid ListenDSN", Err: redacted{err}}
		}
		return pqListener{dsn: listenDSN}, nil
	case isStdlib(c.db):
		return stdlibListener{db: c.db}, nil
	}
	return nil, nil
}

// ping checks that the server answers.
func (c client) ping(ctx context.Context) error {
	if c.pool != nil {
		return c.pool.Ping(ctx)
	}
	return c.db.PingContext(ctx)
}

// closeOwn closes the pool if the backend owns it.
func (c client) closeOwn() error {
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

// newBackend is the one way a Backend is built, by New, NewFromDB and Open
// alike: it validates opts, sets the backend up on c, checks that the
// server answers (Open only: a pool of the caller's is its business), and
// migrates or verifies the schema per opts.Migrate. On failure it closes
// c's pool if it owns it.
func newBackend(ctx context.Context, c client, opts Options) (*Backend, error) {
	b, err := configure(c, opts)
	if err == nil && c.cfg != nil {
		// Open checks that the server answers, and with PoolerAuto
		// whether a pooler is in front, in one round trip.
		var pooled bool
		err = b.do(ctx, read, func() (err error) {
			if opts.Pooler == PoolerAuto {
				pooled, _, err = c.detectPooler(ctx)
				return err
			}
			return c.ping(ctx)
		})
		if err != nil {
			err = c.cfg.describeConnectError(err)
		} else if pooled {
			b.poolerSeen = true
			b.sessionless()
		}
	}
	if err == nil {
		err = b.prepareSchema(ctx, opts.Migrate)
	}
	if err != nil {
		_ = c.closeOwn()
		return nil, err
	}
	return b, nil
}

// configure validates opts and returns a backend on c, without any I/O.
func configure(c client, opts Options) (*Backend, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if !ValidSchema(opts.Schema) {
		return nil, invalid(`schema must match [a-z_][a-z0-9_]{0,62} and not start with "pg_"`)
	}
	switch {
	case opts.Tolerance == 0:
		opts.Tolerance = DefaultTolerance
	case opts.Tolerance < 0:
		opts.Tolerance = 0
	case opts.Tolerance > time.Hour:
		return nil, invalid("tolerance must be at most 1h")
	}
	if opts.Migrate < MigrateAuto || opts.Migrate > MigrateOff {
		return nil, invalid("unknown migrate mode")
	}
	if opts.Listen < ListenOn || opts.Listen > ListenOff {
		return nil, invalid("unknown listen mode")
	}
	if opts.Pooler < PoolerAuto || opts.Pooler > PoolerTransaction {
		return nil, invalid("unknown pooler mode")
	}
	l, err := c.listener(opts.ListenDSN)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		client:  c,
		q:       c.querier(),
		st:      newStatements(opts.Schema),
		schema:  opts.Schema,
		tol:     opts.Tolerance,
		tolSecs: opts.Tolerance.Seconds(),
		clock:   opts.Clock,
		channel: channelName(opts.Schema),
		listen:  opts.Listen == ListenOn && l != nil, // no way to LISTEN: poll only
		pooler:  opts.Pooler,
	}
	b.tele.Store(newTelemetry(opts.Logger, nil))
	b.ownLogger = opts.Logger != nil
	if opts.Pooler == PoolerTransaction {
		b.sessionless()
	}
	b.hub = newHub(b, l)
	return b, nil
}

// sessionless makes b rely on no session state, for a transaction pooler:
// no named prepared statements, no LISTEN. It runs before b is shared.
func (b *Backend) sessionless() {
	b.q = b.client.sessionlessQuerier()
	b.listen = false
}

// transactionPooled reports whether b runs as behind a transaction pooler.
func (b *Backend) transactionPooled() bool {
	return b.pooler == PoolerTransaction || b.pooler == PoolerAuto && b.poolerSeen
}

// Schema returns the schema the backend uses.
func (b *Backend) Schema() string { return b.schema }

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.tol }

// Pool returns the pgx pool the backend runs on, or nil when it runs on
// database/sql (see DB).
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// DB returns the database/sql pool the backend runs on, or nil when it runs
// on pgx (see Pool).
func (b *Backend) DB() *sql.DB { return b.db }

// Close stops the LISTEN connection and, if the backend opened its pool
// (through the registry), closes the pool. A pool passed to New or
// NewFromDB stays open. It reports every failure (closing the listener,
// closing the pool) together; calls after the first return nil, and other
// methods called after Close return Closed.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		err = errors.Join(b.hub.close(), b.closeOwn())
	})
	return err
}

// now returns the injected clock as a statement argument, or nil for the
// database's now().
func (b *Backend) now() any {
	if b.clock == nil {
		return nil
	}
	return b.clock.Now()
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func newToken() string {
	var t [16]byte
	_, _ = rand.Read(t[:])
	return hex.EncodeToString(t[:])
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func utcp(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// --- the registry driver ---

type pgDriver struct{}

// clientKind is the client library a DSN's driver parameter chooses.
type clientKind int

const (
	clientPgx    clientKind = iota // driver=pgx: pgx's own pool (the default)
	clientPQ                       // driver=pq: lib/pq through database/sql
	clientStdlib                   // driver=pgx-stdlib: pgx's stdlib through database/sql
)

var clientNames = map[string]clientKind{"pgx": clientPgx, "pq": clientPQ, "pgx-stdlib": clientStdlib}

// durableParams are the DSN parameters the backend reads itself.
var durableParams = map[string]bool{
	"schema": true, "tolerance": true, "migrate": true, "listen": true, "statement_timeout": true, "driver": true,
	"tcp_keepalive": true, "tcp_user_timeout": true, "pooler": true,
}

// sessionParams are the DSN parameters that set session state at connect,
// which a transaction pooler cannot keep (PgBouncer refuses them).
var sessionParams = []string{"statement_timeout", "options", "lock_timeout", "idle_in_transaction_session_timeout"}

// paramClients lists, for every parameter passed through to the client
// library, the drivers that understand it.
var paramClients = func() map[string][]clientKind {
	all := []clientKind{clientPgx, clientPQ, clientStdlib}
	pgxOnly := []clientKind{clientPgx, clientStdlib}
	m := map[string][]clientKind{}
	for _, k := range []string{
		// libpq parameters that pgx and lib/pq both understand (lock_timeout
		// and idle_in_transaction_session_timeout are server settings, sent
		// at connect by both).
		"host", "port", "dbname", "user", "password", "passfile", "connect_timeout", "sslmode",
		"sslkey", "sslcert", "sslrootcert", "sslnegotiation", "sslsni", "krbspn", "krbsrvname",
		"target_session_attrs", "service", "min_protocol_version", "max_protocol_version",
		"application_name", "options", "lock_timeout", "idle_in_transaction_session_timeout",
		// the pool parameters every driver takes
		"pool_max_conns", "pool_max_conn_lifetime", "pool_max_conn_idle_time",
	} {
		m[k] = all
	}
	for _, k := range []string{
		"sslcertmode", "sslpassword", "channel_binding", "require_auth", "servicefile",
		"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	} {
		m[k] = pgxOnly
	}
	for _, k := range []string{
		"pool_min_conns", "pool_min_idle_conns", "pool_health_check_period",
		"pool_max_conn_lifetime_jitter", "pool_ping_timeout",
	} {
		m[k] = []clientKind{clientPgx}
	}
	m["binary_parameters"] = []clientKind{clientPQ}
	return m
}()

var paramNameRE = regexp.MustCompile(`^[a-z_]{1,40}$`)

// config is a parsed DSN.
type config struct {
	client clientKind
	pool   *pgxpool.Config // driver=pgx and driver=pgx-stdlib
	pqDSN  string          // driver=pq: lib/pq's connection string
	sqlDB  sqlPoolConfig   // driver=pq and driver=pgx-stdlib
	dial   dialSettings
	opts   Options
	// explicitMode: the DSN sets pgx's default_query_exec_mode, which a
	// transaction pooler then does not override (a pooler that keeps
	// prepared statements across server sessions, PgBouncer 1.21 and later
	// with max_prepared_statements, runs cache_statement).
	explicitMode bool
	// dsnMigrate is the DSN's migrate mode, before OpenOptions.Migrate: what
	// the application opening this DSN does (Doctor reports it).
	dsnMigrate MigrateMode
}

// sqlPoolConfig sizes a database/sql pool like pgxpool's defaults.
type sqlPoolConfig struct {
	maxConns             int
	maxLifetime, maxIdle time.Duration
}

func defaultSQLPool() sqlPoolConfig {
	return sqlPoolConfig{maxConns: DefaultPoolSize, maxLifetime: time.Hour, maxIdle: 30 * time.Minute}
}

// DefaultPoolSize is the pool size of a DSN without pool_max_conns, on
// every client library: the most connections the backend opens, and (on
// database/sql) the most it keeps idle. Every operation holds a connection
// for one round trip plus the server's work, most of it waiting (for the
// network, a row lock, the commit's WAL flush) rather than computing, so a
// pool smaller than the number of operations in flight makes callers queue
// for a connection while the server idles: pgxpool's own default, the
// greater of 4 and the client's CPU count (4 on a small machine), served
// 16 concurrent callers well below the throughput of 16 connections (see
// BENCHMARKS.md, "Default pool size"). The client's CPU count says nothing
// about the server, so the default is a fixed number; size the pool to the
// operations a process keeps in flight, within the server's
// max_connections shared by every process.
const DefaultPoolSize = 16

func (c sqlPoolConfig) apply(db *sql.DB) {
	db.SetMaxOpenConns(c.maxConns)
	db.SetMaxIdleConns(c.maxConns)
	db.SetConnMaxLifetime(c.maxLifetime)
	db.SetConnMaxIdleTime(c.maxIdle)
}

// parseDSN splits dsn into the client library's configuration and the
// backend's options. Its errors never contain the DSN or a parameter value.
func parseDSN(dsn string) (*config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, invalid("malformed postgres DSN")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "postgres" && scheme != "postgresql" {
		return nil, invalid("postgres DSN must use the scheme postgres or postgresql")
	}
	u.Scheme = "postgres"
	q, err := parseQuery(u.RawQuery)
	if err != nil {
		return nil, invalid("malformed postgres DSN query")
	}
	cfg := &config{dial: defaultDialSettings(), explicitMode: q.Has("default_query_exec_mode")}
	for _, vs := range q {
		if len(vs) > 1 {
			return nil, invalid("postgres DSN parameter given more than once")
		}
	}
	if v, ok := q["driver"]; ok {
		c, ok := clientNames[v[0]]
		if !ok {
			return nil, invalid("driver must be pgx, pq or pgx-stdlib")
		}
		cfg.client = c
	}
	opts := &cfg.opts
	var statementTimeout string
	for k, vs := range q {
		v := vs[0]
		switch {
		case k == "driver":
		case k == "schema":
			if !ValidSchema(v) {
				return nil, invalid(`schema must match [a-z_][a-z0-9_]{0,62} and not start with "pg_"`)
			}
			opts.Schema = v
		case k == "tolerance":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > time.Hour {
				return nil, invalid("tolerance must be a Go duration within 0s and 1h, such as 1s")
			}
			opts.Tolerance = d
			if d == 0 {
				opts.Tolerance = -1
			}
		case k == "migrate":
			switch v {
			case "auto":
				opts.Migrate = MigrateAuto
			case "verify":
				opts.Migrate = MigrateVerify
			case "off":
				opts.Migrate = MigrateOff
			default:
				return nil, invalid("migrate must be auto, verify or off")
			}
		case k == "pooler":
			p, ok := poolerNames[v]
			if !ok {
				return nil, invalid("pooler must be auto, none, session or transaction")
			}
			opts.Pooler = p
		case k == "listen":
			switch v {
			case "on":
				opts.Listen = ListenOn
			case "off":
				opts.Listen = ListenOff
			default:
				return nil, invalid("listen must be on or off")
			}
		case k == "tcp_keepalive" || k == "tcp_user_timeout":
			ms, ok := parseMillis(v)
			if !ok || ms > int64(time.Hour/time.Millisecond) {
				return nil, invalid(k + " must be a Go duration within 0s and 1h such as 30s, or milliseconds; 0 turns it off")
			}
			d := time.Duration(ms) * time.Millisecond
			if k == "tcp_keepalive" {
				cfg.dial.keepalive = d
			} else {
				cfg.dial.userTimeout = d
			}
		case k == "statement_timeout":
			ms, ok := parseMillis(v)
			if !ok {
				return nil, invalid("statement_timeout must be a Go duration such as 5s, or milliseconds")
			}
			statementTimeout = strconv.FormatInt(ms, 10)
		case paramClients[k] != nil:
			if !slices.Contains(paramClients[k], cfg.client) {
				return nil, invalid("postgres DSN parameter " + strconv.Quote(k) + " is not supported with driver=" + clientName(cfg.client))
			}
		default:
			if paramNameRE.MatchString(k) {
				return nil, invalid("unknown postgres DSN parameter " + strconv.Quote(k))
			}
			return nil, invalid("unknown postgres DSN parameter")
		}
	}
	if opts.Pooler == PoolerTransaction {
		if q.Get("listen") == "on" {
			return nil, invalid("listen=on cannot work with pooler=transaction (LISTEN needs a session of its own): remove listen, WaitKey then polls")
		}
		for _, k := range sessionParams {
			if q.Has(k) {
				return nil, invalid(k + " is a session setting, which a transaction pooler does not keep (PgBouncer refuses it): " +
					"remove it from the DSN and set it on the role instead (ALTER ROLE … SET " + k + " = …)")
			}
		}
	}
	for k := range durableParams {
		q.Del(k)
	}
	if cfg.client == clientPQ {
		return cfg, cfg.parsePQ(u, q, statementTimeout)
	}
	u.RawQuery = encodeQuery(q)
	pc, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
	}
	if statementTimeout != "" {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = statementTimeout
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if !q.Has("pool_max_conns") {
		pc.MaxConns = max(DefaultPoolSize, pc.MinConns, pc.MinIdleConns)
	}
	d := cfg.dial.dialer()
	d.Timeout = pc.ConnConfig.ConnectTimeout
	pc.ConnConfig.DialFunc = d.DialContext
	cfg.pool = pc
	cfg.sqlDB = sqlPoolConfig{maxConns: int(pc.MaxConns), maxLifetime: pc.MaxConnLifetime, maxIdle: pc.MaxConnIdleTime}
	return cfg, nil
}

// parsePQ builds lib/pq's connection string: the DSN without durable's and
// the pool's parameters, with binary_parameters=yes (one round trip per
// statement; without it lib/pq prepares every statement first) and
// sslmode=prefer (libpq's and pgx's default; lib/pq's own is require)
// unless given, and statement_timeout as a server setting.
func (cfg *config) parsePQ(u *url.URL, q url.Values, statementTimeout string) error {
	cfg.sqlDB = defaultSQLPool()
	if v := q.Get("pool_max_conns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return invalid("pool_max_conns must be a positive integer")
		}
		cfg.sqlDB.maxConns = n
	}
	for k, d := range map[string]*time.Duration{"pool_max_conn_lifetime": &cfg.sqlDB.maxLifetime, "pool_max_conn_idle_time": &cfg.sqlDB.maxIdle} {
		if v := q.Get(k); v != "" {
			dur, err := time.ParseDuration(v)
			if err != nil || dur < 0 {
				return invalid(k + " must be a Go duration such as 30m")
			}
			*d = dur
		}
	}
	for _, k := range []string{"pool_max_conns", "pool_max_conn_lifetime", "pool_max_conn_idle_time"} {
		q.Del(k)
	}
	if !q.Has("binary_parameters") {
		q.Set("binary_parameters", "yes")
	}
	if !q.Has("sslmode") {
		q.Set("sslmode", "prefer")
	}
	if !q.Has("connect_timeout") {
		q.Set("connect_timeout", strconv.Itoa(int(DefaultConnectTimeout/time.Second)))
	}
	if statementTimeout != "" {
		q.Set("statement_timeout", statementTimeout)
	}
	u.RawQuery = encodeQuery(q)
	cfg.pqDSN = u.String()
	if _, err := pq.NewConnector(cfg.pqDSN); err != nil {
		return &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
	}
	return nil
}

// parseQuery reads a DSN's query as libpq (and pgx) do: percent-escapes
// are decoded and "+" is a plus sign, not a space as in HTML forms.
func parseQuery(raw string) (url.Values, error) {
	return url.ParseQuery(strings.ReplaceAll(raw, "+", "%2B"))
}

// encodeQuery writes q back so that both libpq's reading (pgx) and Go's
// (lib/pq) get the same values: a space as %20, a plus sign as %2B.
func encodeQuery(q url.Values) string {
	return strings.ReplaceAll(q.Encode(), "+", "%20")
}

func clientName(c clientKind) string {
	for name, k := range clientNames {
		if k == c {
			return name
		}
	}
	return "?"
}

// redacted hides the text of an error whose message may quote the DSN (the
// error itself stays reachable through errors.As for debugging).
type redacted struct{ err error }

func (r redacted) Error() string { return "postgres: DSN could not be parsed" }
func (r redacted) Unwrap() error { return r.err }

// parseMillis reads a Go duration or a plain number of milliseconds.
func parseMillis(s string) (int64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return n, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false
	}
	return d.Milliseconds(), true
}

// Open implements contract.Driver.
func (pgDriver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	return Open(ctx, dsn)
}

// OpenWith implements contract.OptionsDriver.
func (pgDriver) OpenWith(ctx context.Context, dsn string, opts contract.OpenOptions) (contract.Backend, error) {
	return OpenWith(ctx, dsn, opts)
}

// Open opens a backend from a DSN (see the package documentation): it
// creates a pool of the client library the driver parameter names, checks
// that the server answers, and migrates or verifies the schema as the
// migrate parameter says. Close closes the pool. durable.Open of a
// postgres:// DSN calls it, or [OpenWith] when given options.
func Open(ctx context.Context, dsn string) (*Backend, error) {
	return OpenWith(ctx, dsn, contract.OpenOptions{})
}

// OpenWith is [Open] with options that override the DSN's: with
// opts.Migrate set, the schema is treated as that mode says instead of as
// the DSN's migrate parameter does. Everything else about the DSN is read
// and checked as always, the migrate parameter included (a typo in it
// still fails): the option changes the mode, not the DSN.
//
// It is for maintenance tools that open the application's own DSN and
// must neither change the schema by opening it nor fail on a schema that
// is behind, dirty or newer than the code: the durable CLI's migrate and
// doctor commands open with MigrateOff (through durable.Open with
// durable.WithMigrateMode) and then call [Backend.Migrate],
// [Backend.MigrationStatus] or [Backend.Doctor]. New and NewFromDB take
// the mode from [Options].Migrate instead.
func OpenWith(ctx context.Context, dsn string, opts contract.OpenOptions) (*Backend, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.dsnMigrate = cfg.opts.Migrate
	if opts.Migrate != nil {
		cfg.opts.Migrate = *opts.Migrate
	}
	return openConfig(ctx, cfg)
}

// openConfig opens a backend on a parsed DSN: it creates the pool of the
// chosen client library and builds the backend on it as New and NewFromDB
// do, owning the pool.
func openConfig(ctx context.Context, cfg *config) (*Backend, error) {
	c, opts, err := cfg.openClient(ctx)
	if err != nil {
		return nil, err
	}
	return newBackend(ctx, c, opts)
}

// openClient creates the pool cfg describes (it connects lazily), and
// returns it with the options to build the backend with.
func (cfg *config) openClient(ctx context.Context) (client, Options, error) {
	c := client{own: true, cfg: cfg}
	opts := cfg.opts
	switch cfg.client {
	case clientPgx:
		pool, err := pgxpool.NewWithConfig(ctx, cfg.pool)
		if err != nil {
			return client{}, opts, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres pool configuration", Err: redacted{err}}
		}
		c.pool = pool
		return c, opts, nil
	case clientPQ:
		pc, err := newPQConnector(cfg.pqDSN, cfg.dial.dialer())
		if err != nil {
			return client{}, opts, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
		}
		pc.prepare, pc.session = opts.Pooler != PoolerTransaction, opts.Pooler == PoolerSession
		c.db, c.watch = sql.OpenDB(pc), pc
		opts.ListenDSN = cfg.pqDSN
	case clientStdlib:
		c.db = stdlib.OpenDB(*cfg.pool.ConnConfig)
	}
	cfg.sqlDB.apply(c.db)
	return c, opts, nil
}
