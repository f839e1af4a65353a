package redistest_test

import (
	"bufio"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/redis"
	"github.com/durable-go/durable/internal/redistest"
)

// The cluster DSN is the form the backend's parser accepts.
func TestClusterDSNParses(t *testing.T) {
	c := &redistest.Cluster{Masters: []*redistest.Server{{Port: 7001}, {Port: 7002}, {Port: 7003}}}
	cfg, err := redis.ParseDSN(c.DSN() + "&prefix=x")
	if err != nil {
		t.Fatalf("ParseDSN(%q): %v", c.DSN(), err)
	}
	if !cfg.Cluster || !reflect.DeepEqual(cfg.Addrs, c.Addrs()) || cfg.Prefix != "x" {
		t.Fatalf("ParseDSN(%q) = cluster %v, addrs %v, prefix %q", c.DSN(), cfg.Cluster, cfg.Addrs, cfg.Prefix)
	}
}

// A frozen proxy holds bytes until Thaw; SetTarget moves new connections.
func TestProxyFreezeAndRetarget(t *testing.T) {
	echo := func(tag string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					r := bufio.NewReader(c)
					for {
						line, err := r.ReadString('\n')
						if err != nil {
							return
						}
						if _, err := c.Write([]byte(tag + line)); err != nil {
							return
						}
					}
				}()
			}
		}()
		return ln.Addr().String()
	}
	a, b := echo("a:"), echo("b:")
	p := redistest.StartProxy(t, a)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) string {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	if got := roundTrip("1"); got != "a:1\n" {
		t.Fatalf("got %q", got)
	}
	p.Freeze()
	if _, err := c.Write([]byte("2\n")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() { line, _ := r.ReadString('\n'); got <- line }()
	select {
	case line := <-got:
		t.Fatalf("a frozen proxy delivered %q", line)
	case <-time.After(200 * time.Millisecond):
	}
	p.Thaw()
	if line := <-got; line != "a:2\n" {
		t.Fatalf("after Thaw: got %q", line)
	}
	p.SetTarget(b)
	p.Reset()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Write([]byte("3\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c2).ReadString('\n'); err != nil || line != "b:3\n" {
		t.Fatalf("after SetTarget: got %q, %v", line, err)
	}
}
