package main

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

func runMigrate(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "migrate", "up|down|status|force VERSION|sql [up|down]",
		"Manage the schema of a backend that has one, such as Postgres (there, the\n"+
			"schema named by the DSN's schema parameter, default \"durable\"). The DSN is\n"+
			"read exactly as the application reads it; only its migrate mode is set\n"+
			"aside, so that opening neither changes nor checks the schema:\n\n"+
			"  up       apply every pending migration\n"+
			"  down     revert every migration (drops durable's tables: all data is lost)\n"+
			"  status   print the applied and the latest version, and whether it is dirty;\n"+
			"           exits 3 unless the schema is current (behind, dirty or newer)\n"+
			"  force N  record version N (-1 for none) and clear the dirty flag without\n"+
			"           running anything: the repair step after a migration failed halfway\n"+
			"  sql [up|down]\n"+
			"           print the SQL of the migrations (default up; --version N for one)\n"+
			"           for the DSN's schema or --schema, to embed in your own migration\n"+
			"           tool; it must record the version in <schema>.schema_migrations\n"+
			"           (version bigint, dirty boolean) for migrate=verify to accept it\n\n"+
			"up, down and force show on stderr what the migration is doing (waiting for\n"+
			"another migrator's lock, applying migration N, committing): a live line on a\n"+
			"terminal, otherwise a line per phase and every --progress; --quiet silences it.")
	yes := fs.Bool("yes", false, "confirm 'down', which deletes all of durable's data")
	asJSON := jsonFlag(fs)
	sqlVersion := fs.Int("version", 0, "sql: print only migration N (default: all of them)")
	sqlSchema := fs.String("schema", "", "sql: the schema to write the SQL for (default: the DSN's; needs no DSN then)")
	quiet := fs.Bool("quiet", false, "up, down, force: no progress on stderr (the result still goes to stdout)")
	every := fs.Duration("progress", 5*time.Second, "up, down, force: when stderr is not a terminal, repeat the phase line this often (0 = only when a phase begins)")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if *every < 0 {
		return usagef("--progress must not be negative")
	}
	if fs.NArg() == 0 {
		return usagef("want a subcommand: up, down, status, force VERSION or sql [up|down]")
	}
	sub := fs.Arg(0)
	var version int
	switch sub {
	case "up", "down", "status":
		if fs.NArg() != 1 {
			return usagef("%s takes no arguments", sub)
		}
	case "sql":
		dir := "up"
		switch {
		case fs.NArg() > 2:
			return usagef("sql takes at most a direction, up or down")
		case fs.NArg() == 2:
			dir = fs.Arg(1)
			if dir != "up" && dir != "down" {
				return usagef("unknown direction %q: want up or down", dir)
			}
		}
		if *sqlVersion < 0 {
			return usagef("--version must be positive")
		}
		return migrateSQL(ctx, e, *dsn, *sqlSchema, dir, *sqlVersion, *asJSON)
	case "force":
		if fs.NArg() != 2 {
			return usagef("force needs a VERSION")
		}
		v, err := strconv.Atoi(fs.Arg(1))
		if err != nil || v < -1 {
			return usagef("VERSION must be an integer >= -1")
		}
		version = v
	default:
		return usagef("unknown subcommand %q: want up, down, status, force or sql", sub)
	}
	if sub == "down" && !*yes {
		return usagef("'migrate down' drops durable's tables and all their data; pass --yes to confirm")
	}
	store, err := openForMaintenance(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	m, ok := asMigrator(store)
	if !ok {
		return usagef("this backend has no schema to migrate (migrate is for backends with migrations, such as postgres:// and sqlite://)")
	}

	mctx := ctx
	var p *migrateProgress
	if !*quiet && sub != "status" {
		p = newMigrateProgress(e.stderr, isTerminal(e.stderr), *every, sub)
		mctx = p.start(ctx)
	}
	switch sub {
	case "up":
		err = m.Migrate(mctx, contract.MigrateUp)
	case "down":
		err = m.Migrate(mctx, contract.MigrateDown)
	case "force":
		err = m.Force(mctx, version)
	}
	if p != nil {
		p.done()
	}
	if err != nil {
		return err
	}
	st, err := m.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	state, advice := "current", ""
	switch {
	case st.Dirty:
		state, advice = "dirty", "repair the schema by hand, then run 'durable migrate force <version>'"
	case st.Version < st.Latest:
		state, advice = "behind", "run 'durable migrate up'"
	case st.Version > st.Latest:
		state, advice = "newer", "newer than this binary: upgrade durable"
	}
	if *asJSON {
		if err := writeJSON(e, migrateOut{Schema: st.Schema, Version: st.Version, Latest: st.Latest,
			Dirty: st.Dirty, State: state, Current: st.Current(), Advice: advice}); err != nil {
			return err
		}
	} else {
		text := state
		switch state {
		case "newer":
			text = advice
		case "dirty", "behind":
			text = state + ": " + advice
		}
		fmt.Fprintf(e.stdout, "schema %s: version %d, latest %d, %s\n", st.Schema, st.Version, st.Latest, text)
	}
	if sub == "status" && !st.Current() {
		// Exit code 3 (exitSchema): st.Err is a SchemaMismatch.
		return fmt.Errorf("schema needs attention: %w", st.Err())
	}
	return nil
}

type migrateOut struct {
	Schema  string `json:"schema"`
	Version uint   `json:"version"`
	Latest  uint   `json:"latest"`
	Dirty   bool   `json:"dirty"`
	State   string `json:"state"` // current, behind, dirty or newer
	Current bool   `json:"current"`
	Advice  string `json:"advice,omitempty"`
}

type migrationOut struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	File    string `json:"file"`
	SQL     string `json:"sql"`
}

type migrateSQLOut struct {
	Schema     string         `json:"schema"`
	Direction  string         `json:"direction"`
	Table      string         `json:"migrations_table"`
	Migrations []migrationOut `json:"migrations"`
}

// migrateSQL prints the SQL of the migrations for a schema: the one named
// by --schema, else the one the DSN's backend uses (opening it, so the DSN
// is read by the backend's own parser).
func migrateSQL(ctx context.Context, e *env, dsnFlag, schema, dir string, version int, asJSON bool) error {
	var files fs.FS
	table, latest := "", postgres.LatestVersion()
	if schema == "" {
		store, err := openForMaintenance(ctx, dsnFlag)
		if err != nil {
			return err
		}
		defer store.Close()
		var b interface{ Schema() string }
		var m contract.Migrator
		var lite *sqlite.Backend
		switch {
		case store.As(&lite):
			// SQLite: one schema, "main", the database file's.
			files, schema, table, latest = sqlite.MigrationFiles(), "main", sqlite.MigrationsTable, sqlite.LatestVersion()
		case !store.As(&m) || !store.As(&b):
			return usagef("this backend has no schema to migrate (migrate is for backends with migrations, such as postgres:// and sqlite://)")
		default:
			schema = b.Schema()
		}
	}
	if files == nil {
		var err error
		if files, err = postgres.MigrationFiles(schema); err != nil {
			return err
		}
		table = schema + "." + postgres.MigrationsTable
	}
	names, err := fs.Glob(files, "migrations/*."+dir+".sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	if dir == "down" {
		slices.Reverse(names)
	}
	out := migrateSQLOut{Schema: schema, Direction: dir, Table: table, Migrations: []migrationOut{}}
	for _, name := range names {
		base := path.Base(name)
		num, rest, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return fmt.Errorf("migration file %s: no version", base)
		}
		if version != 0 && v != version {
			continue
		}
		data, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		out.Migrations = append(out.Migrations, migrationOut{Version: v, Name: strings.TrimSuffix(rest, "."+dir+".sql"), File: base, SQL: string(data)})
	}
	if len(out.Migrations) == 0 {
		return usagef("no migration %d (the latest is %d)", version, latest)
	}
	if asJSON {
		return writeJSON(e, out)
	}
	for i, m := range out.Migrations {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		fmt.Fprintf(e.stdout, "-- durable migration %d (%s), %s, schema %s\n", m.Version, m.Name, dir, schema)
		fmt.Fprint(e.stdout, m.SQL)
		if !strings.HasSuffix(m.SQL, "\n") {
			fmt.Fprintln(e.stdout)
		}
	}
	return nil
}
