package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/durable-go/durable/backends/postgres"
)

func runMigrate(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "migrate", "up|down|status|force VERSION",
		"Manage the schema of a backend that has one, such as Postgres (there, the\n"+
			"schema named by the DSN's schema parameter, default \"durable\"). The DSN is\n"+
			"read exactly as the application reads it; only its migrate mode is set\n"+
			"aside, so that opening neither changes nor checks the schema:\n\n"+
			"  up       apply every pending migration\n"+
			"  down     revert every migration (drops durable's tables: all data is lost)\n"+
			"  status   print the applied and the latest version, and whether it is dirty;\n"+
			"           exits 3 unless the schema is current (behind, dirty or newer)\n"+
			"  force N  record version N (-1 for none) and clear the dirty flag without\n"+
			"           running anything: the repair step after a migration failed halfway")
	yes := fs.Bool("yes", false, "confirm 'down', which deletes all of durable's data")
	asJSON := jsonFlag(fs)
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
	store, err := openForMaintenance(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	var m migrator
	if !store.As(&m) {
		return usagef("this backend has no schema to migrate (migrate is for backends with migrations, such as postgres://)")
	}

	switch sub {
	case "up":
		err = m.Migrate(ctx, postgres.Up)
	case "down":
		err = m.Migrate(ctx, postgres.Down)
	case "force":
		err = m.Force(ctx, version)
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
