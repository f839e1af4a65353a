package postgres

import (
	"database/sql"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	pgmigrate "github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/lib/pq"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestMigrationFilesThroughGolangMigrate applies MigrationFiles with
// golang-migrate's own postgres driver and iofs source, as the README tells
// a user with their own golang-migrate setup to do: every file, the
// dollar-quoted function of migration 4 among them, is sent whole, the
// version table is the one migrate=verify reads, and the backend opened
// with migrate=verify claims, replays and reclaims keys on that schema.
func TestMigrationFilesThroughGolangMigrate(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	if err := srv.Exec(ctx, `CREATE SCHEMA `+quoteIdent(schema)); err != nil {
		t.Fatal(err)
	}
	c, err := pq.NewConnector(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	drv, err := pgmigrate.WithInstance(db, &pgmigrate.Config{SchemaName: schema, MigrationsTable: MigrationsTable})
	if err != nil {
		t.Fatal(err)
	}
	files, err := MigrationFiles(schema)
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(files, migrationDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", drv)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatalf("golang-migrate up: %v", err)
	}
	if v, dirty, err := m.Version(); err != nil || dirty || v != LatestVersion() {
		t.Fatalf("golang-migrate's version = %d (dirty %v), %v; want %d", v, dirty, err, LatestVersion())
	}

	b, err := openDSN(ctx, srv.DSN()+"&schema="+schema+"&migrate=verify")
	if err != nil {
		t.Fatalf("migrate=verify on golang-migrate's schema: %v", err)
	}
	defer b.Close()
	req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "k"}, Fingerprint: "fp", TTL: 30 * time.Second}
	c1, err := b.ClaimKey(ctx, req)
	if err != nil || c1.Kind != contract.ClaimNew {
		t.Fatalf("first claim = %+v, %v", c1, err)
	}
	if c2, err := b.ClaimKey(ctx, req); err != nil || c2.Kind != contract.ClaimInFlight {
		t.Fatalf("second claim = %+v, %v; want in flight", c2, err)
	}
	if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: req.KeyRef, Token: c1.Token, Outcome: contract.Outcome{Code: 201}, Retain: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if c3, err := b.ClaimKey(ctx, req); err != nil || c3.Kind != contract.ClaimCompleted || c3.Record.Outcome == nil || c3.Record.Outcome.Code != 201 {
		t.Fatalf("replay = %+v, %v", c3, err)
	}
	if err := m.Down(); err != nil {
		t.Fatalf("golang-migrate down: %v", err)
	}
}
