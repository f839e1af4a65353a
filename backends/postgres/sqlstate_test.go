package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

var conditionNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*[a-z0-9]$`)

// TestConditionNames checks the table's form and its agreement with
// lib/pq's table (PostgreSQL 18) and with the errcodes.txt of an installed
// PostgreSQL, when there is one.
func TestConditionNames(t *testing.T) {
	if len(conditionNames) < 260 {
		t.Errorf("only %d condition names", len(conditionNames))
	}
	for code, name := range conditionNames {
		if !validSQLState(code) || !conditionNameRE.MatchString(name) {
			t.Errorf("bad entry %q: %q", code, name)
		}
		if pqName := pqerror.Code(code).Name(); pqName != name && code != "72000" {
			t.Errorf("%s is %q here, %q in lib/pq", code, name, pqName)
		}
	}
	for code, want := range map[string]string{
		"57P01": "admin_shutdown", "42P05": "duplicate_prepared_statement", "23505": "unique_violation",
		"40P01": "deadlock_detected", "40001": "serialization_failure", "3D000": "invalid_catalog_name",
		"28P01": "invalid_password", "42501": "insufficient_privilege", "57014": "query_canceled",
		"25P04": "transaction_timeout", "72000": "snapshot_too_old",
	} {
		if got := ConditionName(code); got != want {
			t.Errorf("ConditionName(%s) = %q, want %q", code, got, want)
		}
	}
	if ConditionName("ZZ999") != "" || ConditionName("") != "" {
		t.Error("ConditionName of an unknown code is not empty")
	}

	files, _ := filepath.Glob("/usr/share/postgresql/*/errcodes.txt")
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || !validSQLState(fields[0]) {
				continue
			}
			n++
			if got := conditionNames[fields[0]]; got != fields[3] {
				t.Errorf("%s: %s is %q, the table has %q", path, fields[0], fields[3], got)
			}
		}
		f.Close()
		if n < 200 {
			t.Errorf("%s: only %d codes read", path, n)
		}
	}
}

func TestDescribeSQLState(t *testing.T) {
	for code, want := range map[string]string{
		"57P01":  "SQLSTATE 57P01 admin_shutdown",
		"ZZ999":  "SQLSTATE ZZ999",
		"":       "",
		"57p01":  "",
		"57P011": "",
		"a b c":  "",
	} {
		if got := describeSQLState(code); got != want {
			t.Errorf("describeSQLState(%q) = %q, want %q", code, got, want)
		}
	}
	if got := withSQLState("database unavailable", "57P01"); got != "database unavailable (SQLSTATE 57P01 admin_shutdown)" {
		t.Errorf("withSQLState = %q", got)
	}
	if got := withSQLState("database error", "bogus"); got != "database error" {
		t.Errorf("withSQLState with an invalid code = %q", got)
	}
}

// TestErrorTextNamesTheSQLState: the message of a classified server error
// has the SQLSTATE and its condition name, and none of the server's text.
func TestErrorTextNamesTheSQLState(t *testing.T) {
	const serverText = "value \"4111-1111-1111-1111\" of customer Jane Doe"
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		op   string
		want string
	}{
		{live, &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: serverText, Detail: serverText, Hint: serverText},
			"ClaimKey", "durable: ClaimKey: unavailable: database unavailable (SQLSTATE 57P01 admin_shutdown)"},
		{live, &pq.Error{Severity: "ERROR", Code: "42P05", Message: serverText, Detail: serverText},
			"UpdateWorkflow", "durable: UpdateWorkflow: misconfigured: " + fmt.Sprintf(msgPooler, "") + " (SQLSTATE 42P05 duplicate_prepared_statement)"},
		{live, &pgconn.PgError{Severity: "ERROR", Code: "26000", Message: serverText},
			"GetKey", "durable: GetKey: misconfigured: " + fmt.Sprintf(msgPooler, "") + " (SQLSTATE 26000 invalid_sql_statement_name)"},
		{live, &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: statement_timeout"},
			"Open", "durable: Open: misconfigured: " + fmt.Sprintf(msgPoolerParam, "") + " (SQLSTATE 08P01 protocol_violation)"},
		{live, &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: serverText, ConstraintName: "workflows_pkey"},
			"CreateWorkflow", "durable: CreateWorkflow: already exists: record already exists (SQLSTATE 23505 unique_violation)"},
		{live, &pgconn.PgError{Severity: "ERROR", Code: "22P02", Message: serverText},
			"GetKey", "durable: GetKey: unknown: database error (SQLSTATE 22P02 invalid_text_representation)"},
		{live, &pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: serverText},
			"AcquireLease", "durable: AcquireLease: unavailable: serialization failure or deadlock persisted (SQLSTATE 40P01 deadlock_detected)"},
		{done, &pgconn.PgError{Severity: "ERROR", Code: "57014", Message: serverText},
			"ListWorkflows", "durable: ListWorkflows: canceled: statement canceled (SQLSTATE 57014 query_canceled): context canceled"},
		{live, &pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: serverText},
			"GetLease", "durable: GetLease: schema mismatch: database schema is missing or differs: run migrations (SQLSTATE 42P01 undefined_table)"},
		{live, &pgconn.PgError{Severity: "ERROR", Code: "XY123", Message: serverText},
			"GetLease", "durable: GetLease: unknown: database error (SQLSTATE XY123)"},
	} {
		err := classify(c.ctx, c.err, write)
		var ce *contract.Error
		if !errors.As(err, &ce) {
			t.Fatalf("classify(%v) = %#v", c.err, err)
		}
		ce.Op = c.op
		if got := err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		checkNoLeak(t, err, "4111", "Jane", "customer", "workflows_pkey")
		if !errors.Is(err, c.err) {
			t.Errorf("the cause of %v is not reachable", err)
		}
	}
}
