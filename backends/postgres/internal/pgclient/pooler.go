package pgclient

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// A pooler in front of PostgreSQL (PgBouncer, pgcat, Supavisor, RDS Proxy)
// answers the startup itself and hands the client a session key of its
// own: the process ID in the client's BackendKeyData is not the server
// process that runs its statements. A direct connection always gets the
// server process's ID. That difference is how the backend's Open
// (PoolerAuto) and Doctor detect a pooler (DetectPooler); it cannot tell a
// session pooler from a transaction pooler, so a detected pooler is
// treated as the stricter kind unless the DSN says pooler=session.

// backendPIDSQL reads the server process that runs the statement.
const backendPIDSQL = `SELECT pg_backend_pid()`

// DetectPooler checks that the server answers and, where the client
// library reveals the session key (pgx and pgx's stdlib), whether a pooler
// is in front: known is false for other drivers (lib/pq), where it only
// pings. It runs one statement without a prepared statement, so it works
// through any pooler.
func (c Client) DetectPooler(ctx context.Context) (pooled, known bool, err error) {
	if c.pool != nil {
		conn, err := c.pool.Acquire(ctx)
		if err != nil {
			return false, false, notSentError{err}
		}
		defer conn.Release()
		var pid int32
		if err := conn.QueryRow(ctx, backendPIDSQL, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
			return false, false, err
		}
		return uint32(pid) != conn.Conn().PgConn().PID(), true, nil
	}
	if !IsStdlib(c.db) {
		return false, false, c.db.PingContext(ctx)
	}
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return false, false, notSentError{err}
	}
	defer conn.Close()
	var keyPID uint32
	if err := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("postgres: not a pgx stdlib connection")
		}
		keyPID = sc.Conn().PgConn().PID()
		return nil
	}); err != nil {
		return false, false, err
	}
	var pid int32
	if err := conn.QueryRowContext(ctx, backendPIDSQL, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, false, err
	}
	return uint32(pid) != keyPID, true, nil
}

// SessionlessQuerier returns a querier on c that relies on no session
// state (for a transaction pooler: the backend's PoolerTransaction).
// lib/pq needs nothing: with binary_parameters=yes (Open's default) it
// sends every statement unnamed, in one round trip; without it, it
// prepares an unnamed statement in one round trip and runs it in another,
// which a transaction pooler may send to two server sessions (the failure
// names binary_parameters, see the backend's configFailure).
//
// A DSN that sets default_query_exec_mode keeps it: the user knows the
// pooler keeps prepared statements (PgBouncer 1.21 and later with
// max_prepared_statements), which spares the server planning every
// statement again.
func (c Client) SessionlessQuerier() Querier {
	if c.cfg != nil && c.cfg.ExplicitMode {
		return c.Querier()
	}
	return c.ProbeQuerier()
}

// ProbeQuerier returns a querier on c that never relies on session state,
// whatever the backend's setting: Doctor's own statements must tell the
// truth behind a pooler the backend is misconfigured for.
func (c Client) ProbeQuerier() Querier {
	if c.pool != nil {
		return pgxQuerier{pool: c.pool, sessionless: true}
	}
	q := c.Querier().(sqlQuerier)
	q.stdlibExec = q.pgxConn
	q.prepare = false
	return q
}

// QueryExecMode names how q, a querier of c, runs statements, for the
// backend's Doctor, and whether that fits a transaction pooler: yes, no, or
// unknown (fits nil).
func (c Client) QueryExecMode(ctx context.Context, q Querier) (mode string, fits *bool) {
	switch q := q.(type) {
	case pgxQuerier:
		if q.sessionless {
			return "pgx, exec mode (unnamed statements)", ptr(true)
		}
		m := c.pool.Config().ConnConfig.DefaultQueryExecMode
		if c.cfg != nil && c.cfg.ExplicitMode && !modeFitsPooler(m) {
			return "pgx, " + modeName(m) + " as the DSN sets it; behind a transaction pooler that works only if the pooler " +
				"keeps prepared statements (PgBouncer 1.21+ with max_prepared_statements)", nil
		}
		return "pgx, " + modeName(m), ptr(modeFitsPooler(m))
	case sqlQuerier:
		switch {
		case q.stdlibExec:
			return "pgx stdlib, exec mode (unnamed statements)", ptr(true)
		case IsStdlib(q.db):
			var m pgx.QueryExecMode
			conn, err := q.db.Conn(ctx)
			if err == nil {
				err = conn.Raw(func(dc any) error {
					if sc, ok := dc.(*stdlib.Conn); ok {
						m = sc.Conn().Config().DefaultQueryExecMode
					}
					return nil
				})
				_ = conn.Close()
			}
			if err != nil || m == 0 {
				return "pgx stdlib", nil
			}
			if c.cfg != nil && c.cfg.ExplicitMode && !modeFitsPooler(m) {
				return "pgx stdlib, " + modeName(m) + " as the DSN sets it; behind a transaction pooler that works only if the pooler " +
					"keeps prepared statements (PgBouncer 1.21+ with max_prepared_statements)", nil
			}
			return "pgx stdlib, " + modeName(m), ptr(modeFitsPooler(m))
		case c.cfg != nil && c.cfg.Library == PQ:
			if q.prepare && q.watch.session {
				return "lib/pq, binary_parameters=yes, named prepared statements (pooler=session)", ptr(false)
			}
			if q.prepare {
				// A connection found to go through a pooler runs unnamed
				// statements (see pqStmts).
				return "lib/pq, binary_parameters=yes, named prepared statements on connections that reach the server directly, unnamed ones through a pooler", ptr(true)
			}
			if strings.Contains(c.cfg.PQDSN, "binary_parameters=yes") {
				return "lib/pq, binary_parameters=yes (unnamed statements, one round trip)", ptr(true)
			}
			return "lib/pq, binary_parameters=no (an unnamed statement prepared in one round trip, run in another)", ptr(false)
		}
		return "a database/sql driver of the application's choosing", nil
	}
	return "unknown", nil
}

// modeFitsPooler reports whether pgx's mode m needs no session state:
// cache_describe, exec and simple_protocol run unnamed statements in one
// round trip (cache_describe once the description is cached);
// cache_statement names its statements, and describe_exec spends two round
// trips on one unnamed statement.
func modeFitsPooler(m pgx.QueryExecMode) bool {
	return m == pgx.QueryExecModeCacheDescribe || m == pgx.QueryExecModeExec || m == pgx.QueryExecModeSimpleProtocol
}

// modeName is m as pgx's default_query_exec_mode parameter spells it.
func modeName(m pgx.QueryExecMode) string {
	switch m {
	case pgx.QueryExecModeCacheStatement:
		return "cache_statement (named prepared statements)"
	case pgx.QueryExecModeCacheDescribe:
		return "cache_describe (unnamed statements, cached descriptions)"
	case pgx.QueryExecModeDescribeExec:
		return "describe_exec (two round trips per statement)"
	case pgx.QueryExecModeExec:
		return "exec (unnamed statements)"
	case pgx.QueryExecModeSimpleProtocol:
		return "simple_protocol"
	}
	return m.String()
}

func ptr[T any](v T) *T { return &v }
