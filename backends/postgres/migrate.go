package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
	Version uint // the applied version; 0 when none is
	Dirty   bool // a migration failed halfway and needs repair and Force
	Latest  uint // LatestVersion()
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

func checkSchemaName(schema string) error {
	if !ValidSchema(schema) {
		return invalid(`schema must match [a-z_][a-z0-9_]{0,62} and not start with "pg_"`)
	}
	return nil
}

// MigrationStatus reads the migration state of schema. It runs one
// read-only statement; a missing schema or version table reads as version
// 0.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool, schema string) (SchemaStatus, error) {
	if err := checkSchemaName(schema); err != nil {
		return SchemaStatus{}, err
	}
	return readStatus(ctx, pgxQuerier{pool}, newStatements(schema))
}

func readStatus(ctx context.Context, q querier, st *statements) (SchemaStatus, error) {
	s := SchemaStatus{Latest: latestVersion}
	var version int64
	found, err := q.queryRow(ctx, st.schemaVersion, nil, &version, &s.Dirty)
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "42P01" || pg.Code == "3F000") {
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

// Migrate applies (Up) or reverts (Down) the embedded migrations in schema,
// creating the schema first if it is missing. It holds golang-migrate's
// advisory lock for the schema, so concurrent callers serialize. Up on a
// current schema does nothing; Up on a schema newer than the code fails
// with SchemaMismatch.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, dir Direction) error {
	if err := checkSchemaName(schema); err != nil {
		return err
	}
	switch dir {
	case Up:
		return migrateUp(ctx, pool, schema)
	case Down:
		return withMigrate(ctx, pool, schema, func(m *migrate.Migrate) error { return m.Down() })
	}
	return invalid("unknown migration direction")
}

// Force sets the recorded migration version of schema to version (-1 for
// none) and clears the dirty flag, without running any migration: the
// repair step after a migration failed halfway.
func Force(ctx context.Context, pool *pgxpool.Pool, schema string, version int) error {
	if err := checkSchemaName(schema); err != nil {
		return err
	}
	if version < -1 || version > int(latestVersion) {
		return invalid(fmt.Sprintf("version must be within -1 and %d", latestVersion))
	}
	return withMigrate(ctx, pool, schema, func(m *migrate.Migrate) error { return m.Force(version) })
}

func migrateUp(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	st := newStatements(schema)
	s, err := readStatus(ctx, pgxQuerier{pool}, st)
	if err != nil {
		return err
	}
	if s.Current() {
		return nil
	}
	if s.Dirty || s.Version > s.Latest {
		return s.Err()
	}
	err = withMigrate(ctx, pool, schema, func(m *migrate.Migrate) error { return m.Up() })
	if err != nil {
		return err
	}
	// Another process may have migrated further meanwhile.
	s, err = readStatus(ctx, pgxQuerier{pool}, st)
	if err != nil {
		return err
	}
	return s.Err()
}

// ensureSchema creates schema unless it exists, serialized by a
// transaction-scoped advisory lock (concurrent CREATE SCHEMA IF NOT EXISTS
// can otherwise fail with a unique violation).
func ensureSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)`, schema).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	h := fnv.New64a()
	h.Write([]byte("durable schema " + schema))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::bigint)`, int64(h.Sum64())); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoteIdent(schema)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// withMigrate runs f on a golang-migrate instance for schema: the iofs
// source over the embedded files and the pgx/v5 database driver on a
// database/sql handle whose connections have search_path = schema. The
// handle opens its own connections with the pool's connection settings.
func withMigrate(ctx context.Context, pool *pgxpool.Pool, schema string, f func(*migrate.Migrate) error) error {
	if err := ensureSchema(ctx, pool, schema); err != nil {
		return classify(ctx, err, write)
	}
	cc := pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["search_path"] = quoteIdent(schema)
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(2)
	drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{SchemaName: schema, MigrationsTable: MigrationsTable})
	if err != nil {
		_ = db.Close()
		return migrationError(ctx, err)
	}
	src, err := iofs.New(migrationFS, "migrations")
	if err != nil {
		_ = drv.Close()
		return migrationError(ctx, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
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
	var pg *pgconn.PgError
	var connErr *pgconn.ConnectError
	if errors.As(err, &pg) || errors.As(err, &connErr) || errors.Is(err, sql.ErrConnDone) {
		e := classify(ctx, err, write)
		var ce *contract.Error
		if errors.As(e, &ce) && ce.Code == contract.Unknown && ce.Msg == "database error" {
			ce.Msg = "migration failed"
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
		s, err := readStatus(ctx, b.q, b.st)
		if err != nil {
			return err
		}
		return s.Err()
	}
	return migrateUp(ctx, b.pool, b.schema)
}
