package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5"
)

// TestMigration6UpAndDownKeepLeases: migration 6 adds the lease's value
// and the watch's mark to a table that holds leases of version 5 (plain,
// released, a permit's name), which this code then reads as leases without
// a value; its down migration drops both columns and keeps every row
// (values are lost, marks' placeholders stay as released rows), and up
// again works as before. The token sequence goes on across both.
func TestMigration6UpAndDownKeepLeases(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	s := srv.Schema(t)
	q := quoteIdent(s)
	migrateTo(t, pool, s, 5)
	if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.leases (scope, resource, owner, token, acquired_at, expires_at, released)
		VALUES ('s', 'held', 'o', nextval('`+q+`.lease_tokens'), now(), now() + interval '1 hour', false),
		       ('s', 'gone', 'o', nextval('`+q+`.lease_tokens'), now(), now(), true),
		       ('s', 'sem#1', 'o', nextval('`+q+`.lease_tokens'), now(), now() + interval '1 hour', false)`); err != nil {
		t.Fatal(err)
	}
	columns := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT column_name::text FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = 'leases' ORDER BY ordinal_position`, s)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	v5 := []string{"scope", "resource", "owner", "token", "acquired_at", "expires_at", "released"}
	if got := columns(); !slices.Equal(got, v5) {
		t.Fatalf("version 5's columns = %q", got)
	}
	count := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.leases`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	migrateTo(t, pool, s, 6)
	if got := columns(); !slices.Equal(got, append(slices.Clone(v5), "value", "watched_until")) {
		t.Fatalf("version 6's columns = %q", got)
	}
	b, err := openDSN(ctx, srv.DSN()+"&schema="+s+"&migrate=verify")
	if err != nil {
		t.Fatalf("migrate=verify at version 6: %v", err)
	}
	defer b.Close()
	if st, err := b.MigrationStatus(ctx); err != nil || st.Version != 6 || !st.Current() {
		t.Fatalf("status = %+v, %v", st, err)
	}
	held, err := b.GetLease(ctx, "s", "held")
	if err != nil || held.Owner != "o" || held.Value != "" {
		t.Fatalf("a lease of version 5 = %+v, %v", held, err)
	}
	if _, err := b.GetLease(ctx, "s", "gone"); contract.CodeOf(err) != contract.NotFound {
		t.Fatalf("a released lease of version 5 = %v", err)
	}
	p, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "sem", Owner: "p", TTL: time.Hour, Permits: 2, Value: "v\x00"})
	if err != nil || p.Resource != "sem#2" || p.Value != "v\x00" || p.Token <= held.Token {
		t.Fatalf("AcquirePermit beside a permit of version 5 = %+v, %v", p, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	if _, err := b.WatchLease(wctx, "s", "watched"); err != nil { // a placeholder row holds its mark
		t.Fatal(err)
	}
	cancel()
	before := count()

	if err := withMigrate(ctx, pgclient.FromPool(pool), s, func(m *migrate.Migrate) error { return m.Steps(-1) }); err != nil {
		t.Fatalf("down one step: %v", err)
	}
	if st, err := poolMigrationStatus(ctx, pool, s); err != nil || st.Version != 5 || st.Dirty {
		t.Fatalf("status after down = %+v, %v", st, err)
	}
	if got := columns(); !slices.Equal(got, v5) {
		t.Fatalf("columns after down = %q, want version 5's", got)
	}
	if n := count(); n != before {
		t.Fatalf("%d rows after down, %d before", n, before)
	}
	var owner string
	var released bool
	if err := pool.QueryRow(ctx, `SELECT owner, released FROM `+q+`.leases WHERE scope = 's' AND resource = 'sem#2'`).Scan(&owner, &released); err != nil || owner != "p" || released {
		t.Fatalf("the permit after down: %q released=%v, %v", owner, released, err)
	}
	if err := pool.QueryRow(ctx, `SELECT owner, released FROM `+q+`.leases WHERE scope = 's' AND resource = 'watched'`).Scan(&owner, &released); err != nil || owner != "" || !released {
		t.Fatalf("the mark's placeholder after down: %q released=%v, %v; want a released row", owner, released, err)
	}

	migrateTo(t, pool, s, 6)
	if got, err := b.GetLease(ctx, "s", "sem#2"); err != nil || got.Value != "" || got.Token != p.Token {
		t.Fatalf("the permit after down and up = %+v, %v; want it held, its value gone", got, err)
	}
	l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: "watched", Owner: "o", TTL: time.Hour, Value: "x"})
	if err != nil || l.Value != "x" || l.Token <= p.Token {
		t.Fatalf("a grant over the placeholder = %+v, %v", l, err)
	}
}
