package pgclient

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"sync/atomic"
	"time"
)

// Prepared statements on lib/pq.
//
// lib/pq has no statement cache: through database/sql every statement is
// sent unnamed, and PostgreSQL parses and plans it on every call, which
// costs the larger statements (UpdateWorkflow, ClaimKey, CompleteKey)
// several hundred microseconds. database/sql's own *sql.Stmt would prepare
// each statement once per connection, but it re-sends a statement on
// another connection after driver.ErrBadConn, which lib/pq also returns
// after sending (lib/pq #939), and it only exists for a *sql.DB, not for
// the *sql.Conn a write must hold.
//
// So with Open's driver=pq the backend keeps, with the record of each
// driver connection (watchedConn, see pqConnector), the statements that
// connection prepared, keyed by their text: the first call of a statement
// on a connection prepares it (one round trip: Parse and Describe, which
// runs nothing), every call binds and executes it in one round trip. The
// statement runs on the driver connection directly, through Conn.Raw, so
// database/sql never re-sends it, and its values are converted here (see
// driverArg and assign), without database/sql's reflection. A statement
// whose arguments or scan targets are of another type takes the
// database/sql path instead.
//
// Named prepared statements need the server session to stay with the
// connection: they are used only on a connection that was found, when it
// was opened, to reach the server directly (the process running its first
// statement is the one its session key names; a pooler hands out keys of
// its own), or behind a session pooler (pooler=session), and never with
// pooler=transaction. lib/pq names its statements by a per-connection
// counter, so on a transaction pooler a statement could run as another
// client's statement of the same name: that is why a connection that
// cannot be checked is not prepared on either.

// maxPreparedPerConn bounds the statements one connection keeps prepared:
// the registry's and the few fixed texts the backend runs (a text beyond it
// runs unnamed).
const maxPreparedPerConn = 128

// pqStmts is the prepared statements of one lib/pq connection. It is used
// only while the connection is held (inside Conn.Raw), so it needs no lock.
type pqStmts struct {
	// direct: the connection reaches the server directly or through a
	// session pooler; statements may be prepared on it.
	direct bool
	byText map[string]driver.Stmt
	// prepares counts the statements prepared on the connection (tests).
	prepares int
	args     []driver.NamedValue // reused per call
	vals     []driver.Value      // reused per call
}

// errDiscard, returned from Conn.Raw, makes database/sql close the
// connection instead of returning it to the pool.
var errDiscard = driver.ErrBadConn

// prepared runs a statement on lib/pq as a prepared statement of its
// connection (see above). With row nil it scans at most one row into dest
// (queryRow); otherwise it scans every row and calls row after each.
func (q sqlQuerier) prepared(ctx context.Context, kind Kind, query string, args, dest []any, row func() error) (bool, error) {
	if !preparable(args, dest) {
		return q.unprepared(ctx, kind, query, args, dest, row)
	}
	conn, release, err := q.take(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	var (
		found, ran bool
		ferr       error
	)
	err = conn.Raw(func(dc any) error {
		ps := q.watch.stmts(dc)
		if ps == nil || !ps.direct {
			return nil
		}
		ran = true
		found, ferr = ps.run(ctx, dc, kind, query, args, dest, row)
		return nil
	})
	if err != nil {
		// The connection was closed before anything was sent.
		return false, notSentError{err}
	}
	if ran {
		return found, ferr
	}
	// Not a connection to prepare on: run the statement unnamed on it.
	rows, err := q.rowsOn(ctx, conn, kind, query, SQLArgs(args))
	if err != nil {
		return false, err
	}
	if row == nil {
		found, err = scanOne(rows, dest)
		if err != nil && kind == Write {
			err = afterSend(err)
		}
		return found, err
	}
	return false, scanAll(rows, kind, dest, row)
}

// unprepared runs a statement through database/sql.
func (q sqlQuerier) unprepared(ctx context.Context, kind Kind, query string, args, dest []any, row func() error) (bool, error) {
	p := q
	p.prepare = false
	if row == nil {
		return p.QueryRow(ctx, kind, query, args, dest...)
	}
	return false, p.Query(ctx, kind, query, args, dest, row)
}

// run runs query on the driver connection dc, preparing it first if dc has
// not yet.
func (ps *pqStmts) run(ctx context.Context, dc any, kind Kind, query string, args, dest []any, row func() error) (bool, error) {
	st, err := ps.stmt(ctx, dc, query)
	if err != nil {
		return false, err
	}
	sq, ok := st.(driver.StmtQueryContext)
	if !ok {
		return false, errors.New("postgres: lib/pq statement without QueryContext")
	}
	nv := ps.args[:0]
	for i, a := range args {
		v, _ := driverArg(a)
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	ps.args = nv
	defer clear(nv)
	rows, err := sq.QueryContext(ctx, nv)
	if err != nil {
		return false, ps.failed(kind, query, err)
	}
	n := len(rows.Columns())
	if cap(ps.vals) < n {
		ps.vals = make([]driver.Value, n)
	}
	vals := ps.vals[:n]
	defer clear(vals)
	found := false
	var derr error // the driver's
	for {
		if derr = rows.Next(vals); derr != nil {
			if derr == io.EOF {
				derr = nil
			}
			break
		}
		found = true
		if len(vals) != len(dest) {
			err = errors.New("postgres: the statement returned another number of columns than it scans")
			break
		}
		for i, v := range vals {
			if err = assign(dest[i], v); err != nil {
				break
			}
		}
		if err == nil && row != nil {
			err = row()
		}
		if err != nil || row == nil {
			break
		}
	}
	// Close reads the rest of the result: an error the server reports after
	// the row (the statement failed after all) is returned, as pgx's
	// QueryRow does.
	if cerr := rows.Close(); derr == nil {
		derr = cerr
	}
	switch {
	case derr != nil:
		return false, ps.failed(kind, query, derr)
	case err != nil:
		return false, err
	}
	return found, nil
}

// stmt returns the statement prepared for query on dc, preparing it now if
// need be. Preparing runs nothing: a failure other than the server's
// refusal (which keeps its SQLSTATE) is marked notSent.
func (ps *pqStmts) stmt(ctx context.Context, dc any, query string) (driver.Stmt, error) {
	if st, ok := ps.byText[query]; ok {
		return st, nil
	}
	if len(ps.byText) >= maxPreparedPerConn {
		return nil, errTooManyStatements
	}
	cp, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("postgres: lib/pq connection without PrepareContext")
	}
	st, err := cp.PrepareContext(ctx, query)
	if err != nil {
		if _, ok := SQLState(err); ok {
			return nil, err
		}
		return nil, notSentError{err}
	}
	if ps.byText == nil {
		ps.byText = make(map[string]driver.Stmt)
	}
	ps.byText[query] = st
	ps.prepares++
	return st, nil
}

var errTooManyStatements = errors.New("postgres: too many prepared statements on one connection")

// failed marks a failure of an executed statement: a read is safe to send
// again after driver.ErrBadConn, a bare context error of a write is the
// statement's own. A statement the server no longer knows (26000) or whose
// cached plan it refused (0A000, after a migration changed a table) is
// forgotten, so that the next call prepares it again.
func (ps *pqStmts) failed(kind Kind, query string, err error) error {
	if code, ok := SQLState(err); ok && (code == "26000" || code == "0A000") {
		if st, ok := ps.byText[query]; ok {
			delete(ps.byText, query)
			_ = st.Close()
		}
	}
	if kind == Read && errors.Is(err, driver.ErrBadConn) {
		return notSentError{err}
	}
	return afterSend(err)
}

// preparable reports whether every argument and scan target has a type the
// prepared path converts itself.
func preparable(args, dest []any) bool {
	if len(args) == 0 {
		// lib/pq sends a statement without arguments as a simple query, in
		// one round trip already.
		return false
	}
	for _, a := range args {
		if _, ok := driverArg(a); !ok {
			return false
		}
	}
	for _, d := range dest {
		if !assignable(d) {
			return false
		}
	}
	return true
}

// driverArg converts a statement argument as SQLArgs and database/sql
// would: a nil []byte is NULL, a time is cut to the microsecond, an int is
// an int64.
func driverArg(a any) (driver.Value, bool) {
	switch v := a.(type) {
	case nil:
		return nil, true
	case string, int64, float64, bool:
		return v, true
	case int:
		return int64(v), true
	case []byte:
		if v == nil {
			return nil, true
		}
		return v, true
	case time.Time:
		return v.Truncate(time.Microsecond), true
	}
	return nil, false
}

// assignable reports whether assign handles a scan target of d's type.
func assignable(d any) bool {
	switch d.(type) {
	case *string, **string, *int64, **int64, *bool, *[]byte, *time.Time, **time.Time, sql.Scanner:
		return true
	}
	return false
}

// errScan is the error of a value that does not fit its scan target. Its
// text names types only, never a value.
var errScan = errors.New("postgres: a column's value does not fit its scan target")

// assign stores the driver value v in the scan target dst as database/sql's
// Rows.Scan does for these types: NULL only into a pointer, a []byte
// copied (lib/pq reuses its read buffer), an sql.Scanner given the value
// (the scanner copies a []byte it keeps, as database/sql requires).
func assign(dst any, v driver.Value) error {
	switch d := dst.(type) {
	case sql.Scanner:
		return d.Scan(v)
	case *string:
		switch s := v.(type) {
		case string:
			*d = s
		case []byte:
			*d = string(s)
		default:
			return errScan
		}
	case **string:
		if v == nil {
			*d = nil
			return nil
		}
		var s string
		if err := assign(&s, v); err != nil {
			return err
		}
		*d = &s
	case *int64:
		n, ok := v.(int64)
		if !ok {
			return errScan
		}
		*d = n
	case **int64:
		if v == nil {
			*d = nil
			return nil
		}
		n, ok := v.(int64)
		if !ok {
			return errScan
		}
		*d = &n
	case *bool:
		b, ok := v.(bool)
		if !ok {
			return errScan
		}
		*d = b
	case *[]byte:
		switch b := v.(type) {
		case nil:
			*d = nil
		case []byte:
			*d = append([]byte{}, b...)
		case string:
			*d = []byte(b)
		default:
			return errScan
		}
	case *time.Time:
		t, ok := v.(time.Time)
		if !ok {
			return errScan
		}
		*d = t
	case **time.Time:
		if v == nil {
			*d = nil
			return nil
		}
		t, ok := v.(time.Time)
		if !ok {
			return errScan
		}
		*d = &t
	default:
		return errScan
	}
	return nil
}

// pqKeyPID returns the process ID of lib/pq's connection dc's session key
// (the BackendKeyData of its startup), which lib/pq keeps unexported; ok is
// false when this version of lib/pq keeps it elsewhere.
func pqKeyPID(dc any) (pid int64, ok bool) {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	f := v.Elem().FieldByName("pid")
	if !f.IsValid() || !f.CanInt() {
		return 0, false
	}
	return f.Int(), true
}

// pqDirect reports whether the new lib/pq connection dc reaches the server
// directly: the server process running a statement is the one its session
// key names. It runs one simple query (no prepared statement).
func pqDirect(ctx context.Context, dc driver.Conn) (bool, error) {
	keyPID, ok := pqKeyPID(dc)
	if !ok {
		return false, nil
	}
	qc, ok := dc.(driver.QueryerContext)
	if !ok {
		return false, nil
	}
	rows, err := qc.QueryContext(ctx, backendPIDSQL, nil)
	if err != nil {
		return false, err
	}
	vals := make([]driver.Value, 1)
	err = rows.Next(vals)
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	pid, ok := vals[0].(int64)
	return ok && pid == keyPID, nil
}

// PQPrepare turns lib/pq's prepared statements on while positive, which
// they are by default; a test may turn them off for itself to compare the
// two paths. (They were off for a while: on a frozen server a prepared
// statement of lib/pq held its caller until connect_timeout past its
// context's end, because lib/pq's dial replaced the cancel request's
// deadline with connect_timeout's; cancelConn keeps the bound.)
var PQPrepare = func() *atomic.Int32 {
	var n atomic.Int32
	n.Store(1)
	return &n
}()
