package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/sqlmigrate"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
)

// Migrations are plain SQL files, NNNNNN_name.up.sql and .down.sql, in
// which every object name is qualified with the placeholder {schema}.
// [MigrationFiles] replaces it with the quoted schema name, so the
// migrations never depend on search_path (which a transaction pooler does
// not keep from one transaction to the next). The version table,
// schema_migrations (golang-migrate's layout: version bigint, dirty
// boolean), lives in the same schema.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationDir is the directory of the migration files, in migrationFS and
// in the file systems MigrationFiles returns.
const migrationDir = "migrations"

// schemaPlaceholder stands for the quoted schema in the migration files,
// as in the backend's statements (see newStatements).
const schemaPlaceholder = "{schema}"

// MigrationsTable is the name of the version table inside the schema.
const MigrationsTable = sqlmigrate.Table

// MigrationFiles returns the embedded migration files for schema, in
// directory "migrations", with every object name qualified with the
// quoted schema: plain SQL for any tool that applies golang-migrate-style
// files, with no search_path needed. The backend's own migrations read the
// same files. It fails with InvalidArgument when schema is not valid (see
// [ValidSchema]).
func MigrationFiles(schema string) (fs.FS, error) {
	if !ValidSchema(schema) {
		return nil, invalid(`schema must match [a-z_][a-z0-9_]{0,62} and not start with "pg_"`)
	}
	entries, err := fs.ReadDir(migrationFS, migrationDir)
	if err != nil {
		return nil, err
	}
	m := &memFS{dir: migrationDir, files: make(map[string][]byte, len(entries))}
	q := []byte(quoteIdent(schema))
	for _, e := range entries {
		data, err := fs.ReadFile(migrationFS, path.Join(migrationDir, e.Name()))
		if err != nil {
			return nil, err
		}
		m.files[e.Name()] = bytes.ReplaceAll(data, []byte(schemaPlaceholder), q)
		m.names = append(m.names, e.Name())
	}
	slices.Sort(m.names)
	return m, nil
}

var latestVersion = sqlmigrate.LatestVersion(migrationFS, migrationDir)

// LatestVersion is the newest migration version this code knows.
func LatestVersion() uint { return latestVersion }

// Direction is the direction of [Backend.Migrate]: [Up] or [Down]. It is
// [contract.Direction], named here for the callers of this package.
type Direction = contract.Direction

const (
	// Up applies every pending migration.
	Up = contract.MigrateUp
	// Down reverts every applied migration. It deletes all data,
	// including the fencing-token sequence: tokens restart afterwards.
	Down = contract.MigrateDown
)

// SchemaStatus is the migration state of a schema: [contract.SchemaStatus],
// named here for the callers of this package. Its Latest is
// LatestVersion().
type SchemaStatus = contract.SchemaStatus

var (
	_ contract.Migrator      = (*Backend)(nil)
	_ contract.OptionsDriver = pgDriver{}
)

// The schema methods below are the whole migration API, on whichever pool
// the backend runs. A caller with only a pool builds a backend on it with
// MigrateOff (NewBackend: no I/O then) and calls them:
//
//	b, err := postgres.NewBackend(ctx, pool, postgres.Options{Schema: "durable", Migrate: postgres.MigrateOff})
//	…
//	err = b.Migrate(ctx, postgres.Up)

// MigrationStatus reads the migration state of the backend's schema. It
// runs one read-only statement; a missing schema or version table reads as
// version 0. It reads the version table only: whether the objects of that
// version are in the schema is checked by Migrate and by opening with
// migrate=verify or migrate=auto.
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
// backend's schema, creating the schema first if it is missing. All of it
// runs in one transaction that holds golang-migrate's advisory lock for the
// schema as a transaction-level lock: concurrent callers serialize (on any
// client library, and with older versions that take the same lock for the
// session), and nothing relies on session state, so it works through a
// transaction pooler such as PgBouncer. A migration that fails rolls the
// whole transaction back: the schema keeps its previous version and is
// never left dirty.
//
// Up on a current schema does nothing, unless objects of that version are
// missing from the schema: when none of them exist (as after an older
// version migrated through a transaction pooler, which created them in
// another schema) and the version is not dirty, Up applies every migration
// again; when only some exist it fails with SchemaMismatch, which says what
// to repair. Up on a schema newer than the code fails with SchemaMismatch.
func (b *Backend) Migrate(ctx context.Context, dir Direction) error {
	if b.closed.Load() {
		return errClosed()
	}
	switch dir {
	case Up:
		return b.migrateUp(ctx)
	case Down:
		err := withMigrate(ctx, b.client, b.schema, func(m *migrate.Migrate) error { return m.Down() })
		if err == nil {
			b.tele.Load().log.Warn("durable/postgres: migrated down: every record and the token sequence are gone", "schema", b.schema)
		}
		return err
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
	err := withMigrate(ctx, b.client, b.schema, func(m *migrate.Migrate) error { return m.Force(version) })
	if err == nil {
		b.tele.Load().log.Warn("durable/postgres: migration version forced", "schema", b.schema, "version", version)
	}
	return err
}

func (b *Backend) migrateUp(ctx context.Context) error {
	s, err := b.readStatus(ctx)
	if err != nil {
		return err
	}
	if s.Current() {
		err := b.checkObjects(ctx, s)
		if err == nil || !errors.Is(err, errObjectsMissing) {
			return err
		}
		// Objects are missing: the migration, under the lock, repairs the
		// schema or says why it cannot (see pgMigration.checkVersion).
	}
	// A dirty flag read here, outside the lock, may be a concurrent
	// migrator's work in progress (an older version's, which records it
	// outside its transaction): only m.Up, under the lock, tells (and
	// fails with ErrDirty if it is real).
	if !s.Dirty && s.Version > s.Latest {
		return s.Err()
	}
	from := s.Version
	log := b.tele.Load().log
	err = runMigrate(ctx, b.client, b.schema, true, func(m *migrate.Migrate) error { return m.Up() })
	if err != nil {
		log.Error("durable/postgres: migration failed; the schema is unchanged", "schema", b.schema, "version", from, "err", err)
		return err
	}
	// Another process may have migrated further meanwhile.
	s, err = b.readStatus(ctx)
	if err != nil {
		return err
	}
	if err := s.Err(); err != nil {
		return err
	}
	if s.Version != from {
		log.Info("durable/postgres: migrated", "schema", b.schema, "from", from, "to", s.Version)
	}
	return b.checkObjects(ctx, s)
}

// prepareSchema migrates or verifies the backend's schema per mode.
func (b *Backend) prepareSchema(ctx context.Context, mode MigrateMode) error {
	return sqlmigrate.Prepare(ctx, mode, b.verifySchema, b.migrateUp)
}

// verifySchema fails unless the schema is current and holds the objects
// of its version (MigrateVerify).
func (b *Backend) verifySchema(ctx context.Context) error {
	s, err := b.readStatus(ctx)
	if err != nil {
		return err
	}
	if err := s.Err(); err != nil {
		return err
	}
	return b.checkObjects(ctx, s)
}

// --- the objects of the schema ---

// schemaObject is an object the migrations create in the schema.
type schemaObject struct {
	name    string
	relkind string // pg_class.relkind: "r" table, "S" sequence; "f" for a function (pg_proc)
	since   uint   // the migration that creates it (a function: the last one that defines it, CREATE OR REPLACE)
}

// schemaObjectList is every object of the latest version, with the
// migration that creates it. A migration that adds, renames or drops a
// table, sequence or function updates it.
var schemaObjectList = []schemaObject{
	{"workflows", "r", 1},
	{"idempotency_keys", "r", 1},
	{"leases", "r", 1},
	{"lease_tokens", "S", 1},
	{"durable_claim_key", "f", 5},
}

func (o schemaObject) kind() string {
	switch o.relkind {
	case "S":
		return "sequence"
	case "f":
		return "function"
	}
	return "table"
}

// holdsData tells a table or sequence from a function, which holds no data
// and which its migration creates with CREATE OR REPLACE: recreating it
// loses nothing.
func (o schemaObject) holdsData() bool { return o.relkind != "f" }

// schemaObjectsSQL lists, in one catalog query, every schema (but the
// system's) that holds a relation named and kinded as one of
// schemaObjectList, or a function so named: schema and object names only,
// never data. It takes no parameters, so it runs the same on every client
// library and inside the migration transaction.
var schemaObjectsSQL = func() string {
	var rels, funcs []string
	for _, o := range schemaObjectList {
		if o.holdsData() {
			rels = append(rels, fmt.Sprintf("(c.relname = %s AND c.relkind = %s)", quoteLiteral(o.name), quoteLiteral(o.relkind)))
		} else {
			funcs = append(funcs, quoteLiteral(o.name))
		}
	}
	const userSchema = `n.nspname <> 'information_schema' AND left(n.nspname, 3) <> 'pg_'`
	return `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c ` +
		`JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace ` +
		`WHERE (` + strings.Join(rels, " OR ") + `) AND ` + userSchema + ` ` +
		`UNION SELECT n.nspname::text, p.proname::text FROM pg_catalog.pg_proc p ` +
		`JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace ` +
		`WHERE p.proname IN (` + strings.Join(funcs, ", ") + `) AND ` + userSchema + ` ORDER BY 1, 2`
}()

// catalogRow is a row of schemaObjectsSQL.
type catalogRow struct{ schema, name string }

// objectState is what schemaObjectsSQL found for a schema at a version.
type objectState struct {
	missing   []string // objects of the version absent from the schema
	present   []string // tables and sequences of the version in the schema (functions hold no data, so they do not count)
	elsewhere []string // other schemas that hold a missing object's name
}

// onlyFunctions reports whether every missing object is a function
// (created with CREATE OR REPLACE by migration since) while the tables and
// sequences are all there, and returns the earliest such migration.
func (s objectState) onlyFunctions() (since uint, ok bool) {
	for _, o := range schemaObjectList {
		if !slices.Contains(s.missing, o.name) {
			continue
		}
		if o.holdsData() {
			return 0, false
		}
		if since == 0 || o.since < since {
			since = o.since
		}
	}
	return since, since != 0
}

// analyzeObjects sorts rows into the objects version needs in schema.
func analyzeObjects(schema string, version uint, rows []catalogRow) objectState {
	var s objectState
	for _, o := range schemaObjectList {
		if o.since > version {
			continue
		}
		if slices.Contains(rows, catalogRow{schema, o.name}) {
			if o.holdsData() {
				s.present = append(s.present, o.name)
			}
			continue
		}
		s.missing = append(s.missing, o.name)
		for _, r := range rows {
			if r.name == o.name && r.schema != schema && !slices.Contains(s.elsewhere, r.schema) {
				s.elsewhere = append(s.elsewhere, r.schema)
			}
		}
	}
	slices.Sort(s.elsewhere)
	return s
}

// schemaObjects checks, with one catalog query, that the tables, the
// sequence and the function of the latest version exist in the backend's
// schema. missing names those that do not; elsewhere names the other
// schemas where objects of the missing names exist (an older version migrating through
// a transaction pooler created them in "public"). It reads names only,
// never data.
func (b *Backend) schemaObjects(ctx context.Context) (missing []string, elsewhere []string, err error) {
	s, err := b.readObjects(ctx, latestVersion)
	return s.missing, s.elsewhere, err
}

func (b *Backend) readObjects(ctx context.Context, version uint) (objectState, error) {
	var rows []catalogRow
	var r catalogRow
	err := b.do(ctx, read, func() error {
		rows = rows[:0]
		return b.q.Query(ctx, read, schemaObjectsSQL, nil, []any{&r.schema, &r.name}, func() error {
			rows = append(rows, r)
			return nil
		})
	})
	if err != nil {
		return objectState{}, err
	}
	return analyzeObjects(b.schema, version, rows), nil
}

// checkObjects returns nil when the objects that version s.Version needs
// are all in the schema (or s records no clean version), otherwise a
// SchemaMismatch error that says what is missing, where same-named tables
// are and what to do; errors.Is(err, errObjectsMissing) tells it from a
// failure to check.
func (b *Backend) checkObjects(ctx context.Context, s SchemaStatus) error {
	if s.Version == 0 || s.Dirty {
		return nil
	}
	o, err := b.readObjects(ctx, s.Version)
	if err != nil {
		return err
	}
	if len(o.missing) == 0 {
		return nil
	}
	return objectsMismatch(b.schema, s.Version, o)
}

// errObjectsMissing is the cause of the SchemaMismatch error of objects
// missing from a schema whose version says they are there.
var errObjectsMissing = errors.New("postgres: objects of the recorded schema version are missing")

// objectsMismatch explains objects missing from schema at version.
func objectsMismatch(schema string, version uint, o objectState) error {
	var b strings.Builder
	fmt.Fprintf(&b, "schema %q records version %d but ", schema, version)
	if since, ok := o.onlyFunctions(); ok {
		// Tables and sequences are all there: nothing that holds data is
		// lost, and the function's migration can simply run again.
		fmt.Fprintf(&b, "lacks %s, which ClaimKey calls: every claim fails until it exists", describeObjects(o.missing))
		switch {
		case version == since:
			fmt.Fprintf(&b, "; run `durable migrate up` (or open with migrate=auto), which applies migration %d again "+
				"(CREATE OR REPLACE FUNCTION) and touches no data", since)
		case version > since:
			fmt.Fprintf(&b, "; run `durable migrate up` (or open with migrate=auto), which applies migrations %d to %d again "+
				"(CREATE OR REPLACE FUNCTION, and later ones written to run again) and touches no data", since, version)
		default:
			fmt.Fprintf(&b, "; recreate it from migration %d (`durable migrate sql` prints the files; it is a CREATE OR "+
				"REPLACE FUNCTION and touches no data)", since)
		}
		return &contract.Error{Code: contract.SchemaMismatch, Msg: b.String(), Err: errObjectsMissing}
	}
	if len(o.present) == 0 {
		fmt.Fprintf(&b, "has none of its objects (%s)", describeObjects(o.missing))
	} else {
		fmt.Fprintf(&b, "lacks %s (it has %s)", describeObjects(o.missing), strings.Join(o.present, ", "))
	}
	if len(o.elsewhere) > 0 {
		fmt.Fprintf(&b, "; objects of those names exist in schema %s (an older durable that migrated through a transaction "+
			"pooler, such as PgBouncer in transaction mode, where search_path does not hold, created them in the role's "+
			"default schema, usually \"public\")", quoteNames(o.elsewhere))
	}
	if len(o.present) == 0 {
		fmt.Fprintf(&b, ": run `durable migrate up` (or open with migrate=auto), which creates them in %q", schema)
		if len(o.elsewhere) > 0 {
			fmt.Fprintf(&b, ", then drop the copies in %s if nothing else uses them", quoteNames(o.elsewhere))
		}
	} else {
		b.WriteString(": the schema is partly migrated, which `durable migrate up` does not repair by itself; " +
			"recreate the missing objects by hand from the migration files, or drop the remaining ones " +
			"(this deletes their data) and run `durable migrate up`")
	}
	return &contract.Error{Code: contract.SchemaMismatch, Msg: b.String(), Err: errObjectsMissing}
}

// describeObjects names objects with their kinds: "tables a, b and
// sequence c".
func describeObjects(names []string) string {
	var tables, sequences, functions []string
	for _, o := range schemaObjectList {
		if !slices.Contains(names, o.name) {
			continue
		}
		switch o.kind() {
		case "sequence":
			sequences = append(sequences, o.name)
		case "function":
			functions = append(functions, o.name)
		default:
			tables = append(tables, o.name)
		}
	}
	var parts []string
	for _, g := range []struct {
		kind  string
		names []string
	}{{"table", tables}, {"sequence", sequences}, {"function", functions}} {
		switch len(g.names) {
		case 0:
		case 1:
			parts = append(parts, g.kind+" "+g.names[0])
		default:
			parts = append(parts, g.kind+"s "+strings.Join(g.names, ", "))
		}
	}
	return strings.Join(parts, " and ")
}

// maxQuotedNames bounds the schemas a message lists (a database may hold
// many schemas of durable, one per tenant).
const maxQuotedNames = 5

// quoteNames quotes names for a message, "public" first, at most
// maxQuotedNames of them.
func quoteNames(names []string) string {
	names = slices.Clone(names)
	if i := slices.Index(names, "public"); i > 0 {
		names = slices.Insert(slices.Delete(names, i, i+1), 0, "public")
	}
	var q []string
	for _, n := range names[:min(len(names), maxQuotedNames)] {
		q = append(q, strconv.Quote(n))
	}
	s := strings.Join(q, ", ")
	if more := len(names) - maxQuotedNames; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// quoteLiteral quotes a string constant of this package (a validated
// schema name, an object name) as an SQL literal.
func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// --- running golang-migrate ---

// withMigrate runs f on a golang-migrate instance for schema: the iofs
// source over MigrationFiles(schema) and the transaction driver of
// newTxDriver, which runs everything in one transaction. It never repairs
// missing objects (see runMigrate).
func withMigrate(ctx context.Context, t client, schema string, f func(*migrate.Migrate) error) error {
	return runMigrate(ctx, t, schema, false, f)
}

// lockWait bounds the wait for the migration lock when ctx has no
// deadline (golang-migrate's default, 15 s); with a deadline the wait ends
// there.
var lockWait = migrate.DefaultLockTimeout

// runMigrate is withMigrate; with repair, a clean version whose objects
// are all missing from the schema reads as no version, so that Up applies
// every migration again (see pgMigration.checkVersion).
func runMigrate(ctx context.Context, t client, schema string, repair bool, f func(*migrate.Migrate) error) error {
	files, err := MigrationFiles(schema)
	if err != nil {
		return err
	}
	return migrationError(ctx, sqlmigrate.Run(newTxDriver(ctx, t, schema, repair), files, migrationDir, f))
}

// migrationError maps golang-migrate's and the transaction driver's
// errors.
func migrationError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if known, ok := sqlmigrate.KnownError(err, latestVersion); ok {
		return known
	}
	if errors.Is(err, migrate.ErrLockTimeout) {
		return &contract.Error{Code: contract.Unavailable, Msg: "timed out waiting for the migration lock: another migration holds it " +
			"(an older durable that migrated through a transaction pooler can leave it held by a pooled server connection " +
			"until that connection ends)", Err: err}
	}
	_, isServer := sqlState(err)
	var netErr net.Error
	inner := err
	var rb rolledBack
	if errors.As(err, &rb) {
		inner = rb.err
	}
	// classify reports a failure inside the rolled-back transaction (see
	// rolledBack) as Unavailable or Canceled, never OutcomeUnknown.
	if isServer || pgclient.IsConnectError(err) || pgclient.PoolClosed(err) || errors.Is(err, driver.ErrBadConn) ||
		errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, sql.ErrTxDone) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgclient.SafeToRetry(inner) {
		e := classify(ctx, err, write)
		var ce *contract.Error
		if errors.As(e, &ce) && ce.Code == contract.Unknown && strings.HasPrefix(ce.Msg, "database error") {
			ce.Msg = "migration failed" + strings.TrimPrefix(ce.Msg, "database error")
		}
		return e
	}
	return &contract.Error{Code: contract.Unknown, Msg: "migration failed", Err: err}
}

// --- the golang-migrate database driver ---

// pgMigration is Postgres's dialect of the shared transaction driver
// (sqlmigrate.Driver), for the backend's schema, on any client the
// backend runs on (a pgx pool, or database/sql with lib/pq, pgx's stdlib
// or another driver). It keeps no session state, so it works through a
// transaction pooler:
//
//   - begin begins one transaction, takes golang-migrate's advisory lock
//     for the schema's version table (the key its postgres and pgx drivers
//     derive from the database, the schema and the table) as a
//     transaction-level lock, and creates the schema and the version
//     table if they are missing.
//   - The driver's Version, SetVersion and Run work inside that
//     transaction; checkVersion reviews the recorded version's objects.
//   - Unlock commits it, or rolls it back when anything failed: a failed
//     migration leaves the previous version, never a dirty flag
//     (PostgreSQL's DDL is transactional).
//
// Every statement is plain text without parameters (values are literals
// of this package's own making), sent with the simple query protocol:
// no prepared statement, named or not, no SET, no search_path. Every
// object is named with its schema. Every wait ends when the context given
// to newTxDriver ends.
type pgMigration struct {
	c        client
	schema   string
	q        string // quoteIdent(schema)
	repair   bool
	progress func(MigratePhase, int) // see WithMigrateProgress
}

// newTxDriver returns the golang-migrate driver for schema on c.
func newTxDriver(ctx context.Context, c client, schema string, repair bool) *sqlmigrate.Driver {
	p := &pgMigration{c: c, schema: schema, q: quoteIdent(schema), repair: repair, progress: progressOf(ctx, schema)}
	return sqlmigrate.NewDriver(ctx, sqlmigrate.Config{
		Name:         "postgres",
		Table:        p.versionTable(),
		Begin:        p.begin,
		CheckVersion: p.checkVersion,
		TxError: func(err error) error {
			var ce *contract.Error
			if !errors.As(err, &ce) {
				err = rolledBack{err}
			}
			return err
		},
		Applying:   func(v int) { p.progress(PhaseApplying, v) },
		Committing: func() { p.progress(PhaseCommitting, 0) },
		// begin bounds its wait for the lock itself (lockWait or ctx's
		// deadline) and ends it when ctx ends. golang-migrate's own
		// timeout would return while the lock is still being waited for.
		LockTimeout: 100 * 365 * 24 * time.Hour,
	})
}

func (p *pgMigration) versionTable() string { return p.q + "." + MigrationsTable }

// begin begins the migration transaction on ctx (the driver's) and takes
// the lock in it.
func (p *pgMigration) begin(ctx context.Context) (sqlmigrate.Tx, error) {
	lctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		lctx, cancel = context.WithTimeout(ctx, lockWait)
	}
	defer cancel()
	// The transaction lives on ctx (database/sql rolls a transaction back
	// when the context of BeginTx ends), the waits on lctx.
	tx, err := p.c.BeginMigration(ctx)
	if err != nil {
		return nil, lockError(ctx, lctx, err)
	}
	if err := p.lock(lctx, tx); err != nil {
		tx.Rollback()
		return nil, lockError(ctx, lctx, err)
	}
	return tx, nil
}

// lockError maps a failure to take the lock: the wait (on lctx) ran out of
// time (lockWait, or ctx's deadline) → migrate.ErrLockTimeout; anything
// else happened inside a transaction that is rolled back.
func lockError(ctx, lctx context.Context, err error) error {
	if lctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%w (%w)", migrate.ErrLockTimeout, rolledBack{err})
	}
	return rolledBack{err}
}

// lock takes the migration lock in tx and creates the schema and the
// version table if they are missing.
func (p *pgMigration) lock(ctx context.Context, tx migrationTx) error {
	var db string
	if err := tx.QueryRow(ctx, `SELECT current_database()::text`, &db); err != nil {
		return err
	}
	key, err := migrationLockKey(db, p.schema)
	if err != nil {
		return err
	}
	p.progress(PhaseLocking, 0)
	if err := waitXactLock(ctx, tx, key, func() { p.progress(PhaseWaiting, 0) }); err != nil {
		return err
	}
	var schemaExists, tableExists bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = `+quoteLiteral(p.schema)+`), `+
		`EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace `+
		`WHERE n.nspname = `+quoteLiteral(p.schema)+` AND c.relname = `+quoteLiteral(MigrationsTable)+`)`,
		&schemaExists, &tableExists)
	if err != nil {
		return err
	}
	// Checked first, so that a role without CREATE can migrate a schema
	// that needs no change (CREATE … IF NOT EXISTS checks the privilege
	// before it looks).
	if !schemaExists {
		// Older versions create the schema under a lock of their own
		// (before their migration lock), which serializes this with them.
		if err := waitXactLock(ctx, tx, schemaLockKey(p.schema), func() { p.progress(PhaseWaiting, 0) }); err != nil {
			return err
		}
		if err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+p.q); err != nil {
			return err
		}
	}
	if !tableExists {
		if err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.versionTable()+
			` (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)`); err != nil {
			return err
		}
	}
	return nil
}

// migrationLockKey is the advisory lock key of golang-migrate's postgres
// and pgx drivers for the version table of schema in database db, which
// they take with pg_advisory_lock (a session lock, which a transaction
// pooler does not keep): the transaction driver takes the same key as a
// transaction lock, so that it and older versions of this package
// serialize.
func migrationLockKey(db, schema string) (int64, error) {
	id, err := database.GenerateAdvisoryLockId(db, schema, MigrationsTable)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(id, 10, 64)
}

// schemaLockKey is the advisory lock key under which older versions create
// the schema.
func schemaLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("durable schema " + schema))
	return int64(h.Sum64())
}

// waitXactLock takes the transaction-level advisory lock key in tx,
// waiting for it until ctx ends. It polls pg_try_advisory_xact_lock rather
// than waiting in pg_advisory_xact_lock: a waiting statement ended by its
// context leaves a server process queued for the lock, and, where a
// client library does not send a cancel request (pgx) or a pooler cannot
// forward it, queued until the lock comes free, which in the very case
// this driver exists for (a session lock that an older version left held
// on a pooled server connection) may be never.
func waitXactLock(ctx context.Context, tx migrationTx, key int64, waiting func()) error {
	stmt := `SELECT pg_try_advisory_xact_lock(` + strconv.FormatInt(key, 10) + `)`
	delay := 5 * time.Millisecond
	for tries := 0; ; tries++ {
		var ok bool
		if err := tx.QueryRow(ctx, stmt, &ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if tries == 0 {
			waiting()
		}
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// checkVersion reviews a clean recorded version v. A version whose
// objects are missing from the schema is a SchemaMismatch, except that
// with repair, when none of its tables and sequences exist, it reads as no
// version (Up then creates them all), and when only a function is
// missing, created by the recorded version's own migration or an earlier
// one, it reads as the version before that migration (Up then applies
// that migration again, CREATE OR REPLACE FUNCTION, and the ones after
// it, which are written to run again: IF NOT EXISTS, IF EXISTS).
func (p *pgMigration) checkVersion(ctx context.Context, tx sqlmigrate.Tx, v int) (int, error) {
	var rows []catalogRow
	var r catalogRow
	if err := tx.Query(ctx, schemaObjectsSQL, []any{&r.schema, &r.name}, func() error {
		rows = append(rows, r)
		return nil
	}); err != nil {
		return 0, err
	}
	o := analyzeObjects(p.schema, uint(v), rows)
	switch {
	case len(o.missing) == 0:
		return v, nil
	case len(o.present) == 0 && p.repair:
		return database.NilVersion, nil
	}
	if since, ok := o.onlyFunctions(); ok && p.repair && uint(v) >= since {
		return int(since) - 1, nil
	}
	return 0, objectsMismatch(p.schema, uint(v), o)
}

// rolledBack marks a failure inside the migration transaction before its
// COMMIT: the transaction is rolled back, so nothing of it was applied.
// classify reports it (when it is no server error) as Unavailable, or
// Canceled when the context ended, never OutcomeUnknown.
type rolledBack struct{ err error }

func (e rolledBack) Error() string     { return e.err.Error() }
func (e rolledBack) Unwrap() error     { return e.err }
func (e rolledBack) SafeToRetry() bool { return true }

// --- the migration transaction on each client library ---

// migrationTx is the migration transaction, on whichever client
// library the backend runs (see pgclient.MigrationTx).
type migrationTx = pgclient.MigrationTx

// --- MigrationFiles' file system ---

// memFS is a read-only file system of one directory of files held in
// memory: the migration files with the schema substituted.
type memFS struct {
	dir   string            // the directory's name
	files map[string][]byte // base name → content
	names []string          // the base names, sorted
}

func (m *memFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	switch name {
	case ".":
		return &memDir{info: memInfo{name: ".", dir: true}, entries: []fs.DirEntry{fs.FileInfoToDirEntry(memInfo{name: m.dir, dir: true})}}, nil
	case m.dir:
		entries := make([]fs.DirEntry, len(m.names))
		for i, n := range m.names {
			entries[i] = fs.FileInfoToDirEntry(memInfo{name: n, size: int64(len(m.files[n]))})
		}
		return &memDir{info: memInfo{name: m.dir, dir: true}, entries: entries}, nil
	}
	if dir, base := path.Split(name); dir == m.dir+"/" {
		if data, ok := m.files[base]; ok {
			return &memFile{info: memInfo{name: base, size: int64(len(data))}, Reader: bytes.NewReader(data)}, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// memInfo is the fs.FileInfo of a memFS file or directory.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }

type memFile struct {
	info memInfo
	*bytes.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

type memDir struct {
	info    memInfo
	entries []fs.DirEntry
	off     int
}

func (d *memDir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *memDir) Close() error               { return nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("is a directory")}
}

func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.off += n
	return slices.Clone(rest[:n]), nil
}
