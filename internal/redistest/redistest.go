// Package redistest starts private redis-server instances for tests: a
// single node or a cluster, on free loopback ports, in temporary
// directories, stopped when the test (or the test binary) ends. It never
// touches a system instance.
//
// A missing redis-server skips the calling test with a message, unless
// DURABLE_REQUIRE_REDIS=1, when it fails it instead (CI sets it).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Binary returns the path of redis-server, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Required reports whether DURABLE_REQUIRE_REDIS=1 is set.
func Required() bool { return os.Getenv("DURABLE_REQUIRE_REDIS") == "1" }

// Require skips t (or fails it, under DURABLE_REQUIRE_REDIS=1) when
// redis-server is missing.
func Require(t testing.TB) {
	t.Helper()
	if Binary() != "" {
		return
	}
	const msg = "redis-server is not installed (Debian package redis-server); the Redis tests need a real server"
	if Required() {
		t.Fatal(msg + " and DURABLE_REQUIRE_REDIS=1 is set")
	}
	t.Skip(msg)
}

// Options configure one node. The zero value is the safe configuration:
// AOF on, fsync on every write, no eviction.
type Options struct {
	AppendOnly      string // "yes" (default) or "no"
	AppendFsync     string // "always" (default), "everysec" or "no"
	MaxmemoryPolicy string // default "noeviction"
	Password        string // requirepass, when not ""
	ReplicaOf       string // host:port of a master to replicate, when not ""
	Cluster         bool   // cluster-enabled yes
	Extra           []string
}

// Server is one redis-server process.
type Server struct {
	Port    int
	BusPort int // the cluster bus port (cluster nodes only)
	Dir     string
	opts    Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
}

// Addr returns the node's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL returns a redis:// URL of the node (with the password, if any).
func (s *Server) URL() string {
	if s.opts.Password != "" {
		return "redis://:" + s.opts.Password + "@" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Client returns a new client of the node; the caller closes it.
func (s *Server) Client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: s.opts.Password, MaxRetries: -1})
}

// Start starts a node for t and stops it (and removes its directory) when
// t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	Require(t)
	s, err := StartServer(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartServer starts a node whose files live in dir, for callers without
// a testing.TB (a TestMain); the caller stops it with Kill or Stop.
func StartServer(dir string, opts Options) (*Server, error) {
	if Binary() == "" {
		return nil, errors.New("redis-server is not installed")
	}
	var last error
	for attempt := 0; attempt < 10; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, Dir: dir, opts: opts}
		if opts.Cluster {
			if s.BusPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("starting redis-server: %w", last)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) args() []string {
	o := s.opts
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	a := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--appendonly", def(o.AppendOnly, "yes"), "--appendfsync", def(o.AppendFsync, "always"),
		"--maxmemory-policy", def(o.MaxmemoryPolicy, "noeviction"),
		"--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", filepath.Join(s.Dir, "redis.log"), "--dbfilename", "dump.rdb",
	}
	if o.Password != "" {
		a = append(a, "--requirepass", o.Password, "--masterauth", o.Password)
	}
	if o.ReplicaOf != "" {
		h, p, _ := net.SplitHostPort(o.ReplicaOf)
		a = append(a, "--replicaof", h, p)
	}
	if o.Cluster {
		a = append(a, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(s.BusPort), "--cluster-node-timeout", "2000")
	}
	return append(a, o.Extra...)
}

func (s *Server) start() error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(Binary(), s.args()...)
	cmd.Dir = s.Dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	s.mu.Lock()
	s.cmd, s.exit = cmd, exit
	s.mu.Unlock()
	// Wait for PING (or for the process to die: a port taken meanwhile).
	cli := s.Client()
	defer cli.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited at start: %s", s.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := cli.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server did not answer PING: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	f, err := os.Open(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 5 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, " | ")
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exit:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exit
	}
}

// Stop stops the node gracefully (SIGTERM: it flushes its AOF).
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Kill kills the node with SIGKILL (kill -9): what it had not written to
// its AOF is lost.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Restart starts the node again on the same port and directory, after a
// Stop or Kill (it stops it first if it still runs). With AOF on, it
// reloads its data.
func (s *Server) Restart() error {
	s.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the port may linger a moment
	}
	return err
}

// Cluster is a Redis Cluster of private nodes.
type Cluster struct {
	Masters  []*Server
	Replicas []*Server // Replicas[i] replicates Masters[i % len(Masters)]
}

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	Masters           int // default 3
	ReplicasPerMaster int // default 0
	Node              Options
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Masters {
		a = append(a, s.Addr())
	}
	return a
}

// DSN returns the backend's DSN of the cluster, naming every master as a
// seed node: redis://h1:p1,h2:p2,…/?cluster=true (with the password, if
// any). Append further parameters with "&".
func (c *Cluster) DSN() string {
	auth := ""
	if len(c.Masters) > 0 && c.Masters[0].opts.Password != "" {
		auth = ":" + c.Masters[0].opts.Password + "@"
	}
	return "redis://" + auth + strings.Join(c.Addrs(), ",") + "/?cluster=true"
}

// Kill kills every node.
func (c *Cluster) Kill() {
	for _, s := range append(append([]*Server{}, c.Masters...), c.Replicas...) {
		s.Kill()
	}
}

// StartCluster starts a cluster for t (stopped when t ends) and waits
// until every node reports cluster_state:ok.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	Require(t)
	c, err := NewCluster(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(c.Kill)
	return c
}

// NewCluster starts a cluster whose nodes live under dir, for callers
// without a testing.TB; the caller stops it with Kill.
func NewCluster(dir string, opts ClusterOptions) (*Cluster, error) {
	if opts.Masters <= 0 {
		opts.Masters = 3
	}
	opts.Node.Cluster = true
	c := &Cluster{}
	n := opts.Masters * (1 + opts.ReplicasPerMaster)
	for i := 0; i < n; i++ {
		s, err := StartServer(filepath.Join(dir, fmt.Sprintf("node%d", i)), opts.Node)
		if err != nil {
			c.Kill()
			return nil, err
		}
		if i < opts.Masters {
			c.Masters = append(c.Masters, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if err := c.form(opts.Masters); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) form(masters int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all := append(append([]*Server{}, c.Masters...), c.Replicas...)
	clis := make([]*goredis.Client, len(all))
	for i, s := range all {
		clis[i] = s.Client()
		defer clis[i].Close()
	}
	const slots = 16384
	for i := 0; i < masters; i++ {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if err := clis[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	}
	for i := 1; i < len(all); i++ {
		if err := clis[i].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", all[0].Port, all[0].BusPort).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET: %w", err)
		}
	}
	// Replicas: each follows its master once it knows it.
	for i := masters; i < len(all); i++ {
		id, err := clis[(i-masters)%masters].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return err
		}
		for {
			err := clis[i].Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("CLUSTER REPLICATE: %w", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for {
		ready := true
		for _, cli := range clis {
			info, err := cli.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(all))) {
				ready = false
				break
			}
			sl, err := cli.ClusterSlots(ctx).Result()
			if err != nil || len(sl) != masters {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		if ctx.Err() != nil {
			return errors.New("the cluster did not reach cluster_state:ok within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
