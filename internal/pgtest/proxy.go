package pgtest

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/internal/faultproxy"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of the server (a
// faultproxy.Proxy), for tests that need the server to vanish
// mid-operation: Cut closes every proxied connection at once. It also
// counts the protocol messages clients send (Messages, RoundTrips),
// whatever the client library, as long as the connection is not encrypted
// (sslmode=disable).
type Proxy struct {
	*faultproxy.Proxy
	msgs [256]atomic.Int64 // frontend messages by type byte
}

// NewProxy starts a proxy to the server, closed when t ends.
func (s *Server) NewProxy(t testing.TB) *Proxy {
	t.Helper()
	p := &Proxy{}
	fp, err := faultproxy.New(net.JoinHostPort(s.host, strconv.Itoa(s.port)), faultproxy.Options{
		ClientBytes: func() io.Writer { return &msgCounter{p: p, startup: true} },
	})
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p.Proxy = fp
	t.Cleanup(p.Close)
	return p
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
