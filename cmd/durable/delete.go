package main

import (
	"context"
	"fmt"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func runDelete(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "delete", "workflow|key|lease ID --yes",
		"Delete one record whatever its state: a workflow by id, an idempotency key by\n"+
			"key, or a lease by resource. It is the way out for a record that cannot be\n"+
			"decoded (error 'corrupt record'), and for a claim or lease known to be\n"+
			"abandoned. Deleting a live claim or lease lets another caller take it over at\n"+
			"once; the holder's fenced writes are rejected from then on. Needs --yes.")
	scope := fs.String("scope", "", "the record's scope (default: the unscoped namespace)")
	tenant := fs.String("tenant", "", "derive the scope from this tenant id (durable.TenantScope)")
	yes := fs.Bool("yes", false, "really delete")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want a kind (workflow, key or lease) and an id")
	}
	if *scope != "" && *tenant != "" {
		return usagef("--scope and --tenant are exclusive")
	}
	kind := contract.RecordKind(fs.Arg(0))
	if kind != contract.KindWorkflow && kind != contract.KindKey && kind != contract.KindLease {
		return usagef("unknown kind %q: want workflow, key or lease", kind)
	}
	if !*yes {
		return usagef("deleting a record cannot be undone: add --yes")
	}
	sc := durable.Scope(*scope)
	if *tenant != "" {
		sc = durable.TenantScope(*tenant)
	}
	store, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	found, err := store.DeleteRecord(ctx, kind, sc, fs.Arg(1))
	if err != nil {
		return err
	}
	if !found {
		fmt.Fprintf(e.stdout, "no %s %q in %s: nothing deleted\n", kind, fs.Arg(1), scopeText(sc))
		return nil
	}
	fmt.Fprintf(e.stdout, "deleted %s %q in %s\n", kind, fs.Arg(1), scopeText(sc))
	return nil
}
