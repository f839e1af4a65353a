package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/lib/pq"
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
		{"AuthFailed", live, pg("28P01"), read, contract.PermissionDenied},
		{"AuthFailedCtxEnded", done, pg("28P01"), read, contract.PermissionDenied},
		{"UnknownRole", live, pg("28000"), read, contract.PermissionDenied},
		{"MissingDatabase", live, pg("3D000"), read, contract.Misconfigured},
		{"PermissionDenied", live, pg("42501"), write, contract.PermissionDenied},
		{"BadSettingAfterConnect", live, pg("22023"), write, contract.Unknown},
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
		{"PQAuthFailed", live, pqErr("28P01"), read, contract.PermissionDenied},
		{"PQNotSentAuthFailed", live, pgclient.NotSent(pqErr("28P01")), write, contract.PermissionDenied},
		{"PQMissingDatabase", live, pqErr("3D000"), read, contract.Misconfigured},
		{"PQPermissionDenied", live, pqErr("42501"), read, contract.PermissionDenied},
		{"BadConnMaybeSentWrite", live, driver.ErrBadConn, write, contract.OutcomeUnknown},
		{"BadConnRead", live, driver.ErrBadConn, read, contract.Unavailable},
		{"BadConnNotSent", live, pgclient.NotSent(driver.ErrBadConn), write, contract.Unavailable},
		{"BareCtxInFlightWrite", done, pgclient.InFlight(context.Canceled), write, contract.OutcomeUnknown},
		{"BareCtxInFlightRead", done, pgclient.InFlight(context.Canceled), read, contract.Canceled},
		{"NotSentCtx", done, pgclient.NotSent(context.Canceled), write, contract.Canceled},
		{"ConnDone", live, sql.ErrConnDone, write, contract.Closed},
		{"DBClosed", live, errDBClosedForTest, read, contract.Closed},
		{"DBClosedAcquiring", live, pgclient.NotSent(errDBClosedForTest), write, contract.Closed},
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
			checkNoLeak(t, err, "secret", "SELECT", "FROM x", "dial tcp")
			if code, ok := sqlState(c.err); ok {
				if want := "SQLSTATE " + code + " " + ConditionName(code); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			} else if strings.Contains(err.Error(), "SQLSTATE") {
				t.Errorf("error %q names an SQLSTATE, but its cause has none", err)
			}
			if c := contract.CodeOf(err); (c == contract.PermissionDenied || c == contract.Misconfigured) && contract.Retryable(err) {
				t.Errorf("Retryable(%v) = true", err)
			}
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
// (The SQLSTATE and its condition name may show: they carry no user data.)
var sqlWords = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH ", "leases", "idempotency_keys", "workflows WHERE"}

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
			_, err = openDSN(ctx, dsn)
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
			_, err := openDSN(ctx, dsn+"&schema="+srv.Schema(t)+"&driver="+drv)
			if contract.CodeOf(err) != contract.PermissionDenied {
				t.Fatalf("Open with a wrong password = %v, want PermissionDenied", err)
			}
			checkNoLeak(t, err, append([]string{secret, pgtest.PasswordRole, "postgres://", `for user "`}, sqlWords...)...)
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
	if err := migratePool(ctx, admin, schema, Up); err != nil {
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
	b, err := openDSN(ctx, dsn)
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
	tx, err := b0.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+quoteIdent(b0.schema)+`.leases FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// statement_timeout reaches the server on every client library.
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		b, err := openDSN(ctx, srv.DSN()+"&statement_timeout=150ms&migrate=verify&schema="+b0.schema+"&driver="+drv)
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
	b, err := openDSN(ctx, srv.DSN()+"&migrate=off&schema="+srv.Schema(t))
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

// TestConfigFailure checks the texts that tell configuration failures
// apart, with the server's messages (in English) and the TLS errors of
// each client library. The server's text chooses the message but never
// shows: it names the client's address, the user and the database.
func TestConfigFailure(t *testing.T) {
	ep := endpoint{Addrs: []string{"db.example:5432"}, Database: "app"}
	pgMsg := func(code, msg, detail string) error {
		return &pgconn.PgError{Severity: "FATAL", Code: code, Message: msg, Detail: detail}
	}
	pqMsg := func(code, msg string) error {
		return &pq.Error{Severity: "FATAL", Code: pq.ErrorCode(code), Message: msg}
	}
	for _, c := range []struct {
		name      string
		err       error
		atConnect bool
		want      contract.Code
		says      string
	}{
		{"Password", pgMsg("28P01", `password authentication failed for user "bob"`, ""), true, contract.PermissionDenied,
			"password authentication failed for the DSN's user on db.example:5432: fix the credentials"},
		{"NoRole", pqMsg("28000", `role "bob" does not exist`), true, contract.PermissionDenied,
			"the DSN's user is not a role on db.example:5432: create the role"},
		{"NoLogin", pgMsg("28000", `role "bob" is not permitted to log in`, ""), true, contract.PermissionDenied,
			"may not log in on db.example:5432 (its role lacks LOGIN)"},
		{"HBANeedsTLS", pgMsg("28000", `no pg_hba.conf entry for host "10.1.2.3", user "bob", database "app", no encryption`, ""), true,
			contract.Misconfigured, `without TLS: set sslmode=require`},
		{"HBANeedsTLSOldServer", pqMsg("28000", `no pg_hba.conf entry for host "10.1.2.3", user "bob", database "app", SSL off`), true,
			contract.Misconfigured, `without TLS: set sslmode=require`},
		{"HBANoEntry", pgMsg("28000", `no pg_hba.conf entry for host "10.1.2.3", user "bob", database "app", SSL encryption`, ""), true,
			contract.PermissionDenied, `the pg_hba.conf of the server on db.example:5432 does not admit this client, user and database "app"`},
		{"HBAReject", pgMsg("28000", `pg_hba.conf rejects connection for host "10.1.2.3", user "bob", database "app", no encryption`, ""), true,
			contract.PermissionDenied, "have the administrator admit them"},
		{"OtherAuth", pgMsg("28000", `Ident authentication failed for user "bob"`, ""), true, contract.PermissionDenied,
			"refused the DSN's credentials"},
		{"Localized", pgMsg("28000", `l'authentification a échoué pour "bob"`, ""), true, contract.PermissionDenied,
			"refused the DSN's credentials"},
		{"NoDatabase", pqMsg("3D000", `database "app" does not exist`), true, contract.Misconfigured,
			`database "app" does not exist on db.example:5432: create it or fix the DSN's database name`},
		{"NoConnect", pgMsg("42501", `permission denied for database "app"`, "User does not have CONNECT privilege."), false,
			contract.PermissionDenied, `may not connect to database "app" on db.example:5432: grant it CONNECT`},
		{"NoPrivilege", pgMsg("42501", `permission denied for table workflows`, ""), false, contract.PermissionDenied,
			"lacks a privilege durable needs on db.example:5432: grant it USAGE on durable's schema"},
		{"BadSetting", pgMsg("22023", `invalid value for parameter "statement_timeout": "x"`, ""), true, contract.Misconfigured,
			"rejected a session setting of the DSN"},
		{"UnknownSetting", pgMsg("42704", `unrecognized configuration parameter "foo"`, ""), true, contract.Misconfigured,
			"rejected a session setting of the DSN"},
		{"SettingLaterIsNot", pgMsg("22023", `invalid value`, ""), false, contract.Unknown, ""},
		{"PgconnTLSRefused", fmt.Errorf("wrapped: %w", errors.Join(errors.New("dial: x"), fmt.Errorf("tls error: %w", errors.New("server refused TLS connection")))), true,
			contract.Misconfigured, "the server on db.example:5432 does not accept TLS but the DSN requires it"},
		{"PQTLSRefused", pq.ErrSSLNotSupported, true, contract.Misconfigured, "does not accept TLS"},
		{"UntrustedCert", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), true, contract.Misconfigured,
			"TLS certificate of the server on db.example:5432 could not be verified"},
		{"CertVerification", &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "db"}}, true, contract.Misconfigured,
			"set sslrootcert"},
		{"Unreachable", errors.New("dial tcp: connection refused"), true, contract.Unknown, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := configFailure(c.err, ep, c.atConnect)
			if c.want == contract.Unknown {
				if e != nil {
					t.Fatalf("configFailure = %v, want nil", e)
				}
				return
			}
			if e == nil || e.Code != c.want {
				t.Fatalf("configFailure = %v, want code %v", e, c.want)
			}
			if !strings.Contains(e.Error(), c.says) {
				t.Errorf("error %q does not say %q", e, c.says)
			}
			if !errors.Is(e, c.err) {
				t.Errorf("the cause is not reachable from %v", e)
			}
			checkNoLeak(t, e, "10.1.2.3", "bob", "FATAL", "échoué", "workflows", "statement_timeout\": \"x", "foo", "refused TLS", "SSL is not enabled", "x509")
			t.Log(e)
		})
	}
	// Without a known endpoint, the messages still say what to fix.
	e := configFailure(pgMsg("3D000", `database "app" does not exist`, ""), endpoint{}, true)
	if e == nil || e.Error() != "durable: misconfigured: the DSN's database does not exist: create it or fix the DSN's database name (SQLSTATE 3D000 invalid_catalog_name)" {
		t.Errorf("without an endpoint: %v", e)
	}
	// A Unix socket and several hosts.
	var pe pgclient.Endpoint
	pe.AddHost("/run/postgresql", 5432)
	pe.AddHost("10.0.0.1", 5433)
	pe.AddHost("10.0.0.1", 5433)
	pe.AddHost("::1", 5432)
	ep = endpoint(pe)
	if got, want := ep.on(), " on /run/postgresql/.s.PGSQL.5432 or 10.0.0.1:5433 or [::1]:5432"; got != want {
		t.Errorf("on() = %q, want %q", got, want)
	}
}
