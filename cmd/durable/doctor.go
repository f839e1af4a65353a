package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// maxSkew is the clock difference doctor reports as a problem. Expiry is
// judged on the database clock alone, so skew does not break the
// guarantees; it does make human-read times and local deadlines misleading.
const maxSkew = 500 * time.Millisecond

// check is one line of the doctor's report.
type check struct {
	name   string
	ok     bool
	detail string
	hint   string
}

func runDoctor(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "doctor", "",
		"Check that the store is usable: connectivity, the schema version, the clock\n"+
			"skew between this host and the database, and whether LISTEN works (WaitKey\n"+
			"falls back to polling without it). Exits 1 when a check fails.")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	d, err := resolveDSN(*dsn)
	if err != nil {
		return err
	}
	var checks []check
	if isPostgres(d) {
		checks = doctorPostgres(ctx, d)
	} else {
		checks = doctorGeneric(ctx, d)
	}
	failed := 0
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(e.stdout, "%s  %-12s %s\n", mark, c.name, c.detail)
		if !c.ok && c.hint != "" {
			fmt.Fprintf(e.stdout, "      %-12s hint: %s\n", "", c.hint)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(checks))
	}
	return nil
}

// doctorGeneric checks a non-Postgres store: it opens it and reads once.
func doctorGeneric(ctx context.Context, dsn string) []check {
	s, err := durable.Open(ctx, dsn)
	if err != nil {
		return []check{{name: "connect", detail: err.Error(), hint: hint(err)}}
	}
	defer s.Close()
	_, err = s.GetWorkflow(ctx, "", "durable-doctor-probe")
	if err != nil && !errors.Is(err, durable.ErrNotFound) {
		return []check{{name: "connect", detail: err.Error(), hint: hint(err)}}
	}
	return []check{{name: "connect", ok: true, detail: "store answers"}}
}

func doctorPostgres(ctx context.Context, dsn string) []check {
	b, err := openPostgresNoMigrate(ctx, dsn)
	if err != nil {
		return []check{{name: "connect", detail: err.Error(), hint: hint(err)}}
	}
	defer b.Close()
	schema := b.Schema()
	checks := []check{}

	var version string
	if err := queryRow(ctx, b, "SELECT current_setting('server_version')", &version); err != nil {
		return []check{{name: "connect", detail: "the server does not answer queries", hint: hint(err)}}
	}
	checks = append(checks, check{name: "connect", ok: true, detail: "PostgreSQL " + version})

	st, err := b.MigrationStatus(ctx)
	switch {
	case err != nil:
		checks = append(checks, check{name: "schema", detail: err.Error(), hint: hint(err)})
	case st.Dirty:
		checks = append(checks, check{name: "schema", detail: fmt.Sprintf("%s is dirty at version %d", schema, st.Version),
			hint: "repair the schema by hand, then run 'durable migrate force <version>'"})
	case st.Version > st.Latest:
		checks = append(checks, check{name: "schema", detail: fmt.Sprintf("%s is at version %d, newer than this binary's %d", schema, st.Version, st.Latest),
			hint: "upgrade durable"})
	case st.Version < st.Latest:
		checks = append(checks, check{name: "schema", detail: fmt.Sprintf("%s is at version %d of %d", schema, st.Version, st.Latest),
			hint: "run 'durable migrate up' (or open with migrate=auto)"})
	default:
		checks = append(checks, check{name: "schema", ok: true, detail: fmt.Sprintf("%s at version %d (latest)", schema, st.Version)})
	}

	// Clock skew: the database's now() against the midpoint of the round trip.
	var dbNow time.Time
	t0 := time.Now()
	err = queryRow(ctx, b, "SELECT clock_timestamp()", &dbNow)
	t1 := time.Now()
	if err != nil {
		checks = append(checks, check{name: "clock", detail: "could not read the database clock", hint: hint(err)})
	} else {
		mid := t0.Add(t1.Sub(t0) / 2)
		skew := dbNow.Sub(mid)
		detail := fmt.Sprintf("database clock is %s %s this host (round trip %s)", absDur(skew).Round(time.Microsecond), aheadBehind(skew), t1.Sub(t0).Round(time.Microsecond))
		c := check{name: "clock", ok: absDur(skew) <= maxSkew, detail: detail,
			hint: "expiry is judged on the database clock only, but synchronise this host with NTP so logs and local deadlines agree"}
		checks = append(checks, c)
	}

	// LISTEN: a transaction pooler in transaction mode rejects or breaks it.
	if err := tryListen(ctx, b); err != nil {
		checks = append(checks, check{name: "listen", detail: "LISTEN is not available",
			hint: "behind a transaction pooler add listen=off to the DSN; WaitKey then polls"})
	} else {
		checks = append(checks, check{name: "listen", ok: true, detail: "LISTEN works (WaitKey is woken by NOTIFY)"})
	}
	return checks
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func aheadBehind(d time.Duration) string {
	if d < 0 {
		return "behind"
	}
	return "ahead of"
}
