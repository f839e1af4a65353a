package pgtest_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestServer(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	if err := srv.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	a, b := srv.Schema(t), srv.Schema(t)
	if a == b || !regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`).MatchString(a) {
		t.Errorf("schema names %q, %q", a, b)
	}
	if err := srv.Exec(ctx, `CREATE SCHEMA "`+a+`"`); err != nil {
		t.Fatal(err)
	}

	t.Run("PasswordRole", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, srv.PasswordDSN(t))
		if err != nil {
			t.Fatalf("connecting as the password role: %v", err)
		}
		conn.Close(ctx)
		if _, err := pgx.Connect(ctx, srv.WithUser(pgtest.PasswordRole, "wrong")); err == nil {
			t.Error("a wrong password was accepted")
		}
	})

	t.Run("ProxyCut", func(t *testing.T) {
		p := srv.NewProxy(t)
		conn, err := pgx.Connect(ctx, p.DSN(srv.DSN()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		p.Cut()
		if err := conn.Ping(ctx); err == nil {
			t.Error("ping through a cut proxy succeeded")
		}
		conn2, err := pgx.Connect(ctx, p.DSN(srv.DSN()))
		if err != nil {
			t.Fatalf("a new connection after Cut: %v", err)
		}
		conn2.Close(ctx)
	})
}
