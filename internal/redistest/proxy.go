package redistest

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on a free loopback port for tests that need to
// control a link: pointed at a node (SetTarget) it forwards every
// connection there; Freeze stops forwarding bytes in both directions (they
// wait in the proxy and the sockets, as behind a stalled network) until
// Thaw; Reset closes every connection, dropping whatever was held. A
// replica whose ReplicaOf is a frozen proxy lags its master by everything
// written since the freeze: killing the master then loses exactly that.
// Clients dialing a proxy retargeted with SetTarget reach the new node, as
// behind a virtual IP moved by a failover.
type Proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	frozen bool
	thaw   chan struct{} // closed by Thaw
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartProxy starts a proxy to target (host:port) for t, closed when t
// ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, thaw: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thaw)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget makes new connections go to target; existing ones are kept
// (Reset closes them).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Freeze stops forwarding: bytes read before the freeze may still be
// delivered, later ones wait.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	if !p.frozen {
		p.frozen = true
		p.thaw = make(chan struct{})
	}
	p.mu.Unlock()
}

// Thaw resumes forwarding.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	p.mu.Unlock()
}

// Reset closes every connection through the proxy, dropping the bytes it
// holds; new connections are accepted.
func (p *Proxy) Reset() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.Thaw()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies from src to dst, waiting while the proxy is frozen; when
// either side ends it closes both. A pipe held by a freeze ends at the next
// Thaw or Close after a Reset closed its connections.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitThawed() // bytes read while frozen wait here
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) waitThawed() {
	for {
		p.mu.Lock()
		thaw, frozen := p.thaw, p.frozen
		p.mu.Unlock()
		if !frozen {
			return
		}
		<-thaw
	}
}
