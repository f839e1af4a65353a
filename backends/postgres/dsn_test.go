package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestValidSchema(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"durable", true},
		{"_x", true},
		{"a1_b2", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"1abc", false},
		{"Durable", false},
		{"a-b", false},
		{"a.b", false},
		{`a"b`, false},
		{"a b", false},
		{"pg_catalog", false},
		{"pg_x", false},
		{"éa", false},
	} {
		if got := ValidSchema(c.name); got != c.ok {
			t.Errorf("ValidSchema(%q) = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestParseDSN(t *testing.T) {
	const base = "postgres://u:pw@localhost:5432/db"
	for _, c := range []struct {
		name, dsn string
		check     func(t *testing.T, cfg *config)
	}{
		{"Defaults", base, func(t *testing.T, cfg *config) {
			o := cfg.opts
			if o.Schema != "" || o.Tolerance != 0 || o.Migrate != MigrateAuto || o.Listen != ListenOn || o.Clock != nil {
				t.Errorf("opts = %+v, want zero (defaults)", cfg.opts)
			}
		}},
		{"AllDurableParams", base + "?schema=my_schema&tolerance=250ms&migrate=verify&listen=off&statement_timeout=2s", func(t *testing.T, cfg *config) {
			want := Options{Schema: "my_schema", Tolerance: 250 * time.Millisecond, Migrate: MigrateVerify, Listen: ListenOff}
			if cfg.opts.Schema != want.Schema || cfg.opts.Tolerance != want.Tolerance || cfg.opts.Migrate != want.Migrate || cfg.opts.Listen != want.Listen {
				t.Errorf("opts = %+v, want %+v", cfg.opts, want)
			}
			if got := cfg.pool.ConnConfig.RuntimeParams["statement_timeout"]; got != "2000" {
				t.Errorf("statement_timeout runtime param = %q, want 2000", got)
			}
			for _, k := range []string{"schema", "tolerance", "migrate", "listen"} {
				if _, ok := cfg.pool.ConnConfig.RuntimeParams[k]; ok {
					t.Errorf("durable parameter %q leaked to the server's runtime parameters", k)
				}
			}
		}},
		{"ZeroToleranceMeansNone", base + "?tolerance=0s", func(t *testing.T, cfg *config) {
			if cfg.opts.Tolerance >= 0 {
				t.Errorf("Tolerance = %v, want negative (none)", cfg.opts.Tolerance)
			}
		}},
		{"StatementTimeoutMillis", base + "?statement_timeout=1500", func(t *testing.T, cfg *config) {
			if got := cfg.pool.ConnConfig.RuntimeParams["statement_timeout"]; got != "1500" {
				t.Errorf("statement_timeout = %q", got)
			}
		}},
		{"PassThrough", base + "?sslmode=disable&application_name=app&pool_max_conns=7&connect_timeout=3", func(t *testing.T, cfg *config) {
			if cfg.pool.MaxConns != 7 {
				t.Errorf("MaxConns = %d, want 7", cfg.pool.MaxConns)
			}
			if cfg.pool.ConnConfig.RuntimeParams["application_name"] != "app" {
				t.Errorf("application_name not passed through")
			}
			if cfg.pool.ConnConfig.ConnectTimeout != 3*time.Second {
				t.Errorf("ConnectTimeout = %v", cfg.pool.ConnConfig.ConnectTimeout)
			}
		}},
		{"PostgresqlScheme", "postgresql://u@h/db?schema=x", func(t *testing.T, cfg *config) {
			if cfg.opts.Schema != "x" {
				t.Errorf("schema = %q", cfg.opts.Schema)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseDSN(c.dsn)
			if err != nil {
				t.Fatalf("parseDSN: %v", err)
			}
			c.check(t, cfg)
		})
	}
}

func TestParseDSNRejectsBadInputWithoutEchoingIt(t *testing.T) {
	const secret = "hunter2secret"
	base := "postgres://bob:" + secret + "@localhost/db"
	for _, c := range []struct{ name, dsn, msg string }{
		{"UnknownParam", base + "?bogus=" + secret, `"bogus"`},
		{"UnknownOddParam", base + "?" + secret + "%21=1", "unknown postgres DSN parameter"},
		{"SearchPathIsNotPassed", base + "?search_path=x", `"search_path"`},
		{"BadSchema", base + "?schema=Bad-" + secret, "schema must match"},
		{"ReservedSchema", base + "?schema=pg_" + secret, "schema must match"},
		{"BadTolerance", base + "?tolerance=" + secret, "tolerance"},
		{"NegativeTolerance", base + "?tolerance=-1s", "tolerance"},
		{"BadMigrate", base + "?migrate=" + secret, "migrate must be"},
		{"BadListen", base + "?listen=" + secret, "listen must be"},
		{"BadStatementTimeout", base + "?statement_timeout=" + secret, "statement_timeout"},
		{"Repeated", base + "?schema=a&schema=b", "more than once"},
		{"BadPoolSize", base + "?pool_max_conns=" + secret, "invalid postgres DSN"},
		{"WrongScheme", "mysql://bob:" + secret + "@h/db", "scheme postgres or postgresql"},
		{"Malformed", "postgres://bob:" + secret + "@h/db?%zz", "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseDSN(c.dsn)
			if contract.CodeOf(err) != contract.InvalidArgument {
				t.Fatalf("parseDSN error = %v (code %v), want InvalidArgument", err, contract.CodeOf(err))
			}
			msg := err.Error()
			if !strings.Contains(msg, c.msg) {
				t.Errorf("error %q does not say %q", msg, c.msg)
			}
			for _, leak := range []string{secret, "bob", "postgres://", "localhost"} {
				if strings.Contains(msg, leak) {
					t.Errorf("error %q leaks %q", msg, leak)
				}
			}
		})
	}
}

func TestRegistryOpensBothSchemes(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	for _, scheme := range []string{"postgres", "PostgreSQL"} {
		dsn := scheme + strings.TrimPrefix(srv.DSN(), "postgres") + "&schema=" + schema
		s, err := durable.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("durable.Open(%s://…): %v", scheme, err)
		}
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "wf-" + strings.ToLower(scheme)}); err != nil {
			t.Errorf("CreateWorkflow: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	found := map[string]bool{}
	for _, d := range durable.Drivers() {
		found[d] = true
	}
	if !found["postgres"] || !found["postgresql"] {
		t.Errorf("Drivers() = %v, want postgres and postgresql", durable.Drivers())
	}
}

func TestCloseOwnsOnlyItsOwnPool(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	pool := newPool(t, srv.DSN())
	b, err := New(ctx, pool, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = b.GetWorkflow(ctx, "", "wf")
	if contract.CodeOf(err) != contract.Closed {
		t.Errorf("GetWorkflow after Close: %v, want Closed", err)
	}
	_, err = b.WaitKey(ctx, contract.KeyRef{Key: "k"})
	if contract.CodeOf(err) != contract.Closed {
		t.Errorf("WaitKey after Close: %v, want Closed", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("the caller's pool was closed by Backend.Close: %v", err)
	}

	// A backend opened from a DSN owns its pool.
	ob, err := Open(ctx, srv.DSN()+"&schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	_ = ob.Close()
	if err := ob.Pool().Ping(ctx); err == nil {
		t.Error("the backend's own pool is still open after Close")
	}
	if err := ob.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	srv := pgtest.Require(t)
	pool := newPool(t, srv.DSN())
	for _, o := range []Options{
		{Schema: "Bad"},
		{Schema: "pg_x"},
		{Tolerance: 2 * time.Hour},
		{Migrate: MigrateMode(9)},
		{Listen: ListenMode(9)},
	} {
		if _, err := New(context.Background(), pool, o); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("New(%+v) = %v, want InvalidArgument", o, err)
		}
	}
	if _, err := New(context.Background(), nil, Options{}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("New(nil pool) = %v, want InvalidArgument", err)
	}
}
