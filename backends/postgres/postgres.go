package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/multierr"
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

// ListenMode says how WaitKey learns of completions, and WatchLease of
// changes of a lease.
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
	// [New] and [NewBackend] do no I/O to find out, so there PoolerAuto
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
	// WaitKey and WatchLease poll instead of listening (LISTEN needs a
	// session), and
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

// Options configures a Backend built with [New] or [NewBackend]. [Open]
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
	// Listen says whether WaitKey and WatchLease use LISTEN/NOTIFY. With
	// PoolerTransaction it is always off.
	Listen ListenMode
	// Pooler says what stands between the backend and the server (see
	// [Pooler]). Behind PgBouncer in transaction mode set
	// PoolerTransaction: New and NewBackend do not detect it.
	Pooler Pooler
	// Clock, when set, replaces the database's now() in every statement
	// (its Now is sent as a timestamptz parameter). For tests only, with a
	// contract.ManualClock: production code leaves it nil so that one
	// clock, the database's, judges expiry.
	Clock contract.Clock
	// ListenDSN is, for a *sql.DB, a lib/pq connection string (URL or
	// key=value) from which the LISTEN connection (of WaitKey and
	// WatchLease) is dialed with
	// lib/pq's ListenerConn: a *sql.DB does not reveal its own, and
	// database/sql cannot wait for notifications. Without it, a *sql.DB on
	// pgx's stdlib listens on one of its own connections (through
	// (*sql.Conn).Raw), and any other driver polls only, as with
	// listen=off. On a *pgxpool.Pool it is ignored.
	ListenDSN string
	// Coalesce says whether writes sent at the same time are coalesced
	// into one pipelined transaction (see the package documentation,
	// "Coalesced writes"): CoalesceOn (the default) on pgx and pgx's
	// stdlib, never on lib/pq or behind a transaction pooler.
	Coalesce CoalesceMode
	// CoalesceInFlight is how many batches may be in flight at once, each
	// on a pooled connection (0: DefaultCoalesceInFlight; at most 64).
	CoalesceInFlight int
	// Logger receives the backend's own log lines: the LISTEN connection
	// lost (Warn) and regained (Info), retried statements (Debug). The
	// default is the Store's logger (durable.WithLogger), handed over
	// through durable.Instrumentable; before that, nothing is logged.
	Logger *slog.Logger
}

// Backend is the PostgreSQL backend. It implements contract.Backend,
// contract.KeyWaiter, contract.PermitAcquirer and contract.LeaseWatcher
// (among other capabilities) and is safe for concurrent use. It runs on a pgx pool
// ([New] on a *pgxpool.Pool, or Open with driver=pgx) or on a database/sql
// pool ([New] on a *sql.DB, or Open with driver=pq or driver=pgx-stdlib), with the same statements;
// every method, the schema methods (Migrate, Force, MigrationStatus),
// FenceTx and Doctor included, works the same on either.
type Backend struct {
	client  client  // the pool it runs on
	cfg     *config // Open's parsed DSN; nil for New and NewBackend
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

	// claimRounds is how often ClaimKey runs its optimistic statement
	// before the locked form (optimisticClaims; the tests of contention
	// lower it), and lockedClaims counts the calls that fell back.
	claimRounds  int
	lockedClaims atomic.Int64

	// batcher coalesces the writes sent at the same time (nil: every
	// write runs alone), sending batches through pipe; see coalesce.go.
	// batchHook, for the tests, is called with the size of every batch of
	// more than one write before it is sent.
	batcher    *batcher
	pipe       pgclient.Pipeliner
	batchHook  func(n int)
	merged     atomic.Int64 // writes sent in many-rows statements (rowsForm)
	rolledBack atomic.Int64 // batches a server error rolled back (CoalesceStats)
	// rowsHook, for the tests, is called with the name of every many-rows
	// statement a batch sends and the number of its writes.
	rowsHook func(name string, n int)
	// singleOnly, for the benchmarks, sends every coalesced write as its
	// own statement (no rowsForm): the pass before many-rows statements.
	singleOnly bool

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

// New returns a Store on c, a pool you already have: a pgx pool
// (*pgxpool.Pool) or a database/sql pool of any PostgreSQL driver (lib/pq,
// pgx's stdlib, …; *sql.DB), bypassing the registry. It is the safe path,
// with the Store's validation, defaults, time bounds and helpers
// (storeOpts configure it). Reach the *Backend, for FenceTx or the
// migration methods, with store.As. The pool stays yours: closing the
// Store does not close it. Depending on opts.Migrate, New migrates or
// verifies the schema first; see [NewBackend] for what differs on
// database/sql.
func New[C *pgxpool.Pool | *sql.DB](ctx context.Context, c C, opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	b, err := NewBackend(ctx, c, opts)
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

// NewBackend returns the raw backend on c, a pgx pool or a database/sql
// pool of any PostgreSQL driver: the contract.Backend for conformance
// harnesses, decorators and this package's own methods. Its methods skip
// the Store's validation, defaults and time bounds; applications use [New]
// (or durable.New on the result), and reach the backend of a Store with
// store.As. Either pool runs the same statements, options and methods. The
// pool stays the caller's: Close does not close it. Depending on
// opts.Migrate, NewBackend migrates or verifies the schema first (on
// database/sql, migrations run in one transaction on the pool and change no
// session state).
//
// On database/sql, writes never rely on database/sql's re-sending of a
// statement after driver.ErrBadConn: a write whose connection broke after
// it was sent is reported as OutcomeUnknown. See the package documentation,
// "database/sql". With lib/pq, set binary_parameters=yes in its connection
// string: without it lib/pq spends two round trips on every statement (one
// to prepare it). WaitKey listens as [Options].ListenDSN says.
func NewBackend[C *pgxpool.Pool | *sql.DB](ctx context.Context, c C, opts Options) (*Backend, error) {
	pc, err := pgclient.From(c)
	if err != nil {
		return nil, err
	}
	return newBackend(ctx, pc, nil, opts)
}

// client is the pool a backend runs on, and everything about it that
// depends on the client library (see package pgclient).
type client = pgclient.Client

// querier runs the backend's statements (see pgclient.Querier).
type querier = pgclient.Querier

// newBackend is the one way a Backend is built, by NewBackend and
// openBackend alike: it validates opts, sets the backend up on c, checks that the
// server answers (from a DSN only, with cfg its parsed DSN: a pool of the
// caller's is its business), and migrates or verifies the schema per
// opts.Migrate. On failure it closes c's pool if it owns it.
func newBackend(ctx context.Context, c client, cfg *config, opts Options) (*Backend, error) {
	b, err := configure(c, opts)
	if err == nil {
		b.cfg = cfg
	}
	if err == nil && cfg != nil {
		// Open checks that the server answers, and with PoolerAuto
		// whether a pooler is in front, in one round trip.
		var pooled bool
		err = b.do(ctx, read, func() (err error) {
			if opts.Pooler == PoolerAuto {
				pooled, _, err = c.DetectPooler(ctx)
				return err
			}
			return c.Ping(ctx)
		})
		if err != nil {
			err = cfg.describeConnectError(err)
		} else if pooled {
			b.poolerSeen = true
			b.sessionless()
		}
	}
	if err == nil {
		err = b.prepareSchema(ctx, opts.Migrate)
	}
	if err != nil {
		_ = c.CloseOwn()
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
	if opts.Coalesce < CoalesceOn || opts.Coalesce > CoalesceOff {
		return nil, invalid("unknown coalesce mode")
	}
	if opts.CoalesceInFlight < 0 || opts.CoalesceInFlight > maxCoalesceInFlight {
		return nil, invalid("coalesce in-flight must be within 0 and 64")
	}
	l, err := c.Listener(opts.ListenDSN)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		client:  c,
		q:       c.Querier(),
		st:      newStatements(opts.Schema),
		schema:  opts.Schema,
		tol:     opts.Tolerance,
		tolSecs: opts.Tolerance.Seconds(),
		clock:   opts.Clock,
		channel: channelName(opts.Schema),
		listen:  opts.Listen == ListenOn && l != nil, // no way to LISTEN: poll only
		pooler:  opts.Pooler,

		claimRounds: optimisticClaims,
	}
	b.tele.Store(newTelemetry(opts.Logger, nil))
	b.ownLogger = opts.Logger != nil
	b.setupCoalescing(opts)
	if opts.Pooler == PoolerTransaction {
		b.sessionless()
	}
	b.hub = newHub(b, l)
	return b, nil
}

// sessionless makes b rely on no session state, for a transaction pooler:
// no named prepared statements, no LISTEN, no coalescing (a pgx batch runs
// in the connection's default mode, which may prepare statements, and
// durable does not rely on a pooler keeping one pipeline on one server
// session). It runs before b is shared.
func (b *Backend) sessionless() {
	b.q = b.client.SessionlessQuerier()
	b.listen = false
	b.batcher, b.pipe = nil, nil
}

// transactionPooled reports whether b runs as behind a transaction pooler.
func (b *Backend) transactionPooled() bool {
	return b.pooler == PoolerTransaction || b.pooler == PoolerAuto && b.poolerSeen
}

// queryExecMode names how the backend's statements run, for Doctor, and
// whether that fits a transaction pooler: yes, no, or unknown (fits nil).
func (b *Backend) queryExecMode(ctx context.Context) (mode string, fits *bool) {
	return b.client.QueryExecMode(ctx, b.q)
}

// Schema returns the schema the backend uses.
func (b *Backend) Schema() string { return b.schema }

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.tol }

// Pool returns the pgx pool the backend runs on, or nil when it runs on
// database/sql (see DB).
func (b *Backend) Pool() *pgxpool.Pool { return b.client.Pool() }

// DB returns the database/sql pool the backend runs on, or nil when it runs
// on pgx (see Pool).
func (b *Backend) DB() *sql.DB { return b.client.DB() }

// Close stops the LISTEN connection and, if the backend opened its pool
// (from a DSN), closes the pool. A pool passed to New or NewBackend stays
// open. It reports every failure (closing the listener,
// closing the pool) together; calls after the first return nil, and other
// methods called after Close return Closed.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		err = multierr.Combine(b.hub.close(), b.client.CloseOwn())
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

// --- the registry driver ---

type pgDriver struct{}

// Defaults of the connection settings (DSN parameters connect_timeout,
// tcp_keepalive and tcp_user_timeout).
const (
	// DefaultConnectTimeout bounds establishing one connection (TCP, TLS
	// and authentication) when the DSN has no connect_timeout.
	DefaultConnectTimeout = pgclient.DefaultConnectTimeout
	// DefaultTCPKeepalive is the idle time before the first keepalive probe
	// on a connection; probes follow every third of it, and three
	// unanswered ones drop the connection. A server whose machine vanished
	// is noticed within about twice this time even while nothing is sent.
	DefaultTCPKeepalive = pgclient.DefaultTCPKeepalive
	// DefaultTCPUserTimeout is how long data sent on a connection may stay
	// unacknowledged before the kernel drops the connection (Linux's
	// TCP_USER_TIMEOUT; ignored elsewhere).
	DefaultTCPUserTimeout = pgclient.DefaultTCPUserTimeout
)

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
const DefaultPoolSize = pgclient.DefaultPoolSize

// backendParams are the DSN parameters the backend reads itself; pgclient
// reads the others (driver, the TCP settings, statement_timeout and what
// it passes through to the client library).
var backendParams = []string{"schema", "tolerance", "migrate", "listen", "pooler", "coalesce", "coalesce_inflight"}

// config is a parsed DSN.
type config struct {
	client *pgclient.Config // the client library's part
	opts   Options
	// dsnMigrate is the DSN's migrate mode, before OpenOptions.Migrate: what
	// the application opening this DSN does (Doctor reports it).
	dsnMigrate MigrateMode
}

// parseDSN splits dsn into the client library's configuration and the
// backend's options. Its errors never contain the DSN or a parameter value.
func parseDSN(dsn string) (*config, error) {
	u, q, err := pgclient.SplitDSN(dsn)
	if err != nil {
		return nil, err
	}
	cc, err := pgclient.NewConfig(q)
	if err != nil {
		return nil, err
	}
	cfg := &config{client: cc}
	opts := &cfg.opts
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "schema":
			if !ValidSchema(v) {
				return nil, invalid(`schema must match [a-z_][a-z0-9_]{0,62} and not start with "pg_"`)
			}
			opts.Schema = v
		case "tolerance":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > time.Hour {
				return nil, invalid("tolerance must be a Go duration within 0s and 1h, such as 1s")
			}
			opts.Tolerance = d
			if d == 0 {
				opts.Tolerance = -1
			}
		case "migrate":
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
		case "pooler":
			p, ok := poolerNames[v]
			if !ok {
				return nil, invalid("pooler must be auto, none, session or transaction")
			}
			opts.Pooler = p
		case "coalesce":
			switch v {
			case "on":
				opts.Coalesce = CoalesceOn
			case "off":
				opts.Coalesce = CoalesceOff
			default:
				return nil, invalid("coalesce must be on or off")
			}
		case "coalesce_inflight":
			n, ok := parseCoalesceInFlight(v)
			if !ok {
				return nil, invalid("coalesce_inflight must be an integer within 1 and 64")
			}
			opts.CoalesceInFlight = n
		case "listen":
			switch v {
			case "on":
				opts.Listen = ListenOn
			case "off":
				opts.Listen = ListenOff
			default:
				return nil, invalid("listen must be on or off")
			}
		default:
			if err := cc.Param(k, v); err != nil {
				return nil, err
			}
		}
	}
	if opts.Pooler == PoolerTransaction {
		if q.Get("listen") == "on" {
			return nil, invalid("listen=on cannot work with pooler=transaction (LISTEN needs a session of its own): remove listen, WaitKey and WatchLease then poll")
		}
		if err := pgclient.RefuseSessionParams(q); err != nil {
			return nil, err
		}
	}
	for _, k := range backendParams {
		q.Del(k)
	}
	if err := cc.Build(u, q); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Open implements contract.Driver.
func (pgDriver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	return openBackend(ctx, dsn, contract.OpenOptions{})
}

// OpenWith implements contract.OptionsDriver: durable.Open (and [Open])
// with durable.WithMigrateMode opens with that mode instead of the DSN's
// migrate parameter.
func (pgDriver) OpenWith(ctx context.Context, dsn string, opts contract.OpenOptions) (contract.Backend, error) {
	return openBackend(ctx, dsn, opts)
}

// Open returns a Store on the database a DSN names (see the package
// documentation): it creates a pool of the client library the driver
// parameter names, checks that the server answers, and migrates or
// verifies the schema as the migrate parameter says; closing the Store
// closes the pool. It is durable.Open for a DSN whose scheme is postgres
// or postgresql (any other is refused with InvalidArgument), and takes the
// same options: storeOpts configure the Store, and
// durable.WithMigrateMode overrides the DSN's migrate parameter for this
// open. Everything else about the DSN is read and checked as always, the
// migrate parameter included (a typo in it still fails): the option
// changes the mode, not the DSN. That is for maintenance tools that open
// the application's own DSN and must neither change the schema by opening
// it nor fail on a schema that is behind, dirty or newer than the code:
// the durable CLI's migrate and doctor commands open with MigrateOff and
// then call [Backend.Migrate], [Backend.MigrationStatus] or
// [Backend.Doctor] (reached with store.As). [New] takes the mode from
// [Options].Migrate instead.
func Open(ctx context.Context, dsn string, storeOpts ...durable.Option) (*durable.Store, error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !strings.EqualFold(scheme, "postgres") && !strings.EqualFold(scheme, "postgresql") {
		return nil, invalid("postgres DSN must use the scheme postgres or postgresql")
	}
	return durable.Open(ctx, dsn, storeOpts...)
}

// openBackend opens the raw backend a DSN names, for the registry driver
// (and this package's tests): with opts.Migrate set, the schema is treated
// as that mode says instead of as the DSN's migrate parameter does.
func openBackend(ctx context.Context, dsn string, opts contract.OpenOptions) (*Backend, error) {
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
// chosen client library and builds the backend on it as NewBackend does,
// owning the pool.
func openConfig(ctx context.Context, cfg *config) (*Backend, error) {
	c, opts, err := cfg.openClient(ctx)
	if err != nil {
		return nil, err
	}
	return newBackend(ctx, c, cfg, opts)
}

// openClient creates the pool cfg describes (it connects lazily), and
// returns it with the options to build the backend with.
func (cfg *config) openClient(ctx context.Context) (client, Options, error) {
	opts := cfg.opts
	c, err := cfg.client.Open(ctx, opts.Pooler != PoolerTransaction, opts.Pooler == PoolerSession)
	if err != nil {
		return client{}, opts, err
	}
	if dsn := cfg.client.ListenDSN(); dsn != "" {
		opts.ListenDSN = dsn
	}
	return c, opts, nil
}
