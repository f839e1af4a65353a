package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestVerbosePrintsTheCauseChain: with --verbose (or -v, before or after
// the command), a failure is followed by its cause chain with the server
// error's SQLSTATE, condition name, severity and message, on every client
// library; the password never shows. Without it, none of that is printed.
func TestVerbosePrintsTheCauseChain(t *testing.T) {
	srv := pgtest.Require(t)
	const wrong = "Wr0ng-hunter2-pw"
	bad := strings.Replace(srv.PasswordDSN(t), pgtest.PasswordRolePassword, wrong, 1)
	if !strings.Contains(bad, wrong) {
		t.Fatal("could not put a wrong password into the DSN")
	}
	for _, c := range []struct {
		driver, errType string
	}{
		{"pgx", "*pgconn.PgError"},
		{"pq", "*pq.Error"},
		{"pgx-stdlib", "*pgconn.PgError"},
	} {
		t.Run(c.driver, func(t *testing.T) {
			dsn := bad + "&driver=" + c.driver
			for _, args := range [][]string{
				{"--verbose", "migrate", "--dsn", dsn, "status"},
				{"-v", "migrate", "--dsn", dsn, "status"},
				{"migrate", "-v", "--dsn=" + dsn, "status"},
				{"migrate", "--dsn", dsn, "--verbose", "status"},
			} {
				code, out, errOut := invoke(t, args...)
				all := out + errOut
				if code != 1 {
					t.Fatalf("%q: exit %d\n%s", args, code, all)
				}
				if args[0] == "--verbose" {
					t.Log(errOut)
				}
				first, rest, _ := strings.Cut(errOut, "\n")
				if !strings.HasPrefix(first, "durable migrate: durable: ") || !strings.Contains(first, "SQLSTATE 28P01 invalid_password") {
					t.Errorf("%q: first line %q is not the one-line error", args, first)
				}
				for _, want := range []string{
					"cause chain:", "*contract.Error: code permission denied", c.errType + ": SQLSTATE 28P01 invalid_password, severity FATAL",
					`message: password authentication failed for user "` + pgtest.PasswordRole + `"`,
				} {
					if !strings.Contains(rest, want) {
						t.Errorf("%q: verbose output lacks %q:\n%s", args, want, errOut)
					}
				}
				for _, leak := range []string{wrong, pgtest.PasswordRolePassword, "postgres://"} {
					if strings.Contains(all, leak) {
						t.Errorf("%q: output shows %q:\n%s", args, leak, all)
					}
				}
			}
			code, _, errOut := invoke(t, "migrate", "--dsn", dsn, "status")
			if code != 1 || strings.Contains(errOut, "cause chain") || strings.Contains(errOut, "message:") {
				t.Errorf("without --verbose: exit %d\n%s", code, errOut)
			}
		})
	}

	t.Run("MissingDatabase", func(t *testing.T) {
		u, _ := url.Parse(srv.PasswordDSN(t))
		u.Path = "/no_such_db_for_verbose"
		code, _, errOut := invoke(t, "-v", "inspect", "--dsn", u.String(), "workflow", "w")
		if code != 1 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		for _, want := range []string{`database "no_such_db_for_verbose" does not exist`, "SQLSTATE 3D000 invalid_catalog_name, severity FATAL",
			"*pgconn.ConnectError: failed to connect to"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("output lacks %q:\n%s", want, errOut)
			}
		}
		if strings.Contains(errOut, pgtest.PasswordRolePassword) {
			t.Errorf("output shows the password:\n%s", errOut)
		}
	})
}

func TestVerboseInHelp(t *testing.T) {
	if code, out, _ := invoke(t, "--help"); code != 0 || !strings.Contains(out, "--verbose") {
		t.Errorf("durable --help: %d %q", code, out)
	}
	if code, out, _ := invoke(t, "migrate", "--help"); code != 0 || !strings.Contains(out, "-verbose") {
		t.Errorf("durable migrate --help: %d %q", code, out)
	}
	// --verbose alone is no command.
	if code, _, _ := invoke(t, "--verbose"); code != 2 {
		t.Errorf("durable --verbose: exit %d, want 2", code)
	}
}

// TestPrintCausesRedacts: a password or DSN in any error text of the chain
// is masked, in whatever form the DSN had it.
func TestPrintCausesRedacts(t *testing.T) {
	const pw = "p@ss:w0rd/with%chars"
	urlDSN := "postgres://bob:" + url.QueryEscape(pw) + "@db.internal:5432/app?sslmode=disable"
	kvDSN := "host=db.internal user=bob password='kv secret pw' dbname=app"
	queryDSN := "postgres://bob@db.internal/app?password=qsecret"
	inner := &pgconn.PgError{Severity: "ERROR", Code: "42P05", Message: "prepared statement exists",
		Detail: "saw " + pw, Hint: "try again"}
	err := &contract.Error{Code: contract.Unknown, Msg: "database error", Err: fmt.Errorf("opening %s: %w", urlDSN,
		errors.Join(fmt.Errorf("kv %s: %w", kvDSN, inner), fmt.Errorf("also %s and postgres://eve:evepw@h/x", queryDSN)))}
	var buf bytes.Buffer
	printCauses(&buf, err, append(append(dsnSecrets(urlDSN), dsnSecrets(kvDSN)...), dsnSecrets(queryDSN)...))
	out := buf.String()
	for _, leak := range []string{pw, url.QueryEscape(pw), "kv secret pw", "qsecret", "evepw", urlDSN, kvDSN} {
		if strings.Contains(out, leak) {
			t.Errorf("output shows %q:\n%s", leak, out)
		}
	}
	for _, want := range []string{"*contract.Error: code unknown", "*pgconn.PgError: SQLSTATE 42P05 duplicate_prepared_statement, severity ERROR",
		"message: prepared statement exists", "detail: saw xxxxx", "hint: try again", "*errors.joinError"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Log(out)
}

func TestSecretsFromArgsAndEnv(t *testing.T) {
	t.Setenv("DURABLE_DSN", "postgres://u:envpw@h/db")
	got := secrets([]string{"--dsn", "postgres://u:flagpw@h/db", "-dsn=postgres://u:eqpw@h/db", "status"})
	for _, want := range []string{"envpw", "flagpw", "eqpw"} {
		found := false
		for _, s := range got {
			found = found || s == want
		}
		if !found {
			t.Errorf("secrets lacks %q: %q", want, got)
		}
	}
}
