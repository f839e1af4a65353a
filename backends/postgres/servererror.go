package postgres

import "github.com/durable-go/durable/backends/postgres/internal/pgclient"

// ServerError is what a PostgreSQL server said in an error, whichever
// client library reported it (pgx's *pgconn.PgError or lib/pq's
// *pq.Error). Message, Detail and Hint are the server's own texts and may
// quote user data: they are for an operator's eyes (the CLI's --verbose),
// never part of durable's error messages.
type ServerError struct {
	Code      string // the SQLSTATE, such as "28P01"
	Condition string // its condition name, such as "invalid_password" ("" if unknown)
	Severity  string // ERROR, FATAL or PANIC
	Message   string
	Detail    string
	Hint      string
}

// ServerErrorOf returns the server error err is, from either client
// library. It looks at err itself, not at the errors it wraps, so that a
// caller walking an error chain describes each one once; use errors.As
// with the client library's type to search a chain.
func ServerErrorOf(err error) (ServerError, bool) {
	e, ok := pgclient.ServerErrorOf(err)
	if !ok {
		return ServerError{}, false
	}
	return ServerError{Code: e.Code, Condition: ConditionName(e.Code), Severity: e.Severity,
		Message: e.Message, Detail: e.Detail, Hint: e.Hint}, true
}
