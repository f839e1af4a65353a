package main

import (
	"context"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// The schema commands ask the backend that the DSN opened for what they
// need, by the contract's capability interfaces (contract.Migrator,
// contract.Doctor), and never look at the DSN themselves: the backend's
// own parser reads it exactly as the application's durable.Open does.

// openForMaintenance opens the store as the application would, from the
// same DSN read by the same parser, except that opening neither changes
// nor checks the schema (durable.WithMigrateMode(MigrateOff), which every
// backend with a schema honours and the others ignore): the schema
// commands must open a schema that is missing, behind, dirty or newer
// than this binary, and 'migrate status' and 'doctor' must not migrate
// it. A mistake anywhere in the DSN, its migrate parameter included,
// still fails as it would for the application.
func openForMaintenance(ctx context.Context, dsnFlag string) (*durable.Store, error) {
	return openStore(ctx, dsnFlag, durable.WithMigrateMode(contract.MigrateOff))
}

// asMigrator returns the migration API of the store's backend, if it has
// a versioned schema (Postgres, SQLite).
func asMigrator(s *durable.Store) (contract.Migrator, bool) {
	var m contract.Migrator
	return m, s.As(&m)
}

// asDoctor returns the self-check of the store's backend, if it has one
// (Postgres: server, pooler, schema version, clock skew, LISTEN; SQLite:
// journal, schema version, write lock). 'durable doctor' falls back to
// reading once for any other backend.
func asDoctor(s *durable.Store) (contract.Doctor, bool) {
	var d contract.Doctor
	return d, s.As(&d)
}
