package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// safeErr is an error pgconn marks as not sent.
type safeErr struct{}

func (safeErr) Error() string     { return "dial tcp: refused" }
func (safeErr) SafeToRetry() bool { return true }

func TestClassify(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	pg := func(code string) error {
		return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "secret detail: SELECT password FROM x"}
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		kind opKind
		want contract.Code
	}{
		{"UniqueViolation", live, pg("23505"), write, contract.AlreadyExists},
		{"UndefinedTable", live, pg("42P01"), read, contract.SchemaMismatch},
		{"InvalidSchema", live, pg("3F000"), write, contract.SchemaMismatch},
		{"UndefinedColumn", live, pg("42703"), read, contract.SchemaMismatch},
		{"SerializationFailure", live, pg("40001"), write, contract.Unavailable},
		{"Deadlock", live, pg("40P01"), write, contract.Unavailable},
		{"StatementTimeout", live, pg("57014"), write, contract.Unavailable},
		{"CanceledByCaller", done, pg("57014"), write, contract.Canceled},
		{"AdminShutdown", live, pg("57P01"), write, contract.Unavailable},
		{"CrashShutdown", live, pg("57P02"), read, contract.Unavailable},
		{"CannotConnectNow", live, pg("57P03"), write, contract.Unavailable},
		{"ConnectionFailure", live, pg("08006"), write, contract.Unavailable},
		{"TooManyConnections", live, pg("53300"), write, contract.Unavailable},
		{"ReadOnlyTransaction", live, pg("25006"), write, contract.Unavailable},
		{"AuthFailed", live, pg("28P01"), read, contract.Unavailable},
		{"PermissionDenied", live, pg("42501"), write, contract.Unknown},
		{"Other", live, pg("22P02"), write, contract.Unknown},
		{"NotSent", live, safeErr{}, write, contract.Unavailable},
		{"BrokenAfterSendWrite", live, io.ErrUnexpectedEOF, write, contract.OutcomeUnknown},
		{"BrokenAfterSendRead", live, io.ErrUnexpectedEOF, read, contract.Unavailable},
		{"CtxEndedInFlightWrite", done, io.ErrUnexpectedEOF, write, contract.OutcomeUnknown},
		{"CtxEndedInFlightRead", done, io.ErrUnexpectedEOF, read, contract.Canceled},
		{"CtxEndedBeforeSend", done, safeErr{}, write, contract.Canceled},
		{"CtxEndedWaitingForConn", done, context.Canceled, write, contract.Canceled},
		{"ClosedPool", live, puddle.ErrClosedPool, write, contract.Closed},
		{"AlreadyMapped", live, &contract.Error{Code: contract.Fenced}, write, contract.Fenced},
		// lib/pq and database/sql.
		{"PQUniqueViolation", live, pqErr("23505"), write, contract.AlreadyExists},
		{"PQSerializationFailure", live, pqErr("40001"), write, contract.Unavailable},
		{"PQStatementTimeout", live, pqErr("57014"), write, contract.Unavailable},
		{"PQCanceledByCaller", done, pqErr("57014"), write, contract.Canceled},
		{"PQInvalidSchema", live, pqErr("3F000"), read, contract.SchemaMismatch},
		{"PQConnectionFailure", live, pqErr("08006"), write, contract.Unavailable},
		{"PQAuthFailed", live, pqErr("28P01"), read, contract.Unavailable},
		{"PQNotSentAuthFailed", live, notSentError{pqErr("28P01")}, write, contract.Unavailable},
		{"BadConnMaybeSentWrite", live, driver.ErrBadConn, write, contract.OutcomeUnknown},
		{"BadConnRead", live, driver.ErrBadConn, read, contract.Unavailable},
		{"BadConnNotSent", live, notSentError{driver.ErrBadConn}, write, contract.Unavailable},
		{"BareCtxInFlightWrite", done, inFlightError{context.Canceled}, write, contract.OutcomeUnknown},
		{"BareCtxInFlightRead", done, inFlightError{context.Canceled}, read, contract.Canceled},
		{"NotSentCtx", done, notSentError{context.Canceled}, write, contract.Canceled},
		{"ConnDone", live, sql.ErrConnDone, write, contract.Closed},
		{"DBClosed", live, errDBClosedForTest, read, contract.Closed},
		{"DBClosedAcquiring", live, notSentError{errDBClosedForTest}, write, contract.Closed},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := classify(c.ctx, c.err, c.kind)
			if got := contract.CodeOf(err); got != c.want {
				t.Fatalf("classify = %v (code %v), want %v", err, got, c.want)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("the cause is not reachable from %v", err)
			}
			if c.ctx.Err() != nil && (c.want == contract.Canceled || c.want == contract.OutcomeUnknown) && !errors.Is(err, context.Canceled) {
				t.Errorf("errors.Is(%v, context.Canceled) = false", err)
			}
			checkNoLeak(t, err, "secret", "SELECT", "password", "SQLSTATE", "dial tcp")
		})
	}
}

// errDBClosedForTest has the text of database/sql's unexported error for
// a closed *sql.DB.
var errDBClosedForTest = errors.New("sql: database is closed")

// checkNoLeak fails if err's text contains any of leaks.
func checkNoLeak(t *testing.T, err error, leaks ...string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, l := range leaks {
		if l != "" && strings.Contains(msg, l) {
			t.Errorf("error text %q leaks %q", msg, l)
		}
	}
}

// sqlWords are fragments of the backend's SQL that must never show.
var sqlWords = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH ", "leases", "idempotency_keys", "workflows WHERE", "SQLSTATE"}

func TestErrorsNeverLeakTheDSN(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	const secret = "Sup3r-s3cret-pw"

	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run("RefusedPort/"+drv, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			dsn := fmt.Sprintf("postgres://bobuser:%s@127.0.0.1:%d/appdb?connect_timeout=2&schema=s&driver=%s", secret, port, drv)
			_, err = Open(ctx, dsn)
			if contract.CodeOf(err) != contract.Unavailable {
				t.Fatalf("Open on a refused port = %v (code %v), want Unavailable", err, contract.CodeOf(err))
			}
			checkNoLeak(t, err, append([]string{secret, dsn, "postgres://", "bobuser", "appdb", strconv.Itoa(port)}, sqlWords...)...)
			var ce *pgconn.ConnectError
			var oe *net.OpError
			if !errors.As(err, &ce) && !errors.As(err, &oe) {
				t.Errorf("the driver's error is not reachable through errors.As: %#v", err)
			}
		})

		t.Run("WrongPassword/"+drv, func(t *testing.T) {
			dsn := strings.Replace(srv.PasswordDSN(t), pgtest.PasswordRolePassword, secret, 1)
			_, err := Open(ctx, dsn+"&schema="+srv.Schema(t)+"&driver="+drv)
			if contract.CodeOf(err) != contract.Unavailable {
				t.Fatalf("Open with a wrong password = %v, want Unavailable", err)
			}
			checkNoLeak(t, err, append([]string{secret, pgtest.PasswordRole, "postgres://", "password authentication"}, sqlWords...)...)
		})
	}

	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run("ServerDiesMidOperation/"+drv, func(t *testing.T) { testServerDiesMidOperation(t, srv, drv, secret) })
	}
}

func testServerDiesMidOperation(t *testing.T, srv *pgtest.Server, drv, secret string) {
	ctx := t.Context()
	proxy := srv.NewProxy(t)
	schema := srv.Schema(t)
	admin := newPool(t, srv.DSN())
	if err := Migrate(ctx, admin, schema, Up); err != nil {
		t.Fatal(err)
	}
	grant := fmt.Sprintf(`GRANT USAGE ON SCHEMA %[1]s TO %[2]s; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[2]s; GRANT USAGE ON ALL SEQUENCES IN SCHEMA %[1]s TO %[2]s`,
		quoteIdent(schema), pgtest.PasswordRole)
	if err := srv.Exec(ctx, grant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Exec(context.Background(), fmt.Sprintf(`REVOKE ALL ON ALL TABLES IN SCHEMA %[1]s FROM %[2]s; REVOKE ALL ON ALL SEQUENCES IN SCHEMA %[1]s FROM %[2]s; REVOKE ALL ON SCHEMA %[1]s FROM %[2]s`, quoteIdent(schema), pgtest.PasswordRole))
	})
	dsn := proxy.DSN(srv.PasswordDSN(t)) + "&migrate=verify&schema=" + schema + "&driver=" + drv
	b, err := Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open through the proxy: %v", err)
	}
	defer b.Close()
	req := contract.LeaseRequest{Resource: "res-1", Owner: "o", TTL: 10 * time.Second}
	if _, err := b.AcquireLease(ctx, req); err != nil {
		t.Fatal(err)
	}
	// Hold the lease row so the next acquire blocks in the server.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+quoteIdent(schema)+`.leases WHERE resource = 'res-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "o2", TTL: 10 * time.Second})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond) // let the statement reach the server and block
	proxy.Cut()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireLease did not return after the connection died")
	}
	if contract.CodeOf(err) != contract.OutcomeUnknown {
		t.Errorf("a write whose connection died in flight = %v (code %v), want OutcomeUnknown", err, contract.CodeOf(err))
	}
	checkNoLeak(t, err, append([]string{secret, pgtest.PasswordRolePassword, pgtest.PasswordRole, "postgres://", dsn}, sqlWords...)...)
	// A read right after: it works (a new connection) or is Unavailable.
	if _, err := b.GetLease(ctx, "", "res-1"); err != nil && contract.CodeOf(err) != contract.Unavailable {
		t.Errorf("GetLease after the cut = %v, want success or Unavailable", err)
	}
}

func TestStatementTimeoutIsUnavailable(t *testing.T) {
	b0, _, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	if _, err := b0.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "o", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	tx, err := b0.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+quoteIdent(b0.schema)+`.leases FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// statement_timeout reaches the server on every client library.
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		b, err := Open(ctx, srv.DSN()+"&statement_timeout=150ms&migrate=verify&schema="+b0.schema+"&driver="+drv)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "o2", TTL: 10 * time.Second})
		if contract.CodeOf(err) != contract.Unavailable || !strings.Contains(err.Error(), "timed out") {
			t.Errorf("driver=%s: AcquireLease past statement_timeout = %v, want Unavailable (timed out)", drv, err)
		}
		checkNoLeak(t, err, sqlWords...)
		b.Close()
	}

	// The caller's deadline in flight: the context error stays visible.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = b0.AcquireLease(cctx, contract.LeaseRequest{Resource: "res-1", Owner: "o2", TTL: 10 * time.Second})
	if c := contract.CodeOf(err); (c != contract.Canceled && c != contract.OutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireLease past the caller's deadline = %v (code %v), want Canceled or OutcomeUnknown with the context error", err, c)
	}
	checkNoLeak(t, err, sqlWords...)
}

func TestMissingSchemaIsAMismatch(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	b, err := Open(ctx, srv.DSN()+"&migrate=off&schema="+srv.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.GetWorkflow(ctx, "", "wf")
	if contract.CodeOf(err) != contract.SchemaMismatch {
		t.Errorf("GetWorkflow on a missing schema = %v, want SchemaMismatch", err)
	}
	checkNoLeak(t, err, sqlWords...)
}

func pgErr(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code} }

func asError(err error, target **contract.Error) bool { return errors.As(err, target) }
