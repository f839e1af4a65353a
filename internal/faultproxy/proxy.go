// Package faultproxy is the TCP proxy that durable's tests put between a
// client and a server to inject network faults: latency, connection resets,
// cut connections and a frozen network. The Postgres fault suite
// (internal/faults), the hung-server tests of the Postgres backend and
// pgtest's message-counting proxy all use it.
package faultproxy

import (
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 that injects network faults between
// clients and a server:
//
//   - latency: every chunk of bytes, in either direction, is held for a
//     base delay plus a random jitter before it is forwarded;
//   - resets: Reset aborts connections with a TCP RST (SO_LINGER 0) on both
//     sides, mid-stream;
//   - cuts: Cut closes every connection at once (an orderly close, not a
//     reset), like a server that went away; new connections are still
//     accepted;
//   - freeze: Freeze stops all forwarding in both directions while keeping
//     every connection open (and accepting new ones), like a network
//     partition or a hung server; Thaw delivers what was held back, in
//     order, like a delayed network.
//
// It is safe for concurrent use.
type Proxy struct {
	l       net.Listener
	target  string
	observe func() io.Writer

	base, jitter atomic.Int64 // latency, nanoseconds

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	thaw   chan struct{} // nil when not frozen; closed by Thaw
	wg     sync.WaitGroup

	accepted atomic.Int64
	resets   atomic.Int64
}

type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (k *link) close(abort bool) {
	k.once.Do(func() {
		if abort {
			for _, c := range []net.Conn{k.client, k.server} {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // close sends RST
				}
			}
		}
		k.client.Close()
		k.server.Close()
		close(k.done)
	})
}

// Options configures a Proxy. The zero value is a plain proxy.
type Options struct {
	// ClientBytes, if set, is called once per accepted connection; the
	// writer it returns sees every chunk the client sends, in order, just
	// after the proxy reads it and before it is forwarded (so a message is
	// seen before the server can answer it). Its errors are ignored.
	ClientBytes func() io.Writer
}

// New starts a proxy on 127.0.0.1 to target (host:port). Close stops it.
func New(target string, o Options) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, observe: o.ClientBytes, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// DSN returns dsn with its host and port replaced by the proxy's.
func (p *Proxy) DSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Host = p.Addr()
	return u.String()
}

// SetLatency holds every chunk for base plus a uniform random part of
// jitter before forwarding it.
func (p *Proxy) SetLatency(base, jitter time.Duration) {
	p.base.Store(int64(base))
	p.jitter.Store(int64(jitter))
}

// Freeze stops forwarding bytes in both directions; connections stay open.
// It reports false if the proxy was already frozen.
func (p *Proxy) Freeze() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw != nil {
		return false
	}
	p.thaw = make(chan struct{})
	return true
}

// Thaw resumes forwarding after Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

// Reset aborts each open connection with probability frac (at least one if
// any is open and frac > 0) and returns how many it aborted.
func (p *Proxy) Reset(frac float64) int {
	p.mu.Lock()
	var victims []*link
	for k := range p.links {
		if rand.Float64() < frac {
			victims = append(victims, k)
		}
	}
	if len(victims) == 0 && frac > 0 && len(p.links) > 0 {
		n := rand.IntN(len(p.links))
		for k := range p.links {
			if n == 0 {
				victims = append(victims, k)
				break
			}
			n--
		}
	}
	for _, k := range victims {
		delete(p.links, k)
	}
	p.mu.Unlock()
	for _, k := range victims {
		k.close(true)
	}
	p.resets.Add(int64(len(victims)))
	return len(victims)
}

// Cut closes every open connection (both sides, an orderly close) and
// returns how many it closed; new connections are still accepted.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for k := range links {
		k.close(false)
	}
	return len(links)
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Stats returns how many connections the proxy accepted and reset.
func (p *Proxy) Stats() (accepted, resets int64) { return p.accepted.Load(), p.resets.Load() }

// Close stops the proxy, thaws it, closes every connection and waits for
// its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	p.l.Close()
	for k := range links {
		k.close(false)
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		k := &link{client: c, server: up, done: make(chan struct{})}
		var seen io.Writer
		if p.observe != nil {
			seen = p.observe()
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			k.close(false)
			return
		}
		p.links[k] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(k, k.server, k.client, seen)
		go p.pipe(k, k.client, k.server, nil)
	}
}

// gate blocks while the proxy is frozen; false if k closed meanwhile.
func (p *Proxy) gate(k *link) bool {
	for {
		p.mu.Lock()
		thaw := p.thaw
		p.mu.Unlock()
		if thaw == nil {
			return true
		}
		select {
		case <-thaw:
		case <-k.done:
			return false
		}
	}
}

func (p *Proxy) delay(k *link) bool {
	d := time.Duration(p.base.Load())
	if j := p.jitter.Load(); j > 0 {
		d += time.Duration(rand.Int64N(j))
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-k.done:
		return false
	}
}

// pipe forwards src to dst chunk by chunk, each shown to seen (if not nil)
// and then passed through the latency and the freeze gate. A chunk read
// before a freeze or a close is still delivered when the gate opens (unless
// the link was reset), like a delayed packet.
func (p *Proxy) pipe(k *link, dst, src net.Conn, seen io.Writer) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, k)
		p.mu.Unlock()
		k.close(false)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if seen != nil {
				_, _ = seen.Write(buf[:n])
			}
			if !p.delay(k) || !p.gate(k) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
