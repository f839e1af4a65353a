package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

// TestLatestVersion pins the schema version: a new migration updates this
// test, the migration tests below and the package documentation.
func TestLatestVersion(t *testing.T) {
	if v := sqlite.LatestVersion(); v != 3 {
		t.Fatalf("LatestVersion = %d, want 3", v)
	}
	b, err := sqlite.NewBackend(t.Context(), sqlite.Options{Path: sqlite.MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if st, err := b.MigrationStatus(t.Context()); err != nil || st.Version != 3 || st.Latest != 3 || !st.Current() {
		t.Fatalf("MigrationStatus = %+v, %v; want version 3 of 3", st, err)
	}
	found := false
	for _, c := range b.Doctor(t.Context()) {
		if c.Name == "schema" {
			found = true
			if !c.OK || c.Detail != "main at version 3 (latest)" {
				t.Errorf("Doctor's schema check: %+v", c)
			}
		}
	}
	if !found {
		t.Error("Doctor has no schema check")
	}
}

// TestMigrationLeaseValues: migration 3 keeps the leases of version 2
// (holder, token, times; their value reads as ""), and the token counter;
// reverting it keeps the leases and drops their values only.
func TestMigrationLeaseValues(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "m3.db")
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := contract.NewManualClock(now)
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path, Clock: clock, Migrate: sqlite.MigrateOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := sqlite.MigrateToForTest(b, 2); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	acquired, expires := now.Add(-time.Minute), now.Add(time.Hour)
	exec(`INSERT INTO leases (scope, resource, owner, token, acquired_at, expires_at) VALUES ('', 'old', 'o', 7, ?, ?), ('s', 'sem#1', 'p', 8, ?, ?)`,
		acquired.UnixMicro(), expires.UnixMicro(), acquired.UnixMicro(), expires.UnixMicro())
	exec(`UPDATE lease_tokens SET last = 8`)

	if err := b.Migrate(ctx, sqlite.Up); err != nil {
		t.Fatal(err)
	}
	old := contract.Lease{Resource: "old", Owner: "o", Token: 7, AcquiredAt: acquired, ExpiresAt: expires}
	if g, err := b.GetLease(ctx, "", "old"); err != nil || g != old {
		t.Fatalf("a lease of version 2 after migration 3: %+v, %v; want %+v", g, err, old)
	}
	r, err := b.RenewLease(ctx, old, 2*time.Hour)
	if err != nil || r.Value != "" || r.Token != 7 {
		t.Fatalf("RenewLease: %+v, %v", r, err)
	}
	n, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "new", Owner: "o", TTL: time.Hour, Value: "v\x00\xff"})
	if err != nil || n.Token != 9 || n.Value != "v\x00\xff" {
		t.Fatalf("AcquireLease: %+v, %v; want token 9", n, err)
	}
	p, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "s", Resource: "sem", Owner: "q", TTL: time.Hour, Value: "p", Permits: 2})
	if err != nil || p.Resource != "sem#2" || p.Token != 10 {
		t.Fatalf("AcquirePermit next to a permit of version 2: %+v, %v; want sem#2, token 10", p, err)
	}
	ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Limit: 10})
	if err != nil || len(ls) != 2 || ls[0].Value != "v\x00\xff" || ls[1].Value != "" {
		t.Fatalf("ListLeases: %+v, %v", ls, err)
	}

	// Down to 2: every lease stays, without its value.
	if err := sqlite.MigrateToForTest(b, 2); err != nil {
		t.Fatal(err)
	}
	if st, err := b.MigrationStatus(ctx); err != nil || st.Version != 2 {
		t.Fatalf("status after reverting 3: %+v, %v", st, err)
	}
	var cols, rows int
	var last int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('leases') WHERE name = 'value'`).Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("value column after reverting 3: %d, %v", cols, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM leases`).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("leases after reverting 3: %d, %v; want 4", rows, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT last FROM lease_tokens`).Scan(&last); err != nil || last != 10 {
		t.Fatalf("token counter after reverting 3: %d, %v; want 10", last, err)
	}
	var owner string
	var token int64
	if err := db.QueryRowContext(ctx, `SELECT owner, token FROM leases WHERE scope = 's' AND resource = 'sem#2'`).Scan(&owner, &token); err != nil || owner != "q" || token != 10 {
		t.Fatalf("sem#2 after reverting 3: %s %d, %v", owner, token, err)
	}

	// Up again: the leases are there, their values empty.
	if err := b.Migrate(ctx, sqlite.Up); err != nil {
		t.Fatal(err)
	}
	if g, err := b.GetLease(ctx, "", "new"); err != nil || g.Value != "" || g.Token != 9 {
		t.Fatalf("after down and up: %+v, %v", g, err)
	}
	if n, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "next", Owner: "o", TTL: time.Hour}); err != nil || n.Token != 11 {
		t.Fatalf("AcquireLease after down and up: %+v, %v; want token 11", n, err)
	}
}
