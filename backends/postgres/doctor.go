package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/sqlmigrate"
)

// MaxClockSkew is the difference between this host's clock and the
// database's that [Backend.Doctor] reports as a problem. Expiry is judged
// on the database clock alone, so skew does not break the guarantees; it
// does make human-read times and local deadlines misleading.
const MaxClockSkew = 500 * time.Millisecond

// listenProbeTimeout bounds Doctor's LISTEN probe: opening the session,
// and then the arrival of its own NOTIFY.
const listenProbeTimeout = 5 * time.Second

// Check is one finding of [Backend.Doctor]: [contract.Check], named here
// for the callers of this package. Its Name is "connect", "pooler",
// "query-mode", "schema", "clock" or "listen".
type Check = contract.Check

var _ contract.Doctor = (*Backend)(nil)

// Doctor checks that the backend is usable, in this order, and returns one
// Check each:
//
//   - connect: the server answers a query (and its version);
//   - pooler: whether a connection pooler is in front (see [Pooler]; on
//     lib/pq it cannot tell) and whether the backend's pooler setting
//     fits: a pooler in front of a backend that relies on session state
//     fails;
//   - query-mode: how statements are sent (pgx's query exec mode, lib/pq's
//     binary_parameters), and whether that fits the pooler;
//   - schema: the schema's migration version is the one this code needs
//     and not dirty, and the DSN's migrate mode would open it;
//   - clock: this host's clock is within [MaxClockSkew] of the database's;
//   - listen: the LISTEN session of WaitKey and WatchLease opens the way
//     the backend opens it and a NOTIFY sent through the pool arrives on it
//     within 5 s (with listen=off, pooler=transaction, or on a *sql.DB that
//     cannot LISTEN, it reports that they poll, which is no failure).
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
	if _, err := b.client.ProbeQuerier().QueryRow(ctx, read, `SELECT current_setting('server_version')`, nil, &version); err != nil {
		err = classify(ctx, err, read)
		return []Check{{Name: "connect", Detail: "the server does not answer queries: " + err.Error(), Err: err}}
	}
	pooler := b.checkPooler(ctx)
	return []Check{
		{Name: "connect", OK: true, Detail: "PostgreSQL " + version},
		pooler,
		b.checkQueryMode(ctx, pooler),
		b.checkSchema(ctx),
		b.checkClock(ctx),
		b.checkListen(ctx),
	}
}

func (b *Backend) checkSchema(ctx context.Context) Check {
	st, err := b.readStatus(ctx)
	c := sqlmigrate.SchemaCheck(st, err)
	if c.OK {
		if oerr := b.checkObjects(ctx, st); oerr != nil {
			c.OK, c.Detail, c.Err = false, oerr.Error(), oerr
			if errors.Is(oerr, errObjectsMissing) {
				c.Hint = "'durable migrate up' recreates them when none of the tables exist, or when only the function is missing; otherwise repair the schema by hand"
			}
		}
	}
	if b.cfg != nil && err == nil && c.Err != nil {
		// What the application opening this DSN does with the schema.
		switch mode := b.cfg.dsnMigrate; {
		case c.OK:
		case mode == MigrateVerify:
			c.Detail += "; the DSN says migrate=verify, so the application fails to open until it is migrated"
		case mode == MigrateAuto && !st.Dirty && st.Version < st.Latest:
			c.Detail += "; the DSN says migrate=auto, so the application migrates on open (its role needs CREATE on the schema)"
		}
	}
	return c
}

// checkPooler detects a pooler in front and judges the backend's setting.
func (b *Backend) checkPooler(ctx context.Context) Check {
	c := Check{Name: "pooler"}
	pooled, known, err := b.client.DetectPooler(ctx)
	switch {
	case err != nil:
		c.Err = classify(ctx, err, read)
		c.Detail = "could not check for a pooler: " + c.Err.Error()
	case !known:
		c.OK = true
		c.Detail = fmt.Sprintf("pooler=%s; lib/pq does not reveal whether a pooler is in front (the listen check shows whether sessions are kept)", b.pooler)
	case pooled && b.transactionPooled():
		c.OK = true
		c.Detail = "a connection pooler is in front (the session key is not the server process's); the backend keeps no session state"
		if b.pooler == PoolerAuto {
			c.Detail += " (detected at open; set pooler=transaction to make it explicit)"
		}
	case pooled && b.pooler == PoolerSession:
		c.OK = true
		c.Detail = "a connection pooler is in front; pooler=session says it keeps each client's session"
	case pooled:
		c.Detail = fmt.Sprintf("a connection pooler is in front (the session key is not the server process's) but pooler=%s: the backend relies on session state (prepared statements, LISTEN)", b.pooler)
		c.Hint = "add pooler=transaction to the DSN (Options.Pooler = PoolerTransaction for New and NewBackend); pooler=session if it pools by session"
		c.Err = &contract.Error{Code: contract.Misconfigured, Msg: "a connection pooler is in front of a backend that relies on session state"}
	case b.pooler == PoolerTransaction:
		c.OK = true
		c.Detail = "direct connection (no pooler found) but pooler=transaction: WaitKey polls although LISTEN would work"
	default:
		c.OK = true
		c.Detail = "direct connection (no pooler in front)"
	}
	return c
}

// checkQueryMode reports how statements are sent and whether that fits.
func (b *Backend) checkQueryMode(ctx context.Context, pooler Check) Check {
	mode, fits := b.queryExecMode(ctx)
	c := Check{Name: "query-mode", OK: true, Detail: "statements run as " + mode}
	pooled := b.transactionPooled() || !pooler.OK && pooler.Err != nil && contract.CodeOf(pooler.Err) == contract.Misconfigured
	if pooled && fits != nil && !*fits {
		c.OK = false
		c.Detail += ", which needs the session a transaction pooler does not keep"
		c.Hint = "add pooler=transaction to the DSN (with your own pool: pgx default_query_exec_mode=exec, lib/pq binary_parameters=yes)"
		c.Err = &contract.Error{Code: contract.Misconfigured, Msg: "the query mode needs session state a pooler does not keep"}
	}
	return c
}

// checkClock compares the database's clock with the midpoint of the round
// trip that read it.
func (b *Backend) checkClock(ctx context.Context) Check {
	var dbNow time.Time
	t0 := time.Now()
	_, err := b.client.ProbeQuerier().QueryRow(ctx, read, `SELECT clock_timestamp()`, nil, &dbNow)
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
// of its own, sends a NOTIFY with a unique payload through the backend's
// pool, and waits for it to arrive on the session: through a transaction
// pooler LISTEN succeeds but the notification never comes.
func (b *Backend) checkListen(ctx context.Context) Check {
	c := Check{Name: "listen"}
	switch {
	case b.hub.l == nil:
		c.OK, c.Detail = true, "this database/sql pool cannot LISTEN (set Options.ListenDSN): WaitKey and WatchLease poll"
		return c
	case b.transactionPooled():
		c.OK, c.Detail = true, fmt.Sprintf("behind a transaction pooler WaitKey and WatchLease poll (within %s of a change)", pollMax)
		return c
	case !b.listen:
		c.OK, c.Detail = true, "listen=off: WaitKey and WatchLease poll"
		return c
	}
	pctx, cancel := context.WithTimeout(ctx, listenProbeTimeout)
	defer cancel()
	channel, payload := "durable_doctor_"+newToken()[:12], "doctor:"+newToken()
	up, got := make(chan struct{}), make(chan time.Time, 1)
	res := make(chan error, 1)
	go func() {
		established, _, err := b.hub.l.Listen(pctx, channel, func(uint32) { close(up) }, func(p string) {
			if p == payload {
				select {
				case got <- time.Now():
				default:
				}
			}
		})
		if !established && err == nil {
			err = pctx.Err()
		}
		res <- err
	}()
	fail := func(err error, detail, hint string) Check {
		c.Err = classify(ctx, err, read)
		c.Detail, c.Hint = detail+c.Err.Error(), hint
		return c
	}
	select {
	case err := <-res:
		return fail(err, "LISTEN is not available: ", "check that the LISTEN connection reaches the server; "+
			"behind a transaction pooler add pooler=transaction to the DSN; listen=off makes WaitKey poll")
	case <-up:
	}
	sent := time.Now()
	var ok bool
	if _, err := b.client.ProbeQuerier().QueryRow(pctx, read, `SELECT true FROM (SELECT pg_notify($1::text, $2::text)) n`, []any{channel, payload}, &ok); err != nil {
		cancel()
		<-res
		return fail(err, "could not send a NOTIFY: ", "")
	}
	select {
	case at := <-got:
		cancel()
		<-res
		c.OK, c.Detail = true, fmt.Sprintf("a NOTIFY arrived on the LISTEN connection %s after it was sent (WaitKey and WatchLease are woken by NOTIFY)", at.Sub(sent).Round(time.Microsecond))
		return c
	case err := <-res:
		if err == nil {
			err = pctx.Err()
		}
		return fail(err, "the LISTEN connection ended before a NOTIFY arrived: ", "")
	case <-pctx.Done():
		<-res
		c.Detail = fmt.Sprintf("LISTEN succeeded but a NOTIFY sent through the pool did not arrive within %s: a transaction pooler is probably in front; WaitKey and WatchLease would be woken only by polling", listenProbeTimeout)
		c.Hint = "add pooler=transaction to the DSN (or listen=off)"
		c.Err = &contract.Error{Code: contract.Misconfigured, Msg: "notifications do not reach the LISTEN connection"}
		return c
	}
}
