package postgres

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
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
			if got := cfg.client.Pool.ConnConfig.RuntimeParams["statement_timeout"]; got != "2000" {
				t.Errorf("statement_timeout runtime param = %q, want 2000", got)
			}
			for _, k := range []string{"schema", "tolerance", "migrate", "listen"} {
				if _, ok := cfg.client.Pool.ConnConfig.RuntimeParams[k]; ok {
					t.Errorf("durable parameter %q leaked to the server's runtime parameters", k)
				}
			}
		}},
		{"CoalesceParams", base + "?coalesce=off&coalesce_inflight=3", func(t *testing.T, cfg *config) {
			if cfg.opts.Coalesce != CoalesceOff || cfg.opts.CoalesceInFlight != 3 {
				t.Errorf("opts = %+v, want Coalesce off, CoalesceInFlight 3", cfg.opts)
			}
			for _, k := range []string{"coalesce", "coalesce_inflight"} {
				if _, ok := cfg.client.Pool.ConnConfig.RuntimeParams[k]; ok {
					t.Errorf("durable parameter %q leaked to the server's runtime parameters", k)
				}
			}
		}},
		{"CoalesceOn", base + "?coalesce=on", func(t *testing.T, cfg *config) {
			if cfg.opts.Coalesce != CoalesceOn || cfg.opts.CoalesceInFlight != 0 {
				t.Errorf("opts = %+v, want Coalesce on, CoalesceInFlight 0 (the default)", cfg.opts)
			}
		}},
		{"ZeroToleranceMeansNone", base + "?tolerance=0s", func(t *testing.T, cfg *config) {
			if cfg.opts.Tolerance >= 0 {
				t.Errorf("Tolerance = %v, want negative (none)", cfg.opts.Tolerance)
			}
		}},
		{"StatementTimeoutMillis", base + "?statement_timeout=1500", func(t *testing.T, cfg *config) {
			if got := cfg.client.Pool.ConnConfig.RuntimeParams["statement_timeout"]; got != "1500" {
				t.Errorf("statement_timeout = %q", got)
			}
		}},
		{"PassThrough", base + "?sslmode=disable&application_name=app&pool_max_conns=7&connect_timeout=3", func(t *testing.T, cfg *config) {
			if cfg.client.Pool.MaxConns != 7 {
				t.Errorf("MaxConns = %d, want 7", cfg.client.Pool.MaxConns)
			}
			if cfg.client.Pool.ConnConfig.RuntimeParams["application_name"] != "app" {
				t.Errorf("application_name not passed through")
			}
			if cfg.client.Pool.ConnConfig.ConnectTimeout != 3*time.Second {
				t.Errorf("ConnectTimeout = %v", cfg.client.Pool.ConnConfig.ConnectTimeout)
			}
		}},
		{"PostgresqlScheme", "postgresql://u@h/db?schema=x", func(t *testing.T, cfg *config) {
			if cfg.opts.Schema != "x" {
				t.Errorf("schema = %q", cfg.opts.Schema)
			}
		}},
		{"SpacesAndPlusSignsReachTheDriver", base + "?options=-c%20search_path%3Da+b&application_name=x%2By", func(t *testing.T, cfg *config) {
			// libpq reads "+" as a plus sign; a space must stay a space.
			if got := cfg.client.Pool.ConnConfig.RuntimeParams["options"]; got != "-c search_path=a+b" {
				t.Errorf("options = %q", got)
			}
			if got := cfg.client.Pool.ConnConfig.RuntimeParams["application_name"]; got != "x+y" {
				t.Errorf("application_name = %q", got)
			}
			pc, err := parseDSN(base + "?driver=pq&options=-c%20search_path%3Da+b")
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(pc.client.PQDSN)
			if got := u.Query().Get("options"); got != "-c search_path=a+b" {
				t.Errorf("lib/pq options = %q", got)
			}
		}},
		{"PlusSignInPasswordIsAPlusSign", "postgres://u@localhost/db?password=pa+ss%20w%2B", func(t *testing.T, cfg *config) {
			// The durable CLI opens through this same parser, so the
			// application and the CLI send the same password.
			const want = "pa+ss w+"
			if got := cfg.client.Pool.ConnConfig.Password; got != want {
				t.Errorf("pgx password = %q, want %q", got, want)
			}
			for _, drv := range []string{"pq", "pgx-stdlib"} {
				dc, err := parseDSN("postgres://u@localhost/db?password=pa+ss%20w%2B&driver=" + drv)
				if err != nil {
					t.Fatal(err)
				}
				got := ""
				if drv == "pq" {
					pc, err := pq.NewConfig(dc.client.PQDSN)
					if err != nil {
						t.Fatal(err)
					}
					got = pc.Password
				} else {
					got = dc.client.Pool.ConnConfig.Password
				}
				if got != want {
					t.Errorf("driver=%s: password = %q, want %q", drv, got, want)
				}
			}
		}},
		{"DriverDefaultsToPgx", base + "?schema=x", func(t *testing.T, cfg *config) {
			if cfg.client.Library != pgclient.Pgx || cfg.client.Pool == nil {
				t.Errorf("client = %v, pool = %v", cfg.client, cfg.client.Pool)
			}
		}},
		{"DriverPgx", base + "?driver=pgx&pool_min_conns=1", func(t *testing.T, cfg *config) {
			if cfg.client.Library != pgclient.Pgx || cfg.client.Pool.MinConns != 1 {
				t.Errorf("client = %v, MinConns = %d", cfg.client, cfg.client.Pool.MinConns)
			}
		}},
		{"DriverPQ", base + "?driver=pq&schema=s&statement_timeout=2s&application_name=app&pool_max_conns=7&pool_max_conn_lifetime=5m&lock_timeout=1000", func(t *testing.T, cfg *config) {
			if cfg.client.Library != pgclient.PQ || cfg.opts.Schema != "s" {
				t.Errorf("client = %v, opts = %+v", cfg.client, cfg.opts)
			}
			u, err := url.Parse(cfg.client.PQDSN)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			for k, want := range map[string]string{
				"binary_parameters": "yes", "sslmode": "prefer", "statement_timeout": "2000",
				"application_name": "app", "lock_timeout": "1000",
				"driver": "", "schema": "", "pool_max_conns": "", "pool_max_conn_lifetime": "",
			} {
				if got := q.Get(k); got != want {
					t.Errorf("lib/pq DSN parameter %s = %q, want %q", k, got, want)
				}
			}
			if u.User.Username() != "u" || u.Host != "localhost:5432" || u.Path != "/db" {
				t.Errorf("lib/pq DSN lost the connection target: %v", u.Redacted())
			}
			if want := (pgclient.SQLPool{MaxConns: 7, MaxLifetime: 5 * time.Minute, MaxIdle: 30 * time.Minute}); cfg.client.SQLPool != want {
				t.Errorf("pool = %+v, want %+v", cfg.client.SQLPool, want)
			}
		}},
		{"ConnectionTimeoutDefaults", base, func(t *testing.T, cfg *config) {
			if cfg.client.Dial != pgclient.DefaultDialSettings() || cfg.client.Pool.ConnConfig.ConnectTimeout != DefaultConnectTimeout {
				t.Errorf("dial = %+v, connect timeout %v; want the defaults", cfg.client.Dial, cfg.client.Pool.ConnConfig.ConnectTimeout)
			}
		}},
		{"ConnectionTimeouts", base + "?tcp_keepalive=5s&tcp_user_timeout=2500&connect_timeout=3", func(t *testing.T, cfg *config) {
			if want := (pgclient.DialSettings{Keepalive: 5 * time.Second, UserTimeout: 2500 * time.Millisecond}); cfg.client.Dial != want {
				t.Errorf("dial = %+v, want %+v", cfg.client.Dial, want)
			}
			if cfg.client.Pool.ConnConfig.ConnectTimeout != 3*time.Second {
				t.Errorf("connect timeout = %v", cfg.client.Pool.ConnConfig.ConnectTimeout)
			}
			if _, ok := cfg.client.Pool.ConnConfig.RuntimeParams["tcp_keepalive"]; ok {
				t.Error("tcp_keepalive reached the server as a setting")
			}
		}},
		{"ConnectionTimeoutsOff", base + "?driver=pq&tcp_keepalive=0&tcp_user_timeout=0s", func(t *testing.T, cfg *config) {
			if cfg.client.Dial != (pgclient.DialSettings{}) {
				t.Errorf("dial = %+v, want both off", cfg.client.Dial)
			}
			u, _ := url.Parse(cfg.client.PQDSN)
			if q := u.Query(); q.Get("connect_timeout") != "10" || q.Has("tcp_keepalive") {
				t.Errorf("lib/pq DSN = %v, want connect_timeout=10 and no tcp_keepalive", u.Redacted())
			}
		}},
		{"DriverPQKeepsExplicitSettings", base + "?driver=pq&binary_parameters=no&sslmode=require", func(t *testing.T, cfg *config) {
			u, _ := url.Parse(cfg.client.PQDSN)
			if q := u.Query(); q.Get("binary_parameters") != "no" || q.Get("sslmode") != "require" {
				t.Errorf("lib/pq DSN = %v", u.Redacted())
			}
		}},
		{"DriverPgxStdlib", base + "?driver=pgx-stdlib&pool_max_conns=9&default_query_exec_mode=simple_protocol&statement_timeout=300", func(t *testing.T, cfg *config) {
			if cfg.client.Library != pgclient.Stdlib || cfg.client.SQLPool.MaxConns != 9 {
				t.Errorf("client = %v, pool = %+v", cfg.client, cfg.client.SQLPool)
			}
			if cfg.client.Pool.ConnConfig.RuntimeParams["statement_timeout"] != "300" {
				t.Errorf("statement_timeout = %q", cfg.client.Pool.ConnConfig.RuntimeParams["statement_timeout"])
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
		{"BadCoalesce", base + "?coalesce=" + secret, "coalesce must be on or off"},
		{"BadCoalesceInFlight", base + "?coalesce_inflight=" + secret, "coalesce_inflight must be"},
		{"ZeroCoalesceInFlight", base + "?coalesce_inflight=0", "coalesce_inflight must be"},
		{"HugeCoalesceInFlight", base + "?coalesce_inflight=65", "coalesce_inflight must be"},
		{"BadStatementTimeout", base + "?statement_timeout=" + secret, "statement_timeout"},
		{"Repeated", base + "?schema=a&schema=b", "more than once"},
		{"BadPoolSize", base + "?pool_max_conns=" + secret, "invalid postgres DSN"},
		{"WrongScheme", "mysql://bob:" + secret + "@h/db", "scheme postgres or postgresql"},
		{"Malformed", "postgres://bob:" + secret + "@h/db?%zz", "malformed"},
		{"BadDriver", base + "?driver=" + secret, "driver must be pgx, pq or pgx-stdlib"},
		{"PgxPoolParamWithPQ", base + "?driver=pq&pool_min_conns=" + secret, `"pool_min_conns" is not supported with driver=pq`},
		{"PgxPoolParamWithStdlib", base + "?driver=pgx-stdlib&pool_health_check_period=" + secret, `"pool_health_check_period" is not supported with driver=pgx-stdlib`},
		{"PgxParamWithPQ", base + "?driver=pq&default_query_exec_mode=" + secret, `"default_query_exec_mode" is not supported with driver=pq`},
		{"PQParamWithPgx", base + "?binary_parameters=" + secret, `"binary_parameters" is not supported with driver=pgx`},
		{"BadPQPoolSize", base + "?driver=pq&pool_max_conns=" + secret, "pool_max_conns must be"},
		{"BadPQLifetime", base + "?driver=pq&pool_max_conn_idle_time=" + secret, "pool_max_conn_idle_time must be"},
		{"BadPQValue", base + "?driver=pq&sslmode=" + secret, "invalid postgres DSN"},
		{"BadKeepalive", base + "?tcp_keepalive=" + secret, "tcp_keepalive must be"},
		{"HugeUserTimeout", base + "?tcp_user_timeout=2h", "tcp_user_timeout must be"},
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
	b, err := NewBackend(ctx, pool, Options{Schema: schema})
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
	ob, err := openDSN(ctx, srv.DSN()+"&schema="+schema)
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

	// The same on database/sql: a *sql.DB passed to NewBackend stays open,
	// one opened from a DSN is closed, with its listener.
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sb, err := NewBackend(ctx, db, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if sb.DB() != db || sb.Pool() != nil {
		t.Errorf("DB() = %v, Pool() = %v", sb.DB(), sb.Pool())
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.GetLease(ctx, "", "r"); contract.CodeOf(err) != contract.Closed {
		t.Errorf("GetLease after Close: %v, want Closed", err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Errorf("the caller's *sql.DB was closed by Backend.Close: %v", err)
	}
	for _, drv := range []string{"pq", "pgx-stdlib"} {
		ob, err := openDSN(ctx, srv.DSN()+"&schema="+schema+"&driver="+drv)
		if err != nil {
			t.Fatal(err)
		}
		if ob.DB() == nil || ob.Pool() != nil {
			t.Errorf("driver=%s: DB() = %v, Pool() = %v", drv, ob.DB(), ob.Pool())
		}
		// Start the listener, so Close has to stop it too.
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, _ = ob.WaitKey(wctx, contract.KeyRef{Key: "k"})
		cancel()
		if err := ob.Close(); err != nil {
			t.Errorf("driver=%s: Close: %v", drv, err)
		}
		if err := ob.DB().PingContext(ctx); err == nil {
			t.Errorf("driver=%s: the backend's own *sql.DB is still open after Close", drv)
		}
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
		if _, err := NewBackend(context.Background(), pool, o); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("New(%+v) = %v, want InvalidArgument", o, err)
		}
	}
	if _, err := NewBackend(context.Background(), (*pgxpool.Pool)(nil), Options{}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("NewBackend(nil pool) = %v, want InvalidArgument", err)
	}
	if _, err := NewBackend(context.Background(), (*sql.DB)(nil), Options{}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("NewBackend(nil db) = %v, want InvalidArgument", err)
	}
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, o := range []Options{{Schema: "Bad"}, {Migrate: MigrateMode(9)}, {ListenDSN: "postgres://u@h/db?sslmode=bogus"}} {
		if _, err := NewBackend(context.Background(), db, o); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("NewBackend(%+v) = %v, want InvalidArgument", o, err)
		}
	}
	if err := db.PingContext(context.Background()); err != nil {
		t.Errorf("a failed NewBackend closed the caller's *sql.DB: %v", err)
	}
}
