package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func runDoctor(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "doctor", "",
		"Check that the store is usable: that it opens and answers and, on a backend\n"+
			"that checks itself, its own checks: on Postgres the server version, the\n"+
			"pooler, the schema version, the clock skew between this host and the\n"+
			"database, and whether LISTEN works (WaitKey falls back to polling without\n"+
			"it); on SQLite the journal mode, the schema version and whether the write\n"+
			"lock can be taken; on Redis, on every primary, that the eviction policy is\n"+
			"noeviction and that the AOF is on with appendfsync always or everysec\n"+
			"(a server that refuses CONFIG GET fails as \"cannot verify\"). The DSN is read exactly as the\n"+
			"application reads it, except that opening neither changes nor checks the\n"+
			"schema. Changes nothing. Exits 3 when only the schema check fails (the schema\n"+
			"is missing, behind, dirty or newer), 1 when any other check fails.")
	asJSON := jsonFlag(fs)
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if _, err := resolveDSN(*dsn); err != nil {
		return err
	}
	checks := diagnose(ctx, *dsn)
	failed := 0
	if *asJSON {
		out := doctorOut{Checks: []checkOut{}}
		for _, c := range checks {
			co := checkOut{Name: c.Name, OK: c.OK, Detail: c.Detail}
			if !c.OK {
				failed++
				co.Hint = c.Hint
				if co.Hint == "" {
					co.Hint = hint(c.Err)
				}
				if c.Err != nil {
					co.Code = contract.CodeOf(c.Err).String()
				}
			}
			out.Checks = append(out.Checks, co)
		}
		out.OK = failed == 0
		if err := writeJSON(e, out); err != nil {
			return err
		}
		if failed > 0 {
			return doctorErr(checks, failed)
		}
		return nil
	}
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(e.stdout, "%s  %-12s %s\n", mark, c.Name, c.Detail)
		h := c.Hint
		if h == "" {
			h = hint(c.Err)
		}
		if !c.OK && h != "" {
			fmt.Fprintf(e.stdout, "      %-12s hint: %s\n", "", h)
		}
	}
	if failed > 0 {
		return doctorErr(checks, failed)
	}
	return nil
}

// diagnose opens the store and runs the backend's own checks, or, for a
// backend without them, reads once.
func diagnose(ctx context.Context, dsnFlag string) []contract.Check {
	s, err := openForMaintenance(ctx, dsnFlag)
	if err != nil {
		return []contract.Check{{Name: "connect", Detail: err.Error(), Err: err}}
	}
	defer s.Close()
	if d, ok := asDoctor(s); ok {
		return d.Doctor(ctx)
	}
	_, err = s.GetWorkflow(ctx, "", "durable-doctor-probe")
	if err != nil && !errors.Is(err, durable.ErrNotFound) {
		return []contract.Check{{Name: "connect", Detail: err.Error(), Err: err}}
	}
	return []contract.Check{{Name: "connect", OK: true, Detail: "store answers"}}
}

type checkOut struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
	Code   string `json:"code,omitempty"` // the failure's contract code
}

type doctorOut struct {
	OK     bool       `json:"ok"`
	Checks []checkOut `json:"checks"`
}

// doctorErr is the failure of a doctor run: a SchemaMismatch (exit code 3)
// when the schema check is the only one that failed, a plain failure (exit
// code 1) otherwise.
func doctorErr(checks []contract.Check, failed int) error {
	err := fmt.Errorf("%d of %d checks failed", failed, len(checks))
	if failed == 1 {
		for _, c := range checks {
			if !c.OK && c.Name == "schema" && contract.CodeOf(c.Err) == contract.SchemaMismatch {
				return fmt.Errorf("%w: %w", err, c.Err)
			}
		}
	}
	return err
}
