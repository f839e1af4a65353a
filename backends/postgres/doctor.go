package postgres

import (
	"context"
	"fmt"
	"time"
)

// MaxClockSkew is the difference between this host's clock and the
// database's that [Backend.Doctor] reports as a problem. Expiry is judged
// on the database clock alone, so skew does not break the guarantees; it
// does make human-read times and local deadlines misleading.
const MaxClockSkew = 500 * time.Millisecond

// listenProbeTimeout bounds Doctor's LISTEN probe.
const listenProbeTimeout = 10 * time.Second

// Check is one finding of [Backend.Doctor].
type Check struct {
	Name   string // "connect", "schema", "clock" or "listen"
	OK     bool   // the check passed
	Detail string // what was found, one line; never the DSN or a password
	Hint   string // what to do about a failed check, or ""
	Err    error  // the failure, when there was one (a *contract.Error)
}

// Doctor checks that the backend is usable, in this order, and returns one
// Check each:
//
//   - connect: the server answers a query (and its version);
//   - schema: the schema's migration version is the one this code needs
//     and not dirty;
//   - clock: this host's clock is within [MaxClockSkew] of the database's;
//   - listen: WaitKey's LISTEN session can be opened the way the backend
//     opens it (with listen=off, or on a *sql.DB that cannot LISTEN, it
//     reports that WaitKey polls, which is no failure).
//
// When the server does not answer, only the connect check is returned.
// Doctor changes nothing, and works on a backend opened with MigrateOff
// whatever the state of its schema. It is the capability behind the
// durable CLI's doctor command.
func (b *Backend) Doctor(ctx context.Context) []Check {
	if b.closed.Load() {
		err := errClosed()
		return []Check{{Name: "connect", Detail: err.Error(), Err: err}}
	}
	var version string
	if _, err := b.q.queryRow(ctx, read, `SELECT current_setting('server_version')`, nil, &version); err != nil {
		err = classify(ctx, err, read)
		return []Check{{Name: "connect", Detail: "the server does not answer queries: " + err.Error(), Err: err}}
	}
	return []Check{
		{Name: "connect", OK: true, Detail: "PostgreSQL " + version},
		b.checkSchema(ctx),
		b.checkClock(ctx),
		b.checkListen(ctx),
	}
}

func (b *Backend) checkSchema(ctx context.Context) Check {
	c := Check{Name: "schema"}
	st, err := b.readStatus(ctx)
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

// checkClock compares the database's clock with the midpoint of the round
// trip that read it.
func (b *Backend) checkClock(ctx context.Context) Check {
	var dbNow time.Time
	t0 := time.Now()
	_, err := b.q.queryRow(ctx, read, `SELECT clock_timestamp()`, nil, &dbNow)
	t1 := time.Now()
	if err != nil {
		err = classify(ctx, err, read)
		return Check{Name: "clock", Detail: "could not read the database clock: " + err.Error(), Err: err}
	}
	skew := dbNow.Sub(t0.Add(t1.Sub(t0) / 2))
	abs, dir := skew, "ahead of"
	if skew < 0 {
		abs, dir = -skew, "behind"
	}
	return Check{
		Name:   "clock",
		OK:     abs <= MaxClockSkew,
		Detail: fmt.Sprintf("database clock is %s %s this host (round trip %s)", abs.Round(time.Microsecond), dir, t1.Sub(t0).Round(time.Microsecond)),
		Hint:   "expiry is judged on the database clock only, but synchronise this host with NTP so logs and local deadlines agree",
	}
}

// checkListen opens one LISTEN session the way WaitKey would, on a channel
// of its own, and ends it as soon as it is established.
func (b *Backend) checkListen(ctx context.Context) Check {
	c := Check{Name: "listen"}
	switch {
	case b.hub.l == nil:
		c.OK, c.Detail = true, "this database/sql pool cannot LISTEN (set Options.ListenDSN): WaitKey polls"
		return c
	case !b.listen:
		c.OK, c.Detail = true, "listen=off: WaitKey polls"
		return c
	}
	pctx, cancel := context.WithTimeout(ctx, listenProbeTimeout)
	defer cancel()
	established, _, err := b.hub.l.listen(pctx, "durable_doctor", func(uint32) { cancel() }, func(string) {})
	if !established {
		if err == nil {
			err = pctx.Err()
		}
		c.Err = classify(ctx, err, read)
		c.Detail = "LISTEN is not available: " + c.Err.Error()
		c.Hint = "behind a transaction pooler add listen=off to the DSN; WaitKey then polls"
		return c
	}
	c.OK, c.Detail = true, "LISTEN works (WaitKey is woken by NOTIFY)"
	return c
}
