package postgres

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/lib/pq"
)

// checksByName returns Doctor's checks by name, failing t unless they are
// exactly connect, pooler, query-mode, schema, clock and listen, in that
// order.
func checksByName(t *testing.T, checks []Check) map[string]Check {
	t.Helper()
	var names []string
	m := map[string]Check{}
	for _, c := range checks {
		names = append(names, c.Name)
		m[c.Name] = c
	}
	if got, want := strings.Join(names, " "), "connect pooler query-mode schema clock listen"; got != want {
		t.Fatalf("checks %q, want %s: %+v", got, want, checks)
	}
	return m
}

func TestDoctor(t *testing.T) {
	srv := pgtest.Require(t)
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			b, err := openBackend(ctx, srv.DSN()+"&schema="+schema+"&driver="+drv, openMode(MigrateOff))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()

			c := checksByName(t, b.Doctor(ctx))
			if !c["connect"].OK || !strings.HasPrefix(c["connect"].Detail, "PostgreSQL 1") {
				t.Errorf("connect = %+v", c["connect"])
			}
			if s := c["schema"]; s.OK || !strings.Contains(s.Hint, "durable migrate up") || contract.CodeOf(s.Err) != contract.SchemaMismatch ||
				!strings.Contains(s.Detail, schema+" is at version 0") {
				t.Errorf("schema before migrating = %+v", s)
			}
			if !c["clock"].OK || !strings.Contains(c["clock"].Detail, "database clock is") {
				t.Errorf("clock = %+v", c["clock"])
			}
			if !c["listen"].OK || !strings.Contains(c["listen"].Detail, "a NOTIFY arrived on the LISTEN connection") {
				t.Errorf("listen = %+v", c["listen"])
			}
			wantPooler := "direct connection"
			if drv == "pq" {
				wantPooler = "lib/pq does not reveal"
			}
			if p := c["pooler"]; !p.OK || !strings.Contains(p.Detail, wantPooler) {
				t.Errorf("pooler = %+v", p)
			}
			if q := c["query-mode"]; !q.OK || !strings.Contains(q.Detail, map[string]string{
				"pgx": "pgx, cache_statement", "pq": "binary_parameters=yes", "pgx-stdlib": "pgx stdlib, cache_statement"}[drv]) {
				t.Errorf("query-mode = %+v", q)
			}

			if err := b.Migrate(ctx, Up); err != nil {
				t.Fatal(err)
			}
			for _, ch := range b.Doctor(ctx) {
				if !ch.OK || ch.Err != nil {
					t.Errorf("after migrating: %+v", ch)
				}
			}

			if err := srv.Exec(ctx, `UPDATE `+quoteIdent(schema)+`.schema_migrations SET dirty = true`); err != nil {
				t.Fatal(err)
			}
			if s := checksByName(t, b.Doctor(ctx))["schema"]; s.OK || !strings.Contains(s.Detail, "dirty") || !strings.Contains(s.Hint, "durable migrate force") {
				t.Errorf("schema when dirty = %+v", s)
			}
		})
	}
}

// TestDoctorListenModes: a backend that does not LISTEN says that WaitKey
// polls, which is no failure; one whose LISTEN session cannot be opened
// fails the check with the fix.
func TestDoctorListenModes(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	off, err := openDSN(ctx, srv.DSN()+"&schema="+schema+"&listen=off")
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if l := checksByName(t, off.Doctor(ctx))["listen"]; !l.OK || !strings.Contains(l.Detail, "listen=off") {
		t.Errorf("listen=off: %+v", l)
	}

	c, err := pq.NewConnector(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	noListen, err := NewBackend(ctx, db, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer noListen.Close()
	if l := checksByName(t, noListen.Doctor(ctx))["listen"]; !l.OK || !strings.Contains(l.Detail, "poll") {
		t.Errorf("lib/pq without ListenDSN: %+v", l)
	}

	broken, err := NewBackend(ctx, db, Options{Schema: schema, ListenDSN: "postgres://nobody:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"})
	if err != nil {
		t.Fatal(err)
	}
	defer broken.Close()
	l := checksByName(t, broken.Doctor(ctx))["listen"]
	if l.OK || l.Err == nil || !strings.Contains(l.Hint, "listen=off") {
		t.Errorf("unreachable ListenDSN: %+v", l)
	}
	if strings.Contains(l.Detail, "hunter2") || strings.Contains(l.Detail, "postgres://") {
		t.Errorf("the detail quotes the DSN: %q", l.Detail)
	}
}

func TestDoctorOnAClosedBackend(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	checks := b.Doctor(t.Context())
	if len(checks) != 1 || checks[0].Name != "connect" || checks[0].OK || contract.CodeOf(checks[0].Err) != contract.Closed {
		t.Errorf("Doctor after Close = %+v", checks)
	}
}
