package contract

import (
	"context"
	"fmt"
	"strconv"
)

// This file holds the operational types of backends with a versioned
// schema (the SQL backends): the migrate mode they open with, the
// migration API and its status, and the self-check behind the durable
// CLI's doctor command. They live here so that the CLI and any other tool
// can name them without importing a backend.

// MigrateMode says what opening a backend does about its schema. Backends
// without a schema ignore it.
type MigrateMode int

const (
	// MigrateAuto creates the schema if it is missing and applies every
	// pending migration (the default). Concurrent openers serialize on the
	// backend's migration lock; all of them succeed.
	MigrateAuto MigrateMode = iota
	// MigrateVerify only reads the schema's migration version and fails
	// with SchemaMismatch unless it is current. It runs no DDL, so it
	// works for a role without CREATE.
	MigrateVerify
	// MigrateOff neither checks nor changes the schema.
	MigrateOff
)

// String returns the DSN value of m: auto, verify or off.
func (m MigrateMode) String() string {
	switch m {
	case MigrateAuto:
		return "auto"
	case MigrateVerify:
		return "verify"
	case MigrateOff:
		return "off"
	}
	return "MigrateMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMigrateMode reads the DSN value of a migrate mode: auto, verify or
// off. It reports false for anything else.
func ParseMigrateMode(s string) (MigrateMode, bool) {
	switch s {
	case "auto":
		return MigrateAuto, true
	case "verify":
		return MigrateVerify, true
	case "off":
		return MigrateOff, true
	}
	return 0, false
}

// Direction is the direction of [Migrator.Migrate].
type Direction int

const (
	// MigrateUp applies every pending migration.
	MigrateUp Direction = iota + 1
	// MigrateDown reverts every applied migration. It deletes all data,
	// the fencing-token sequence included: tokens restart afterwards.
	MigrateDown
)

// SchemaStatus is the migration state of a backend's schema.
type SchemaStatus struct {
	// Schema names the schema: the Postgres schema, or "main" for SQLite's
	// database file (never its path).
	Schema string
	// Version is the applied migration version; 0 when none is.
	Version uint
	// Dirty reports that a migration failed halfway and needs repair and
	// [Migrator.Force].
	Dirty bool
	// Latest is the newest migration version the backend's code knows.
	Latest uint
}

// Current reports whether the schema is exactly what the code expects.
func (s SchemaStatus) Current() bool { return !s.Dirty && s.Version == s.Latest }

// Err returns nil when the schema is current, otherwise a SchemaMismatch
// error that says what to do.
func (s SchemaStatus) Err() error {
	switch {
	case s.Dirty:
		return &Error{Code: SchemaMismatch, Msg: fmt.Sprintf(
			"migration %d is dirty (it failed halfway): repair the schema, then run `durable migrate force <version>`",
			s.Version)}
	case s.Version > s.Latest:
		return &Error{Code: SchemaMismatch, Msg: fmt.Sprintf(
			"database schema version %d is newer than this code knows (%d): upgrade the code", s.Version, s.Latest)}
	case s.Version < s.Latest:
		return &Error{Code: SchemaMismatch, Msg: fmt.Sprintf(
			"database schema version %d is older than this code needs (%d): run migrations (migrate=auto or `durable migrate up`)",
			s.Version, s.Latest)}
	}
	return nil
}

// Migrator is an optional capability of a Backend with a versioned schema
// (the Postgres and SQLite backends): the whole migration API, which the
// durable CLI's migrate command calls. A tool opens the backend with
// [MigrateOff] (see [OpenOptions]) so that opening neither changes nor
// checks the schema, and then calls these.
type Migrator interface {
	// Migrate applies (MigrateUp) or reverts (MigrateDown) the backend's
	// migrations. A migration that fails leaves the previous version.
	Migrate(ctx context.Context, dir Direction) error
	// Force records version (-1 for none) and clears the dirty flag
	// without running any migration: the repair step after a migration
	// failed halfway.
	Force(ctx context.Context, version int) error
	// MigrationStatus reads the schema's migration state. A schema that
	// does not exist yet reads as version 0.
	MigrationStatus(ctx context.Context) (SchemaStatus, error)
}

// Check is one finding of [Doctor.Doctor].
type Check struct {
	// Name names the check, such as "connect" or "schema"; each backend
	// documents its own.
	Name string
	// OK reports that the check passed.
	OK bool
	// Detail says what was found, in one line; never a DSN, a path or a
	// password.
	Detail string
	// Hint says what to do about a failed check, or "".
	Hint string
	// Err is the failure, when there was one (a *Error).
	Err error
}

// Doctor is an optional capability of a Backend that checks itself: that
// it answers, that its schema is current, and whatever else its storage
// needs (the durable CLI's doctor command runs it). Doctor changes
// nothing and works on a backend opened with [MigrateOff] whatever the
// state of its schema. When the storage does not answer it returns the
// failed "connect" check alone.
type Doctor interface {
	Doctor(ctx context.Context) []Check
}

// OpenOptions are what a caller may set when opening a backend by DSN,
// besides the DSN itself: durable.Open hands them to a driver that
// implements [OptionsDriver].
type OpenOptions struct {
	// Migrate, when not nil, replaces the DSN's migrate mode. Everything
	// else about the DSN is read and checked as always, its migrate
	// parameter included (a typo in it still fails): the option changes
	// the mode, not the DSN. Maintenance tools open with [MigrateOff] so
	// that opening neither changes the schema nor fails on one that is
	// missing, behind, dirty or newer than the code. A driver whose
	// backend has no schema ignores it.
	Migrate *MigrateMode
}

// OptionsDriver is an optional capability of a [Driver]: it opens a
// backend with [OpenOptions]. durable.Open calls OpenWith, with the zero
// OpenOptions when none are set, instead of Open on a driver that has it;
// a driver without it opens with the DSN alone, ignoring the options
// (right for a backend without a schema). OpenWith with the zero
// OpenOptions must behave as Open.
type OptionsDriver interface {
	Driver
	OpenWith(ctx context.Context, dsn string, opts OpenOptions) (Backend, error)
}
