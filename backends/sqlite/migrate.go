package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"

	"github.com/durable-go/durable/contract"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Migrations are plain SQL files, NNNNNN_name.up.sql and .down.sql,
// applied with golang-migrate (its iofs source) through txDriver below.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

const migrationDir = "migrations"

// MigrationsTable is golang-migrate's version table (version INTEGER,
// dirty INTEGER), in the same database.
const MigrationsTable = "schema_migrations"

var latestVersion = func() uint {
	entries, err := fs.ReadDir(migrationFS, migrationDir)
	if err != nil {
		panic(err)
	}
	var latest uint
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".up.sql") {
			continue
		}
		digits, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseUint(digits, 10, 32)
		if err != nil {
			panic("sqlite: bad migration file name " + e.Name())
		}
		latest = max(latest, uint(v))
	}
	return latest
}()

// LatestVersion is the newest migration version this code knows.
func LatestVersion() uint { return latestVersion }

// MigrationFiles returns the embedded migration files, in directory
// "migrations", for any tool that applies golang-migrate-style files.
func MigrationFiles() fs.FS { return migrationFS }

// Direction is the direction of Migrate.
type Direction int

const (
	// Up applies every pending migration.
	Up Direction = iota + 1
	// Down reverts every applied migration. It deletes all data,
	// including the fencing-token counter: tokens restart afterwards.
	Down
)

// SchemaStatus is the migration state of a database.
type SchemaStatus struct {
	Version uint // the applied version; 0 when none is
	Dirty   bool // a migration failed halfway (never left by this runner)
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
			"migration %d is dirty (it failed halfway): repair the database, then run `durable migrate force <version>`", s.Version)}
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
	s := SchemaStatus{Latest: latestVersion}
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
	switch mode {
	case MigrateOff:
		return nil
	case MigrateVerify:
		s, err := b.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		return s.Err()
	}
	return b.Migrate(ctx, Up)
}

func (b *Backend) runMigrate(ctx context.Context, f func(*migrate.Migrate) error) error {
	src, err := iofs.New(migrationFS, migrationDir)
	if err != nil {
		return &contract.Error{Code: contract.Unknown, Msg: "reading the embedded migrations failed", Err: err}
	}
	drv := &txDriver{b: b, ctx: ctx}
	m, err := migrate.NewWithInstance("iofs", src, "durable-sqlite", drv)
	if err != nil {
		_ = src.Close()
		return b.migrationError(ctx, err)
	}
	err = f(m)
	srcErr, dbErr := m.Close()
	if err == nil {
		err = errors.Join(srcErr, dbErr)
	}
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return b.migrationError(ctx, err)
}

func (b *Backend) migrationError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *contract.Error
	if errors.As(err, &ce) {
		return ce
	}
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return SchemaStatus{Version: uint(max(dirty.Version, 0)), Dirty: true, Latest: latestVersion}.Err()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &contract.Error{Code: contract.SchemaMismatch, Msg: "database schema version is unknown to this code: upgrade the code", Err: err}
	}
	if _, ok := sqliteCode(err); ok {
		e := classify(ctx, err)
		if errors.As(e, &ce) && ce.Code == contract.Unknown {
			ce.Msg = "migration failed" + codeSuffix(err)
		}
		return e
	}
	return &contract.Error{Code: contract.Unknown, Msg: "migration failed", Err: err}
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// txDriver is golang-migrate's database.Driver on the backend's write
// connection (which the caller holds):
//
//   - Lock begins one BEGIN IMMEDIATE transaction (SQLite's write lock,
//     across processes) and creates the version table if it is missing;
//   - Version, SetVersion and Run work inside it;
//   - Unlock commits it, or rolls it back when anything failed (SQLite's
//     DDL is transactional), so no migration is ever left half applied.
type txDriver struct {
	b   *Backend
	ctx context.Context

	mu     sync.Mutex
	locked bool
	failed bool
}

var _ database.Driver = (*txDriver)(nil)

func (d *txDriver) Open(string) (database.Driver, error) {
	return nil, errors.New("sqlite: the migration driver runs on a backend's connection and is not opened by URL")
}

func (d *txDriver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.locked {
		d.b.rollback()
		d.locked = false
	}
	return nil
}

func (d *txDriver) Drop() error {
	return errors.New("sqlite: Drop is not supported; migrate down instead")
}

func (d *txDriver) Lock() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.locked {
		return database.ErrLocked
	}
	err := d.b.retryBusy(d.ctx, func() error { return d.b.begin(d.ctx) })
	if err != nil {
		return err
	}
	if _, err := d.b.wc.ExecContext(d.ctx, `CREATE TABLE IF NOT EXISTS `+MigrationsTable+
		` (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`); err != nil {
		d.b.rollback()
		return err
	}
	d.locked, d.failed = true, false
	return nil
}

func (d *txDriver) Unlock() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.locked {
		return database.ErrNotLocked
	}
	d.locked = false
	if d.failed {
		d.b.rollback()
		return nil
	}
	if _, err := d.b.wc.ExecContext(d.ctx, "COMMIT"); err != nil {
		d.b.rollback()
		return err
	}
	return nil
}

func (d *txDriver) inTx(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.locked {
		return database.ErrNotLocked
	}
	if err := f(); err != nil {
		d.failed = true
		return err
	}
	return nil
}

func (d *txDriver) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	return d.inTx(func() error {
		_, err := d.b.wc.ExecContext(d.ctx, string(body))
		return err
	})
}

func (d *txDriver) SetVersion(version int, dirty bool) error {
	return d.inTx(func() error {
		if _, err := d.b.wc.ExecContext(d.ctx, `DELETE FROM `+MigrationsTable); err != nil {
			return err
		}
		if version >= 0 || (version == database.NilVersion && dirty) {
			_, err := d.b.wc.ExecContext(d.ctx, `INSERT INTO `+MigrationsTable+` (version, dirty) VALUES (?, ?)`, version, dirty)
			return err
		}
		return nil
	})
}

func (d *txDriver) Version() (version int, dirty bool, err error) {
	err = d.inTx(func() error {
		var v int64
		err := d.b.wc.QueryRowContext(d.ctx, `SELECT version, dirty FROM `+MigrationsTable+` LIMIT 1`).Scan(&v, &dirty)
		if err != nil {
			if isNoRows(err) {
				version, dirty = database.NilVersion, false
				return nil
			}
			return err
		}
		version = int(v)
		return nil
	})
	return version, dirty, err
}
