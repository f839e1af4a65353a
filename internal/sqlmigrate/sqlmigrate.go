// Package sqlmigrate is what the SQL backends (Postgres, SQLite) share
// about their versioned schema: golang-migrate's database driver running
// every migration in one transaction ([Driver]), running golang-migrate
// on it ([Run]), the errors every backend maps the same way
// ([KnownError]), the migrate modes ([Prepare]), the doctor's schema check
// ([SchemaCheck]) and the latest version of a set of migration files
// ([LatestVersion]).
//
// A backend supplies its dialect through [Config]: how to begin the
// locked transaction, the statements on it ([Tx]), and what to check of a
// recorded version. Its SQL, its locks and the classification of its
// client library's errors stay in the backend's package.
package sqlmigrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"go.uber.org/multierr"
)

// Table is the name of golang-migrate's version table (version, dirty),
// which every SQL backend keeps in its schema.
const Table = "schema_migrations"

// LatestVersion is the highest version among the NNNNNN_name.up.sql files
// of dir in files. It panics on a file name without a version, which the
// embedded files of a backend never have (a test of the backend reads
// them).
func LatestVersion(files fs.FS, dir string) uint {
	entries, err := fs.ReadDir(files, dir)
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
			panic("sqlmigrate: bad migration file name " + e.Name())
		}
		latest = max(latest, uint(v))
	}
	return latest
}

// Tx is the one transaction of a migration, which [Config.Begin] begins
// and locks. Its statements carry no parameters: values are literals of
// the backend's own making.
type Tx interface {
	// Exec runs sql, which may hold several statements.
	Exec(ctx context.Context, sql string) error
	// Query scans every row of sql into dest, calling row after each.
	Query(ctx context.Context, sql string, dest []any, row func() error) error
	// Commit commits the transaction. It ends the transaction whether or
	// not it succeeds.
	Commit(ctx context.Context) error
	// Rollback ends the transaction; a failure leaves nothing to do.
	Rollback()
}

// Rows is what EachRow reads: *sql.Rows, or pgx.Rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// EachRow scans every row of rows into dest, calling row after each, and
// returns the first failure, rows.Err included: the loop of [Tx.Query].
// The caller closes rows.
func EachRow(rows Rows, dest []any, row func() error) error {
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := row(); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Config is a backend's dialect of [Driver].
type Config struct {
	// Name names the backend in the driver's own errors ("postgres").
	Name string
	// Table is the version table as the statements name it (qualified
	// with the schema where the backend has one).
	Table string
	// Begin begins the migration transaction on ctx, takes the backend's
	// migration lock and creates the schema and the version table if they
	// are missing. On failure it leaves no transaction open.
	Begin func(ctx context.Context) (Tx, error)
	// CheckVersion, when set, reviews a clean recorded version above 0
	// inside the transaction (Postgres checks the version's objects): it
	// returns the version golang-migrate should see, or an error.
	CheckVersion func(ctx context.Context, tx Tx, version int) (int, error)
	// TxError, when set, maps the failure of a statement inside the
	// transaction, which Unlock then rolls back.
	TxError func(error) error
	// Applying, when set, hears that the migration to version begins
	// (migrating down: the version being reverted to).
	Applying func(version int)
	// Committing, when set, hears that the transaction commits.
	Committing func()
	// LockTimeout is golang-migrate's wait for Lock; zero keeps
	// golang-migrate's default. A Begin that bounds its own wait sets it
	// long, so that golang-migrate does not return while Begin still
	// waits.
	LockTimeout time.Duration
}

// Driver is golang-migrate's database.Driver for a SQL backend's schema.
// It keeps no session state:
//
//   - Lock begins one transaction and takes the backend's migration lock
//     in it ([Config.Begin]);
//   - Version, SetVersion and Run work inside that transaction;
//   - Unlock commits it, or rolls it back when anything failed: a failed
//     migration leaves the previous version, never a dirty flag (the
//     DDL of both PostgreSQL and SQLite is transactional).
//
// Every wait ends when the context given to [NewDriver] ends, or when
// the driver is closed.
type Driver struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	tx     Tx   // the transaction holding the lock; nil when unlocked
	failed bool // a statement of tx failed: Unlock rolls back
}

var _ database.Driver = (*Driver)(nil)

// NewDriver returns a driver on cfg whose statements run on ctx.
func NewDriver(ctx context.Context, cfg Config) *Driver {
	dctx, cancel := context.WithCancel(ctx)
	return &Driver{cfg: cfg, ctx: dctx, cancel: cancel}
}

// Open is not supported: the backend builds its driver on its own
// connections.
func (d *Driver) Open(string) (database.Driver, error) {
	return nil, errors.New(d.cfg.Name + ": the migration driver runs on a backend's connections and is not opened by URL")
}

// Close ends a wait for the lock and rolls back a transaction still open.
// The backend's connections stay open.
func (d *Driver) Close() error {
	d.cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tx != nil {
		d.tx.Rollback()
		d.tx = nil
	}
	return nil
}

// Drop is not supported: Down reverts the migrations instead.
func (d *Driver) Drop() error {
	return errors.New(d.cfg.Name + ": Drop is not supported; migrate down instead")
}

// Lock begins the transaction and takes the migration lock in it.
func (d *Driver) Lock() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tx != nil {
		return database.ErrLocked
	}
	tx, err := d.cfg.Begin(d.ctx)
	if err != nil {
		return err
	}
	d.tx, d.failed = tx, false
	return nil
}

// locked runs f on the locked transaction, marking it failed when f fails.
func (d *Driver) locked(f func(tx Tx) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tx == nil {
		return database.ErrNotLocked
	}
	err := f(d.tx)
	if err != nil {
		d.failed = true
		if d.cfg.TxError != nil {
			err = d.cfg.TxError(err)
		}
	}
	return err
}

// Unlock commits the transaction, or rolls it back when a statement in it
// failed (golang-migrate then reports that failure).
func (d *Driver) Unlock() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tx == nil {
		return database.ErrNotLocked
	}
	tx, failed := d.tx, d.failed
	d.tx = nil
	if failed {
		tx.Rollback()
		return nil
	}
	if d.cfg.Committing != nil {
		d.cfg.Committing()
	}
	return tx.Commit(d.ctx)
}

// Run runs one migration file, which may hold several statements.
func (d *Driver) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	return d.locked(func(tx Tx) error { return tx.Exec(d.ctx, string(body)) })
}

// SetVersion records version (NilVersion: none) and dirty, in one round
// trip.
func (d *Driver) SetVersion(version int, dirty bool) error {
	if dirty && d.cfg.Applying != nil {
		// golang-migrate marks the version dirty before it runs the file.
		d.cfg.Applying(version)
	}
	stmt := `DELETE FROM ` + d.cfg.Table
	if version >= 0 || (version == database.NilVersion && dirty) {
		stmt += fmt.Sprintf(`; INSERT INTO %s (version, dirty) VALUES (%d, %t)`, d.cfg.Table, version, dirty)
	}
	return d.locked(func(tx Tx) error { return tx.Exec(d.ctx, stmt) })
}

// Version reads the recorded version, which [Config.CheckVersion] reviews
// when it is clean.
func (d *Driver) Version() (version int, dirty bool, err error) {
	err = d.locked(func(tx Tx) error {
		var v int64
		var found bool
		err := tx.Query(d.ctx, `SELECT version, dirty FROM `+d.cfg.Table+` LIMIT 1`, []any{&v, &dirty}, func() error {
			found = true
			return nil
		})
		switch {
		case err != nil:
			return err
		case !found:
			version, dirty = database.NilVersion, false
			return nil
		}
		version = int(v)
		if dirty || v < 1 || d.cfg.CheckVersion == nil {
			return nil
		}
		version, err = d.cfg.CheckVersion(d.ctx, tx, version)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return version, dirty, nil
}

// Run runs f on a golang-migrate instance over the migration files in dir
// of files and drv, and closes both. golang-migrate's ErrNoChange is
// success; any other error is returned as it is, for the backend to map
// ([KnownError], then its own classification), except that unreadable
// files are an Unknown *contract.Error.
func Run(drv *Driver, files fs.FS, dir string, f func(*migrate.Migrate) error) error {
	src, err := iofs.New(files, dir)
	if err != nil {
		_ = drv.Close()
		return &contract.Error{Code: contract.Unknown, Msg: "reading the embedded migrations failed", Err: err}
	}
	m, err := migrate.NewWithInstance("iofs", src, "durable-"+drv.cfg.Name, drv)
	if err != nil {
		_ = src.Close()
		_ = drv.Close()
		return err
	}
	if drv.cfg.LockTimeout > 0 {
		m.LockTimeout = drv.cfg.LockTimeout
	}
	err = f(m)
	srcErr, dbErr := m.Close()
	if err == nil {
		err = multierr.Combine(srcErr, dbErr)
	}
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// KnownError maps the failures of [Run] that mean the same on every SQL
// backend: a *contract.Error is returned as it is; golang-migrate's
// ErrDirty becomes the dirty status's SchemaMismatch; a recorded version
// the embedded files do not have (fs.ErrNotExist) is a SchemaMismatch.
// It reports false for any other error (and nil), which the backend
// classifies.
func KnownError(err error, latest uint) (error, bool) {
	if err == nil {
		return nil, false
	}
	var ce *contract.Error
	if errors.As(err, &ce) {
		return ce, true
	}
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return contract.SchemaStatus{Version: uint(max(dirty.Version, 0)), Dirty: true, Latest: latest}.Err(), true
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &contract.Error{Code: contract.SchemaMismatch, Msg: "database schema version is unknown to this code: upgrade the code", Err: err}, true
	}
	return nil, false
}

// Prepare does what opening a backend does about its schema per mode:
// nothing (MigrateOff), verify (MigrateVerify: fail unless the schema is
// current) or up (MigrateAuto: migrate it up).
func Prepare(ctx context.Context, mode contract.MigrateMode, verify, up func(context.Context) error) error {
	switch mode {
	case contract.MigrateOff:
		return nil
	case contract.MigrateVerify:
		return verify(ctx)
	}
	return up(ctx)
}

// SchemaCheck is the doctor's "schema" check of a status, or of the
// failure (err, a *contract.Error) to read it. A backend with more to
// check of a current schema does so when the check is OK.
func SchemaCheck(st contract.SchemaStatus, err error) contract.Check {
	c := contract.Check{Name: "schema"}
	switch {
	case err != nil:
		c.Detail, c.Err = err.Error(), err
	case st.Dirty:
		c.Detail = fmt.Sprintf("%s is dirty at version %d", st.Schema, st.Version)
		c.Hint = "repair the schema by hand, then run 'durable migrate force <version>'"
		c.Err = st.Err()
	case st.Version > st.Latest:
		c.Detail = fmt.Sprintf("%s is at version %d, newer than this binary's %d", st.Schema, st.Version, st.Latest)
		c.Hint = "upgrade durable"
		c.Err = st.Err()
	case st.Version < st.Latest:
		c.Detail = fmt.Sprintf("%s is at version %d of %d", st.Schema, st.Version, st.Latest)
		c.Hint = "run 'durable migrate up' (or open with migrate=auto)"
		c.Err = st.Err()
	default:
		c.OK, c.Detail = true, fmt.Sprintf("%s at version %d (latest)", st.Schema, st.Version)
	}
	return c
}
