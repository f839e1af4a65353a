package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5/pgxpool"
)

func init() {
	durable.Register("postgres", driver{})
	durable.Register("postgresql", driver{})
}

// Defaults.
const (
	DefaultSchema    = "durable"
	DefaultTolerance = time.Second
)

// MigrateMode says what opening a backend does about the schema.
type MigrateMode int

const (
	// MigrateAuto creates the schema if it is missing and applies every
	// pending migration (the default). Concurrent openers serialize on a
	// PostgreSQL advisory lock; all of them succeed.
	MigrateAuto MigrateMode = iota
	// MigrateVerify only reads the schema's migration version and fails
	// with SchemaMismatch unless it is current. It runs no DDL, so it works
	// for a role without CREATE.
	MigrateVerify
	// MigrateOff skips every check.
	MigrateOff
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

// Options configures a Backend built with [New].
type Options struct {
	// Schema holds the backend's tables (default "durable"). It must match
	// [a-z_][a-z0-9_]{0,62} and not start with "pg_".
	Schema string
	// Tolerance is the clock tolerance. Zero means DefaultTolerance (1 s);
	// a negative value means no tolerance.
	Tolerance time.Duration
	// Migrate says whether New migrates, verifies or ignores the schema.
	Migrate MigrateMode
	// Listen says whether WaitKey uses LISTEN/NOTIFY.
	Listen ListenMode
	// Clock, when set, replaces the database's now() in every statement
	// (it is sent as a timestamptz parameter). For tests only: production
	// code leaves it nil so that one clock, the database's, judges expiry.
	Clock func() time.Time
}

// Backend is the PostgreSQL backend. It implements contract.Backend and
// contract.KeyWaiter and is safe for concurrent use.
type Backend struct {
	q       querier
	pool    *pgxpool.Pool
	ownPool bool
	st      *statements
	schema  string
	tol     time.Duration
	tolSecs float64
	clock   func() time.Time
	channel string
	listen  bool
	closed  atomic.Bool

	hub       *hub
	closeOnce sync.Once
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

// New returns a backend on pool, bypassing the registry. The pool stays
// the caller's: Close does not close it. Depending on opts.Migrate, New
// migrates or verifies the schema first.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Backend, error) {
	if pool == nil {
		return nil, invalid("pool must not be nil")
	}
	b, err := newBackend(pool, opts)
	if err != nil {
		return nil, err
	}
	if err := b.prepareSchema(ctx, opts.Migrate); err != nil {
		return nil, err
	}
	return b, nil
}

func newBackend(pool *pgxpool.Pool, opts Options) (*Backend, error) {
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
	b := &Backend{
		q:       pgxQuerier{pool: pool},
		pool:    pool,
		st:      newStatements(opts.Schema),
		schema:  opts.Schema,
		tol:     opts.Tolerance,
		tolSecs: opts.Tolerance.Seconds(),
		clock:   opts.Clock,
		channel: channelName(opts.Schema),
		listen:  opts.Listen == ListenOn,
	}
	b.hub = newHub(b)
	return b, nil
}

// Schema returns the schema the backend uses.
func (b *Backend) Schema() string { return b.schema }

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.tol }

// Pool returns the pool the backend runs on.
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Close stops the LISTEN connection and, if the backend opened its pool
// (through the registry), closes the pool. A pool passed to New stays open.
// Calls after Close return Closed.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.hub.close()
		if b.ownPool {
			b.pool.Close()
		}
	})
	return nil
}

// now returns the injected clock as a statement argument, or nil for the
// database's now().
func (b *Backend) now() any {
	if b.clock == nil {
		return nil
	}
	return b.clock()
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

// fenceArgs returns the fence as three statement arguments (all NULL when
// there is no fence).
func fenceArgs(f *contract.Fence) (any, any, any) {
	if f == nil {
		return nil, nil, nil
	}
	return f.Resource, f.Owner, f.Token
}

// --- the registry driver ---

type driver struct{}

// durableParams are the DSN parameters the backend reads itself.
var durableParams = map[string]bool{
	"schema": true, "tolerance": true, "migrate": true, "listen": true, "statement_timeout": true,
}

// passParams are the libpq and pgx parameters passed through to pgx.
var passParams = map[string]bool{
	"host": true, "port": true, "dbname": true, "user": true, "password": true, "passfile": true,
	"connect_timeout": true, "sslmode": true, "sslkey": true, "sslcert": true, "sslcertmode": true,
	"sslrootcert": true, "sslnegotiation": true, "sslpassword": true, "sslsni": true,
	"krbspn": true, "krbsrvname": true, "target_session_attrs": true, "service": true,
	"servicefile": true, "min_protocol_version": true, "max_protocol_version": true,
	"channel_binding": true, "require_auth": true, "application_name": true, "options": true,
	"lock_timeout": true, "idle_in_transaction_session_timeout": true,
	"statement_cache_capacity": true, "description_cache_capacity": true, "default_query_exec_mode": true,
	"pool_max_conns": true, "pool_min_conns": true, "pool_min_idle_conns": true,
	"pool_max_conn_lifetime": true, "pool_max_conn_idle_time": true, "pool_health_check_period": true,
	"pool_max_conn_lifetime_jitter": true, "pool_ping_timeout": true,
}

var paramNameRE = regexp.MustCompile(`^[a-z_]{1,40}$`)

// config is a parsed DSN.
type config struct {
	pool *pgxpool.Config
	opts Options
}

// parseDSN splits dsn into pgx's configuration and the backend's options.
// Its errors never contain the DSN or a parameter value.
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
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, invalid("malformed postgres DSN query")
	}
	opts := Options{}
	var statementTimeout string
	for k, vs := range q {
		v := vs[len(vs)-1]
		if len(vs) > 1 {
			return nil, invalid("postgres DSN parameter given more than once")
		}
		switch {
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
		case k == "listen":
			switch v {
			case "on":
				opts.Listen = ListenOn
			case "off":
				opts.Listen = ListenOff
			default:
				return nil, invalid("listen must be on or off")
			}
		case k == "statement_timeout":
			ms, ok := parseMillis(v)
			if !ok {
				return nil, invalid("statement_timeout must be a Go duration such as 5s, or milliseconds")
			}
			statementTimeout = strconv.FormatInt(ms, 10)
		case passParams[k]:
		default:
			if paramNameRE.MatchString(k) {
				return nil, invalid("unknown postgres DSN parameter " + strconv.Quote(k))
			}
			return nil, invalid("unknown postgres DSN parameter")
		}
	}
	for k := range durableParams {
		q.Del(k)
	}
	u.RawQuery = q.Encode()
	pc, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
	}
	if statementTimeout != "" {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = statementTimeout
	}
	return &config{pool: pc, opts: opts}, nil
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
func (driver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	return Open(ctx, dsn)
}

// Open opens a backend from a DSN (see the package documentation): it
// creates a pool, checks that the server answers, and migrates or verifies
// the schema. Close closes the pool.
func Open(ctx context.Context, dsn string) (*Backend, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg.pool)
	if err != nil {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres pool configuration", Err: redacted{err}}
	}
	b, err := newBackend(pool, cfg.opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.ownPool = true
	if err := b.do(ctx, read, func() error { return pool.Ping(ctx) }); err != nil {
		pool.Close()
		return nil, err
	}
	if err := b.prepareSchema(ctx, cfg.opts.Migrate); err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}
