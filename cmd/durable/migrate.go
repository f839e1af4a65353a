package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/durable-go/durable/backends/postgres"
)

func runMigrate(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "migrate", "up|down|status|force VERSION",
		"Manage the Postgres schema of durable (the schema named by the DSN's schema\n"+
			"parameter, default \"durable\"):\n\n"+
			"  up       apply every pending migration\n"+
			"  down     revert every migration (drops durable's tables: all data is lost)\n"+
			"  status   print the applied and the latest version, and whether it is dirty\n"+
			"  force N  record version N (-1 for none) and clear the dirty flag without\n"+
			"           running anything: the repair step after a migration failed halfway")
	yes := fs.Bool("yes", false, "confirm 'down', which deletes all of durable's data")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want a subcommand: up, down, status or force VERSION")
	}
	sub := fs.Arg(0)
	var version int
	switch sub {
	case "up", "down", "status":
		if fs.NArg() != 1 {
			return usagef("%s takes no arguments", sub)
		}
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
		return usagef("unknown subcommand %q: want up, down, status or force", sub)
	}
	if sub == "down" && !*yes {
		return usagef("'migrate down' drops durable's tables and all their data; pass --yes to confirm")
	}
	d, err := resolveDSN(*dsn)
	if err != nil {
		return err
	}
	if !isPostgres(d) {
		return usagef("migrate needs a postgres:// DSN; other backends have no schema")
	}
	b, err := openPostgresNoMigrate(ctx, d)
	if err != nil {
		return err
	}
	defer b.Close()
	schema := b.Schema()

	switch sub {
	case "up":
		if err := b.Migrate(ctx, postgres.Up); err != nil {
			return err
		}
	case "down":
		if err := b.Migrate(ctx, postgres.Down); err != nil {
			return err
		}
	case "force":
		if err := b.Force(ctx, version); err != nil {
			return err
		}
	}
	st, err := b.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	state := "current"
	switch {
	case st.Dirty:
		state = "dirty: repair the schema by hand, then run 'durable migrate force <version>'"
	case st.Version < st.Latest:
		state = "behind: run 'durable migrate up'"
	case st.Version > st.Latest:
		state = "newer than this binary: upgrade durable"
	}
	fmt.Fprintf(e.stdout, "schema %s: version %d, latest %d, %s\n", schema, st.Version, st.Latest, state)
	if sub == "status" && (st.Dirty || st.Version > st.Latest) {
		return fmt.Errorf("schema is not usable: %w", st.Err())
	}
	return nil
}
