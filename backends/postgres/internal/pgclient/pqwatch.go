package pgclient

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// watchdogGrace is how long a statement may go on after its context ended
// before the watchdog cuts its connection.
const watchdogGrace = time.Second

// pqConnector is the database/sql connector of Open with driver=pq. It is
// lib/pq's own connector plus a record of the network connection under each
// driver connection, so that a statement on a server that stopped answering
// can be cut off (see watch).
//
// lib/pq honours a context only by sending a cancel request on a second
// connection and then waiting for the server's reply on the first: when the
// server (or a proxy in front of it) is frozen with the TCP connection
// still open, that reply never comes and the caller hangs however its
// context ends. pgx instead sets a deadline on the network connection.
//
// It also decides, for each connection it opens, whether statements may be
// prepared on it (see pqStmts): with prepare set, a connection that reaches
// the server directly (checked with one statement while connecting, see
// pqDirect), or any connection with session set (pooler=session).
type pqConnector struct {
	dsn     string
	dialer  *net.Dialer
	conns   sync.Map // driver.Conn → *watchedConn
	prepare bool     // statements may be prepared (not pooler=transaction)
	session bool     // a session pooler: prepare without checking
}

func newPQConnector(dsn string, dialer *net.Dialer) (*pqConnector, error) {
	if _, err := pq.NewConnector(dsn); err != nil {
		return nil, err
	}
	return &pqConnector{dsn: dsn, dialer: dialer}, nil
}

// Connect dials one connection through a connector of its own, so that the
// network connection it dials is known to belong to it.
func (p *pqConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := pq.NewConnector(p.dsn)
	if err != nil {
		return nil, err
	}
	d := &captureDialer{d: p.dialer, ctx: ctx}
	c.Dialer(d)
	dc, err := c.Connect(ctx)
	// Any later dial is lib/pq's cancel request for a statement of dc.
	d.connected.Store(true)
	var ps *pqStmts
	if err == nil && p.prepare && PQPrepare.Load() > 0 {
		ps = &pqStmts{direct: p.session}
		if !ps.direct {
			// Still under the cut armed on ctx; and bounded like the
			// connect, should ctx never end.
			if d.conn != nil {
				_ = d.conn.SetDeadline(time.Now().Add(DefaultConnectTimeout))
			}
			ps.direct, err = pqDirect(ctx, dc)
			if d.conn != nil {
				_ = d.conn.SetDeadline(time.Time{})
			}
			if err != nil {
				_ = dc.Close()
			}
		}
	}
	// lib/pq gives ctx to the dial only: the TLS and authentication
	// exchange after it ignores ctx, so a frozen server would hold it until
	// connect_timeout. The dialer armed a cut of the connection when ctx
	// ends; disarm it now.
	if d.conn != nil && !d.conn.disarm() && err == nil {
		_ = dc.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	if d.conn != nil {
		d.conn.stmts = ps
		d.conn.forget = func() { p.conns.Delete(dc) }
		p.conns.Store(dc, d.conn)
	}
	return dc, nil
}

// stmts returns the prepared statements of the driver connection dc, or nil
// when none may be prepared on it. Call it only while holding dc.
func (p *pqConnector) stmts(dc any) *pqStmts {
	if wc := p.netConn(dc); wc != nil {
		return wc.stmts
	}
	return nil
}

func (p *pqConnector) Driver() driver.Driver { return pq.Driver{} }

// netConn returns the network connection under a driver connection.
func (p *pqConnector) netConn(dc any) *watchedConn {
	if v, ok := p.conns.Load(dc); ok {
		return v.(*watchedConn)
	}
	return nil
}

// watch arms the watchdog of conn for one statement: when ctx ends and the
// statement has not finished watchdogGrace later, the network connection
// gets a deadline that has passed, so the blocked read fails. The returned
// function disarms it; it reports whether the watchdog fired, in which case
// the connection must not be reused.
func (p *pqConnector) watch(ctx context.Context, conn *sql.Conn) func() bool {
	var wc *watchedConn
	_ = conn.Raw(func(dc any) error {
		wc = p.netConn(dc)
		return nil
	})
	if wc == nil || ctx.Done() == nil {
		return func() bool { return false }
	}
	var (
		mu    sync.Mutex
		done  bool
		fired bool
		timer *time.Timer
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		timer = time.AfterFunc(watchdogGrace, func() {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				fired = true
				_ = wc.SetDeadline(time.Unix(1, 0))
			}
		})
	})
	return func() bool {
		stop()
		mu.Lock()
		defer mu.Unlock()
		done = true
		if timer != nil {
			timer.Stop()
		}
		return fired
	}
}

// discard closes conn without returning its driver connection to the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// captureDialer dials with d and remembers the connection it made.
type captureDialer struct {
	d    *net.Dialer
	ctx  context.Context // the whole connect's context (lib/pq cancels the dial's own when the dial returns)
	conn *watchedConn
	// connected: the connection is set up; a dial now is lib/pq's cancel
	// request for one of its statements.
	connected atomic.Bool
}

// cancelRequestTimeout bounds a cancel request's connection. lib/pq waits
// for the server to close it, and a prepared statement's cancel holds the
// statement's caller until then: on a frozen server that would be forever.
// The watchdog cuts the statement itself watchdogGrace after its context
// ended; the cancel request, dialled when the context ended, is bounded
// well within that (dial included), so that a caller waits for neither
// much beyond watchdogGrace. A cancel request is one small packet and the
// server's close: on a live server it takes a round trip.
const cancelRequestTimeout = watchdogGrace / 2

func (c *captureDialer) Dial(network, address string) (net.Conn, error) {
	return c.DialContext(context.Background(), network, address)
}

func (c *captureDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.DialContext(ctx, network, address)
}

func (c *captureDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if c.connected.Load() {
		// A cancel request: bounded from its start, dial included.
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, cancelRequestTimeout)
		defer cancel()
		nc, err := c.d.DialContext(dctx, network, address)
		if err != nil {
			return nil, err
		}
		cc := &cancelConn{Conn: nc, bound: start.Add(cancelRequestTimeout)}
		_ = cc.SetDeadline(time.Time{})
		return cc, nil
	}
	nc, err := c.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	// lib/pq dials once per connection (again only when it falls back from
	// one host to the next); the last one is the one it keeps.
	if c.conn != nil {
		c.conn.disarm()
	}
	wc := &watchedConn{Conn: nc}
	if c.ctx != nil {
		wc.stop = context.AfterFunc(c.ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	}
	c.conn = wc
	return wc, nil
}

// cancelConn is the connection of a cancel request: no deadline set on it
// reaches past bound. lib/pq's dial sets its own deadline on the connection
// the dialer returned (now plus connect_timeout, for the startup it does
// not do on a cancel request), which would otherwise replace the bound set
// here: on a frozen server the cancel request, and with it the caller of a
// prepared statement, which waits for its cancel request to end, would wait
// connect_timeout.
type cancelConn struct {
	net.Conn
	bound time.Time
}

func (c *cancelConn) clamp(t time.Time) time.Time {
	if t.IsZero() || t.After(c.bound) {
		return c.bound
	}
	return t
}

func (c *cancelConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *cancelConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *cancelConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

// watchedConn is a network connection that forgets its record on Close.
// While it is being set up, stop disarms the cut armed on the connect
// context.
type watchedConn struct {
	net.Conn
	once   sync.Once
	forget func()
	stop   func() bool
	stmts  *pqStmts // nil: prepare nothing on this connection
}

// disarm stops the cut armed while connecting; false if it already fired.
func (w *watchedConn) disarm() bool {
	if w.stop == nil {
		return true
	}
	return w.stop()
}

func (w *watchedConn) Close() error {
	w.once.Do(func() {
		if w.forget != nil {
			w.forget()
		}
	})
	return w.Conn.Close()
}
