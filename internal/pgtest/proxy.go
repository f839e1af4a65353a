package pgtest

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of the server, for tests that
// need the server to vanish mid-operation: Cut closes every proxied
// connection at once. It also counts the protocol messages clients send
// (Messages, RoundTrips), whatever the client library, as long as the
// connection is not encrypted (sslmode=disable).
type Proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	msgs   [256]atomic.Int64 // frontend messages by type byte
}

// NewProxy starts a proxy to the server, closed when t ends.
func (s *Server) NewProxy(t testing.TB) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{l: l, target: net.JoinHostPort(s.host, strconv.Itoa(s.port)), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// DSN returns dsn with its host and port replaced by the proxy's.
func (p *Proxy) DSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Host = p.l.Addr().String()
	return u.String()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(c, up, io.Discard)
		go p.pipe(up, c, &msgCounter{p: p, startup: true})
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst, showing every chunk to count first (so a message
// is counted before the server can answer it).
func (p *Proxy) pipe(dst, src net.Conn, count io.Writer) {
	defer p.wg.Done()
	_, _ = io.Copy(io.MultiWriter(count, dst), src)
	dst.Close()
	src.Close()
}

// Messages returns how many messages of each type (the type byte: 'Q'
// simple query, 'P' parse, 'B' bind, 'D' describe, 'E' execute, 'S' sync,
// …) clients have sent through the proxy since it started or since the
// last ResetMessages. The untyped startup packets are not counted.
func (p *Proxy) Messages() map[byte]int64 {
	m := map[byte]int64{}
	for i := range p.msgs {
		if n := p.msgs[i].Load(); n != 0 {
			m[byte(i)] = n
		}
	}
	return m
}

// RoundTrips returns the number of Sync and simple Query messages clients
// have sent since the last ResetMessages: after each, a client waits for
// the server's ReadyForQuery, so this is the number of round trips.
func (p *Proxy) RoundTrips() int64 { return p.msgs['S'].Load() + p.msgs['Q'].Load() }

// ResetMessages sets the message counts to zero.
func (p *Proxy) ResetMessages() {
	for i := range p.msgs {
		p.msgs[i].Store(0)
	}
}

// msgCounter parses the frontend side of the PostgreSQL protocol as it
// streams by and counts the messages by type. Startup packets (startup,
// SSL and GSSAPI encryption requests) have no type byte: an 8-byte header
// of length and code. After the startup message (protocol 3.x) every
// message is a type byte and a 4-byte length that counts itself.
type msgCounter struct {
	p       *Proxy
	startup bool
	hdr     [8]byte
	n       int   // header bytes collected
	skip    int64 // body bytes still to pass
}

func (c *msgCounter) Write(b []byte) (int, error) {
	total := len(b)
	for len(b) > 0 {
		if c.skip > 0 {
			k := int(min(c.skip, int64(len(b))))
			c.skip -= int64(k)
			b = b[k:]
			continue
		}
		need := 5
		if c.startup {
			need = 8
		}
		k := copy(c.hdr[c.n:need], b)
		c.n += k
		b = b[k:]
		if c.n < need {
			break
		}
		c.n = 0
		if c.startup {
			length := int64(binary.BigEndian.Uint32(c.hdr[:4]))
			code := binary.BigEndian.Uint32(c.hdr[4:8])
			c.skip = max(length-8, 0)
			if code>>16 == 3 { // a startup message: protocol 3.x
				c.startup = false
			}
			continue
		}
		c.p.msgs[c.hdr[0]].Add(1)
		c.skip = max(int64(binary.BigEndian.Uint32(c.hdr[1:5]))-4, 0)
	}
	return total, nil
}

// Cut closes every connection through the proxy; new connections are
// still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.l.Close()
	p.Cut()
	p.wg.Wait()
}
