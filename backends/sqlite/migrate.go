package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/sqlmigrate"
	"github.com/golang-migrate/migrate/v4"
	"go.uber.org/multierr"
)

// Migrations are plain SQL files, NNNNNN_name.up.sql and .down.sql,
// applied with golang-migrate (its iofs source) through the shared
// transaction driver (see runMigrate).
//
//go:embed migrations/*.sql
var migrationFS embed.FS

const migrationDir = "migrations"

// MigrationsTable is golang-migrate's version table (version INTEGER,
// dirty INTEGER), in the same database.
const MigrationsTable = sqlmigrate.Table

var latestVersion = sqlmigrate.LatestVersion(migrationFS, migrationDir)

// LatestVersion is the newest migration version this code knows.
func LatestVersion() uint { return latestVersion }

// MigrationFiles returns the embedded migration files, in directory
// "migrations", for any tool that applies golang-migrate-style files.
func MigrationFiles() fs.FS { return migrationFS }

// Direction is the direction of [Backend.Migrate]: [Up] or [Down]. It is
// [contract.Direction], named here for the callers of this package.
type Direction = contract.Direction

const (
	// Up applies every pending migration.
	Up = contract.MigrateUp
	// Down reverts every applied migration. It deletes all data,
	// including the fencing-token counter: tokens restart afterwards.
	Down = contract.MigrateDown
)

// SchemaStatus is the migration state of a database: [contract.SchemaStatus],
// named here for the callers of this package. Its Schema is always
// "main" (SQLite's name of the database file's schema, never the path);
// Dirty is never left by this package's own runner.
type SchemaStatus = contract.SchemaStatus

// schemaName is the Schema of every SchemaStatus: SQLite's name of the
// database file's schema.
const schemaName = "main"

var _ contract.Migrator = (*Backend)(nil)

// MigrationStatus reads the schema version. A database without the
// version table reads as version 0.
func (b *Backend) MigrationStatus(ctx context.Context) (SchemaStatus, error) {
	if err := b.lockWriter(ctx); err != nil {
		return SchemaStatus{}, err
	}
	defer b.unlockWriter()
	s, err := b.readStatus(ctx)
	if err != nil {
		return SchemaStatus{}, classify(ctx, err)
	}
	return s, nil
}

// readStatus reads the version on the write connection, which the caller
// holds.
func (b *Backend) readStatus(ctx context.Context) (SchemaStatus, error) {
	s := SchemaStatus{Schema: schemaName, Latest: latestVersion}
	var v int64
	var dirty bool
	err := b.retryBusy(ctx, func() error {
		return b.wc.QueryRowContext(ctx, `SELECT version, dirty FROM `+MigrationsTable+` LIMIT 1`).Scan(&v, &dirty)
	})
	switch {
	case isNoRows(err), noSuchTable(err):
		return s, nil
	case err != nil:
		return SchemaStatus{}, err
	}
	if v > 0 {
		s.Version = uint(v)
	}
	s.Dirty = dirty
	return s, nil
}

// Migrate applies (Up) or reverts (Down) the embedded migrations, all of
// them in one BEGIN IMMEDIATE transaction: concurrent migrators, in this
// process or others, serialize on SQLite's write lock, and a migration
// that fails rolls everything back, never leaving the schema dirty. Up on
// a database newer than the code fails with SchemaMismatch.
func (b *Backend) Migrate(ctx context.Context, dir Direction) error {
	switch dir {
	case Up, Down:
	default:
		return invalid("unknown migration direction")
	}
	if err := b.lockWriter(ctx); err != nil {
		return err
	}
	defer b.unlockWriter()
	defer b.ws.reset()
	if dir == Up {
		return b.migrateUp(ctx)
	}
	return b.runMigrate(ctx, func(m *migrate.Migrate) error { return m.Down() })
}

// Force records version (-1 for none) and clears the dirty flag without
// running any migration.
func (b *Backend) Force(ctx context.Context, version int) error {
	if version < -1 || version > int(latestVersion) {
		return invalid(fmt.Sprintf("version must be within -1 and %d", latestVersion))
	}
	if err := b.lockWriter(ctx); err != nil {
		return err
	}
	defer b.unlockWriter()
	defer b.ws.reset()
	return b.runMigrate(ctx, func(m *migrate.Migrate) error { return m.Force(version) })
}

// migrateUp runs under the write connection.
func (b *Backend) migrateUp(ctx context.Context) error {
	s, err := b.readStatus(ctx)
	if err != nil {
		return classify(ctx, err)
	}
	if s.Current() {
		return nil
	}
	if !s.Dirty && s.Version > s.Latest {
		return s.Err()
	}
	if err := b.runMigrate(ctx, func(m *migrate.Migrate) error { return m.Up() }); err != nil {
		return err
	}
	// Another process may have migrated further meanwhile.
	s, err = b.readStatus(ctx)
	if err != nil {
		return classify(ctx, err)
	}
	return s.Err()
}

// prepareSchema migrates or verifies the schema per mode.
func (b *Backend) prepareSchema(ctx context.Context, mode MigrateMode) error {
	return sqlmigrate.Prepare(ctx, mode, b.verifySchema, func(ctx context.Context) error { return b.Migrate(ctx, Up) })
}

// verifySchema fails unless the schema is current (MigrateVerify).
func (b *Backend) verifySchema(ctx context.Context) error {
	s, err := b.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	return s.Err()
}

// runMigrate runs f on golang-migrate over the embedded files and the
// shared transaction driver on the write connection, which the caller
// holds:
//
//   - Lock begins one BEGIN IMMEDIATE transaction (SQLite's write lock,
//     across processes) and creates the version table if it is missing;
//   - Version, SetVersion and Run work inside it;
//   - Unlock commits it, or rolls it back when anything failed (SQLite's
//     DDL is transactional), so no migration is ever left half applied.
func (b *Backend) runMigrate(ctx context.Context, f func(*migrate.Migrate) error) error {
	drv := sqlmigrate.NewDriver(ctx, sqlmigrate.Config{Name: "sqlite", Table: MigrationsTable, Begin: b.beginMigration})
	return b.migrationError(ctx, sqlmigrate.Run(drv, migrationFS, migrationDir, f))
}

func (b *Backend) migrationError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if known, ok := sqlmigrate.KnownError(err, latestVersion); ok {
		return known
	}
	if _, ok := sqliteCode(err); ok {
		e := classify(ctx, err)
		var ce *contract.Error
		if errors.As(e, &ce) && ce.Code == contract.Unknown {
			ce.Msg = "migration failed" + codeSuffix(err)
		}
		return e
	}
	return &contract.Error{Code: contract.Unknown, Msg: "migration failed", Err: err}
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// beginMigration begins the migration transaction on the write
// connection: BEGIN IMMEDIATE, waiting out another writer's lock, and the
// version table created if it is missing.
func (b *Backend) beginMigration(ctx context.Context) (sqlmigrate.Tx, error) {
	if err := b.retryBusy(ctx, func() error { return b.begin(ctx) }); err != nil {
		return nil, err
	}
	if _, err := b.wc.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+MigrationsTable+
		` (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`); err != nil {
		b.rollback()
		return nil, err
	}
	return migrationTx{b}, nil
}

// migrationTx is the migration transaction on the write connection.
type migrationTx struct{ b *Backend }

func (t migrationTx) Exec(ctx context.Context, sql string) error {
	_, err := t.b.wc.ExecContext(ctx, sql)
	return err
}

func (t migrationTx) Query(ctx context.Context, sql string, dest []any, row func() error) (err error) {
	rows, err := t.b.wc.QueryContext(ctx, sql)
	if err != nil {
		return err
	}
	defer multierr.AppendInvoke(&err, multierr.Close(rows))
	return sqlmigrate.EachRow(rows, dest, row)
}

// Commit commits, or rolls back when COMMIT fails.
func (t migrationTx) Commit(ctx context.Context) error {
	if _, err := t.b.wc.ExecContext(ctx, "COMMIT"); err != nil {
		t.b.rollback()
		return err
	}
	return nil
}

func (t migrationTx) Rollback() { t.b.rollback() }
