package faultproxy

import (
	"github.com/durable-go/durable/internal/syncbuf"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer accepts connections and echoes what they send, until t ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends msg and reads its echo within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func TestProxy(t *testing.T) {
	seen := &syncbuf.Buffer{}
	p, err := New(echoServer(t), Options{ClientBytes: func() io.Writer { return seen }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	c := dial()
	if got, err := roundTrip(c, "hello", 5*time.Second); got != "hello" || err != nil {
		t.Fatalf("echo through the proxy = %q, %v", got, err)
	}
	if got := seen.String(); got != "hello" {
		t.Errorf("ClientBytes saw %q, want the client's bytes only, %q", got, "hello")
	}

	// Frozen: nothing moves, the connection stays open; thawed, the held
	// bytes arrive.
	if !p.Freeze() || p.Freeze() {
		t.Fatal("Freeze should report true once, then false while frozen")
	}
	if got, err := roundTrip(c, "held", 200*time.Millisecond); err == nil {
		t.Fatalf("echo while frozen = %q, want a timeout", got)
	}
	if p.Conns() != 1 {
		t.Errorf("Conns while frozen = %d, want 1", p.Conns())
	}
	p.Thaw()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after Thaw read %q, %v; want the held bytes", buf, err)
	}

	// Cut closes every connection; new ones are still accepted.
	if n := p.Cut(); n != 1 {
		t.Errorf("Cut closed %d connections, want 1", n)
	}
	if _, err := roundTrip(c, "x", 5*time.Second); err == nil {
		t.Fatal("a cut connection still echoes")
	}
	c2 := dial()
	if got, err := roundTrip(c2, "again", 5*time.Second); got != "again" || err != nil {
		t.Fatalf("echo on a new connection after Cut = %q, %v", got, err)
	}

	// Reset aborts connections.
	if n := p.Reset(1); n != 1 {
		t.Errorf("Reset(1) aborted %d connections, want 1", n)
	}
	if _, err := roundTrip(c2, "x", 5*time.Second); err == nil {
		t.Fatal("a reset connection still echoes")
	}
	if accepted, resets := p.Stats(); accepted != 2 || resets != 1 {
		t.Errorf("Stats = %d accepted, %d resets; want 2, 1", accepted, resets)
	}

	// Latency delays every chunk.
	p.SetLatency(100*time.Millisecond, 0)
	c3 := dial()
	start := time.Now()
	if got, err := roundTrip(c3, "slow", 5*time.Second); got != "slow" || err != nil {
		t.Fatalf("echo with latency = %q, %v", got, err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("round trip with 100ms latency each way took %v", el)
	}
}
