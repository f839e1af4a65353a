package main

import (
	"context"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/sqlite"
)

// The SQLite backend has the same schema methods and checks as Postgres,
// with types of its own package: the adapters below give the schema
// commands one interface for both.

// asMigrator returns the migrator of the store's backend, if it has one.
func asMigrator(s *durable.Store) (migrator, bool) {
	var m migrator
	if s.As(&m) {
		return m, true
	}
	var b *sqlite.Backend
	if s.As(&b) {
		return sqliteMigrator{b}, true
	}
	return nil, false
}

// asDoctor returns the doctor of the store's backend, if it has one.
func asDoctor(s *durable.Store) (doctor, bool) {
	var d doctor
	if s.As(&d) {
		return d, true
	}
	var b *sqlite.Backend
	if s.As(&b) {
		return sqliteDoctor{b}, true
	}
	return nil, false
}

type sqliteMigrator struct{ b *sqlite.Backend }

func (m sqliteMigrator) Migrate(ctx context.Context, dir postgres.Direction) error {
	d := sqlite.Up
	if dir == postgres.Down {
		d = sqlite.Down
	}
	return m.b.Migrate(ctx, d)
}

func (m sqliteMigrator) Force(ctx context.Context, version int) error {
	return m.b.Force(ctx, version)
}

// MigrationStatus names the schema "main", SQLite's name of the database
// file's schema (never the path).
func (m sqliteMigrator) MigrationStatus(ctx context.Context) (postgres.SchemaStatus, error) {
	s, err := m.b.MigrationStatus(ctx)
	return postgres.SchemaStatus{Schema: "main", Version: s.Version, Dirty: s.Dirty, Latest: s.Latest}, err
}

type sqliteDoctor struct{ b *sqlite.Backend }

func (d sqliteDoctor) Doctor(ctx context.Context) []postgres.Check {
	var out []postgres.Check
	for _, c := range d.b.Doctor(ctx) {
		out = append(out, postgres.Check{Name: c.Name, OK: c.OK, Detail: c.Detail, Hint: c.Hint, Err: c.Err})
	}
	return out
}
