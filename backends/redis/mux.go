package redis

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// A mux is the backend's own connection to one node, on which the scripts
// of every caller are in flight at once (coalesce=on; see the package
// documentation, "Shared connections"). A caller appends its EVALSHA to
// the mux's queue; if nobody is writing, the queue is written at once —
// by the caller itself when the connection is idle (writableNow), else by
// a goroutine of the mux; scripts queued while a write is in the kernel
// go together in the next write. Writing never waits for replies: one goroutine per connection
// reads them, in order, and hands each to its caller. A pooled go-redis
// connection, by contrast, carries one request (or one pipeline) at a
// time, so each concurrent caller needs a connection of its own, and the
// server reads and answers each of them with system calls of their own.
//
// The connection is dialed with the node client's own dialer (TLS
// included) and authenticated as go-redis would (AUTH, SELECT, CLIENT SETNAME); it speaks
// RESP2. A node client whose options this cannot reproduce (credential
// providers, OnConnect hooks) gets no mux: newMux returns nil and the
// backend uses pooled pipelines instead.
type mux struct {
	dial         func(ctx context.Context) (net.Conn, error)
	dialTimeout  time.Duration
	readTimeout  time.Duration // 0: none
	writeTimeout time.Duration // 0: none

	mu      sync.Mutex
	conn    *muxConn // nil: not dialed yet, or the last one broke
	queue   []*muxCall
	writing bool // a caller is writing the queue
	closed  bool
	wbuf    []byte // the writer's buffer, kept between writes

	batches, calls, largest atomic.Int64

	// busy counts the backend's scripts to this node in flight, on the
	// mux or alone on a pooled connection (see Backend.run).
	busy atomic.Int64

	// beforeWrite, for tests (set under mu): called by the writer,
	// without mu, with the bytes of each write before it is made; it may
	// block, holding the queue back.
	beforeWrite func(w []byte)
}

// mux returns the shared connection of node (made on first use), or nil
// when node's options need the pooled path.
func (b *Backend) mux(node *goredis.Client) *mux {
	addr := node.Options().Addr
	if v, ok := b.muxes.Load(addr); ok {
		return v.(*mux)
	}
	m := newMux(node)
	if m != nil && b.newMuxHook != nil {
		b.newMuxHook(m)
	}
	v, loaded := b.muxes.LoadOrStore(addr, m)
	m = v.(*mux)
	if !loaded && m != nil && b.closed.Load() {
		m.close() // Close ran meanwhile and may have missed it
	}
	return m
}

// runMux runs s on the shared connection m. What its caller gets is what
// it would get alone on a pooled connection (runDirect): a script the
// node did not run (NOSCRIPT, MOVED, ASK) runs again there, where those
// are handled; a caller that leaves before its script is written gets
// Canceled and the script is never sent; once written, a write is
// OutcomeUnknown and a read Canceled.
func (b *Backend) runMux(ctx context.Context, m *mux, s *goredis.Script, write bool, keys []string, args []any) (any, error) {
	buf, ok := evalShaCommand(s.Hash(), keys, args)
	if !ok {
		return b.runDirect(ctx, s, write, keys, args)
	}
	r, left := m.do(ctx, buf)
	switch {
	case left && r.sent && write:
		return nil, &contract.Error{Code: contract.OutcomeUnknown, Msg: "context ended while the request was in flight", Err: r.err}
	case left:
		return nil, &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: r.err}
	case r.err == nil:
		return r.v, nil
	case goredis.HasErrorPrefix(r.err, "NOSCRIPT") || redirected(r.err):
		return b.runDirect(ctx, s, write, keys, args)
	}
	return nil, b.fail(ctx, r.err, write && r.sent)
}

// muxConn is one connection of a mux. sent (guarded by the mux's mu)
// holds the calls written on it whose replies have not been read, in the
// order they were written.
type muxConn struct {
	nc   net.Conn
	sent []*muxCall
	dead bool
}

// A call's state: queued (may still leave unsent), sent (its bytes are,
// or are being, written), or left (its caller gave up before it was sent:
// the writer skips it).
const (
	callQueued int32 = iota
	callSent
	callLeft
)

type muxCall struct {
	buf   []byte
	state atomic.Int32
	done  chan muxReply // capacity 1: the reader never blocks on a caller that left
}

// muxReply is a call's result: the reply's value, or err; sent says
// whether the call may have reached the server (false: certainly not).
type muxReply struct {
	v    any
	err  error
	sent bool
}

// muxErr is an error reply of the server. It is a goredis.Error, so the
// backend's error mapping (fail, HasErrorPrefix) treats it as go-redis's
// own.
type muxErr string

func (e muxErr) Error() string { return string(e) }
func (muxErr) RedisError()     {}

var _ goredis.Error = muxErr("")

var (
	errMuxClosed     = errors.New("redis: the backend's connection is closed")
	errMuxBadReply   = errors.New("redis: malformed reply")
	errMuxExtraReply = errors.New("redis: a reply nobody asked for")
)

// newMux returns a mux for node, or nil when node's options need
// something the mux does not do.
func newMux(node *goredis.Client) *mux {
	o := node.Options()
	if o.Dialer == nil || o.OnConnect != nil || o.CredentialsProvider != nil || o.CredentialsProviderContext != nil ||
		o.StreamingCredentialsProvider != nil {
		return nil
	}
	addr, user, pass, db, name := o.Addr, o.Username, o.Password, o.DB, o.ClientName
	dialer := o.Dialer
	m := &mux{dialTimeout: o.DialTimeout}
	if o.ReadTimeout > 0 {
		m.readTimeout = o.ReadTimeout
	}
	if o.WriteTimeout > 0 {
		m.writeTimeout = o.WriteTimeout
	}
	m.dial = func(ctx context.Context) (net.Conn, error) {
		nc, err := dialer(ctx, o.Network, addr)
		if err != nil {
			return nil, err
		}
		var hello []byte
		n := 0
		if pass != "" {
			if user != "" {
				hello = appendCommand(hello, "AUTH", user, pass)
			} else {
				hello = appendCommand(hello, "AUTH", pass)
			}
			n++
		}
		if db != 0 {
			hello = appendCommand(hello, "SELECT", strconv.Itoa(db))
			n++
		}
		if name != "" {
			hello = appendCommand(hello, "CLIENT", "SETNAME", name)
			n++
		}
		if n == 0 {
			return nc, nil
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = nc.SetDeadline(dl)
		}
		if _, err := nc.Write(hello); err != nil {
			_ = nc.Close()
			return nil, &net.OpError{Op: "dial", Net: o.Network, Err: err}
		}
		rd := bufio.NewReader(nc)
		for range n {
			if _, err := readReply(rd); err != nil {
				_ = nc.Close()
				var re muxErr
				if errors.As(err, &re) {
					return nil, re
				}
				return nil, &net.OpError{Op: "dial", Net: o.Network, Err: err}
			}
		}
		if rd.Buffered() > 0 {
			_ = nc.Close()
			return nil, &net.OpError{Op: "dial", Net: o.Network, Err: errMuxExtraReply}
		}
		_ = nc.SetDeadline(time.Time{})
		return nc, nil
	}
	return m
}

// do sends the command buf and waits for its reply or for ctx to end.
// left reports that ctx ended first; sent then says whether the command
// may have been sent.
func (m *mux) do(ctx context.Context, buf []byte) (r muxReply, left bool) {
	c := &muxCall{buf: buf, done: make(chan muxReply, 1)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return muxReply{err: errMuxClosed}, false
	}
	m.queue = append(m.queue, c)
	if m.writing {
		m.mu.Unlock()
	} else {
		m.writing = true
		m.flush(2)
	}
	select {
	case r := <-c.done:
		return r, false
	case <-ctx.Done():
	}
	if c.state.CompareAndSwap(callQueued, callLeft) {
		return muxReply{err: ctx.Err()}, true
	}
	select {
	case r := <-c.done: // it came in the meantime
		return r, false
	default:
	}
	return muxReply{err: ctx.Err(), sent: true}, true
}

// flush writes the queue, called with m.mu held and m.writing set by the
// caller; it returns with m.mu released. It writes at most rounds times
// on the caller's goroutine, and only while writableNow: a caller is not
// kept writing for others while its own reply waits. Work left after
// that, dialing (bounded by the dial timeout, not by the caller's
// context, since it serves every queued call) and writes that could block
// go on in a goroutine of its own (rounds < 0; the writing flag passes to
// it), so that a caller waits only for its own reply or its context.
func (m *mux) flush(rounds int) {
	for ; len(m.queue) > 0; rounds-- {
		if rounds == 0 || rounds > 0 && !m.writableNow() {
			m.mu.Unlock()
			go func() {
				m.mu.Lock()
				m.flush(-1)
			}()
			return
		}
		q := m.queue
		m.queue = nil
		cn := m.conn
		if cn == nil {
			m.mu.Unlock()
			var err error
			cn, err = m.connect()
			m.mu.Lock()
			if err == nil && m.closed {
				_ = cn.nc.Close()
				err = errMuxClosed
			}
			if err != nil {
				for _, c := range q {
					if c.state.CompareAndSwap(callQueued, callSent) {
						c.done <- muxReply{err: err} // not sent
					}
				}
				continue
			}
			m.conn = cn
			go m.read(cn)
		}
		w := m.wbuf[:0]
		n := 0
		idle := len(cn.sent) == 0 // the reader has no deadline set
		for _, c := range q {
			if !c.state.CompareAndSwap(callQueued, callSent) {
				continue // its caller left before it was sent
			}
			cn.sent = append(cn.sent, c)
			w = append(w, c.buf...)
			n++
		}
		if n == 0 {
			continue
		}
		m.batches.Add(1)
		m.calls.Add(int64(n))
		for l := m.largest.Load(); int64(n) > l && !m.largest.CompareAndSwap(l, int64(n)); l = m.largest.Load() {
		}
		if idle && m.readTimeout > 0 {
			_ = cn.nc.SetReadDeadline(time.Now().Add(m.readTimeout))
		}
		hook := m.beforeWrite
		m.mu.Unlock()
		if hook != nil {
			hook(w)
		}
		if m.writeTimeout > 0 {
			_ = cn.nc.SetWriteDeadline(time.Now().Add(m.writeTimeout))
		}
		_, err := cn.nc.Write(w)
		m.mu.Lock()
		if cap(w) <= 1<<20 {
			m.wbuf = w
		}
		if err != nil {
			// Some of it may have reached the server: every call on the
			// connection fails as sent.
			m.breakConn(cn, err)
		}
	}
	m.writing = false
	m.mu.Unlock()
}

// writableNow reports whether a caller's goroutine may write the queue
// itself: the connection is up and idle (every byte written before has
// been answered, so its send buffer is empty) and the queue is small
// enough to fit in it. Anything else — a dial, a busy connection whose
// server may have stopped reading, a large write — goes to the flusher's
// own goroutine, where a write blocked up to write_timeout holds no
// caller past its context. m.mu is held.
func (m *mux) writableNow() bool {
	if m.conn == nil || len(m.conn.sent) > 0 {
		return false
	}
	n := 0
	for _, c := range m.queue {
		if n += len(c.buf); n > maxCallerWrite {
			return false
		}
	}
	return true
}

// maxCallerWrite bounds what a caller's goroutine writes (writableNow):
// far below any socket's send buffer.
const maxCallerWrite = 64 << 10

// connect dials a connection, within the node's dial timeout.
func (m *mux) connect() (*muxConn, error) {
	ctx := context.Background()
	if m.dialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.dialTimeout)
		defer cancel()
	}
	nc, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &muxConn{nc: nc}, nil
}

// read reads cn's replies until it breaks, handing each to the call
// written first among those still waiting: one blocking read, then every
// reply already buffered, handed out under one lock. It reads while no
// call waits too, so a connection the server closed (its idle timeout, a
// restart) is noticed at once and the next call dials a new one. With a
// read timeout, the deadline runs from the last reply while calls wait
// (the server has been silent that long), and is off while none does.
func (m *mux) read(cn *muxConn) {
	rd := bufio.NewReaderSize(cn.nc, 32<<10)
	var got []muxReply
	var to []*muxCall
	for {
		got = got[:0]
		var broken error
		for len(got) == 0 || rd.Buffered() > 0 {
			v, err := readReply(rd)
			var re muxErr
			if err != nil && !errors.As(err, &re) && !errors.Is(err, goredis.Nil) {
				broken = err
				break
			}
			got = append(got, muxReply{v: v, err: err, sent: true})
		}
		m.mu.Lock()
		if len(got) > len(cn.sent) {
			got, broken = got[:len(cn.sent)], errMuxExtraReply
		}
		to = append(to[:0], cn.sent[:len(got)]...)
		clear(cn.sent[:len(got)])
		cn.sent = cn.sent[len(got):]
		if broken != nil {
			m.breakConn(cn, broken)
		} else if m.readTimeout > 0 {
			if len(cn.sent) == 0 {
				_ = cn.nc.SetReadDeadline(time.Time{})
			} else {
				_ = cn.nc.SetReadDeadline(time.Now().Add(m.readTimeout))
			}
		}
		m.mu.Unlock()
		for i, c := range to {
			c.done <- got[i]
			to[i] = nil
		}
		if broken != nil {
			return
		}
	}
}

// breakConn closes cn (once) and fails every call waiting on it as sent;
// the next write dials a new connection. m.mu is held.
func (m *mux) breakConn(cn *muxConn, err error) {
	if cn.dead {
		return
	}
	cn.dead = true
	_ = cn.nc.Close()
	if m.conn == cn {
		m.conn = nil
	}
	for _, c := range cn.sent {
		c.done <- muxReply{err: err, sent: true}
	}
	cn.sent = nil
}

// close fails every call, queued or in flight, and closes the connection.
func (m *mux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.conn != nil {
		m.breakConn(m.conn, errMuxClosed)
	}
	for _, c := range m.queue {
		if c.state.CompareAndSwap(callQueued, callSent) {
			c.done <- muxReply{err: errMuxClosed}
		}
	}
	m.queue = nil
}

// --- RESP2 ---

// evalShaCommand is EVALSHA of s with keys and args, encoded as go-redis
// would send it; ok is false for an argument type the backend never
// passes (the caller then takes the pooled path).
func evalShaCommand(sha string, keys []string, args []any) (buf []byte, ok bool) {
	n := 3 + len(keys) + len(args)
	size := 16 + len(sha)
	for _, k := range keys {
		size += len(k) + 16
	}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			size += len(v) + 16
		case []byte:
			size += len(v) + 16
		default:
			size += 32
		}
	}
	buf = make([]byte, 0, size)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, '\r', '\n')
	buf = appendBulk(buf, "EVALSHA")
	buf = appendBulk(buf, sha)
	buf = appendBulk(buf, strconv.Itoa(len(keys)))
	for _, k := range keys {
		buf = appendBulk(buf, k)
	}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			buf = appendBulk(buf, v)
		case []byte:
			buf = appendBulk(buf, v)
		case int:
			buf = appendBulk(buf, strconv.Itoa(v))
		case int64:
			buf = appendBulk(buf, strconv.FormatInt(v, 10))
		default:
			return nil, false
		}
	}
	return buf, true
}

func appendCommand(buf []byte, args ...string) []byte {
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = appendBulk(buf, a)
	}
	return buf
}

func appendBulk[T string | []byte](buf []byte, s T) []byte {
	buf = append(buf, '$')
	buf = strconv.AppendInt(buf, int64(len(s)), 10)
	buf = append(buf, '\r', '\n')
	buf = append(buf, s...)
	return append(buf, '\r', '\n')
}

// maxBulk bounds one bulk string of a reply (Redis's own limit,
// proto-max-bulk-len, defaults to 512 MB).
const maxBulk = 512 << 20

// readReply reads one RESP2 reply as go-redis returns a script's: an
// integer as int64, a bulk or status string as string, an array as
// []any (a nil element as nil, an error element as its muxErr). A nil
// reply is goredis.Nil and an error reply a muxErr, both as err; any
// other err means the connection can no longer be read.
func readReply(rd *bufio.Reader) (any, error) {
	v, err := readValue(rd)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil:
		return nil, goredis.Nil
	case muxErr:
		return nil, v
	}
	return v, nil
}

func readValue(rd *bufio.Reader) (any, error) {
	line, err := rd.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errMuxBadReply
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errMuxBadReply
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return string(body), nil
	case '-':
		return muxErr(string(body)), nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, errMuxBadReply
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil || n > maxBulk {
			return nil, errMuxBadReply
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return nil, errMuxBadReply
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(string(body))
		if err != nil || n > 1<<20 {
			return nil, errMuxBadReply
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readValue(rd); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errMuxBadReply
}
