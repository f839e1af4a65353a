package pgclient

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

// Listener opens the LISTEN sessions of the backend's hub: one
// implementation per client library.
type Listener interface {
	// Listen runs one LISTEN session on channel until it fails or ctx ends.
	// Once listening it calls up with the session's server process ID; then
	// it calls notify with the payload of every notification. established
	// reports whether up was called. closeErr is the error of closing a
	// session that was still healthy when ctx ended.
	Listen(ctx context.Context, channel string, up func(pid uint32), notify func(payload string)) (established bool, closeErr, err error)
}

// pgxPoolListener listens on a connection taken out of a pgx pool for
// good (it has LISTEN state, so it never goes back).
type pgxPoolListener struct{ pool *pgxpool.Pool }

func (l pgxPoolListener) Listen(ctx context.Context, channel string, up func(uint32), notify func(string)) (bool, error, error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return false, nil, err
	}
	return listenPgx(ctx, pc.Hijack(), channel, up, notify)
}

// listenPgx runs a LISTEN session on conn and closes conn when it ends.
func listenPgx(ctx context.Context, conn *pgx.Conn, channel string, up func(uint32), notify func(string)) (established bool, closeErr, err error) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if cerr := conn.Close(cctx); established && ctx.Err() != nil {
			closeErr = cerr
		}
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(channel)); err != nil {
		return false, nil, err
	}
	up(conn.PgConn().PID())
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, nil, err
		}
		notify(n.Payload)
	}
}

// stdlibListener listens on a connection of a database/sql pool on pgx's
// stdlib: it holds one *sql.Conn and runs the pgx session on the *pgx.Conn
// underneath. The connection is closed afterwards, never returned to the
// pool with its LISTEN state.
type stdlibListener struct{ db *sql.DB }

// errNotPgx is returned when the pool's driver connection is not pgx's.
var errNotPgx = errors.New("postgres: the database/sql connection is not a pgx stdlib connection")

func (l stdlibListener) Listen(ctx context.Context, channel string, up func(uint32), notify func(string)) (established bool, closeErr, err error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return false, nil, err
	}
	defer conn.Close()
	rerr := conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			err = errNotPgx
			return nil
		}
		established, closeErr, err = listenPgx(ctx, pc.Conn(), channel, up, notify)
		// The connection was closed: make database/sql drop it.
		return driver.ErrBadConn
	})
	if err == nil && !errors.Is(rerr, driver.ErrBadConn) {
		err = rerr
	}
	return established, closeErr, err
}

// pqListener listens with lib/pq's ListenerConn, on a connection of its own
// dialed from a lib/pq connection string (a *sql.DB does not reveal one).
type pqListener struct{ dsn string }

func (l pqListener) Listen(ctx context.Context, channel string, up func(uint32), notify func(string)) (established bool, closeErr, err error) {
	// lib/pq delivers notifications synchronously from its reader
	// goroutine, also while Listen waits for its reply: drain them in a
	// goroutine of our own from the start.
	ch := make(chan *pq.Notification, 64)
	lc, err := dialPQListener(ctx, l.dsn, ch)
	if err != nil {
		return false, nil, err
	}
	// A NOTIFY of our own with a unique payload tells the session's process
	// ID (lib/pq does not expose it); other listeners of the channel ignore
	// the payload, as no waiter has it.
	probe := "pid:" + probeToken()
	pids := make(chan uint32, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for n := range ch {
			if n.Extra == probe {
				pids <- uint32(n.BePid)
				continue
			}
			notify(n.Extra)
		}
	}()
	// When ctx ends, closing the connection ends Listen, ExecSimpleQuery
	// and lib/pq's reader, which closes ch.
	closed := make(chan error, 1)
	stop := context.AfterFunc(ctx, func() { closed <- lc.Close() })
	defer func() {
		if stop() {
			_ = lc.Close() // the session failed on its own
		} else if cerr := <-closed; established {
			closeErr = cerr
		}
		<-drained
	}()
	if _, err := lc.Listen(channel); err != nil {
		return false, nil, err
	}
	if _, err := lc.ExecSimpleQuery("SELECT pg_notify('" + channel + "', '" + probe + "')"); err != nil {
		return false, nil, err
	}
	select {
	case pid := <-pids:
		established = true
		up(pid)
	case <-drained:
		return false, nil, lc.Err()
	}
	<-drained
	return true, nil, lc.Err()
}

// dialPQListener opens a lib/pq ListenerConn, giving up when ctx ends
// (lib/pq's dial takes no context; a connection that arrives late is
// closed).
func dialPQListener(ctx context.Context, dsn string, ch chan *pq.Notification) (*pq.ListenerConn, error) {
	type result struct {
		lc  *pq.ListenerConn
		err error
	}
	res := make(chan result, 1)
	go func() {
		lc, err := pq.NewListenerConn(dsn, ch)
		res <- result{lc, err}
	}()
	select {
	case r := <-res:
		return r.lc, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.lc != nil {
				_ = r.lc.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// probeToken returns a random hex string for a probe's payload.
func probeToken() string {
	var t [16]byte
	_, _ = rand.Read(t[:])
	return hex.EncodeToString(t[:])
}

// quoteIdent quotes an identifier of the backend's making (a channel name).
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
