package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	pgmigrate "github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Migrations are plain SQL files, NNNNNN_name.up.sql and .down.sql, with
// unqualified names: they are run with search_path set to the schema. The
// version table, schema_migrations (golang-migrate's layout: version
// bigint, dirty boolean), lives in the same schema.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// MigrationsTable is the name of the version table inside the schema.
const MigrationsTable = "schema_migrations"

// Migrations returns the embedded migration files (in directory
// "migrations"), for tools that apply them another way.
func Migrations() fs.FS { return migrationFS }

var latestVersion = func() uint {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(err)
	}
	var max uint
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		digits, _, _ := strings.Cut(name, "_")
		v, err := strconv.ParseUint(digits, 10, 32)
		if err != nil {
			panic("postgres: bad migration file name " + name)
		}
		max = uint(v)
	}
	return max
}()

// LatestVersion is the newest migration version this code knows.
func LatestVersion() uint { return latestVersion }

// Direction is the direction of Migrate.
type Direction int

const (
	// Up applies every pending migration.
	Up Direction = iota + 1
	// Down reverts every applied migration. It deletes all data,
	// including the fencing-token sequence: tokens restart afterwards.
	Down
)

// SchemaStatus is the migration state of a schema.
type SchemaStatus struct {
	Schema  string // the schema's name
	Version uint   // the applied version; 0 when none is
	Dirty   bool   // a migration failed halfway and needs repair and Force
	Latest  uint   // LatestVersion()
}

// Current reports whether the schema is exactly what this code expects.
func (s SchemaStatus) Current() bool { return !s.Dirty && s.Version == s.Latest }

// Err returns nil when the schema is current, otherwise a SchemaMismatch
// error that says what to do.
func (s SchemaStatus) Err() error {
	switch {
	case s.Dirty:
		return &contract.Error{Code: contract.SchemaMismatch, Msg: fmt.Sprintf(
			"migration %d is dirty (it failed halfway): repair the schema, then run `durable migrate force <version>` after repairing",
			s.Version)}
	case s.Version > s.Latest:
		return &contract.Error{Code: contract.SchemaMismatch, Msg: fmt.Sprintf(
			"database schema version %d is newer than this code knows (%d): upgrade the code", s.Version, s.Latest)}
	case s.Version < s.Latest:
		return &contract.Error{Code: contract.SchemaMismatch, Msg: fmt.Sprintf(
			"database schema version %d is older than this code needs (%d): run migrations (migrate=auto or `durable migrate up`)",
			s.Version, s.Latest)}
	}
	return nil
}

// The schema methods below are the whole migration API, on whichever pool
// the backend runs. A caller with only a pool builds a backend on it with
// MigrateOff (NewBackend or NewBackendFromDB: no I/O then) and calls them:
//
//	b, err := postgres.NewBackend(ctx, pool, postgres.Options{Schema: "durable", Migrate: postgres.MigrateOff})
//	…
//	err = b.Migrate(ctx, postgres.Up)

// MigrationStatus reads the migration state of the backend's schema. It
// runs one read-only statement; a missing schema or version table reads as
// version 0.
func (b *Backend) MigrationStatus(ctx context.Context) (SchemaStatus, error) {
	if b.closed.Load() {
		return SchemaStatus{}, errClosed()
	}
	return b.readStatus(ctx)
}

func (b *Backend) readStatus(ctx context.Context) (SchemaStatus, error) {
	s := SchemaStatus{Schema: b.schema, Latest: latestVersion}
	var r schemaVersionRow
	found, err := qSchemaVersion.run(ctx, b.q, b.st, noParams{}, &r)
	version := r.version
	s.Dirty = r.dirty
	if c, ok := sqlState(err); ok && (c == "42P01" || c == "3F000") {
		return s, nil
	}
	if err != nil {
		return SchemaStatus{}, classify(ctx, err, read)
	}
	if found && version > 0 {
		s.Version = uint(version)
	}
	return s, nil
}

// Migrate applies (Up) or reverts (Down) the embedded migrations in the
// backend's schema, creating the schema first if it is missing. It holds
// golang-migrate's advisory lock for the schema, so concurrent callers
// serialize (on any client library: the lock is the same). Up on a current
// schema does nothing; Up on a schema newer than the code fails with
// SchemaMismatch. On database/sql the migrations run on one connection of
// the pool with search_path set to the schema; that connection is closed
// afterwards, never returned to the pool.
func (b *Backend) Migrate(ctx context.Context, dir Direction) error {
	if b.closed.Load() {
		return errClosed()
	}
	switch dir {
	case Up:
		return b.migrateUp(ctx)
	case Down:
		return withMigrate(ctx, b.client, b.schema, func(m *migrate.Migrate) error { return m.Down() })
	}
	return invalid("unknown migration direction")
}

// Force sets the recorded migration version of the backend's schema to
// version (-1 for none) and clears the dirty flag, without running any
// migration: the repair step after a migration failed halfway.
func (b *Backend) Force(ctx context.Context, version int) error {
	if b.closed.Load() {
		return errClosed()
	}
	if version < -1 || version > int(latestVersion) {
		return invalid(fmt.Sprintf("version must be within -1 and %d", latestVersion))
	}
	return withMigrate(ctx, b.client, b.schema, func(m *migrate.Migrate) error { return m.Force(version) })
}

func (b *Backend) migrateUp(ctx context.Context) error {
	s, err := b.readStatus(ctx)
	if err != nil {
		return err
	}
	if s.Current() {
		return nil
	}
	// A dirty flag read here, outside golang-migrate's lock, may be a
	// concurrent migrator's work in progress: only m.Up, under the lock,
	// tells (and fails with ErrDirty if it is real).
	if !s.Dirty && s.Version > s.Latest {
		return s.Err()
	}
	err = withMigrate(ctx, b.client, b.schema, func(m *migrate.Migrate) error { return m.Up() })
	if err != nil {
		return err
	}
	// Another process may have migrated further meanwhile.
	s, err = b.readStatus(ctx)
	if err != nil {
		return err
	}
	return s.Err()
}

// The statements of ensureSchema.
const (
	schemaExistsSQL = `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)`
	schemaLockSQL   = `SELECT pg_advisory_xact_lock($1::bigint)`
)

// ensureSchema creates schema unless it exists, serialized by a
// transaction-scoped advisory lock (concurrent CREATE SCHEMA IF NOT EXISTS
// can otherwise fail with a unique violation).
func ensureSchema(ctx context.Context, t client, schema string) error {
	var exists bool
	if _, err := t.querier().queryRow(ctx, read, schemaExistsSQL, []any{schema}, &exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte("durable schema " + schema))
	lockID := int64(h.Sum64())
	create := `CREATE SCHEMA IF NOT EXISTS ` + quoteIdent(schema)
	if t.pool != nil {
		tx, err := t.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(ctx, schemaLockSQL, lockID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, create); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, schemaLockSQL, lockID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, create); err != nil {
		return err
	}
	return tx.Commit()
}

// withMigrate runs f on a golang-migrate instance for schema: the iofs
// source over the embedded files and a golang-migrate database driver
// whose connection has search_path = schema (see migrateDriver).
func withMigrate(ctx context.Context, t client, schema string, f func(*migrate.Migrate) error) error {
	if err := ensureSchema(ctx, t, schema); err != nil {
		return classify(ctx, err, write)
	}
	drv, name, err := t.migrateDriver(ctx, schema)
	if err != nil {
		return migrationError(ctx, err)
	}
	src, err := iofs.New(migrationFS, "migrations")
	if err != nil {
		_ = drv.Close()
		return migrationError(ctx, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, name, drv)
	if err != nil {
		_ = src.Close()
		_ = drv.Close()
		return migrationError(ctx, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		m.LockTimeout = max(time.Until(dl), time.Second)
	}
	err = f(m)
	srcErr, dbErr := m.Close()
	if err == nil {
		err = errors.Join(srcErr, dbErr)
	}
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return migrationError(ctx, err)
}

// migrateDriver returns golang-migrate's database driver for schema and its
// name. Both drivers use golang-migrate's PostgreSQL version table and the
// same advisory lock (derived from the database, the schema and the table
// name), so migrators on pgx and on database/sql serialize with each other.
//
//   - On a pgx pool: the pgx/v5 driver on a database/sql handle of its own
//     (pgx's stdlib) whose connections have search_path = schema, opened
//     with the pool's connection settings and closed afterwards.
//   - On a database/sql pool: the postgres driver (database/sql only; its
//     lib/pq dependency is for error details) on one connection taken from
//     the pool, with SET search_path. That connection is dropped
//     afterwards, never returned to the caller's pool with its search_path
//     changed.
func (t client) migrateDriver(ctx context.Context, schema string) (database.Driver, string, error) {
	if t.pool != nil {
		cc := t.pool.Config().ConnConfig.Copy()
		if cc.RuntimeParams == nil {
			cc.RuntimeParams = map[string]string{}
		}
		cc.RuntimeParams["search_path"] = quoteIdent(schema)
		db := stdlib.OpenDB(*cc)
		db.SetMaxOpenConns(2)
		drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{SchemaName: schema, MigrationsTable: MigrationsTable})
		if err != nil {
			_ = db.Close()
			return nil, "", err
		}
		return drv, "pgx5", nil
	}
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, "", err
	}
	if _, err := conn.ExecContext(ctx, "SET search_path TO "+quoteIdent(schema)); err != nil {
		dropConn(conn)
		return nil, "", err
	}
	drv, err := pgmigrate.WithConnection(ctx, conn, &pgmigrate.Config{SchemaName: schema, MigrationsTable: MigrationsTable})
	if err != nil {
		dropConn(conn)
		return nil, "", err
	}
	return connDriver{Driver: drv, conn: conn}, "postgres", nil
}

// connDriver is golang-migrate's driver on one connection of a caller's
// pool. Close drops the connection (its session has a changed search_path)
// instead of closing the driver, which would return it to the pool.
type connDriver struct {
	database.Driver
	conn *sql.Conn
}

func (d connDriver) Close() error {
	dropConn(d.conn)
	return nil
}

// dropConn closes conn's driver connection and removes it from its pool:
// database/sql discards a connection whose Raw function returns
// driver.ErrBadConn.
func dropConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// migrationError maps golang-migrate's errors, whose text may quote SQL.
func migrationError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return SchemaStatus{Version: uint(max(dirty.Version, 0)), Dirty: true, Latest: latestVersion}.Err()
	}
	if errors.Is(err, migrate.ErrLockTimeout) {
		return &contract.Error{Code: contract.Unavailable, Msg: "timed out waiting for the migration lock", Err: err}
	}
	// golang-migrate's database.Error does not unwrap; its OrigErr is the
	// driver error.
	var dbErr database.Error
	var dbErrP *database.Error
	switch {
	case errors.As(err, &dbErr) && dbErr.OrigErr != nil:
		err = dbErr.OrigErr
	case errors.As(err, &dbErrP) && dbErrP.OrigErr != nil:
		err = dbErrP.OrigErr
	}
	_, isServer := sqlState(err)
	var connErr *pgconn.ConnectError
	var netErr net.Error
	if isServer || errors.As(err, &connErr) || poolClosed(err) || errors.Is(err, driver.ErrBadConn) ||
		errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) {
		e := classify(ctx, err, write)
		var ce *contract.Error
		if errors.As(e, &ce) && ce.Code == contract.Unknown && strings.HasPrefix(ce.Msg, "database error") {
			ce.Msg = "migration failed" + strings.TrimPrefix(ce.Msg, "database error")
		}
		return e
	}
	if errors.Is(err, fs.ErrNotExist) {
		// The database is at a version the embedded files do not have.
		return &contract.Error{Code: contract.SchemaMismatch, Msg: "database schema version is unknown to this code", Err: err}
	}
	return &contract.Error{Code: contract.Unknown, Msg: "migration failed", Err: err}
}

// prepareSchema migrates or verifies the backend's schema per mode.
func (b *Backend) prepareSchema(ctx context.Context, mode MigrateMode) error {
	switch mode {
	case MigrateOff:
		return nil
	case MigrateVerify:
		s, err := b.readStatus(ctx)
		if err != nil {
			return err
		}
		return s.Err()
	}
	return b.migrateUp(ctx)
}
