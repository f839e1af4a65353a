package main

import (
	"context"
	"flag"
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
	target, _ := recordFlags(fs)
	yes := fs.Bool("yes", false, "really delete")
	asJSON := jsonFlag(fs)
	if err := parse(fs, e, args); err != nil {
		return err
	}
	k, sc, id, err := target()
	if err != nil {
		return err
	}
	kind := contract.RecordKind(k)
	if !*yes {
		return usagef("deleting a record cannot be undone: add --yes")
	}
	store, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	found, err := store.DeleteRecord(ctx, kind, sc, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e, deleteOut{Kind: string(kind), Scope: string(sc), ID: id, Deleted: found})
	}
	if !found {
		fmt.Fprintf(e.stdout, "no %s %q in %s: nothing deleted\n", kind, id, scopeText(sc))
		return nil
	}
	fmt.Fprintf(e.stdout, "deleted %s %q in %s\n", kind, id, scopeText(sc))
	return nil
}

type deleteOut struct {
	Kind    string `json:"kind"`
	Scope   string `json:"scope"`
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"` // false: there was no such record
}

// recordFlags adds the --scope and --tenant flags of a command that names
// one record as "KIND ID", and returns the function that reads the kind,
// scope and id after parsing, and the one that reads the scope alone.
func recordFlags(fs *flag.FlagSet) (func() (kind string, sc durable.Scope, id string, err error), func() (durable.Scope, error)) {
	scope := fs.String("scope", "", "the record's scope (default: the unscoped namespace)")
	tenant := fs.String("tenant", "", "derive the scope from this tenant id (durable.TenantScope)")
	scopeOf := func() (durable.Scope, error) {
		if *scope != "" && *tenant != "" {
			return "", usagef("--scope and --tenant are exclusive")
		}
		if *tenant != "" {
			return durable.TenantScope(*tenant), nil
		}
		return durable.Scope(*scope), nil
	}
	return func() (string, durable.Scope, string, error) {
		if fs.NArg() != 2 {
			return "", "", "", usagef("want a kind (workflow, key or lease) and an id")
		}
		sc, err := scopeOf()
		if err != nil {
			return "", "", "", err
		}
		kind := fs.Arg(0)
		if kind != "workflow" && kind != "key" && kind != "lease" {
			return "", "", "", usagef("unknown kind %q: want workflow, key or lease", kind)
		}
		return kind, sc, fs.Arg(1), nil
	}, scopeOf
}
