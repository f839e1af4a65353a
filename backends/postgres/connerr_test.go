package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// The configuration failures of Open, on every client library against the
// real server: each has a code Retryable reports false for, says what to
// fix, and never shows the password, the DSN or the server's text.

// randomName returns prefix and 8 random hex digits.
func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// withDatabase returns dsn with its database replaced.
func withDatabase(t *testing.T, dsn, db string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// checkConfigFailure checks err against the rules every configuration
// failure follows.
func checkConfigFailure(t *testing.T, err error, want contract.Code, fix []string, leaks []string) {
	t.Helper()
	if got := contract.CodeOf(err); got != want {
		t.Fatalf("error = %v (code %v), want %v", err, got, want)
	}
	sentinel := map[contract.Code]error{contract.PermissionDenied: contract.ErrPermissionDenied, contract.Misconfigured: contract.ErrMisconfigured}[want]
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, %v) = false", err, sentinel)
	}
	if contract.Retryable(err) {
		t.Errorf("Retryable(%v) = true", err)
	}
	msg := err.Error()
	for _, f := range fix {
		if !strings.Contains(msg, f) {
			t.Errorf("error %q does not say %q", msg, f)
		}
	}
	checkNoLeak(t, err, append(leaks, sqlWords...)...)
	t.Log(err)
}

// hostPort returns the test server's "host:port".
func hostPort(srv *pgtest.Server) string {
	h, p := srv.HostPort()
	return h + ":" + strconv.Itoa(p)
}

func TestOpenConfigurationFailures(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pwDSN := srv.PasswordDSN(t)
	addr := hostPort(srv)
	// The server's own texts, which name the role or the database in its
	// words, and the password, which must never show.
	serverText := []string{"FATAL", "for user \"", `role "`, "pg_hba", pgtest.PasswordRole, pgtest.PasswordRolePassword, "postgres://"}

	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		// lib/pq's errors do not carry the server's address; Open adds it
		// through (*config).describeConnectError (see
		// TestDescribeConnectErrorNamesTheServerForLibPQ).
		named := drv != "pq"

		t.Run("MissingDatabase/"+drv, func(t *testing.T) {
			db := randomName("nosuchdb_")
			dsn := withDatabase(t, pwDSN, db) + "&schema=" + srv.Schema(t) + "&driver=" + drv
			_, err := openDSN(ctx, dsn)
			fix := []string{"does not exist", "create it or fix the DSN's database name", "SQLSTATE 3D000 invalid_catalog_name"}
			if named {
				fix = append(fix, `database "`+db+`"`, "on "+addr)
			}
			checkConfigFailure(t, err, contract.Misconfigured, fix, append([]string{dsn}, serverText...))
		})

		t.Run("WrongPassword/"+drv, func(t *testing.T) {
			const wrong = "Wr0ng-pa55-do-not-leak"
			dsn := strings.Replace(pwDSN, pgtest.PasswordRolePassword, wrong, 1) + "&schema=" + srv.Schema(t) + "&driver=" + drv
			_, err := openDSN(ctx, dsn)
			fix := []string{"password authentication failed for the DSN's user", "fix the credentials", "SQLSTATE 28P01 invalid_password"}
			if named {
				fix = append(fix, "on "+addr)
			}
			checkConfigFailure(t, err, contract.PermissionDenied, fix, append([]string{dsn, wrong}, serverText...))
		})

		t.Run("UnknownRole/"+drv, func(t *testing.T) {
			role := randomName("nosuchrole_")
			dsn := srv.WithUser(role, "Secret-pw-1") + "&schema=" + srv.Schema(t) + "&driver=" + drv
			_, err := openDSN(ctx, dsn)
			fix := []string{"the DSN's user is not a role", "create the role or fix the DSN's user", "SQLSTATE 28000 invalid_authorization_specification"}
			if named {
				fix = append(fix, "on "+addr)
			}
			checkConfigFailure(t, err, contract.PermissionDenied, fix, append([]string{dsn, role, "Secret-pw-1"}, serverText...))
		})

		t.Run("TLSRequiredButUnavailable/"+drv, func(t *testing.T) {
			// The test server has no TLS.
			u, _ := url.Parse(pwDSN)
			q := u.Query()
			q.Set("sslmode", "require")
			u.RawQuery = q.Encode()
			dsn := u.String() + "&schema=" + srv.Schema(t) + "&driver=" + drv
			_, err := openDSN(ctx, dsn)
			fix := []string{"does not accept TLS", "sslmode"}
			if named {
				fix = append(fix, "on "+addr)
			}
			checkConfigFailure(t, err, contract.Misconfigured, fix, append([]string{dsn, "refused TLS", "SSL is not enabled"}, serverText...))
			var ce *pgconn.ConnectError
			if !errors.As(err, &ce) && !errors.Is(err, pq.ErrSSLNotSupported) {
				t.Errorf("the client's error is not reachable: %#v", err)
			}
		})
	}
}

// TestDescribeConnectErrorNamesTheServerForLibPQ: lib/pq's connect errors
// carry no configuration; the helper Open uses names the server and the
// database from the parsed DSN.
func TestDescribeConnectErrorNamesTheServerForLibPQ(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	db := randomName("nosuchdb_")
	cfg, err := parseDSN(withDatabase(t, srv.PasswordDSN(t), db) + "&driver=pq")
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := cfg.openClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := c.DB()
	defer sqlDB.Close()
	err = cfg.describeConnectError(classify(ctx, sqlDB.PingContext(ctx), read))
	checkConfigFailure(t, err, contract.Misconfigured,
		[]string{`database "` + db + `" does not exist on ` + hostPort(srv), "create it or fix the DSN's database name"},
		[]string{pgtest.PasswordRolePassword, "FATAL", "postgres://"})

	// Not a configuration failure: returned as is.
	other := &contract.Error{Code: contract.Unavailable, Msg: "database unreachable", Err: errors.New("dial tcp: refused")}
	if got := cfg.describeConnectError(other); got != other {
		t.Errorf("describeConnectError(%v) = %v, want it unchanged", other, got)
	}
}

// TestMissingPrivilegesArePermissionDenied uses a role that may log in but
// has no USAGE on the backend's schema.
func TestMissingPrivilegesArePermissionDenied(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	if err := migratePool(ctx, newPool(t, srv.DSN()), schema, Up); err != nil {
		t.Fatal(err)
	}
	role := randomName("durable_nopriv_")
	const password = "N0priv-pa55-do-not-leak"
	if err := srv.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, role, password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %[1]s; DROP ROLE %[1]s`, role))
	})
	fix := []string{"lacks a privilege", "grant it USAGE on durable's schema", "SQLSTATE 42501 insufficient_privilege"}
	leaks := []string{password, role, schema, "permission denied for", "postgres://"}
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(drv, func(t *testing.T) {
			dsn := srv.WithUser(role, password) + "&schema=" + schema + "&driver=" + drv

			_, err := openDSN(ctx, dsn+"&migrate=verify")
			checkConfigFailure(t, err, contract.PermissionDenied, fix, append([]string{dsn}, leaks...))

			b, err := openDSN(ctx, dsn+"&migrate=off")
			if err != nil {
				t.Fatalf("migrate=off: %v", err)
			}
			defer b.Close()
			_, err = b.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1", Status: "running"})
			checkConfigFailure(t, err, contract.PermissionDenied, fix, append([]string{dsn, "wf-1"}, leaks...))
			_, err = b.ListWorkflows(ctx, contract.ListQuery{Limit: 10})
			checkConfigFailure(t, err, contract.PermissionDenied, fix, append([]string{dsn}, leaks...))

			// migrate=auto on a schema it may not create.
			_, err = openDSN(ctx, srv.WithUser(role, password)+"&schema="+srv.Schema(t)+"&driver="+drv)
			checkConfigFailure(t, err, contract.PermissionDenied, []string{"lacks a privilege", "CREATE"}, append([]string{dsn}, leaks...))
		})
	}
}

// TestNoExecuteOnClaimFunctionIsPermissionDenied uses a role with every
// privilege on the schema's tables and sequence but none on
// durable_claim_key (EXECUTE revoked from PUBLIC): ClaimKey, a replay too,
// is PermissionDenied and says to grant EXECUTE; GetKey works.
func TestNoExecuteOnClaimFunctionIsPermissionDenied(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	if err := migratePool(ctx, newPool(t, srv.DSN()), schema, Up); err != nil {
		t.Fatal(err)
	}
	role := randomName("durable_noexec_")
	const password = "N0exec-pa55-do-not-leak"
	q := quoteIdent(schema)
	for _, s := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, role, password),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, q, role),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO %s`, q, role),
		fmt.Sprintf(`GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO %s`, q, role),
		fmt.Sprintf(`REVOKE EXECUTE ON FUNCTION %s.durable_claim_key FROM PUBLIC`, q),
	} {
		if err := srv.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = srv.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %[1]s; DROP ROLE %[1]s`, role))
	})
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(drv, func(t *testing.T) {
			dsn := srv.WithUser(role, password) + "&schema=" + schema + "&driver=" + drv
			b, err := openDSN(ctx, dsn+"&migrate=verify")
			if err != nil {
				t.Fatalf("migrate=verify: %v", err)
			}
			defer b.Close()
			req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "k-" + drv}, Fingerprint: "fp", TTL: 30 * time.Second}
			_, err = b.ClaimKey(ctx, req)
			checkConfigFailure(t, err, contract.PermissionDenied, []string{"lacks a privilege", "EXECUTE on its function durable_claim_key"},
				[]string{dsn, password, role, schema, "permission denied for", "k-" + drv})
			if _, err := b.GetKey(ctx, req.KeyRef); contract.CodeOf(err) != contract.NotFound {
				t.Errorf("GetKey = %v, want NotFound", err)
			}
		})
	}
}

// TestNoConnectPrivilegeIsPermissionDenied connects to a database whose
// CONNECT privilege the role lacks.
func TestNoConnectPrivilegeIsPermissionDenied(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	db := randomName("durable_noconnect_")
	role := randomName("durable_noconnect_")
	if err := srv.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Exec(context.Background(), `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`) })
	if err := srv.Exec(ctx, fmt.Sprintf(`REVOKE CONNECT ON DATABASE %[1]s FROM PUBLIC; CREATE ROLE %[2]s LOGIN`, db, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(drv, func(t *testing.T) {
			dsn := withDatabase(t, srv.WithUser(role, ""), db) + "&driver=" + drv
			_, err := openDSN(ctx, dsn)
			fix := []string{"may not connect to", "grant it CONNECT on the database", "SQLSTATE 42501 insufficient_privilege"}
			if drv != "pq" {
				fix = append(fix, `database "`+db+`" on `+hostPort(srv))
			}
			checkConfigFailure(t, err, contract.PermissionDenied, fix, []string{role, "postgres://", "FATAL", "permission denied for"})
		})
	}
}
