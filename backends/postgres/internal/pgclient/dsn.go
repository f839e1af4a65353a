package pgclient

import (
	"context"
	"database/sql"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

// Library is the client library a DSN's driver parameter chooses.
type Library int

const (
	Pgx    Library = iota // driver=pgx: pgx's own pool (the default)
	PQ                    // driver=pq: lib/pq through database/sql
	Stdlib                // driver=pgx-stdlib: pgx's stdlib through database/sql
)

var libraryNames = map[string]Library{"pgx": Pgx, "pq": PQ, "pgx-stdlib": Stdlib}

// String returns the DSN value of l: pgx, pq or pgx-stdlib.
func (l Library) String() string {
	for name, k := range libraryNames {
		if k == l {
			return name
		}
	}
	return "?"
}

// ownParams are the DSN parameters this package reads itself and does not
// pass on to the client library.
var ownParams = []string{"driver", "statement_timeout", "tcp_keepalive", "tcp_user_timeout"}

// sessionParams are the DSN parameters that set session state at connect,
// which a transaction pooler cannot keep (PgBouncer refuses them).
var sessionParams = []string{"statement_timeout", "options", "lock_timeout", "idle_in_transaction_session_timeout"}

// SessionParams returns the DSN parameters that RefuseSessionParams
// refuses.
func SessionParams() []string { return slices.Clone(sessionParams) }

// paramClients lists, for every parameter passed through to the client
// library, the drivers that understand it.
var paramClients = func() map[string][]Library {
	all := []Library{Pgx, PQ, Stdlib}
	pgxOnly := []Library{Pgx, Stdlib}
	m := map[string][]Library{}
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
		m[k] = []Library{Pgx}
	}
	m["binary_parameters"] = []Library{PQ}
	return m
}()

var paramNameRE = regexp.MustCompile(`^[a-z_]{1,40}$`)

// Config is the client's part of a parsed DSN.
type Config struct {
	Library Library
	Pool    *pgxpool.Config // driver=pgx and driver=pgx-stdlib
	PQDSN   string          // driver=pq: lib/pq's connection string
	SQLPool SQLPool         // driver=pq and driver=pgx-stdlib
	Dial    DialSettings
	// ExplicitMode: the DSN sets pgx's default_query_exec_mode, which a
	// transaction pooler then does not override (a pooler that keeps
	// prepared statements across server sessions, PgBouncer 1.21 and later
	// with max_prepared_statements, runs cache_statement).
	ExplicitMode bool

	statementTimeout string // milliseconds, or "" when not set
}

// SQLPool sizes a database/sql pool like pgxpool's defaults.
type SQLPool struct {
	MaxConns             int
	MaxLifetime, MaxIdle time.Duration
}

func defaultSQLPool() SQLPool {
	return SQLPool{MaxConns: DefaultPoolSize, MaxLifetime: time.Hour, MaxIdle: 30 * time.Minute}
}

// DefaultPoolSize is the pool size of a DSN without pool_max_conns, on
// every client library (see the backend's DefaultPoolSize).
const DefaultPoolSize = 16

func (c SQLPool) apply(db *sql.DB) {
	db.SetMaxOpenConns(c.MaxConns)
	db.SetMaxIdleConns(c.MaxConns)
	db.SetConnMaxLifetime(c.MaxLifetime)
	db.SetConnMaxIdleTime(c.MaxIdle)
}

// SplitDSN parses dsn, a postgres:// or postgresql:// URL, and returns it
// (with the scheme postgres) and its query, each parameter given at most
// once. Its errors never contain the DSN or a parameter value.
func SplitDSN(dsn string) (*url.URL, url.Values, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, nil, invalid("malformed postgres DSN")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "postgres" && scheme != "postgresql" {
		return nil, nil, invalid("postgres DSN must use the scheme postgres or postgresql")
	}
	u.Scheme = "postgres"
	q, err := ParseQuery(u.RawQuery)
	if err != nil {
		return nil, nil, invalid("malformed postgres DSN query")
	}
	for _, vs := range q {
		if len(vs) > 1 {
			return nil, nil, invalid("postgres DSN parameter given more than once")
		}
	}
	return u, q, nil
}

// NewConfig begins the client's configuration from a DSN's query q (see
// SplitDSN): it reads the driver parameter. The backend then hands every
// parameter it does not read itself to Param, and builds the configuration
// with Build.
func NewConfig(q url.Values) (*Config, error) {
	cfg := &Config{Dial: DefaultDialSettings(), ExplicitMode: q.Has("default_query_exec_mode")}
	if v, ok := q["driver"]; ok {
		c, ok := libraryNames[v[0]]
		if !ok {
			return nil, invalid("driver must be pgx, pq or pgx-stdlib")
		}
		cfg.Library = c
	}
	return cfg, nil
}

// Param reads the DSN parameter k with value v: one of this package's own
// (driver, tcp_keepalive, tcp_user_timeout, statement_timeout), or one
// passed through to the client library, which it checks the chosen
// library understands. Any other parameter is refused. Its errors never
// contain a value.
func (cfg *Config) Param(k, v string) error {
	switch {
	case k == "driver":
	case k == "tcp_keepalive" || k == "tcp_user_timeout":
		ms, ok := parseMillis(v)
		if !ok || ms > int64(time.Hour/time.Millisecond) {
			return invalid(k + " must be a Go duration within 0s and 1h such as 30s, or milliseconds; 0 turns it off")
		}
		d := time.Duration(ms) * time.Millisecond
		if k == "tcp_keepalive" {
			cfg.Dial.Keepalive = d
		} else {
			cfg.Dial.UserTimeout = d
		}
	case k == "statement_timeout":
		ms, ok := parseMillis(v)
		if !ok {
			return invalid("statement_timeout must be a Go duration such as 5s, or milliseconds")
		}
		cfg.statementTimeout = strconv.FormatInt(ms, 10)
	case paramClients[k] != nil:
		if !slices.Contains(paramClients[k], cfg.Library) {
			return invalid("postgres DSN parameter " + strconv.Quote(k) + " is not supported with driver=" + cfg.Library.String())
		}
	default:
		if paramNameRE.MatchString(k) {
			return invalid("unknown postgres DSN parameter " + strconv.Quote(k))
		}
		return invalid("unknown postgres DSN parameter")
	}
	return nil
}

// RefuseSessionParams refuses the session settings in q, for a transaction
// pooler.
func RefuseSessionParams(q url.Values) error {
	for _, k := range sessionParams {
		if q.Has(k) {
			return invalid(k + " is a session setting, which a transaction pooler does not keep (PgBouncer refuses it): " +
				"remove it from the DSN and set it on the role instead (ALTER ROLE … SET " + k + " = …)")
		}
	}
	return nil
}

// Build builds the client library's configuration from u and its query q,
// from which the backend removed the parameters it reads itself.
func (cfg *Config) Build(u *url.URL, q url.Values) error {
	for _, k := range ownParams {
		q.Del(k)
	}
	if cfg.Library == PQ {
		return cfg.parsePQ(u, q)
	}
	u.RawQuery = EncodeQuery(q)
	pc, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
	}
	if cfg.statementTimeout != "" {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = cfg.statementTimeout
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if !q.Has("pool_max_conns") {
		pc.MaxConns = max(DefaultPoolSize, pc.MinConns, pc.MinIdleConns)
	}
	d := cfg.Dial.dialer()
	d.Timeout = pc.ConnConfig.ConnectTimeout
	pc.ConnConfig.DialFunc = d.DialContext
	cfg.Pool = pc
	cfg.SQLPool = SQLPool{MaxConns: int(pc.MaxConns), MaxLifetime: pc.MaxConnLifetime, MaxIdle: pc.MaxConnIdleTime}
	return nil
}

// parsePQ builds lib/pq's connection string: the DSN without durable's and
// the pool's parameters, with binary_parameters=yes (one round trip per
// statement; without it lib/pq prepares every statement first) and
// sslmode=prefer (libpq's and pgx's default; lib/pq's own is require)
// unless given, and statement_timeout as a server setting.
func (cfg *Config) parsePQ(u *url.URL, q url.Values) error {
	cfg.SQLPool = defaultSQLPool()
	if v := q.Get("pool_max_conns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return invalid("pool_max_conns must be a positive integer")
		}
		cfg.SQLPool.MaxConns = n
	}
	for k, d := range map[string]*time.Duration{"pool_max_conn_lifetime": &cfg.SQLPool.MaxLifetime, "pool_max_conn_idle_time": &cfg.SQLPool.MaxIdle} {
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
	if cfg.statementTimeout != "" {
		q.Set("statement_timeout", cfg.statementTimeout)
	}
	u.RawQuery = EncodeQuery(q)
	cfg.PQDSN = u.String()
	if _, err := pq.NewConnector(cfg.PQDSN); err != nil {
		return &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
	}
	return nil
}

// ParseQuery reads a DSN's query as libpq (and pgx) do: percent-escapes
// are decoded and "+" is a plus sign, not a space as in HTML forms.
func ParseQuery(raw string) (url.Values, error) {
	return url.ParseQuery(strings.ReplaceAll(raw, "+", "%2B"))
}

// EncodeQuery writes q back so that both libpq's reading (pgx) and Go's
// (lib/pq) get the same values: a space as %20, a plus sign as %2B.
func EncodeQuery(q url.Values) string {
	return strings.ReplaceAll(q.Encode(), "+", "%20")
}

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

// ListenDSN returns the connection string of the LISTEN sessions of a
// Client opened from cfg (driver=pq: lib/pq's own), or "".
func (cfg *Config) ListenDSN() string {
	if cfg.Library == PQ {
		return cfg.PQDSN
	}
	return ""
}

// Open creates the pool cfg describes (it connects lazily). The Client
// owns it: CloseOwn closes it. With driver=pq, prepare lets statements run
// as named prepared statements on connections found to reach the server
// directly (false behind a transaction pooler), and session, on every
// connection without checking (a session pooler); see pqConnector.
func (cfg *Config) Open(ctx context.Context, prepare, session bool) (Client, error) {
	c := Client{own: true, cfg: cfg}
	switch cfg.Library {
	case Pgx:
		pool, err := pgxpool.NewWithConfig(ctx, cfg.Pool)
		if err != nil {
			return Client{}, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres pool configuration", Err: redacted{err}}
		}
		c.pool = pool
		return c, nil
	case PQ:
		pc, err := newPQConnector(cfg.PQDSN, cfg.Dial.dialer())
		if err != nil {
			return Client{}, &contract.Error{Code: contract.InvalidArgument, Msg: "invalid postgres DSN", Err: redacted{err}}
		}
		pc.prepare, pc.session = prepare, session
		c.db, c.watch = sql.OpenDB(pc), pc
	case Stdlib:
		c.db = stdlib.OpenDB(*cfg.Pool.ConnConfig)
	}
	cfg.SQLPool.apply(c.db)
	return c, nil
}
