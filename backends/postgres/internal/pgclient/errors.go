package pgclient

import (
	"database/sql"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/lib/pq"
)

// The client libraries' errors, read into client-neutral facts: the
// backend's classification (its classify and configFailure) asks these
// functions and never looks at a client library's error types itself.

// sqlStater is a server error with its SQLSTATE: pgx's *pgconn.PgError and
// lib/pq's *pq.Error both implement it.
type sqlStater interface {
	error
	SQLState() string
}

// SQLState returns the SQLSTATE of the server error in err's chain.
func SQLState(err error) (string, bool) {
	var s sqlStater
	if errors.As(err, &s) {
		return s.SQLState(), true
	}
	return "", false
}

// ServerError is what a PostgreSQL server said in an error, whichever
// client library reported it (pgx's *pgconn.PgError or lib/pq's
// *pq.Error). Message, Detail and Hint are the server's own texts and may
// quote user data.
type ServerError struct {
	Code     string // the SQLSTATE, such as "28P01"
	Severity string // ERROR, FATAL or PANIC
	Message  string
	Detail   string
	Hint     string
}

// ServerErrorOf returns the server error err is, from either client
// library. It looks at err itself, not at the errors it wraps.
func ServerErrorOf(err error) (ServerError, bool) {
	switch e := err.(type) {
	case *pgconn.PgError:
		return ServerError{Code: e.Code, Severity: e.Severity, Message: e.Message, Detail: e.Detail, Hint: e.Hint}, true
	case *pq.Error:
		return ServerError{Code: string(e.Code), Severity: e.Severity, Message: e.Message, Detail: e.Detail, Hint: e.Hint}, true
	}
	return ServerError{}, false
}

// ServerErrorIn returns the server error in err's chain: pgx's, or else
// lib/pq's.
func ServerErrorIn(err error) (ServerError, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return ServerErrorOf(pe)
	}
	var qe *pq.Error
	if errors.As(err, &qe) {
		return ServerErrorOf(qe)
	}
	return ServerError{}, false
}

// SafeToRetry reports whether err is marked as a failure before anything
// was sent: pgconn's own marks, the queriers' (NotSent), and any other
// error in the chain with a SafeToRetry method that says so.
func SafeToRetry(err error) bool { return pgconn.SafeToRetry(err) }

// IsConnectError reports whether err is pgx's failure to connect
// (*pgconn.ConnectError, pgx and pgx's stdlib).
func IsConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// errDBClosedText is the text of database/sql's unexported error for a
// closed *sql.DB ("sql: database is closed"), which has no exported
// sentinel.
const errDBClosedText = "sql: database is closed"

// PoolClosed reports whether err says the connection pool was closed:
// pgxpool's puddle.ErrClosedPool, database/sql's closed *sql.DB, or
// sql.ErrConnDone. (puddle is pgxpool's own pool package, already in the
// module graph through pgx; importing it for its sentinel adds no code.)
func PoolClosed(err error) bool {
	if errors.Is(err, puddle.ErrClosedPool) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == errDBClosedText {
			return true
		}
	}
	return false
}

// TLSRefused reports whether err says the server does not accept TLS
// while the DSN requires it (sslmode=require or stricter): lib/pq's
// pq.ErrSSLNotSupported, or pgconn's error for a server that answered the
// TLS request with "N", anywhere in err's tree.
func TLSRefused(err error) bool {
	return errors.Is(err, pq.ErrSSLNotSupported) || anyInTree(err, isPgconnTLSRefused)
}

// pgconnTLSRefused is the text of pgconn's unexported error for a server
// that answered the TLS request with "N" (it has no TLS), under
// sslmode=require and stricter. lib/pq's is pq.ErrSSLNotSupported.
const pgconnTLSRefused = "server refused TLS connection"

// errorStringType is the type of the errors errors.New returns.
var errorStringType = reflect.TypeOf(errors.New(""))

// isPgconnTLSRefused reports whether e is pgconn's error for a server
// without TLS.
func isPgconnTLSRefused(e error) bool {
	return reflect.TypeOf(e) == errorStringType && e.Error() == pgconnTLSRefused
}

// anyInTree reports whether f holds for err or any error it wraps,
// following both Unwrap() error and Unwrap() []error (errors.Join, which
// pgconn uses for its per-host attempts).
func anyInTree(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	if f(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return anyInTree(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if anyInTree(e, f) {
				return true
			}
		}
	}
	return false
}

// Endpoint names the server and the database a connection was for, in the
// messages of configuration failures. Both come from the client library's
// parsed configuration (the DSN), never from server text, and either may
// be unknown. The user and the password are never part of it.
type Endpoint struct {
	Addrs    []string // "host:port" or a Unix socket path, each once
	Database string
}

// AddHost adds the address of host and port, once.
func (ep *Endpoint) AddHost(host string, port uint16) {
	if host == "" {
		return
	}
	var a string
	if strings.HasPrefix(host, "/") {
		a = filepath.Join(host, ".s.PGSQL."+strconv.Itoa(int(port)))
	} else {
		a = net.JoinHostPort(host, strconv.Itoa(int(port)))
	}
	if !slices.Contains(ep.Addrs, a) {
		ep.Addrs = append(ep.Addrs, a)
	}
}

// pgconnEndpoint returns the endpoint of a pgx connection configuration,
// its fallbacks included.
func pgconnEndpoint(c *pgconn.Config) Endpoint {
	ep := Endpoint{Database: c.Database}
	ep.AddHost(c.Host, c.Port)
	for _, f := range c.Fallbacks {
		ep.AddHost(f.Host, f.Port)
	}
	return ep
}

// ConnectEndpoint returns the endpoint of the failed connection attempt in
// err's chain: pgx's *pgconn.ConnectError (pgx, pgx's stdlib) carries its
// configuration. lib/pq's errors do not; see (*Config).Endpoint.
func ConnectEndpoint(err error) Endpoint {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Config != nil {
		return pgconnEndpoint(ce.Config)
	}
	return Endpoint{}
}

// Endpoint returns the endpoint a parsed DSN connects to.
func (cfg *Config) Endpoint() Endpoint {
	if cfg.Library != PQ && cfg.Pool != nil {
		return pgconnEndpoint(&cfg.Pool.ConnConfig.Config)
	}
	c, err := pq.NewConfig(cfg.PQDSN)
	if err != nil {
		return Endpoint{}
	}
	ep := Endpoint{Database: c.Database}
	ep.AddHost(c.Host, c.Port)
	for _, m := range c.Multi {
		ep.AddHost(m.Host, m.Port)
	}
	return ep
}
