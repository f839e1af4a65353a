package main

import (
	"context"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/sqlite"
)

// The schema commands ask the backend that the DSN opened for what they
// need, by interface, and never look at the DSN themselves: the backend's
// own parser reads it exactly as the application's durable.Open does.

// migrator is a backend with a versioned schema (the Postgres backend; the
// SQLite backend through an adapter, see asMigrator): what 'durable
// migrate' needs.
type migrator interface {
	Migrate(ctx context.Context, dir postgres.Direction) error
	Force(ctx context.Context, version int) error
	MigrationStatus(ctx context.Context) (postgres.SchemaStatus, error)
}

// doctor is a backend that checks itself (the Postgres backend: server,
// schema version, clock skew, LISTEN). 'durable doctor' falls back to
// opening the store and reading once for any other backend.
type doctor interface {
	Doctor(ctx context.Context) []postgres.Check
}

// openForMaintenance opens the store as the application would, from the
// same DSN read by the same parser, except that opening neither changes
// nor checks the schema (postgres.WithMigrateMode): the schema commands
// must open a schema that is missing, behind, dirty or newer than this
// binary, and 'migrate status' and 'doctor' must not migrate it. A
// mistake anywhere in the DSN, its migrate parameter included, still
// fails as it would for the application.
func openForMaintenance(ctx context.Context, dsnFlag string) (*durable.Store, error) {
	ctx = sqlite.WithMigrateMode(ctx, sqlite.MigrateOff)
	return openStore(postgres.WithMigrateMode(ctx, postgres.MigrateOff), dsnFlag)
}
