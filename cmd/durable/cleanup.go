package main

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

func runCleanup(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "cleanup", "",
		"Delete terminal workflows older than --terminal-age, completed idempotency keys past\n"+
			"their retention, and claims and leases expired beyond the clock tolerance, in\n"+
			"batches of --batch, until nothing is left. Progress goes to stderr.")
	age := fs.Duration("terminal-age", 7*24*time.Hour, "delete terminal workflows not updated for this long")
	batch := fs.Int("batch", durable.DefaultCleanupLimit, "records of each kind deleted per batch")
	dry := fs.Bool("dry-run", false, "count what would be deleted now, delete nothing")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *batch <= 0 || *batch > durable.MaxCleanupLimit {
		return usagef("--batch must be within 1 and %d", durable.MaxCleanupLimit)
	}
	if *age < 0 {
		return usagef("--terminal-age must not be negative")
	}
	store, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()

	if *dry {
		// Count in full: the limit bounds each count, so count with the
		// largest limit and say when there are even more.
		res, err := store.CountCleanup(ctx, durable.CleanupRequest{TerminalAge: *age, Limit: durable.MaxCleanupLimit})
		if err != nil {
			return err
		}
		more := ""
		if res.More {
			more = fmt.Sprintf(" (at least; counting stops at %d per kind)", durable.MaxCleanupLimit)
		}
		fmt.Fprintf(e.stdout, "would delete: %d workflows, %d keys, %d leases%s\n", res.Workflows, res.Keys, res.Leases, more)
		return nil
	}

	var total durable.CleanupResult
	for n := 1; ; n++ {
		res, err := store.Cleanup(ctx, durable.CleanupRequest{TerminalAge: *age, Limit: *batch})
		if err != nil {
			return fmt.Errorf("batch %d: %w (deleted so far: %d workflows, %d keys, %d leases)", n, err, total.Workflows, total.Keys, total.Leases)
		}
		total.Workflows += res.Workflows
		total.Keys += res.Keys
		total.Leases += res.Leases
		fmt.Fprintf(e.stderr, "batch %d: deleted %d workflows, %d keys, %d leases\n", n, res.Workflows, res.Keys, res.Leases)
		if !res.More {
			break
		}
	}
	fmt.Fprintf(e.stdout, "deleted: %d workflows, %d keys, %d leases\n", total.Workflows, total.Keys, total.Leases)
	return nil
}
